package chain

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A confirmation of a chain whose prefix a record says the same backend
// confirmed whole within the slack writes only the rest: the prefix keeps
// its time (up to the slack early, the slack's rule), the new blocks take
// the new one; past the slack, after a removal, or for another backend it
// writes everything.
func TestConfirmWritesOnlyPastARecentWholePrefix(t *testing.T) {
	t.Parallel()
	const ttl = 1000
	c := &clock{t: time.Unix(1000, 0)}
	tb := NewTable(Config{TTL: ttl * time.Millisecond, MaxBlocks: 1 << 14, Now: c.now, TouchSlack: 10 * time.Millisecond})
	p := lineage(1, 300)
	t0 := tb.Now()
	tb.Touch(p[:200], 0, t0)
	tb.Touch(p[:250], 0, t0+4) // the prefix within the slack: kept at t0
	if got := tb.Lookup(p[10], t0+ttl); got.Has(0) {
		t.Fatalf("the prefix was written again: live at t0+ttl")
	}
	if got := tb.Lookup(p[220], t0+ttl+3); !got.Has(0) {
		t.Fatalf("a new block was not written at t0+4")
	}
	if h, ok := tb.wholeHolder(p[:250], t0+ttl-1); !ok || h != 0 {
		t.Fatalf("the whole record of the longer chain: %d %v", h, ok)
	}
	if _, ok := tb.wholeHolder(p[:250], t0+ttl); ok {
		t.Fatal("the record outlives its oldest block")
	}
	tb.Touch(p[:260], 0, t0+11) // the record dates t0: past the slack, all written
	if got := tb.Lookup(p[10], t0+ttl+10); !got.Has(0) {
		t.Fatal("a touch past the slack kept the prefix's old time")
	}
	tb.Forget(p[5:6], 0)
	tb.Touch(p[:270], 0, t0+13) // a removal since the record: all written
	if got := tb.Lookup(p[5], t0+13); !got.Has(0) {
		t.Fatal("a touch after a removal skipped the removed block")
	}
	tb.Touch(p[:280], 1, t0+14) // another backend: its own blocks
	if got := tb.Lookup(p[3], t0+14); got != set(0, 1) {
		t.Fatalf("another backend's touch: %v", got)
	}
}

// lineage is a chain of n blocks whose every prefix is a conversation's
// earlier turn.
func lineage(seed uint64, n int) []uint64 {
	out := make([]uint64, n)
	h := seed*0x9e3779b97f4a7c15 + 1
	for i := range out {
		h = h*6364136223846793005 + 1442695040888963407
		out[i] = h | 1
	}
	return out
}

// Whatever order conversations grow, repeat, fork and lose blocks in, a
// confirmed location lives at least TTL minus the slack after its last
// confirmation and never TTL or more, on the grouped path and block by
// block.
func TestPrefixSkipKeepsTheTTLRandomized(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		ttl := int64(200 + rng.IntN(800))
		slack := int64(1 + rng.IntN(20))
		c := &clock{t: time.Unix(1000, 0)}
		tb := NewTable(Config{TTL: time.Duration(ttl) * time.Millisecond, MaxBlocks: 1 << 16, Now: c.now,
			TouchSlack: time.Duration(slack) * time.Millisecond})
		type key struct {
			h uint64
			b int
		}
		last := map[key]int64{}
		convs := [][]uint64{lineage(seed*10, 400), lineage(seed*10+1, 400), lineage(seed*10+2, 400)}
		lens := []int{0, 0, 0}
		for step := 0; step < 600; step++ {
			now := tb.Now()
			i := rng.IntN(len(convs))
			switch op := rng.IntN(10); {
			case op < 6: // the conversation's next turn, or one again
				if rng.IntN(3) > 0 && lens[i] < len(convs[i]) {
					lens[i] = min(lens[i]+1+rng.IntN(40), len(convs[i]))
				}
				n := lens[i]
				if rng.IntN(5) == 0 && n > 1 {
					n = 1 + rng.IntN(n) // an earlier turn
				}
				b := rng.IntN(2)
				tb.Touch(convs[i][:n], b, now)
				for _, h := range convs[i][:n] {
					last[key{h, b}] = now
				}
			case op < 7: // a removal
				if lens[i] > 0 {
					lo := rng.IntN(lens[i])
					b := rng.IntN(2)
					tb.Forget(convs[i][lo:lo+1], b)
					delete(last, key{convs[i][lo], b})
				}
			default:
				c.add(time.Duration(rng.IntN(int(slack)*2+2)) * time.Millisecond)
				if rng.IntN(20) == 0 {
					c.add(time.Duration(ttl/2) * time.Millisecond)
				}
			}
			now = tb.Now()
			for k, at := range last {
				// The time a block holds is its last confirmation's, or up
				// to the slack before it.
				for _, l := range tb.Locations(k.h, now, nil) {
					if l.Backend == k.b && !l.Predicted && (l.Last > at || l.Last < at-slack) {
						t.Fatalf("seed %d step %d: block %x on %d dated %d, last confirmed at %d (slack %d)", seed, step, k.h, k.b, l.Last, at, slack)
					}
				}
				got := tb.Lookup(k.h, now).Has(k.b)
				if now >= at+ttl && got {
					t.Fatalf("seed %d step %d: block %x on %d live %d ms after its last confirmation (ttl %d)", seed, step, k.h, k.b, now-at, ttl)
				}
				if now < at+ttl-slack && !got {
					t.Fatalf("seed %d step %d: block %x on %d gone %d ms after its last confirmation (ttl %d, slack %d)", seed, step, k.h, k.b, now-at, ttl, slack)
				}
				if now >= at+ttl {
					delete(last, k)
				}
			}
			// A record of a whole chain holds only while all of it does.
			for i, conv := range convs {
				if lens[i] == 0 {
					continue
				}
				if b, ok := tb.wholeHolder(conv[:lens[i]], now); ok {
					for _, h := range conv[:lens[i]] {
						if !tb.Lookup(h, now).Has(b) {
							t.Fatalf("seed %d step %d: a record says %d holds the chain, block %x is gone", seed, step, b, h)
						}
					}
				}
			}
		}
	}
}
