package chain_test

import (
	"slices"
	"testing"

	"github.com/kvca/kvca/chain"
)

// TestRestore: a Hasher restored to the state another had at some point
// goes on to the same chain, and only Hashers of the same key and block
// size share a ResumeTag.
func TestRestore(t *testing.T) {
	key := chain.Key{K0: 1, K1: 2}
	data := make([]byte, 5000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, cut := range []int{0, 1, 63, 64, 65, 1000, 4999} {
		a := chain.NewHasher(key, 64)
		a.Write(data[:cut])
		blocks, partial := slices.Clone(a.Blocks()), slices.Clone(a.Partial())
		a.Write(data[cut:])

		b := chain.NewHasher(key, 64)
		b.Write([]byte("something else entirely, to be overwritten"))
		copy(b.Restore(len(blocks), partial), blocks)
		b.Write(data[cut:])
		if !slices.Equal(a.Sum(), b.Sum()) || string(a.Partial()) != string(b.Partial()) {
			t.Fatalf("cut %d: restored hasher diverged", cut)
		}
	}
	tags := map[uint64]string{}
	for _, h := range []struct {
		name string
		h    *chain.Hasher
	}{{"a", chain.NewHasher(key, 64)}, {"size", chain.NewHasher(key, 128)}, {"key", chain.NewHasher(chain.Key{K0: 1, K1: 3}, 64)}} {
		if other, ok := tags[h.h.ResumeTag()]; ok {
			t.Fatalf("%s and %s share a tag", h.name, other)
		}
		tags[h.h.ResumeTag()] = h.name
	}
	if chain.NewHasher(key, 64).ResumeTag() != chain.NewHasher(key, 64).ResumeTag() {
		t.Fatal("equal hashers, different tags")
	}
}

func TestRestoreNoAllocs(t *testing.T) {
	h := chain.NewHasher(chain.Key{K0: 1, K1: 2}, 64)
	h.Write(make([]byte, 1000))
	blocks, partial := slices.Clone(h.Blocks()), slices.Clone(h.Partial())
	if n := testing.AllocsPerRun(100, func() { copy(h.Restore(len(blocks), partial), blocks) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
