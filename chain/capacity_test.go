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
	// 12 > 10: the oldest chain (a) goes first, deepest blocks first
	// (depth buckets 0, 1, 2, 2): its last two are enough.
	if n := tb.EnforceCapacity(); n != 2 {
		t.Fatalf("dropped %d, want a's last 2 blocks", n)
	}
	for i, h := range a {
		want := set(0, 1)
		if i >= 2 {
			want = set(1)
		}
		if got := tb.Lookup(h, tb.Now()); got != want {
			t.Fatalf("a[%d]: %v, want %v", i, got, want)
		}
	}
	for _, h := range append(b, c...) {
		if got := tb.Lookup(h, tb.Now()); got != set(0) {
			t.Fatalf("block %d: %v", h, got)
		}
	}
	// b is used again, d arrives: 14 held. What is left of a goes, then
	// c, the least recently used chain now, loses its tail.
	clk.add(time.Second)
	tb.Touch(b, 0, tb.Now())
	clk.add(time.Second)
	tb.Touch(d, 0, tb.Now())
	if n := tb.EnforceCapacity(); n != 4 {
		t.Fatalf("dropped %d, want a's head and c's tail", n)
	}
	if n, _ := tb.Prefix(c, tb.Now()); n != 2 {
		t.Fatalf("c's known prefix %d blocks, want its first 2", n)
	}
	if got := tb.Lookup(11, tb.Now()); got != set(1) {
		t.Fatalf("a's head still on %v", got)
	}
	if n, _ := tb.Prefix(b, tb.Now()); n != 4 {
		t.Fatalf("b lost: %d", n)
	}
	if got := tb.Held(0); got != 10 {
		t.Fatalf("held %d", got)
	}
	if n := tb.EnforceCapacity(); n != 0 {
		t.Fatalf("within capacity yet %d dropped", n)
	}
	st := tb.Stats()
	if st.EvictedBackendCapacity != 6 || st.EvictedCapacity != 0 || st.EvictedReset != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A chain dropped this way is learned again by its next touch.
	tb.Touch(c, 0, tb.Now())
	if n, _ := tb.Prefix(c, tb.Now()+1); n != 4 {
		t.Fatalf("c not relearned: %d", n)
	}
}

func TestBackendCapacityDropsTailFirst(t *testing.T) {
	tb, _ := newTestTable(time.Hour, 1<<12)
	c := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	tb.SetBackendCapacity(0, 6)
	tb.Touch(c, 0, tb.Now())
	// Depth buckets 0 1 2 2 3 3 3 3: two blocks over, and the deepest
	// bucket goes whole.
	if n := tb.EnforceCapacity(); n != 4 {
		t.Fatalf("dropped %d", n)
	}
	if n, _ := tb.Prefix(c, tb.Now()); n != 4 {
		t.Fatalf("known prefix %d, want the first 4 blocks", n)
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
