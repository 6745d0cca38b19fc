// Package chain computes the SipHash-2-4 Merkle chain over a CBR and keeps
// the global block table that maps chain hashes to the backends holding them.
package chain

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/dchest/siphash"
)

// Key is the 128-bit SipHash key. Without a shared secret, clients could
// craft prompts whose blocks collide and steer routing.
type Key struct{ K0, K1 uint64 }

// ParseKey reads 32 hex digits; k0 is the little-endian uint64 of bytes
// 0–7 and k1 of bytes 8–15.
func ParseKey(s string) (Key, error) {
	if len(s) != 32 {
		return Key{}, fmt.Errorf("hash key must be 32 hex digits (16 bytes), got %d characters", len(s))
	}
	var b [16]byte
	if _, err := hex.Decode(b[:], []byte(s)); err != nil {
		return Key{}, fmt.Errorf("hash key is not hex: %v", err)
	}
	return Key{binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])}, nil
}

// RandomKey draws a key from the operating system's random source.
func RandomKey() Key {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("chain: no system randomness: " + err.Error())
	}
	return Key{binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])}
}

// String returns the key as ParseKey reads it.
func (k Key) String() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], k.K0)
	binary.LittleEndian.PutUint64(b[8:], k.K1)
	return hex.EncodeToString(b[:])
}

// CheckBlockSize refuses sizes that would leave a fragment of an 8-byte
// SipHash word: the chain hashes whole 8-byte words, so sizes are positive
// multiples of 8.
func CheckBlockSize(n int) error {
	if n <= 0 || n%8 != 0 {
		return fmt.Errorf("block size must be a positive multiple of 8, got %d", n)
	}
	return nil
}

// Hasher cuts the bytes written to it into blocks and chains their hashes:
// hash[i] = SipHash-2-4(key, LE64(hash[i-1]) || block[i]), hash[-1] = 0.
// A trailing partial block is never hashed. Reset makes it reusable without
// allocating.
type Hasher struct {
	key   Key
	bs    int
	buf   []byte // LE64(prev) followed by the block being filled
	n     int    // bytes of the current block in buf[8:]
	Chain []uint64
	tag   uint64 // ResumeTag, computed on first use

	memo *Memo
	// A SkipLiteral that missed: what WroteLiteral needs to record.
	pending    bool
	pendFP     uint64
	pendChain  int
	pendBefore []byte
}

// NewHasher returns a Hasher for a block size accepted by CheckBlockSize.
func NewHasher(key Key, blockSize int) *Hasher {
	if err := CheckBlockSize(blockSize); err != nil {
		panic(err)
	}
	return &Hasher{key: key, bs: blockSize, buf: make([]byte, 8+blockSize)}
}

// Reset forgets everything written, keeping the key and block size.
func (h *Hasher) Reset() {
	h.n = 0
	h.Chain = h.Chain[:0]
	clear(h.buf[:8])
	h.pending = false
}

// Len returns the CBR bytes written since Reset, the trailing partial
// block included (what Calibrator.Observe takes).
func (h *Hasher) Len() int { return len(h.Chain)*h.bs + h.n }

// BlockSize returns the block size in bytes.
func (h *Hasher) BlockSize() int { return h.bs }

// Write feeds CBR bytes.
func (h *Hasher) Write(p []byte) {
	for len(p) > 0 {
		c := copy(h.buf[8+h.n:], p)
		h.n += c
		p = p[c:]
		if h.n == h.bs {
			v := siphash.Hash(h.key.K0, h.key.K1, h.buf)
			h.Chain = append(h.Chain, v)
			binary.LittleEndian.PutUint64(h.buf[:8], v)
			h.n = 0
		}
	}
}

// Sum returns the chain of complete blocks (aliasing the Hasher's storage).
func (h *Hasher) Sum() []uint64 { return h.Chain }
