package canon_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/internal/bodies"
)

var sizes = []int{1 << 10, 4 << 10, 16 << 10, 128 << 10, 1 << 20}

// BenchmarkCanon measures canonicalisation alone (into a discarding sink).
func BenchmarkCanon(b *testing.B) {
	benchCanon(b, canon.Chat, sizes, bodies.Chat)
}

// BenchmarkCanonStringPrompt is BenchmarkCanon for a prompt given as one
// string (completions' prompt, the Responses API's input), a text with a
// line break every 30 bytes.
func BenchmarkCanonStringPrompt(b *testing.B) {
	benchCanon(b, canon.Completions, sizes, func(n int) []byte {
		return []byte(`{"model":"m","prompt":"` + strings.Repeat("lorem ipsum dolor sit amet, \\n", n/30) + `"}`)
	})
}

// benchCanon canonicalises body(n) of api for each size n, one sub-benchmark each.
func benchCanon(b *testing.B, api canon.API, ns []int, body func(n int) []byte) {
	c := canon.New(nil)
	for _, n := range ns {
		body := body(n)
		b.Run(fmt.Sprintf("%dKB", n>>10), func(b *testing.B) {
			var sink discard
			var info canon.Info
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Canonicalize(api, body, &sink, &info); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCanonChain measures canonicalisation plus chain hashing, the
// whole body → chain step of the hot path.
func BenchmarkCanonChain(b *testing.B) {
	benchCanonChain(b, canon.New(nil), true)
}

// BenchmarkCanonChainNoSession is BenchmarkCanonChain without the session
// hash (canon.Options.NoSession), what kvca serve does for every policy but
// session-hash.
func BenchmarkCanonChainNoSession(b *testing.B) {
	benchCanonChain(b, canon.NewWithOptions(nil, canon.Options{NoSession: true}), false)
}

// BenchmarkCanonChainMemo is BenchmarkCanonChainNoSession with a
// chain.Memo, as kvca serve runs it, on bodies it has seen before: every
// string of 256 bytes or more is compared with the remembered one instead of
// being canonicalised and hashed again.
func BenchmarkCanonChainMemo(b *testing.B) {
	benchCanonChainWith(b, canon.NewWithOptions(nil, canon.Options{NoSession: true}), true, chain.NewMemo(64<<20))
}

func benchCanonChain(b *testing.B, c *canon.Canonicalizer, turn40 bool) {
	benchCanonChainWith(b, c, turn40, nil)
}

func benchCanonChainWith(b *testing.B, c *canon.Canonicalizer, turn40 bool, m *chain.Memo) {
	h := chain.NewHasher(chain.RandomKey(), 256)
	h.UseMemo(m)
	run := func(b *testing.B, body []byte) {
		var info canon.Info
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			h.Reset()
			if err := c.Canonicalize(canon.Chat, body, h, &info); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, n := range sizes {
		body := bodies.Chat(n)
		b.Run(fmt.Sprintf("%dKB", n>>10), func(b *testing.B) { run(b, body) })
	}
	if turn40 {
		conv := bodies.Conversation(40, 300)
		b.Run("turn40", func(b *testing.B) { run(b, conv[len(conv)-1]) })
	}
}
