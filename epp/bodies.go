package epp

import "sync"

// bodies keeps the buffers of request bodies for the streams to come,
// by size class (powers of two from 512 bytes to 16 MiB): a new buffer
// for every large body cost page faults and zeroing, and for every small
// one an allocation and the collector's work, on every request. A buffer
// goes back once its request's lifecycle has ended, which keeps no body
// past End.
type bodies struct{ class [16]sync.Pool }

const bodyClassMin = 512 // the smallest class

// bodyClassSize is the capacity of class c.
func bodyClassSize(c int) int { return bodyClassMin << c }

// get is a buffer of length 0 and capacity n or more and, when it is to
// go back (put), the pool's box for it (nil: not pooled). A nil pool
// makes new buffers.
func (b *bodies) get(n int) ([]byte, *[]byte) {
	if b == nil {
		return make([]byte, 0, n), nil
	}
	c := 0
	for bodyClassSize(c) < n {
		c++
	}
	if c >= len(b.class) {
		return make([]byte, 0, n), nil
	}
	if box, _ := b.class[c].Get().(*[]byte); box != nil {
		return (*box)[:0], box
	}
	box := new([]byte)
	*box = make([]byte, 0, bodyClassSize(c))
	return *box, box
}

// put keeps the buffer in box, which get gave, for another body; the box
// goes with it, so that putting it back allocates nothing.
func (b *bodies) put(box *[]byte) {
	for c := range b.class {
		if cap(*box) == bodyClassSize(c) {
			b.class[c].Put(box)
			return
		}
	}
}
