package canon

import "math/bits"

// Raw body bytes are copied into buffers the Resumer recycles: a body
// seen for the first time is copied whole, and copying it into memory
// the process touched before costs a memmove, where fresh memory from the
// heap cost as much again in zeroing, page faults and collections as
// canonicalising the body (a tenth of it at 128 KB, a third at 1 MB).

// Buffers of 2^rzMinShift (512 B) to 2^(rzMinShift+rzClasses-1) (16 MB)
// bytes are recycled.
const (
	rzMinShift = 9
	rzClasses  = 16
)

// bufClass is the class of a buffer of capacity n (or -1: not kept),
// and of a request for n bytes, rounded up.
func bufClass(n int) int {
	c := bits.Len(uint(n-1)) - rzMinShift
	if c < 0 {
		c = 0
	}
	if c >= rzClasses {
		return -1
	}
	return c
}

// newBuf returns an empty buffer of capacity at least n, recycled if one
// is free (under the write lock). Its capacity is a power of two, so it
// goes back to a class whole.
func (r *Resumer) newBuf(n int) []byte {
	c := bufClass(n)
	if c < 0 {
		return make([]byte, 0, n)
	}
	if l := r.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		r.free[c] = l[:len(l)-1]
		r.freeBytes -= cap(b)
		return b[:0]
	}
	return make([]byte, 0, 1<<(c+rzMinShift))
}

// putBuf keeps b for newBuf if it is a whole buffer of a class and the
// free buffers stay within an eighth of the budget (under the write lock).
func (r *Resumer) putBuf(b []byte) {
	c := bufClass(cap(b))
	if c < 0 || cap(b) != 1<<(c+rzMinShift) || r.freeBytes+cap(b) > r.max/8 {
		return
	}
	r.free[c] = append(r.free[c], b[:0])
	r.freeBytes += cap(b)
}
