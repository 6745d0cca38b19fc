package chain

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/dchest/siphash"
)

func TestSetLenCountsEveryWord(t *testing.T) {
	t.Parallel()
	var s Set
	for i, b := range []int{0, 63, 64, 130, 191, 192, 255} {
		s.Add(b)
		if s.Len() != i+1 {
			t.Fatalf("after adding %d: Len %d, want %d", b, s.Len(), i+1)
		}
	}
}

func TestCheckBlockSize(t *testing.T) {
	t.Parallel()
	for n, ok := range map[int]bool{-8: false, 0: false, 4: false, 8: true, 12: false, 64: true} {
		if err := CheckBlockSize(n); (err == nil) != ok {
			t.Errorf("CheckBlockSize(%d) = %v, want ok=%v", n, err, ok)
		}
	}
}

// TestHasherKnownAnswer: the chain is SipHash-2-4 over LE64(previous
// hash) || block, computed here independently; a trailing partial block
// is not hashed, and how the bytes are split over writes does not matter.
func TestHasherKnownAnswer(t *testing.T) {
	t.Parallel()
	key := Key{0x0706050403020100, 0x0f0e0d0c0b0a0908}
	data := make([]byte, 8*3+5)
	for i := range data {
		data[i] = byte(i * 7)
	}
	var want []uint64
	var prev uint64
	for off := 0; off+8 <= len(data); off += 8 {
		msg := binary.LittleEndian.AppendUint64(nil, prev)
		msg = append(msg, data[off:off+8]...)
		prev = siphash.Hash(key.K0, key.K1, msg)
		want = append(want, prev)
	}
	for _, split := range []int{1, 3, 8, len(data)} {
		h := NewHasher(key, 8)
		for p := data; len(p) > 0; {
			n := min(split, len(p))
			h.Write(p[:n])
			p = p[n:]
		}
		got := h.Sum()
		if len(got) != 3 {
			t.Fatalf("split %d: %d blocks, want 3", split, len(got))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("split %d: block %d %x, want %x", split, i, got[i], want[i])
			}
		}
	}
}

func TestTimeOfAndAt(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Hour, 64)
	epoch := clk.now()
	if got := tb.TimeOf(1500); !got.Equal(epoch.Add(1500 * time.Millisecond)) {
		t.Fatalf("TimeOf(1500) = %v, want epoch + 1.5s", got)
	}
	if got := tb.At(epoch.Add(2500 * time.Millisecond)); got != 2500 {
		t.Fatalf("At(epoch + 2.5s) = %d", got)
	}
	if got := tb.At(epoch.Add(-time.Second)); got != 0 {
		t.Fatalf("At(before the epoch) = %d, want 0", got)
	}
}

// TestTTLBoundary: a location touched at t with TTL d is live through
// t+d-1 ms and gone at t+d.
func TestTTLBoundary(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(100*time.Millisecond, 64)
	tb.Touch([]uint64{1}, 2, tb.Now())
	clk.add(99 * time.Millisecond)
	if got := tb.Lookup(1, tb.Now()); got != set(2) {
		t.Fatalf("at t+99ms: %v", got)
	}
	clk.add(time.Millisecond)
	if got := tb.Lookup(1, tb.Now()); !got.Empty() {
		t.Fatalf("at t+100ms: %v, want expired", got)
	}
}

func TestShardCountAndCapacity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ shards, max, wantShards, wantCap int }{
		{4, 1 << 20, 4, 1 << 20},
		{8, 1 << 20, 8, 1 << 20},
		{0, 1000, 1, 1000},
		{0, 4096, 4, 4096},
		{4, 4097, 4, 4100}, // rounded up to whole shards
	} {
		tb := NewTable(Config{TTL: time.Hour, MaxBlocks: tc.max, Shards: tc.shards})
		if len(tb.shards) != tc.wantShards || tb.Capacity() != tc.wantCap {
			t.Errorf("Shards %d MaxBlocks %d: %d shards, capacity %d; want %d, %d",
				tc.shards, tc.max, len(tb.shards), tb.Capacity(), tc.wantShards, tc.wantCap)
		}
	}
}

// TestResetBeforeIsStrict: a location last accessed exactly at the reset's
// instant survives it.
func TestResetBeforeIsStrict(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Hour, 64)
	tb.Touch([]uint64{1}, 0, tb.Now())
	clk.add(time.Millisecond)
	at := tb.Now()
	tb.Touch([]uint64{2}, 0, at)
	if n := tb.ResetBefore(0, at); n != 1 {
		t.Fatalf("dropped %d, want 1", n)
	}
	if got := tb.Lookup(2, at); got != set(0) {
		t.Fatalf("the location at the reset's instant: %v", got)
	}
}

func TestForgetNothing(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(time.Hour, 64)
	tb.Touch([]uint64{1}, 0, tb.Now())
	if n := tb.Forget(nil, 0); n != 0 {
		t.Fatalf("Forget(nil) dropped %d", n)
	}
	if got := tb.Lookup(1, tb.Now()); got != set(0) {
		t.Fatalf("Forget(nil) touched block 1: %v", got)
	}
}

// TestEvictionPassesOverAtMostEightPins: a full shard whose eight least
// recently used blocks are pinned exceeds its bound rather than look
// further; with seven pinned it evicts the first unpinned one.
func TestEvictionPassesOverAtMostEightPins(t *testing.T) {
	t.Parallel()
	for _, pinned := range []int{7, 8} {
		tb, clk := newTestTable(time.Hour, 16)
		for h := 1; h <= 16; h++ {
			if h <= pinned {
				tb.Pin([]uint64{uint64(h)}, 0, tb.Now())
			} else {
				tb.Touch([]uint64{uint64(h)}, 0, tb.Now())
			}
			clk.add(time.Millisecond)
		}
		tb.Touch([]uint64{100}, 1, tb.Now())
		st := tb.Stats()
		switch pinned {
		case 7:
			if st.Blocks != 16 || st.EvictedCapacity != 1 || !tb.Lookup(uint64(pinned+1), tb.Now()).Empty() {
				t.Errorf("7 pinned: %+v, want block 8 evicted", st)
			}
		case 8:
			if st.Blocks != 17 || st.EvictedCapacity != 0 {
				t.Errorf("8 pinned: %+v, want 17 blocks and no eviction", st)
			}
		}
	}
}

// TestVacuumPassesOverPins: a pinned block at the LRU tail does not stop
// the vacuum from reclaiming expired blocks behind it.
func TestVacuumPassesOverPins(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Second, 64)
	tb.Pin([]uint64{1}, 0, tb.Now())
	tb.Touch([]uint64{2, 3}, 0, tb.Now())
	clk.add(2 * time.Second)
	tb.VacuumOnce()
	if st := tb.Stats(); st.Blocks != 1 || st.EvictedExpired != 2 {
		t.Fatalf("after vacuum %+v, want the pinned block only", st)
	}
	if got := tb.Lookup(1, tb.Now()); got != set(0) {
		t.Fatalf("pinned block: %v", got)
	}
}

// TestVacuumBudget: one pass gives up at most vacuumBudget blocks per
// shard and asks to be called again at once.
func TestVacuumBudget(t *testing.T) {
	t.Parallel()
	const n = vacuumBudget + 476
	tb, clk := newTestTable(time.Second, 2000) // one shard
	for h := uint64(1); h <= n; h++ {
		tb.Touch([]uint64{h}, 0, tb.Now())
	}
	clk.add(2 * time.Second)
	now := tb.Now()
	if next := tb.VacuumOnce(); next != now {
		t.Fatalf("next %d after a pass cut short, want now (%d)", next, now)
	}
	if st := tb.Stats(); st.Blocks != n-vacuumBudget || st.EvictedExpired != vacuumBudget {
		t.Fatalf("after one pass %+v, want %d blocks left", st, n-vacuumBudget)
	}
	if next := tb.VacuumOnce(); next != now+1000 {
		t.Fatalf("next %d after the last pass, want now + TTL", next)
	}
	if st := tb.Stats(); st.Blocks != 0 {
		t.Fatalf("after two passes %+v", st)
	}
}

// TestIndexGrowsAtThreeQuarters: a shard's index doubles when a block
// would fill more than 3/4 of it, and no sooner.
func TestIndexGrowsAtThreeQuarters(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(time.Hour, 1000)
	sh := &tb.shards[0]
	for h := uint64(1); h <= 12; h++ {
		tb.Touch([]uint64{h}, 0, tb.Now())
	}
	if len(sh.idx) != 16 {
		t.Fatalf("index of %d slots for 12 blocks, want 16", len(sh.idx))
	}
	tb.Touch([]uint64{13}, 0, tb.Now())
	if len(sh.idx) != 32 {
		t.Fatalf("index of %d slots for 13 blocks, want 32", len(sh.idx))
	}
}

// TestEntriesAreReused: churn through a full table keeps its slab at its
// bound (freed entries, the first included, are reused).
func TestEntriesAreReused(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(time.Hour, 16)
	for h := uint64(1); h <= 1000; h++ {
		tb.Touch([]uint64{h}, 0, tb.Now())
	}
	if n := len(tb.shards[0].ents); n != 16 {
		t.Fatalf("slab of %d entries for a 16-block table", n)
	}
	tb.Forget([]uint64{1000}, 0)
	tb.Touch([]uint64{5000}, 0, tb.Now())
	if n := len(tb.shards[0].ents); n != 16 {
		t.Fatalf("slab of %d entries after forget and touch", n)
	}
}

// TestMatchesKeptForTheMillisecond: within the millisecond a Matches
// result is reused (changes show from the next one on), never another
// chain's, even one of the same length in the same slot.
func TestMatchesKeptForTheMillisecond(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Hour, 1<<12)
	// Same length, same slot: the last blocks differ only below bit 20.
	a := []uint64{0x10_0000_0011, 0x30_0000_0001}
	b := []uint64{0x20_0000_0021, 0x30_0000_0002}
	now := tb.Now()
	for be := range matchPairs {
		tb.Touch(a, be, now) // 8 holders: the most a slot keeps
	}
	tb.Touch(b[:1], 20, now)
	var m [MaxBackends]int32
	held := tb.Matches(a, now, &m)
	if held.Len() != matchPairs || m[0] != 2 || m[7] != 2 {
		t.Fatalf("chain a: %v held, matches %v", held, m[:8])
	}
	// Backend 0 forgets a's second block; within the millisecond the kept
	// result still says 2.
	tb.Forget(a[1:], 0)
	m = [MaxBackends]int32{}
	held = tb.Matches(a, now, &m)
	if held.Len() != matchPairs || m[0] != 2 {
		t.Fatalf("within the millisecond: %v held, m[0]=%d, want the kept result", held, m[0])
	}
	var mb [MaxBackends]int32
	if held := tb.Matches(b, now, &mb); held != set(20) || mb[20] != 1 || mb[0] != 0 {
		t.Fatalf("chain b in a's slot: %v held, m[20]=%d m[0]=%d", held, mb[20], mb[0])
	}
	clk.add(time.Millisecond)
	m = [MaxBackends]int32{}
	held = tb.Matches(a, tb.Now(), &m)
	if held.Len() != matchPairs || m[0] != 1 || m[1] != 2 {
		t.Fatalf("next millisecond: %v held, m[0]=%d m[1]=%d, want 1 and 2", held, m[0], m[1])
	}
}

// TestTouchKeepsAPin: a later touch by the pinning backend refreshes the
// location and keeps its pin.
func TestTouchKeepsAPin(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Minute, 64)
	tb.Pin([]uint64{1}, 3, tb.Now())
	clk.add(time.Millisecond)
	tb.Touch([]uint64{1}, 3, tb.Now())
	clk.add(time.Hour)
	if got := tb.Lookup(1, tb.Now()); got != set(3) {
		t.Fatalf("pinned then touched: %v an hour later", got)
	}
	if n := tb.Unpin([]uint64{1}, 3); n != 1 {
		t.Fatalf("unpinned %d, want the 1 pin the touch kept", n)
	}
}

// TestForgetOneOfThreeHolders: the other holders of a block stay.
func TestForgetOneOfThreeHolders(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(time.Hour, 64)
	for b := range 3 {
		tb.Touch([]uint64{1}, b, tb.Now())
	}
	if n := tb.Forget([]uint64{1}, 0); n != 1 {
		t.Fatalf("forgot %d", n)
	}
	if got := tb.Lookup(1, tb.Now()); got != set(1, 2) {
		t.Fatalf("after forgetting backend 0: %v, want 1 and 2", got)
	}
	if n := tb.Forget([]uint64{1}, 2); n != 1 {
		t.Fatalf("forgot %d", n)
	}
	if got := tb.Lookup(1, tb.Now()); got != set(1) {
		t.Fatalf("after forgetting backend 2: %v, want 1", got)
	}
	if st := tb.Stats(); st.Blocks != 1 || st.Locations != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTouchNothing(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(time.Hour, 64)
	tb.Touch(nil, 0, tb.Now())
	tb.TouchAt([]uint64{}, 1, tb.Now())
	if st := tb.Stats(); st.Blocks != 0 {
		t.Fatalf("an empty chain added %+v", st)
	}
}

// TestIndexDeleteAcrossTheWrap: deleting a block whose probe run wraps
// past the end of the index keeps the block that wrapped findable.
func TestIndexDeleteAcrossTheWrap(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(time.Hour, 1000) // one shard, a 16-slot index
	// Both blocks' first probe is the last slot: the second wraps to 0.
	h1, h2 := uint64(15)<<16|1, uint64(15)<<16|2
	tb.Touch([]uint64{h1}, 0, tb.Now())
	tb.Touch([]uint64{h2}, 1, tb.Now())
	if sh := &tb.shards[0]; len(sh.idx) != 16 || sh.idx[15] == 0 || sh.idx[0] == 0 {
		t.Fatalf("setup: index %v", sh.idx)
	}
	tb.Forget([]uint64{h1}, 0)
	if got := tb.Lookup(h2, tb.Now()); got != set(1) {
		t.Fatalf("the wrapped block after its neighbour went: %v", got)
	}
}

// TestIndexTags: blocks on one probe run, some sharing their tag (the
// hash's top byte) and some not, are each found, absent ones are not,
// and deleting from the run keeps the rest findable.
func TestIndexTags(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(time.Hour, 1000) // one shard
	var blocks []uint64
	for k, tag := range []uint64{0, 0, 1, 255, 255, 7, 0} {
		blocks = append(blocks, tag<<56|5<<16|uint64(k+1)) // every one's home is slot 5
	}
	for i, h := range blocks {
		tb.Touch([]uint64{h}, i%4, tb.Now())
	}
	for i, h := range blocks {
		if got := tb.Lookup(h, tb.Now()); got != set(i%4) {
			t.Fatalf("block %d (%#x): %v, want %v", i, h, got, set(i%4))
		}
	}
	for _, h := range []uint64{0<<56 | 5<<16 | 99, 255<<56 | 5<<16 | 99, 3<<56 | 5<<16 | 99} {
		if got := tb.Lookup(h, tb.Now()); !got.Empty() {
			t.Fatalf("absent block %#x found on %v", h, got)
		}
	}
	tb.Forget(blocks[:1], 0)
	tb.Forget(blocks[3:4], 3)
	for i, h := range blocks {
		want := set(i % 4)
		if i == 0 || i == 3 {
			want = Set{}
		}
		if got := tb.Lookup(h, tb.Now()); got != want {
			t.Fatalf("after deletes, block %d: %v, want %v", i, got, want)
		}
	}
}

// TestShardsBoundTheSlotIndex: however few shards are asked for, none
// holds more entries than an index slot can name.
func TestShardsBoundTheSlotIndex(t *testing.T) {
	t.Parallel()
	tb := NewTable(Config{TTL: time.Hour, MaxBlocks: 3*maxShardEntries + 5, Shards: 1})
	if tb.perShard > maxShardEntries || len(tb.shards) != 4 {
		t.Fatalf("%d shards of %d blocks; at most %d a shard", len(tb.shards), tb.perShard, maxShardEntries)
	}
}
