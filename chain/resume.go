package chain

import (
	"encoding/binary"

	"github.com/dchest/siphash"
)

// The methods below let a canonicalizer that remembers where a request
// stood at a line boundary (canon's resumer) hand the Hasher's state over
// and take it back, so that a body repeating an earlier one's bytes is
// only hashed from where it starts to differ. The state at a boundary is
// the chain of complete blocks and the partial block behind it.

// ResumeTag identifies the Hasher's key and block size without revealing
// the key: states saved by one Hasher are only restored into a Hasher with
// the same tag, whose chain would have come out the same.
func (h *Hasher) ResumeTag() uint64 {
	if h.tag == 0 {
		var b [16]byte
		copy(b[:8], "kvcaresm")
		binary.LittleEndian.PutUint64(b[8:], uint64(h.bs))
		h.tag = siphash.Hash(h.key.K0, h.key.K1, b[:]) | 1
	}
	return h.tag
}

// Blocks returns the chain so far (aliasing the Hasher's storage, like Sum).
func (h *Hasher) Blocks() []uint64 { return h.Chain }

// Partial returns LE64(the last complete block's hash, 0 before the
// first) followed by the bytes of the block being filled: with Blocks, all
// of the Hasher's state. It aliases the Hasher's storage.
func (h *Hasher) Partial() []byte { return h.buf[:8+h.n] }

// Restore puts the Hasher in the state whose chain has blocks hashes and
// whose Partial was partial, and returns the chain, of length blocks, for
// the caller to fill with the saved hashes (its contents are unspecified
// until then). It allocates only to grow the chain.
func (h *Hasher) Restore(blocks int, partial []byte) []uint64 {
	if len(partial) < 8 || len(partial) > len(h.buf) {
		panic("chain: Restore with a partial block of the wrong size")
	}
	if cap(h.Chain) < blocks {
		h.Chain = make([]uint64, blocks, blocks+blocks/4)
	}
	h.Chain = h.Chain[:blocks]
	copy(h.buf, partial)
	h.n = len(partial) - 8
	h.pending = false
	return h.Chain
}
