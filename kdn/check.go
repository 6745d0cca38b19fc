package kdn

import "time"

// checker records the first broken rule; later checks are skipped. It is
// used by every validate method so that Decode and Encode enforce the same
// rules on the typed value.
type checker struct {
	base string // path of the value being checked, prefixed to every field
	err  *ValidationError
}

func (c *checker) ok() bool { return c.err == nil }

func (c *checker) fail(code, field, rule, msg string) {
	if c.err == nil {
		if field == "" {
			field = c.base
		} else {
			field = joinPath(c.base, field)
		}
		c.err = verr(code, field, rule, msg)
	}
}

// at returns the path of a nested field, for a nested value's validate.
func (c *checker) at(field string) string { return joinPath(c.base, field) }

// rule fails with CodeRule unless cond holds.
func (c *checker) rule(cond bool, field, rule, msg string) {
	if !cond {
		c.fail(CodeRule, field, rule, msg)
	}
}

func (c *checker) sub(e *ValidationError) {
	if c.err == nil && e != nil {
		c.err = e
	}
}

// min1 is the contract's "min 1": any non-empty string, whitespace included.
func (c *checker) min1(field, s string) {
	if s == "" {
		c.fail(CodeTooShort, field, "min_length:1", "string must not be empty")
	}
}

// nonBlank is the identity-field rule: something besides whitespace.
func (c *checker) nonBlank(field, s string) {
	if isBlank(s) {
		c.fail(CodeBlank, field, "non_blank", "string must contain a non-whitespace character")
	}
}

func (c *checker) pattern(field, s, prefix string) {
	if !hex32(s, prefix) {
		c.fail(CodePattern, field, "pattern:^"+prefix+"[0-9a-f]{32}$", "value does not match the required id pattern")
	}
}

func (c *checker) atLeast(field string, n, min int64) {
	if n < min {
		rule := "ge:0"
		if min == 1 {
			rule = "ge:1"
		}
		c.fail(CodeOutOfRange, field, rule, "integer is below the allowed minimum")
	}
}

func (c *checker) utc(field string, t time.Time) {
	switch {
	case !inWireRange(t):
		c.fail(CodeInvalidDatetime, field, "datetime:range", "datetime is outside the representable range")
	case !isUTC(t):
		c.fail(CodeNonUTCDatetime, field, "datetime:utc", "datetime offset must be zero (UTC)")
	}
}

func (c *checker) utcOpt(field string, t Opt[time.Time]) {
	if v, ok := t.Get(); ok {
		c.utc(field, v)
	}
}

// profile checks a normalised runtime profile as stored on a value.
func (c *checker) profile(field string, p RuntimeProfile) {
	switch {
	case p == ProfileAuto || p == "":
		c.fail(CodeInvalidProfile, field, "runtime_profile:auto", "runtime_profile auto is start-up only and is rejected on the wire")
	case !p.resolved():
		c.fail(CodeInvalidProfile, field, "runtime_profile", "runtime_profile is not v1, legacy or test/mock")
	}
}

func (c *checker) enum(valid bool, field string) {
	if !valid {
		c.fail(CodeInvalidEnum, field, "enum", "value is not one of the allowed enum values")
	}
}

// uniqueNonBlank checks a list of names: each non-blank, no repeats.
func (c *checker) uniqueNonBlank(field string, list []string) {
	seen := make(map[string]struct{}, len(list))
	for i, s := range list {
		c.nonBlank(indexPath(field, i), s)
		if _, dup := seen[s]; dup {
			c.fail(CodeDuplicateItem, indexPath(field, i), "unique", "list items must be unique")
		}
		seen[s] = struct{}{}
	}
}

// generation checks the "0 only when legacy" rule shared by targets,
// responses, summaries and snapshots.
func (c *checker) generation(field string, gen int64, p RuntimeProfile) {
	c.atLeast(field, gen, 0)
	c.rule(gen != 0 || p == ProfileLegacy, field, "generation_zero_legacy_only",
		"endpoint_generation 0 (unknown) is only valid with runtime_profile legacy")
}
