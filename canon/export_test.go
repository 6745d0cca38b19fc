package canon

// NewDecoding returns a Canonicalizer that decodes and re-escapes every
// string, the reference the literal fast path is checked against.
func NewDecoding(extraExclude []string) *Canonicalizer {
	c := New(extraExclude)
	c.decodeStrings = true
	return c
}

// CanonicalLiteral exposes canonicalLiteral to the tests.
var CanonicalLiteral = canonicalLiteral

// SetSnapEvery makes r remember boundaries every n CBR bytes (0: all).
func SetSnapEvery(r *Resumer, n int) { r.every = n }
