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

// spread returns n block hashes of chain c, spread over shards and index
// slots as SipHash outputs are.
func spread(c uint64, n int) []uint64 {
	h := make([]uint64, n)
	for i := range h {
		h[i] = (c<<32 | uint64(i+1)) * 0x9e3779b97f4a7c15
	}
	return h
}

// TestBackendCapacityBoundaries: what one EnforceCapacity drops at the
// edges of the bound and of the eviction order. Table time starts at 0, so
// a chain touched then has eviction keys down to 0 (its blocks from the
// 16384th on, depth bucket 15) and 1 (its 8192nd to 16383rd, bucket 14).
func TestBackendCapacityBoundaries(t *testing.T) {
	t.Parallel()
	deep := spread(9, 16384+530)
	for _, tc := range []struct {
		name      string
		maxBlocks int
		slack     time.Duration
		bound     int // backend 0's capacity
		setup     func(tb *Table, clk *clock)
		dropped   int
		held      [2]int
		after     func(t *testing.T, tb *Table, clk *clock)
	}{
		{
			name: "at the bound nothing goes", maxBlocks: 1 << 12, bound: 64,
			setup: func(tb *Table, _ *clock) { tb.Touch(spread(1, 64), 0, tb.Now()) },
			held:  [2]int{64, 0},
		},
		{
			// 65 > 64: down to 64 − 64/32 = 62, the 3 oldest chains.
			name: "one over frees the slack", maxBlocks: 1 << 12, bound: 64,
			setup: func(tb *Table, clk *clock) {
				for i := range 65 {
					clk.add(time.Millisecond)
					tb.Touch(spread(uint64(100+i), 1), 0, tb.Now())
				}
			},
			dropped: 3, held: [2]int{62, 0},
			after: func(t *testing.T, tb *Table, _ *clock) {
				for i, want := range []bool{false, false, false, true} {
					if got := tb.Lookup(spread(uint64(100+i), 1)[0], tb.Now()).Has(0); got != want {
						t.Errorf("chain %d held %v, want %v", i, got, want)
					}
				}
			},
		},
		{
			// Backend 1 is not over: even its blocks of key 1 stay.
			name: "another backend's deepest blocks stay", maxBlocks: 1 << 15, bound: 64,
			setup: func(tb *Table, clk *clock) {
				tb.Touch(spread(2, 8193), 1, tb.Now())
				for i := range 70 {
					clk.add(time.Millisecond)
					tb.Touch(spread(uint64(100+i), 1), 0, tb.Now())
				}
			},
			dropped: 8, held: [2]int{62, 8193},
		},
		{
			// 16914 > 16913: 529 over, and the 530 blocks of key 0 (the
			// cutoff) all go. The same chain touched again in the same
			// millisecond is learned again: its touch record was cleared.
			name: "a cutoff at key 0", maxBlocks: 1 << 16, bound: len(deep) - 1,
			setup:   func(tb *Table, _ *clock) { tb.Touch(deep, 0, tb.Now()) },
			dropped: 530, held: [2]int{16384, 0},
			after: func(t *testing.T, tb *Table, _ *clock) {
				if n, _ := tb.Prefix(deep, tb.Now()); n != 16384 {
					t.Errorf("known prefix %d, want 16384", n)
				}
				tb.Touch(deep, 0, tb.Now())
				if got := tb.Held(0); got != len(deep) {
					t.Errorf("held %d after the chain's next touch, want %d", got, len(deep))
				}
			},
		},
		{
			// Over only through pins: nothing can go, and the touch records
			// stay, so a touch within the slack is still skipped.
			name: "over only through pins", maxBlocks: 1 << 12, slack: 10 * time.Millisecond, bound: 32,
			setup: func(tb *Table, _ *clock) {
				tb.Pin(spread(3, 40), 0, tb.Now())
				tb.Touch(spread(4, 3), 1, tb.Now())
			},
			held: [2]int{40, 3},
			after: func(t *testing.T, tb *Table, clk *clock) {
				clk.add(5 * time.Millisecond)
				c := spread(4, 3)
				tb.Touch(c, 1, tb.Now())
				if at, ok := tb.LastAccess(c[2], 1, tb.Now()); at != 0 || !ok {
					t.Errorf("last access %d %v, want 0: the touch within the slack was applied", at, ok)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := &clock{t: time.Unix(1000, 0)}
			tb := NewTable(Config{TTL: time.Hour, MaxBlocks: tc.maxBlocks, Now: clk.now, TouchSlack: tc.slack})
			tb.SetBackendCapacity(0, tc.bound)
			tc.setup(tb, clk)
			if n := tb.EnforceCapacity(); n != tc.dropped {
				t.Fatalf("dropped %d, want %d", n, tc.dropped)
			}
			if got := [2]int{tb.Held(0), tb.Held(1)}; got != tc.held {
				t.Fatalf("held %v, want %v", got, tc.held)
			}
			if st := tb.Stats(); st.EvictedBackendCapacity != uint64(tc.dropped) || st.Locations != tc.held[0]+tc.held[1] {
				t.Fatalf("stats %+v", st)
			}
			if tc.after != nil {
				tc.after(t, tb, clk)
			}
		})
	}
}

// TestHeldCountsEveryLocation: Held follows each way a location comes and
// goes, for a block's first holder and for a further one.
func TestHeldCountsEveryLocation(t *testing.T) {
	t.Parallel()
	a, b, c, d := spread(1, 3), spread(2, 2), spread(3, 1), spread(4, 4)
	for _, tc := range []struct {
		name      string
		maxBlocks int
		do        func(t *testing.T, tb *Table, clk *clock)
		held      [2]int
		gone      []uint64 // blocks no longer in the table
	}{
		{
			name: "a second holder", maxBlocks: 64,
			do:   func(_ *testing.T, tb *Table, _ *clock) { tb.Touch(a, 0, tb.Now()); tb.Touch(a, 1, tb.Now()) },
			held: [2]int{3, 3},
		},
		{
			// One shard of 4 blocks: c's insert evicts the LRU tail d[0].
			name: "a sole holder evicted by the LRU", maxBlocks: 4,
			do: func(_ *testing.T, tb *Table, _ *clock) {
				tb.Touch(d, 0, tb.Now())
				tb.Touch(c, 0, tb.Now())
			},
			held: [2]int{4, 0}, gone: d[:1],
		},
		{
			// a[0] is the LRU tail with both backends' locations on it.
			name: "a shared block evicted by the LRU", maxBlocks: 4,
			do: func(_ *testing.T, tb *Table, _ *clock) {
				tb.Touch(a[:2], 0, tb.Now())
				tb.Touch(a[:2], 1, tb.Now())
				tb.Touch(b, 0, tb.Now())
				tb.Touch(c, 0, tb.Now())
			},
			held: [2]int{4, 1}, gone: a[:1],
		},
		{
			name: "the second holder forgets", maxBlocks: 64,
			do: func(_ *testing.T, tb *Table, _ *clock) {
				tb.Touch(a, 0, tb.Now())
				tb.Touch(a, 1, tb.Now())
				tb.Forget(a, 1)
			},
			held: [2]int{3, 0},
		},
		{
			name: "the second holder is reset", maxBlocks: 64,
			do: func(_ *testing.T, tb *Table, _ *clock) {
				tb.Touch(a, 0, tb.Now())
				tb.Touch(a, 1, tb.Now())
				tb.Reset(1)
			},
			held: [2]int{3, 0},
		},
		{
			// Backend 0 refreshed a at 30 s; backend 1's copy expires at 60 s
			// and goes when looked up at 70 s.
			name: "the second holder expires", maxBlocks: 64,
			do: func(t *testing.T, tb *Table, clk *clock) {
				tb.Touch(a, 0, tb.Now())
				tb.Touch(a, 1, tb.Now())
				clk.add(30 * time.Second)
				tb.Touch(a, 0, tb.Now())
				clk.add(40 * time.Second)
				for _, h := range a {
					if got := tb.Lookup(h, tb.Now()); got != set(0) {
						t.Fatalf("block %x on %v after the lookups", h, got)
					}
				}
			},
			held: [2]int{3, 0},
		},
		{
			name: "the first holder expires", maxBlocks: 64,
			do: func(t *testing.T, tb *Table, clk *clock) {
				tb.Touch(a, 0, tb.Now())
				clk.add(30 * time.Second)
				tb.Touch(a, 1, tb.Now())
				clk.add(40 * time.Second)
				for _, h := range a {
					if got := tb.Lookup(h, tb.Now()); got != set(1) {
						t.Fatalf("block %x on %v after the lookups", h, got)
					}
				}
			},
			held: [2]int{0, 3},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := &clock{t: time.Unix(1000, 0)}
			tb := NewTable(Config{TTL: time.Minute, MaxBlocks: tc.maxBlocks, Now: clk.now})
			tc.do(t, tb, clk)
			if got := [2]int{tb.Held(0), tb.Held(1)}; got != tc.held {
				t.Fatalf("held %v, want %v", got, tc.held)
			}
			if st := tb.Stats(); st.Locations != tc.held[0]+tc.held[1] {
				t.Fatalf("%d locations, held %v", st.Locations, tc.held)
			}
			for _, h := range tc.gone {
				if got := tb.Lookup(h, tb.Now()); !got.Empty() {
					t.Fatalf("block %x still on %v", h, got)
				}
			}
		})
	}
}

// The capacity bound remembers which backend each dropped location was on;
// a block it did not drop is not remembered, and a later drop of the same
// block from another backend replaces the memory.
func TestBackendCapacityRemembersDeparted(t *testing.T) {
	tb, clk := newTestTable(time.Hour, 1<<12)
	a, b := []uint64{0x1100, 0x1200, 0x1300, 0x1400}, []uint64{0x2100, 0x2200, 0x2300, 0x2400}
	tb.SetBackendCapacity(3, 6)
	tb.Touch(a, 3, tb.Now())
	clk.add(time.Second)
	tb.Touch(b, 3, tb.Now())
	// 8 > 6: a's last two blocks go (one enforcement frees a 32nd of the
	// bound below it, none here).
	if n := tb.EnforceCapacity(); n != 2 {
		t.Fatalf("dropped %d", n)
	}
	for _, h := range a[2:] {
		if got, ok := tb.Departed(h); !ok || got != 3 {
			t.Fatalf("block %#x: departed %d %v, want backend 3", h, got, ok)
		}
	}
	for _, h := range append(a[:2:2], b...) {
		if got, ok := tb.Departed(h); ok {
			t.Fatalf("block %#x, still held, remembered as departed from %d", h, got)
		}
	}
	// A block of the same slot but another value is not taken for it.
	if _, ok := tb.Departed(a[2] + departedSlots<<8); ok {
		t.Fatal("a colliding block taken for a departed one")
	}
	tb.SetBackendCapacity(7, 1)
	tb.Touch(a[:3], 7, tb.Now())
	clk.add(time.Second)
	tb.Touch(a[:1], 7, tb.Now())
	tb.EnforceCapacity()
	if got, ok := tb.Departed(a[2]); !ok || got != 7 {
		t.Fatalf("block %#x: departed %d %v, want backend 7 now", a[2], got, ok)
	}
}
