package canon

import (
	"bytes"
	"unsafe"

	"github.com/valyala/fastjson"
)

// The resumer needs the raw offsets of message boundaries, which fastjson
// does not report. It copies the body into its own buffer and leaves every
// object key as a slice of that copy, so a key's address minus the copy's
// base is its offset in the body. The base is learnt from one key whose
// offset is known, and every offset so derived is checked against the
// body's bytes (the key, its quotes) before use: were fastjson ever to
// keep keys elsewhere, offsets would fail the check and nothing would be
// remembered, but no wrong offset would be used.

func addr(b []byte) int { return int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// keyOffset returns the body offset of object key k (a slice of the
// parser's copy, base st.rz.base), or -1 if it cannot be vouched for: an
// empty key, or one that had escapes (fastjson unescapes in place).
func (st *state) keyOffset(body, k []byte) int {
	if len(k) == 0 {
		return -1
	}
	off := addr(k) - st.rz.base
	if off < 1 || off+len(k) >= len(body) || body[off-1] != '"' || body[off+len(k)] != '"' || !bytes.Equal(body[off:off+len(k)], k) {
		return -1
	}
	return off
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// back skips whitespace backward from i and reports whether body[i] is
// then want; it returns that index (or -1).
func back(body []byte, i int, want byte) int {
	for i >= 0 && isSpace(body[i]) {
		i--
	}
	if i < 0 || body[i] != want {
		return -1
	}
	return i
}

// endBefore is the offset just past the object that ends before the
// object whose first key is at q, in an array: `} ws , ws { ws "key`.
func endBefore(body []byte, q int) int {
	if q < 1 || body[q-1] != '"' {
		return -1
	}
	i := back(body, q-2, '{')
	if i < 0 {
		return -1
	}
	if i = back(body, i-1, ','); i < 0 {
		return -1
	}
	if i = back(body, i-1, '}'); i < 0 {
		return -1
	}
	return i + 1
}

// endBeforeClose is the offset just past the object that ends before the
// array's closing bracket at e.
func endBeforeClose(body []byte, e int) int {
	i := back(body, e-1, '}')
	if i < 0 {
		return -1
	}
	return i + 1
}

// firstKey is an object's first key in body order, nil if none.
func firstKey(o *fastjson.Object) []byte {
	var first []byte
	seen := false
	o.Visit(func(k []byte, _ *fastjson.Value) {
		if !seen {
			first, seen = k, true
		}
	})
	return first
}
