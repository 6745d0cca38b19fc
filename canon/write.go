package canon

import (
	"encoding/binary"
	"math/bits"
)

// The writer batches small pieces into st.out so the sink sees few, large
// writes; long runs of bytes that need no escaping bypass the buffer.

const directRun = 512

func (st *state) flush() {
	if st.n > 0 {
		st.sink.Write(st.out[:st.n])
		st.total += st.n
		st.n = 0
	}
}

func (st *state) startSession() {
	if !st.session {
		return // st.hash stays 0
	}
	st.hashing = true
	st.hashed = 0
	st.hash = fnvOffset
}

func hashInto[T string | []byte](st *state, p T) {
	if room := sessionBytes - st.hashed; len(p) > room {
		p = p[:room]
	}
	h := st.hash
	for i := 0; i < len(p); i++ {
		h ^= uint64(p[i])
		h *= fnvPrime
	}
	st.hash = h
	st.hashed += len(p)
	if st.hashed >= sessionBytes {
		st.hashing = false
	}
}

func (st *state) write(p []byte) {
	if st.hashing {
		hashInto(st, p)
	}
	if len(p) >= directRun {
		st.flush()
		st.sink.Write(p)
		st.total += len(p)
		return
	}
	if st.n+len(p) > len(st.out) {
		st.flush()
	}
	st.n += copy(st.out[st.n:], p)
}

func (st *state) writeString(s string) {
	if st.n+len(s) > len(st.out) {
		st.flush()
	}
	if st.hashing {
		hashInto(st, s)
	}
	st.n += copy(st.out[st.n:], s)
}

// writeByte is small enough to inline: it is called for every brace,
// comma and colon of the CBR.
func (st *state) writeByte(b byte) {
	if st.hashing || st.n == len(st.out) {
		st.writeByteSlow(b)
		return
	}
	st.out[st.n] = b
	st.n++
}

func (st *state) writeByteSlow(b byte) {
	if st.n == len(st.out) {
		st.flush()
	}
	if st.hashing {
		st.hash = (st.hash ^ uint64(b)) * fnvPrime
		st.hashed++
		if st.hashed >= sessionBytes {
			st.hashing = false
		}
	}
	st.out[st.n] = b
	st.n++
}

// writeKey writes canonString(k) and a colon, after a comma unless first.
// Member names are short and need no escaping: they go into the buffer
// in one piece, without writeQuoted's scan and writes.
func (st *state) writeKey(k []byte, first bool) {
	if st.hashing || len(k) > 64 || st.n+len(k)+4 > len(st.out) || !plainKey(k) {
		if !first {
			st.writeByte(',')
		}
		st.writeQuoted(k)
		st.writeByte(':')
		return
	}
	o := st.out[st.n:]
	i := 0
	if !first {
		o[0] = ','
		i = 1
	}
	o[i] = '"'
	i += 1 + copy(o[i+1:], k)
	o[i] = '"'
	o[i+1] = ':'
	st.n += i + 2
}

// plainKey reports whether k needs no escaping.
func plainKey(k []byte) bool {
	for _, c := range k {
		if needsEscape[c] {
			return false
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// wordNeedsEscape reports whether any of 8 bytes is a control byte, '"' or
// '\\' (the classic SWAR tests for a zero byte and a byte below n).
func wordNeedsEscape(x uint64) bool {
	ctl := (x - 0x20*lsb) &^ x
	q := x ^ ('"' * lsb)
	q = (q - lsb) &^ q
	b := x ^ ('\\' * lsb)
	b = (b - lsb) &^ b
	return (ctl|q|b)&msb != 0
}

// needsEscape marks the bytes canonString escapes: '"', '\\' and controls.
var needsEscape = func() (t [256]bool) {
	for i := 0; i < 0x20; i++ {
		t[i] = true
	}
	t['"'] = true
	t['\\'] = true
	return t
}()

// writeQuoted writes canonString(s): only '"', '\\' and control bytes are
// escaped, every other byte (including invalid UTF-8) is written raw, so
// every JSON spelling of the same string gives the same bytes.
func (st *state) writeQuoted(s []byte) {
	st.writeByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		// Skip eight clean bytes at a time: prompts are long runs of text
		// with few characters to escape.
		for i+8 <= len(s) && !wordNeedsEscape(binary.LittleEndian.Uint64(s[i:])) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if !needsEscape[c] {
			continue
		}
		if start < i {
			st.write(s[start:i])
		}
		start = i + 1
		switch c {
		case '"':
			st.writeString(`\"`)
		case '\\':
			st.writeString(`\\`)
		case '\b':
			st.writeString(`\b`)
		case '\f':
			st.writeString(`\f`)
		case '\n':
			st.writeString(`\n`)
		case '\r':
			st.writeString(`\r`)
		case '\t':
			st.writeString(`\t`)
		default:
			st.writeString(`\u00`)
			st.writeByte(hexDigits[c>>4])
			st.writeByte(hexDigits[c&0xf])
		}
	}
	if start < len(s) {
		st.write(s[start:])
	}
	st.writeByte('"')
}

// canonicalLiteral reports whether lit, a JSON string literal with its
// quotes, is already canonString of the string it spells: no raw control
// byte, and every escape the one canonString would write for its byte
// (\" \\ \b \f \n \r \t, \u00xx in lowercase hex for the other
// controls). Any other spelling (\/, \u00e9, uppercase hex) is decoded and
// re-escaped by the caller instead.
//
// Prompts have an escape every few dozen bytes (newlines, quotes), so the
// scan neither stops nor branches per byte: it takes eight bytes at a time,
// collects control bytes into one mask tested at the end, and visits the
// backslashes through their mask bits.
func canonicalLiteral(lit []byte) bool {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return false
	}
	s := lit[1 : len(lit)-1]
	var ctl uint64
	next := 0 // the first byte not inside an escape already checked
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		ctl |= (x - 0x20*lsb) &^ x
		b := x ^ ('\\' * lsb)
		// Exact as to whether a byte is a backslash, but a borrow can also
		// mark the byte after one, hence the s[j] test.
		for m := (b - lsb) &^ b & msb; m != 0; m &= m - 1 {
			j := i + bits.TrailingZeros64(m)>>3
			if j < next || s[j] != '\\' {
				continue
			}
			n := canonicalEscape(s[j:])
			if n == 0 {
				return false
			}
			next = j + n
		}
	}
	for ; i < len(s); i++ {
		c := s[i]
		if c < 0x20 {
			return false
		}
		if c != '\\' || i < next {
			continue
		}
		n := canonicalEscape(s[i:])
		if n == 0 {
			return false
		}
		next = i + n
	}
	return ctl&msb == 0
}

// rawControl reports whether b holds a byte below 0x20.
func rawControl(b []byte) bool {
	var ctl uint64
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		ctl |= (x - 0x20*lsb) &^ x
	}
	for ; i < len(b); i++ {
		if b[i] < 0x20 {
			return true
		}
	}
	return ctl&msb != 0
}

// canonicalEscape returns the length of the escape at the start of e if it
// is the one canonString writes, else 0.
func canonicalEscape(e []byte) int {
	if len(e) < 2 {
		return 0
	}
	switch e[1] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if len(e) < 6 || e[2] != '0' || e[3] != '0' || (e[4] != '0' && e[4] != '1') {
			return 0
		}
		d := e[5]
		var x byte
		switch {
		case d >= '0' && d <= '9':
			x = d - '0'
		case d >= 'a' && d <= 'f':
			x = d - 'a' + 10
		default:
			return 0
		}
		switch x + (e[4]-'0')<<4 {
		case '\b', '\f', '\n', '\r', '\t':
			return 0 // canonString has a short form for these
		}
		return 6
	}
	return 0
}

// validNumber checks the JSON number grammar; fastjson also accepts forms
// such as "+1", "inf" and "NaN" that no backend would.
func validNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return false
	}
	switch {
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	return i == len(b)
}
