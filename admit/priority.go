package admit

// Class is a request's priority class. Lower values are served first.
type Class uint8

const (
	High Class = iota
	Normal
	Low
	// NumClasses is the number of classes.
	NumClasses = 3
)

var classNames = [NumClasses]string{"high", "normal", "low"}

func (c Class) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return "normal"
}

// ParseClass reads an X-KVCA-Priority value: high, normal or low, in any
// letter case; false for anything else (the caller keeps its default).
func ParseClass(v []byte) (Class, bool) {
	for c := High; c < NumClasses; c++ {
		if equalFold(v, classNames[c]) {
			return c, true
		}
	}
	return Normal, false
}

// ClassOfVLLM maps vLLM's integer `priority` field (lower is handled
// earlier, 0 is the default) onto the classes: below 0 is high, 0 normal,
// above 0 low.
func ClassOfVLLM(p int64) Class {
	switch {
	case p < 0:
		return High
	case p > 0:
		return Low
	}
	return Normal
}

// ParseVLLM reads the `priority` body field as its JSON text (an integer
// literal, as vLLM accepts it; canon.Info.Priority); false if it is not an
// integer. Only its sign matters, so an integer of any length is read.
func ParseVLLM(raw []byte) (Class, bool) {
	digits := raw
	neg := len(raw) > 0 && raw[0] == '-'
	if neg {
		digits = raw[1:]
	}
	if len(digits) == 0 || (len(digits) > 1 && digits[0] == '0') {
		return Normal, false
	}
	zero := true
	for _, c := range digits {
		if c < '0' || c > '9' {
			return Normal, false
		}
		zero = zero && c == '0'
	}
	switch {
	case zero:
		return Normal, true
	case neg:
		return High, true
	}
	return Low, true
}

// ClassOf decides a request's class: a valid X-KVCA-Priority header wins,
// then a valid `priority` body field, else normal. The header wins because
// it is what a gateway in front of kvca (or the operator's client library)
// sets on purpose, while the body field is part of the payload that kvca
// forwards to the engine unchanged for the engine's own scheduler.
func ClassOf(header, bodyPriority []byte) Class {
	if c, ok := ParseClass(header); ok {
		return c
	}
	if c, ok := ParseVLLM(bodyPriority); ok {
		return c
	}
	return Normal
}

func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
