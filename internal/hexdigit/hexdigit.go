// Package hexdigit reads hexadecimal digits, the one reader behind the
// chunk sizes of h1 and sniff, the ids of a traceparent (tracing) and the
// \u escapes of kdn's JSON. It imports nothing, so the lowest packages can
// use it.
package hexdigit

// Value is the value of the hexadecimal digit c, either case; ok is false
// when c is not one.
func Value(c byte) (v byte, ok bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
