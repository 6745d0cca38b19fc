package kdn

import (
	"strings"
	"unicode"
)

// normaliseProfile applies §3.2 to a JSON value. Python stringifies
// non-string input, but no stringified number, bool or container can spell a
// profile, so anything but a string is simply invalid; null and "" resolve to
// the start-up-only auto and are rejected with it.
func normaliseProfile(v jvalue, path string) (RuntimeProfile, *ValidationError) {
	if v.kind != jString {
		return "", verr(CodeInvalidProfile, path, "runtime_profile", "runtime_profile must be a resolved profile name")
	}
	s := strings.ToLower(strings.TrimFunc(v.s, isPySpace))
	switch s {
	case "old", "v0":
		s = "legacy"
	case "modern", "new", "current":
		s = "v1"
	case "mock", "test":
		s = "test/mock"
	}
	p := RuntimeProfile(s)
	if s == "" || p == ProfileAuto {
		return "", verr(CodeInvalidProfile, path, "runtime_profile:auto", "runtime_profile auto is start-up only and is rejected on the wire")
	}
	if !p.resolved() {
		return "", verr(CodeInvalidProfile, path, "runtime_profile", "runtime_profile is not v1, legacy or test/mock (or an alias)")
	}
	return p, nil
}

// isPySpace mirrors Python's str.isspace, which unlike unicode.IsSpace also
// counts the information separators U+001C..U+001F.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

func isBlank(s string) bool { return strings.TrimFunc(s, isPySpace) == "" }
