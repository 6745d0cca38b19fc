package kdn

import (
	"unicode/utf16"
	"unicode/utf8"

	"github.com/kvca/kvca/internal/hexdigit"
)

// The contracts need things encoding/json hides: duplicate keys, null versus
// absent, and the literal text of numbers (1 versus 1.0). This small strict
// parser builds a tree that keeps all of it.

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

type jvalue struct {
	kind jkind
	b    bool
	s    string // string contents, or the literal text of a number
	arr  []jvalue
	obj  []jmember
}

type jmember struct {
	key string
	val jvalue
}

// maxDepth bounds recursion on hostile input; no valid message nests deeper
// than about six levels.
const maxDepth = 64

type jparser struct {
	data  []byte
	pos   int
	depth int
}

func malformed(msg string) *ValidationError {
	return verr(CodeMalformedJSON, "", "json", msg)
}

// parseJSON parses exactly one JSON document. Duplicate object keys are
// rejected: the reference would silently keep the last one, which lets a
// payload say two things at once (the contracts kvca answers, docs/kdn.md,
// allow either choice).
func parseJSON(data []byte) (jvalue, *ValidationError) {
	if !utf8.Valid(data) {
		return jvalue{}, malformed("input is not valid UTF-8")
	}
	p := &jparser{data: data}
	p.skipWS()
	v, err := p.value()
	if err != nil {
		return jvalue{}, err
	}
	p.skipWS()
	if p.pos != len(p.data) {
		return jvalue{}, malformed("unexpected bytes after the JSON document")
	}
	return v, nil
}

func (p *jparser) skipWS() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jparser) value() (jvalue, *ValidationError) {
	if p.pos >= len(p.data) {
		return jvalue{}, malformed("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.str()
		return jvalue{kind: jString, s: s}, err
	case c == 't':
		return jvalue{kind: jBool, b: true}, p.literal("true")
	case c == 'f':
		return jvalue{kind: jBool}, p.literal("false")
	case c == 'n':
		return jvalue{kind: jNull}, p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return jvalue{}, malformed("unexpected character")
	}
}

func (p *jparser) literal(word string) *ValidationError {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return malformed("invalid literal")
	}
	p.pos += len(word)
	return nil
}

func (p *jparser) enter() *ValidationError {
	p.depth++
	if p.depth > maxDepth {
		return malformed("document nests too deeply")
	}
	return nil
}

func (p *jparser) object() (jvalue, *ValidationError) {
	if err := p.enter(); err != nil {
		return jvalue{}, err
	}
	defer func() { p.depth-- }()
	p.pos++ // '{'
	v := jvalue{kind: jObject, obj: []jmember{}}
	var seen map[string]struct{}
	p.skipWS()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return v, nil
	}
	for {
		p.skipWS()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return jvalue{}, malformed("expected an object key")
		}
		key, err := p.str()
		if err != nil {
			return jvalue{}, err
		}
		if seen == nil {
			seen = make(map[string]struct{})
		}
		if _, dup := seen[key]; dup {
			return jvalue{}, verr(CodeDuplicateKey, "", "json:unique_keys", "an object repeats a key")
		}
		seen[key] = struct{}{}
		p.skipWS()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return jvalue{}, malformed("expected ':' after an object key")
		}
		p.pos++
		p.skipWS()
		val, err := p.value()
		if err != nil {
			return jvalue{}, err
		}
		v.obj = append(v.obj, jmember{key: key, val: val})
		p.skipWS()
		if p.pos >= len(p.data) {
			return jvalue{}, malformed("unterminated object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return v, nil
		default:
			return jvalue{}, malformed("expected ',' or '}' in an object")
		}
	}
}

func (p *jparser) array() (jvalue, *ValidationError) {
	if err := p.enter(); err != nil {
		return jvalue{}, err
	}
	defer func() { p.depth-- }()
	p.pos++ // '['
	v := jvalue{kind: jArray, arr: []jvalue{}}
	p.skipWS()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return v, nil
	}
	for {
		p.skipWS()
		el, err := p.value()
		if err != nil {
			return jvalue{}, err
		}
		v.arr = append(v.arr, el)
		p.skipWS()
		if p.pos >= len(p.data) {
			return jvalue{}, malformed("unterminated array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return v, nil
		default:
			return jvalue{}, malformed("expected ',' or ']' in an array")
		}
	}
}

func (p *jparser) number() (jvalue, *ValidationError) {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.pos < len(p.data) && p.data[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return jvalue{}, malformed("invalid number")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return jvalue{}, malformed("invalid number")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return jvalue{}, malformed("invalid number")
		}
	}
	return jvalue{kind: jNumber, s: string(p.data[start:p.pos])}, nil
}

// str parses a string literal at p.pos. Unpaired surrogate escapes are
// rejected because they cannot be represented as UTF-8.
func (p *jparser) str() (string, *ValidationError) {
	p.pos++ // opening quote
	start := p.pos
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := string(p.data[start:p.pos])
			p.pos++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", malformed("control character in a string")
		}
		p.pos++
	}
	buf := append([]byte(nil), p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c < 0x20:
			return "", malformed("control character in a string")
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		p.pos++
		if p.pos >= len(p.data) {
			break
		}
		e := p.data[p.pos]
		p.pos++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", malformed("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				if r >= 0xdc00 || p.pos+1 >= len(p.data) || p.data[p.pos] != '\\' || p.data[p.pos+1] != 'u' {
					return "", malformed("unpaired surrogate escape")
				}
				p.pos += 2
				r2, ok := p.hex4()
				if !ok || r2 < 0xdc00 || r2 > 0xdfff {
					return "", malformed("unpaired surrogate escape")
				}
				r = utf16.DecodeRune(r, r2)
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", malformed("invalid escape")
		}
	}
	return "", malformed("unterminated string")
}

func (p *jparser) hex4() (rune, bool) {
	if len(p.data)-p.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		d, ok := hexdigit.Value(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	p.pos += 4
	return r, true
}
