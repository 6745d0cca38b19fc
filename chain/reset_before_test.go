package chain

import (
	"testing"
	"time"
)

func TestResetBeforeKeepsNewerAndOtherBackends(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Hour, 1000)
	tb.Touch([]uint64{1, 2}, 1, tb.Now()) // old on backend 1
	tb.Touch([]uint64{1}, 2, tb.Now())    // shared block, other backend
	tb.Pin([]uint64{3}, 1, tb.Now())      // pinned, old: the cache is gone all the same
	clk.add(10 * time.Second)
	cut := tb.Now()
	clk.add(10 * time.Second)
	tb.Touch([]uint64{4}, 1, tb.Now()) // learned after the reset

	if n := tb.ResetBefore(1, cut); n != 3 {
		t.Fatalf("dropped %d locations, want 3", n)
	}
	now := tb.Now()
	if got := tb.Lookup(1, now); got != set(2) {
		t.Fatalf("block 1 held by %v, want only backend 2", got)
	}
	for _, h := range []uint64{2, 3} {
		if got := tb.Lookup(h, now); !got.Empty() {
			t.Fatalf("block %d still held by %v", h, got)
		}
	}
	if got := tb.Lookup(4, now); got != set(1) {
		t.Fatalf("location learned after the reset lost: %v", got)
	}
	// A late duplicate of the same reset finds nothing to drop.
	if n := tb.ResetBefore(1, cut); n != 0 {
		t.Fatalf("second reset dropped %d", n)
	}
	st := tb.Stats()
	if st.Blocks != 2 || st.Locations != 2 || st.EvictedReset != 3 {
		t.Fatalf("stats %+v", st)
	}
	if g := tb.Generation(1); g != 1 {
		t.Fatalf("generation bumped to %d; ResetBefore must keep it", g)
	}
}
