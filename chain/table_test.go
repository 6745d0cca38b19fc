package chain

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// clock is a hand-moved clock for TTL tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestTable(ttl time.Duration, max int) (*Table, *clock) {
	c := &clock{t: time.Unix(1000, 0)}
	return NewTable(Config{TTL: ttl, MaxBlocks: max, Now: c.now}), c
}

func set(bs ...int) (s Set) {
	for _, b := range bs {
		s.Add(b)
	}
	return s
}

func TestTouchLookupAndTTL(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Minute, 1000)
	chain := []uint64{1, 2, 3}
	tb.Touch(chain, 0, tb.Now())
	clk.add(30 * time.Second)
	tb.Touch(chain[:2], 2, tb.Now())
	if got := tb.Lookup(1, tb.Now()); got != set(0, 2) {
		t.Fatalf("lookup %v", got)
	}
	clk.add(31 * time.Second) // backend 0 idle 61 s: expired
	if got := tb.Lookup(1, tb.Now()); got != set(2) {
		t.Fatalf("after TTL %v", got)
	}
	if got := tb.Lookup(3, tb.Now()); !got.Empty() {
		t.Fatalf("expired block still has %v", got)
	}
	st := tb.Stats()
	if st.Blocks != 2 || st.Locations != 3 || st.EvictedExpired != 2 { // block 2 still lists backend 0 until looked up
		t.Fatalf("stats %+v", st)
	}
	// A refresh keeps a location alive.
	clk.add(50 * time.Second)
	tb.Touch(chain[:1], 2, tb.Now())
	clk.add(50 * time.Second)
	if got := tb.Lookup(1, tb.Now()); got != set(2) {
		t.Fatalf("refreshed location lost: %v", got)
	}
	if got := tb.Lookup(2, tb.Now()); !got.Empty() {
		t.Fatalf("unrefreshed block kept: %v", got)
	}
}

func TestTouchAtNeverMovesBack(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Minute, 100)
	tb.Touch([]uint64{7}, 1, tb.Now())
	old := tb.Now()
	clk.add(40 * time.Second)
	tb.Touch([]uint64{7}, 1, tb.Now())
	tb.TouchAt([]uint64{7}, 1, old) // late message from a peer
	clk.add(40 * time.Second)
	if got := tb.Lookup(7, tb.Now()); got != set(1) {
		t.Fatalf("late update rolled the time back: %v", got)
	}
}

func TestVacuumIsDeadlineDriven(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Minute, 1000)
	tb.Touch([]uint64{1, 2, 3}, 0, tb.Now())
	clk.add(20 * time.Second)
	tb.Touch([]uint64{4}, 1, tb.Now())
	next := tb.VacuumOnce()
	if want := int64(60_000); next != want {
		t.Fatalf("next deadline %d, want %d (first block's expiry)", next, want)
	}
	clk.add(41 * time.Second) // first three expired, block 4 has 19 s left
	next = tb.VacuumOnce()
	if st := tb.Stats(); st.Blocks != 1 || st.EvictedExpired != 3 {
		t.Fatalf("after vacuum %+v", st)
	}
	if want := int64(80_000); next != want {
		t.Fatalf("next deadline %d, want %d", next, want)
	}
	clk.add(20 * time.Second)
	tb.VacuumOnce()
	if st := tb.Stats(); st.Blocks != 0 || st.Locations != 0 {
		t.Fatalf("vacuum left %+v", st)
	}
}

// TestMaxBlocksEvictsLRU: a full table gives up exactly its least recently
// used blocks, one per block added, and keeps everything else.
func TestMaxBlocksEvictsLRU(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Hour, 64)
	if tb.Capacity() != 64 {
		t.Fatalf("capacity %d, want 64 (one exact shard)", tb.Capacity())
	}
	// Blocks 1..64, oldest first, one millisecond apart.
	for h := uint64(1); h <= 64; h++ {
		tb.Touch([]uint64{h}, 0, tb.Now())
		clk.add(time.Millisecond)
	}
	// Refresh the 16 oldest: they become the most recent, so 17 is now
	// the least recently used.
	for h := uint64(1); h <= 16; h++ {
		tb.Touch([]uint64{h}, 0, tb.Now())
	}
	// 32 new blocks by another backend push out the 32 least recently
	// used: 17..48.
	for h := uint64(100); h < 132; h++ {
		tb.Touch([]uint64{h}, 1, tb.Now())
	}
	st := tb.Stats()
	if st.Blocks != 64 || st.Locations != 64 || st.EvictedCapacity != 32 || st.EvictedExpired != 0 {
		t.Fatalf("stats %+v, want 64 blocks and locations, 32 evicted for capacity, none expired", st)
	}
	now := tb.Now()
	for h := uint64(1); h < 132; h++ {
		var want Set
		switch {
		case h <= 16 || (h >= 49 && h <= 64):
			want = set(0)
		case h >= 100:
			want = set(1)
		}
		if got := tb.Lookup(h, now); got != want {
			t.Errorf("block %d held by %v, want %v", h, got, want)
		}
	}
}

func TestEvictingExpiredFirstCountsExpired(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Second, 8)
	for h := uint64(1); h <= 8; h++ {
		tb.Touch([]uint64{h}, 0, tb.Now())
	}
	clk.add(2 * time.Second)
	for h := uint64(11); h <= 18; h++ {
		tb.Touch([]uint64{h}, 0, tb.Now())
	}
	if st := tb.Stats(); st.EvictedExpired != 8 || st.EvictedCapacity != 0 {
		t.Fatalf("%+v", st)
	}
}

func TestResetDropsBackendAndBumpsGeneration(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(time.Hour, 1000)
	tb.Touch([]uint64{1, 2}, 0, tb.Now())
	tb.Touch([]uint64{1, 2}, 1, tb.Now())
	if g := tb.Generation(0); g != 1 {
		t.Fatalf("generation %d", g)
	}
	if g := tb.Reset(0); g != 2 {
		t.Fatalf("reset generation %d", g)
	}
	if got := tb.Lookup(1, tb.Now()); got != set(1) {
		t.Fatalf("after reset %v", got)
	}
	if st := tb.Stats(); st.Locations != 2 || st.EvictedReset != 2 {
		t.Fatalf("%+v", st)
	}
	tb.Touch([]uint64{1}, 0, tb.Now())
	if got := tb.Lookup(1, tb.Now()); got != set(0, 1) {
		t.Fatalf("relearn after reset %v", got)
	}
}

func TestPinSurvivesTTL(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Minute, 1000)
	tb.Pin([]uint64{1, 2}, 3, tb.Now())
	tb.Touch([]uint64{1}, 4, tb.Now())
	clk.add(time.Hour)
	tb.VacuumOnce()
	if got := tb.Lookup(1, tb.Now()); got != set(3) {
		t.Fatalf("pinned %v", got)
	}
	if n := tb.Unpin([]uint64{1, 2}, 3); n != 2 {
		t.Fatalf("unpinned %d", n)
	}
	clk.add(time.Hour)
	tb.VacuumOnce()
	if st := tb.Stats(); st.Blocks != 0 {
		t.Fatalf("unpinned blocks kept: %+v", st)
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	tb := NewTable(Config{TTL: time.Second, MaxBlocks: 5000})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			chain := make([]uint64, 16)
			for i := 0; i < 2000; i++ {
				for j := range chain {
					chain[j] = uint64(i*31+j) * 0x9e3779b97f4a7c15
				}
				tb.Touch(chain, (g+i)%4, tb.Now())
				for _, h := range chain {
					tb.Lookup(h, tb.Now())
				}
				if i%500 == 0 {
					tb.VacuumOnce()
					tb.Reset(g % 4)
				}
			}
		}()
	}
	wg.Wait()
	if st := tb.Stats(); st.Blocks > tb.Capacity() {
		t.Fatalf("over capacity %+v", st)
	}
}

func BenchmarkTouch(b *testing.B) {
	tb := NewTable(Config{TTL: time.Minute, MaxBlocks: 1 << 20})
	chain := make([]uint64, 64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range chain {
			chain[j] = uint64(i&1023*64+j) * 0x9e3779b97f4a7c15
		}
		tb.Touch(chain, i&7, tb.Now())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(chain)), "ns/block")
}

// BenchmarkTouchChain touches whole chains of 4 (1 KB), 64 (16 KB) and 512
// (128 KB) blocks in a table of 256 shards, new blocks and known ones.
func BenchmarkTouchChain(b *testing.B) {
	for _, n := range []int{4, 64, 512} {
		b.Run(fmt.Sprintf("%dblocks", n), func(b *testing.B) {
			tb := NewTable(Config{TTL: time.Minute, MaxBlocks: 1 << 20})
			chain := make([]uint64, n)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				for j := range chain {
					chain[j] = uint64(i&255*n+j+1) * 0x9e3779b97f4a7c15
				}
				tb.Touch(chain, i&7, tb.Now())
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(chain)), "ns/block")
		})
	}
}

func BenchmarkLookupParallel(b *testing.B) {
	tb := NewTable(Config{TTL: time.Minute, MaxBlocks: 1 << 20})
	hs := make([]uint64, 1<<16)
	for i := range hs {
		hs[i] = uint64(i+1) * 0x9e3779b97f4a7c15
	}
	tb.Touch(hs, 1, tb.Now())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		now := tb.Now()
		for pb.Next() {
			tb.Lookup(hs[i&(len(hs)-1)], now)
			i++
		}
	})
}

func BenchmarkTouchParallel(b *testing.B) {
	tb := NewTable(Config{TTL: time.Minute, MaxBlocks: 1 << 20})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var c [1]uint64
		i := uint64(0)
		for pb.Next() {
			c[0] = (i & 0xffff) * 0x9e3779b97f4a7c15
			tb.Touch(c[:], int(i&7), tb.Now())
			i++
		}
	})
}

// Prefix is the walk it stands for, and a remembered walk is only reused
// within its millisecond.
func TestPrefix(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Hour, 1<<12)
	c := make([]uint64, 5)
	for i := range c {
		c[i] = uint64(21+i) * 0x9e3779b97f4a7c15 // block hashes are uniform
	}
	walk := func(now int64) (int, Set) {
		var prev Set
		n := 0
		for _, h := range c {
			l := tb.Lookup(h, now)
			if l.Empty() {
				break
			}
			prev, n = l, n+1
		}
		return n, prev
	}
	// matchWalk is what Matches stands for: per backend, the leading
	// blocks it holds.
	matchWalk := func(now int64) (m [MaxBackends]int32) {
		for b := range 4 {
			for _, h := range c {
				if !tb.Lookup(h, now).Has(b) {
					break
				}
				m[b]++
			}
		}
		return m
	}
	check := func(what string) {
		t.Helper()
		now := tb.Now()
		gn, gs := tb.Prefix(c, now)
		wn, ws := walk(now)
		if gn != wn || gs != ws {
			t.Fatalf("%s: Prefix = %d %v, walk = %d %v", what, gn, gs, wn, ws)
		}
		want := matchWalk(now)
		for range 2 { // computed, then remembered
			var got [MaxBackends]int32
			held := tb.Matches(c, now, &got)
			if got != want {
				t.Fatalf("%s: Matches = %v, walk = %v", what, got[:4], want[:4])
			}
			for b := range 4 {
				if held.Has(b) != (want[b] > 0) {
					t.Fatalf("%s: Matches holders %v, walk %v", what, held, want[:4])
				}
			}
		}
	}
	check("empty table")
	clk.add(time.Millisecond)
	tb.Touch(c[:3], 0, tb.Now())
	check("three blocks held by 0")
	clk.add(time.Millisecond)
	tb.Touch(c[:1], 2, tb.Now())
	check("and the first by 2")
	clk.add(time.Millisecond)
	tb.Touch(c, 1, tb.Now())
	check("all held by 1")
	if n, s := tb.Prefix(c[:2], tb.Now()); n != 2 || s != set(0, 1) {
		t.Fatalf("a shorter chain: %d %v", n, s)
	}
	// Within one millisecond the remembered walk stands; the next sees
	// what was learned.
	now := tb.Now()
	tb.Forget(c, 1)
	if n, _ := tb.Prefix(c, now); n != 5 {
		t.Fatalf("within the millisecond: %d", n)
	}
	clk.add(time.Millisecond)
	check("after Forget")
}

func TestPrefixConcurrent(t *testing.T) {
	t.Parallel()
	tb := NewTable(Config{TTL: time.Minute, MaxBlocks: 1 << 16})
	c := make([]uint64, 64)
	for i := range c {
		c[i] = uint64(i+1) * 0x9e3779b97f4a7c15
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				now := tb.Now()
				if g%2 == 0 {
					tb.Touch(c[:1+i%len(c)], g, now)
					continue
				}
				if n, s := tb.Prefix(c, now); n > 0 && s.Empty() {
					t.Error("a prefix without holders")
					return
				}
				var m [MaxBackends]int32
				held := tb.Matches(c, now, &m)
				held.Each(func(b int) {
					if m[b] <= 0 || int(m[b]) > len(c) {
						t.Errorf("backend %d matches %d blocks", b, m[b])
					}
				})
			}
		}()
	}
	wg.Wait()
}

// A repeated touch within the same millisecond is skipped, but never one
// that would change something: another backend, a forgotten chain, a reset
// backend, a pin.
func TestRepeatedTouchSkipsOnlyNoOps(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(time.Hour, 1<<12)
	c := []uint64{11, 12, 13}
	now := tb.Now()
	tb.Touch(c, 0, now)
	tb.Touch(c, 0, now) // skipped: nothing to change
	tb.Touch(c, 1, now)
	if got := tb.Lookup(13, now); got != set(0, 1) {
		t.Fatalf("after touches by 0 and 1: %v", got)
	}
	tb.Forget(c, 1)
	tb.Touch(c, 1, now)
	if got := tb.Lookup(13, now); got != set(0, 1) {
		t.Fatalf("a touch right after Forget was skipped: %v", got)
	}
	tb.Reset(0)
	tb.Touch(c, 0, now)
	if got := tb.Lookup(12, now); got != set(0, 1) {
		t.Fatalf("a touch right after Reset was skipped: %v", got)
	}
	tb.Pin(c, 0, now)
	if n := tb.Unpin(c, 0); n != len(c) {
		t.Fatalf("pin after a touch in the same millisecond: %d blocks pinned", n)
	}
}

// TestTouchSlack: a touch within slack of the chain's last touch by the
// same backend keeps the earlier time (the location expires TTL after it);
// a later one, another backend's, or one after Forget is applied; a touch
// dated earlier than the recorded one does not move the record back.
func TestTouchSlack(t *testing.T) {
	t.Parallel()
	const ttl = 1000
	c := &clock{t: time.Unix(1000, 0)}
	tb := NewTable(Config{TTL: ttl * time.Millisecond, MaxBlocks: 1 << 12, Now: c.now, TouchSlack: 10 * time.Millisecond})
	ch := []uint64{21, 22, 23}
	t0 := tb.Now()
	tb.Touch(ch, 0, t0)
	tb.Touch(ch, 0, t0+10) // within slack: skipped
	if got := tb.Lookup(23, t0+ttl+5); !got.Empty() {
		t.Fatalf("a touch within the slack was applied: %v at t0+ttl+5", got)
	}
	tb.Touch(ch, 0, t0+11) // beyond it: applied
	if got := tb.Lookup(23, t0+ttl+5); got != set(0) {
		t.Fatalf("a touch beyond the slack was skipped: %v", got)
	}
	// A peer's older touch walks (and changes nothing newer), then the
	// next local touch within slack of t0+11 is still skipped.
	tb.TouchAt(ch, 0, t0+1)
	tb.Touch(ch, 0, t0+21)
	if got := tb.Lookup(23, t0+ttl+15); got.Has(0) {
		t.Fatalf("the record moved back to an older touch: %v at t0+ttl+15", got)
	}
	tb.Touch(ch, 1, t0+22) // another backend: its own record
	if got := tb.Lookup(22, t0+22); got != set(0, 1) {
		t.Fatalf("another backend's touch: %v", got)
	}
	tb.Forget(ch, 1)
	tb.Touch(ch, 1, t0+23)
	if got := tb.Lookup(21, t0+23); got != set(0, 1) {
		t.Fatalf("a touch right after Forget: %v", got)
	}
	// A removal of a block inside a longer chain: that chain's next touch
	// within the slack writes the block again.
	long := []uint64{21, 22, 23, 24, 25}
	tb.Touch(long, 0, t0+24)
	tb.Forget(ch[1:2], 0)
	tb.Touch(long, 0, t0+25)
	if got := tb.Lookup(22, t0+25); !got.Has(0) {
		t.Fatalf("a touch within the slack after a removal inside the chain: %v", got)
	}
}

// BenchmarkHotChainParallel is what concurrent requests carrying one long
// prompt do to the table: every goroutine walks the same 512-block (128 KB)
// chain as routing does (Prefix), then touches it as learning does, so
// both cores meet on the same shards at the same time.
func BenchmarkHotChainParallel(b *testing.B) {
	tb := NewTable(Config{TTL: time.Minute, MaxBlocks: 4 << 20})
	hot := make([]uint64, 512)
	for i := range hot {
		hot[i] = uint64(i+1) * 0x9e3779b97f4a7c15
	}
	tb.Touch(hot, 0, tb.Now())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			now := tb.Now()
			if n, _ := tb.Prefix(hot, now); n != len(hot) {
				panic("hot chain lost")
			}
			tb.Touch(hot, 0, now)
		}
	})
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(hot)), "ns/block")
}

// BenchmarkMemoryPerBlock reports heap bytes per tracked block with one
// location each (target: at most 64).
func BenchmarkMemoryPerBlock(b *testing.B) {
	const n = 1 << 20
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		tb := NewTable(Config{TTL: time.Minute, MaxBlocks: n})
		var c [1]uint64
		now := tb.Now()
		for i := uint64(1); i <= n; i++ {
			c[0] = i * 0x9e3779b97f4a7c15
			tb.Touch(c[:], int(i&7), now)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/block")
		runtime.KeepAlive(tb)
	}
}

func TestForget(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(time.Hour, 1000)
	tb.Touch([]uint64{1, 2, 3}, 0, tb.Now())
	tb.Pin([]uint64{1, 2, 3}, 1, tb.Now())
	if n := tb.Forget([]uint64{1, 2}, 1); n != 2 {
		t.Fatalf("forgot %d", n)
	}
	if got := tb.Lookup(1, tb.Now()); got != set(0) {
		t.Fatalf("after forget %v", got)
	}
	tb.Forget([]uint64{3}, 0)
	tb.Forget([]uint64{3}, 1)
	if st := tb.Stats(); st.Blocks != 2 || st.EvictedReset != 4 || tb.Generation(1) != 1 {
		t.Fatalf("%+v gen %d", st, tb.Generation(1))
	}
}

// TestIndexAgainstMap drives the open-addressing index through inserts,
// evictions and deletions and checks it against a plain map, with
// hashes clustered on a few homes (long probe runs that wrap around the
// end, slots far from their homes), on a few homes with different tags,
// and uniform.
func TestIndexAgainstMap(t *testing.T) {
	t.Parallel()
	for name, gen := range map[string]func(next func() uint64) uint64{
		"clustered": func(next func() uint64) uint64 { return (next()%64)<<16 | next()%1024 },
		"tagged":    func(next func() uint64) uint64 { return next()&0xe00000000000ffff | (next()%4)<<16 },
		"uniform":   func(next func() uint64) uint64 { return next() },
	} {
		var sh shard
		sh.init()
		model := map[uint64]bool{}
		rng := uint64(12345)
		next := func() uint64 { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng }
		for step := 0; step < 40000; step++ {
			h := gen(next)
			if _, ok := sh.find(h); ok != model[h] {
				t.Fatalf("%s, step %d: find(%x)=%v, model %v", name, step, h, ok, model[h])
			}
			if model[h] {
				i, _ := sh.find(h)
				sh.remove(i)
				delete(model, h)
			} else if len(model) < 3000 {
				sh.insert(h)
				model[h] = true
			} else {
				// Full: evict one at random, as a full shard does its tail.
				for k := range model {
					i, _ := sh.find(k)
					sh.remove(i)
					delete(model, k)
					break
				}
			}
		}
		for h := range model {
			if _, ok := sh.find(h); !ok {
				t.Fatalf("%s: lost %x", name, h)
			}
		}
		if sh.count != len(model) {
			t.Fatalf("%s: count %d, model %d", name, sh.count, len(model))
		}
	}
}

// BenchmarkRefreshChain is an agent's next turn on a long history: a chain
// of n blocks (512: 128 KB, 4096: 1 MB), all known, predicted on its
// confirmed backend, then confirmed a millisecond later than last time.
func BenchmarkRefreshChain(b *testing.B) {
	for _, n := range []int{512, 4096} {
		b.Run(fmt.Sprintf("%dblocks", n), func(b *testing.B) {
			tb := NewTable(Config{TTL: time.Hour, MaxBlocks: 1 << 20})
			chain := make([]uint64, n)
			for j := range chain {
				chain[j] = uint64(j+1) * 0x9e3779b97f4a7c15
			}
			now := tb.Now()
			tb.Touch(chain, 1, now)
			b.ReportAllocs()
			for b.Loop() {
				now++
				tb.Predict(chain, 1, now)
				tb.Touch(chain, 1, now)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(chain)), "ns/block")
		})
	}
}

// BenchmarkNewConversations is a fleet's traffic of distinct long
// conversations on a table far larger than the CPU's caches: each
// iteration routes a new 512-block chain (128 KB) as kvca does (the
// longest known prefix, a prediction, a confirmation), then its
// follow-up, which extends it by 16 blocks. Blocks are where the table's
// index and slab lie at random.
func BenchmarkNewConversations(b *testing.B) {
	const blocks = 512
	const capacity = 2 << 20
	tb := NewTable(Config{TTL: time.Hour, MaxBlocks: capacity})
	rng := rand.New(rand.NewPCG(1, 2))
	chain := make([]uint64, blocks+16)
	route := func(c []uint64, now int64) {
		tb.Prefix(c, now)
		tb.Predict(c, 1, now)
		tb.Touch(c, 1, now)
	}
	now := tb.Now()
	// Filled twice over: full, evicting, its slices grown, as a fleet's
	// table runs.
	for range 2 * capacity / len(chain) {
		for j := range chain {
			chain[j] = rng.Uint64()
		}
		now++
		route(chain, now)
	}
	b.ReportAllocs()
	for b.Loop() {
		for j := range chain {
			chain[j] = rng.Uint64()
		}
		now++
		route(chain[:blocks], now)
		route(chain, now+1)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(2*blocks+16)), "ns/block")
}
