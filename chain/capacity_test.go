package chain

import (
	"testing"
	"time"
)

func TestBackendCapacityDropsLeastRecentChains(t *testing.T) {
	tb, clk := newTestTable(time.Hour, 1<<12)
	a, b, c, d := []uint64{11, 12, 13, 14}, []uint64{21, 22, 23, 24}, []uint64{31, 32, 33, 34}, []uint64{41, 42, 43, 44}
	tb.SetBackendCapacity(0, 10)
	tb.Touch(a, 0, tb.Now())
	tb.Touch(a, 1, tb.Now()) // another backend's copy is its own business
	clk.add(time.Second)
	tb.Touch(b, 0, tb.Now())
	clk.add(time.Second)
	tb.Touch(c, 0, tb.Now())
	if got := tb.Held(0); got != 12 {
		t.Fatalf("held %d", got)
	}
	// 12 > 10: the oldest chain (a) goes whole, 8 are left.
	if n := tb.EnforceCapacity(); n != 4 {
		t.Fatalf("dropped %d, want a's 4 blocks", n)
	}
	for _, h := range a {
		if got := tb.Lookup(h, tb.Now()); got != set(1) {
			t.Fatalf("block %d: %v, want only backend 1", h, got)
		}
	}
	for _, h := range append(b, c...) {
		if got := tb.Lookup(h, tb.Now()); got != set(0) {
			t.Fatalf("block %d: %v", h, got)
		}
	}
	// b is used again, d arrives: c is now the least recently used.
	clk.add(time.Second)
	tb.Touch(b, 0, tb.Now())
	clk.add(time.Second)
	tb.Touch(d, 0, tb.Now())
	if n := tb.EnforceCapacity(); n != 4 {
		t.Fatalf("dropped %d, want c's 4 blocks", n)
	}
	if got := tb.Lookup(31, tb.Now()); !got.Empty() {
		t.Fatalf("c still located on %v", got)
	}
	if got := tb.Lookup(21, tb.Now()); got != set(0) {
		t.Fatalf("b lost: %v", got)
	}
	if got := tb.Held(0); got != 8 {
		t.Fatalf("held %d", got)
	}
	if n := tb.EnforceCapacity(); n != 0 {
		t.Fatalf("within capacity yet %d dropped", n)
	}
	st := tb.Stats()
	if st.EvictedBackendCapacity != 8 || st.EvictedCapacity != 0 || st.EvictedReset != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A chain dropped this way is learned again by its next touch.
	tb.Touch(c, 0, tb.Now())
	if got := tb.Lookup(34, tb.Now()); got != set(0) {
		t.Fatalf("c not relearned: %v", got)
	}
}

func TestBackendCapacityFreesSlackAndKeepsPins(t *testing.T) {
	tb, clk := newTestTable(time.Hour, 1<<12)
	tb.SetBackendCapacity(2, 64)
	tb.Pin([]uint64{1, 2}, 2, tb.Now())
	for i := range 70 {
		clk.add(time.Millisecond)
		tb.Touch([]uint64{uint64(1000 + i)}, 2, tb.Now())
	}
	// 72 held, bound 64: down to 64 − 64/32 = 62, oldest single-block
	// chains first, the pinned ones kept.
	if n := tb.EnforceCapacity(); n != 10 {
		t.Fatalf("dropped %d", n)
	}
	if got := tb.Held(2); got != 62 {
		t.Fatalf("held %d", got)
	}
	if got := tb.Lookup(1, tb.Now()); got != set(2) {
		t.Fatalf("pinned block dropped: %v", got)
	}
	if got := tb.Lookup(1009, tb.Now()); !got.Empty() {
		t.Fatalf("10th oldest kept: %v", got)
	}
	if got := tb.Lookup(1010, tb.Now()); got != set(2) {
		t.Fatalf("11th oldest dropped: %v", got)
	}
	// Unbounded again: nothing is dropped, and Reset empties the count.
	tb.SetBackendCapacity(2, 0)
	tb.Touch([]uint64{5, 6, 7, 8, 9}, 2, tb.Now())
	if n := tb.EnforceCapacity(); n != 0 {
		t.Fatalf("dropped %d without a bound", n)
	}
	tb.Reset(2)
	if got := tb.Held(2); got != 0 {
		t.Fatalf("held %d after reset", got)
	}
}
