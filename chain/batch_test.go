package chain

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// Touching a long chain a shard at a time leaves every block exactly as
// touching it block by block does, and walking it a shard at a time, or
// not at all where a record of the chain confirmed whole stands in for
// the walk (whole.go), finds what walking it block by block finds: random long chains sharing prefixes and
// repeated whole, confirmed, predicted, pinned, learned late from a peer,
// forgotten in part, cut by a backend's capacity and reset, on
// random backends as the clock moves past TTLs, applied to a table of
// many shards (grouped) and to one of a single shard (block by block), and
// every block's locations compared after each step. No capacity pressure:
// each shard keeps its own LRU order, so evictions differ by design.
func TestGroupedTouchMatchesBlockByBlock(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		c := &clock{t: time.Unix(1000, 0)}
		cfg := Config{TTL: 200 * time.Millisecond, MaxBlocks: maxShardEntries, Now: c.now} // room for every block in one shard
		grouped := NewTable(Config{TTL: cfg.TTL, MaxBlocks: cfg.MaxBlocks, Now: c.now, Shards: 64})
		cfg.Shards = 1
		single := NewTable(cfg)
		single.noWhole = true // and it walks every time
		if len(grouped.shards) < 2 || len(single.shards) != 1 {
			t.Fatalf("shards %d and %d", len(grouped.shards), len(single.shards))
		}
		predTTL := 50 * time.Millisecond
		grouped.SetPredictTTL(predTTL)
		single.SetPredictTTL(predTTL)
		// A few trunks; each chain is a trunk's prefix plus its own tail.
		var trunks, used [][]uint64
		for range 4 {
			tr := make([]uint64, 600)
			for i := range tr {
				tr[i] = rng.Uint64()
			}
			trunks = append(trunks, tr)
		}
		seen := map[uint64]bool{}
		for step := range 400 {
			tr := trunks[rng.IntN(len(trunks))]
			ch := slices.Clone(tr[:128+rng.IntN(len(tr)-128)])
			for range rng.IntN(200) {
				ch = append(ch, rng.Uint64())
			}
			switch r := rng.IntN(4); {
			case len(used) > 0 && r < 2:
				ch = used[rng.IntN(len(used))] // an exact repeat: its record counts
			case len(used) > 0 && r == 2:
				// An earlier chain's next turn: its record covers a prefix.
				ch = slices.Clone(used[rng.IntN(len(used))])
				for range 1 + rng.IntN(60) {
					ch = append(ch, rng.Uint64())
				}
			}
			used = append(used, ch)
			for _, h := range ch {
				seen[h] = true
			}
			b := rng.IntN(4)
			now := grouped.Now()
			switch op := rng.IntN(10); {
			case op < 3:
				grouped.Touch(ch, b, now)
				single.Touch(ch, b, now)
			case op < 6:
				grouped.Predict(ch, b, now)
				single.Predict(ch, b, now)
			case op < 7:
				at := now - int64(rng.IntN(300))
				grouped.TouchAt(ch, b, at)
				single.TouchAt(ch, b, at)
			case op < 8:
				grouped.Pin(ch, b, now)
				single.Pin(ch, b, now)
				if rng.IntN(2) == 0 {
					grouped.Unpin(ch, b)
					single.Unpin(ch, b)
				}
			default:
				switch rng.IntN(6) {
				case 0:
					grouped.Reset(b)
					single.Reset(b)
				case 1, 2, 3:
					part := ch[:1+rng.IntN(len(ch))]
					grouped.Forget(part, b)
					single.Forget(part, b)
				case 4, 5:
					n := 20 + rng.IntN(500)
					grouped.SetBackendCapacity(b, n)
					single.SetBackendCapacity(b, n)
					grouped.EnforceCapacity()
					single.EnforceCapacity()
					grouped.SetBackendCapacity(b, 0)
					single.SetBackendCapacity(b, 0)
				}
			}
			c.add(time.Duration(rng.IntN(40)) * time.Millisecond)
			if step%10 == 0 || step == 399 {
				now := grouped.Now()
				// The walks, which also forget what expired on their way.
				for range 8 {
					tr := trunks[rng.IntN(len(trunks))]
					ch := slices.Clone(tr[:1+rng.IntN(len(tr)-1)])
					if rng.IntN(3) == 0 {
						ch = append(ch, rng.Uint64())
					}
					if rng.IntN(2) == 0 {
						ch = used[rng.IntN(len(used))]
					}
					gn, gs := grouped.Prefix(ch, now)
					sn, ss := single.Prefix(ch, now)
					var gm, sm [MaxBackends]int32
					gh := grouped.Matches(ch, now, &gm)
					shd := single.Matches(ch, now, &sm)
					if gn != sn || gs != ss || gh != shd || gm != sm {
						t.Fatalf("seed %d step %d: grouped walk %d %v %v %v, block by block %d %v %v %v", seed, step, gn, gs, gh, gm[:4], sn, ss, shd, sm[:4])
					}
				}
				for h := range seen {
					// In any order: a walk forgets dead locations on its way,
					// which reorders those left, and a record spares the walk.
					byBackend := func(a, b Location) int { return a.Backend - b.Backend }
					a := slices.SortedFunc(slices.Values(grouped.Locations(h, now, nil)), byBackend)
					s := slices.SortedFunc(slices.Values(single.Locations(h, now, nil)), byBackend)
					if !slices.Equal(a, s) {
						t.Fatalf("seed %d step %d: block %x: grouped %v, block by block %v", seed, step, h, a, s)
					}
				}
			}
		}
	}
}

// Grouping by shard keeps chain order within each shard, and every
// position once.
func TestShardGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	var g shardGroups
	for _, n := range []int{1, 2, 17, 512, 3000} {
		chain := make([]uint64, n)
		for i := range chain {
			chain[i] = rng.Uint64()
		}
		const mask = 63
		g.sort(chain, mask)
		got := 0
		for s := range mask + 1 {
			ps := g.order[g.start[s]:g.start[s+1]]
			for k, p := range ps {
				if chain[p]&mask != uint64(s) || (k > 0 && ps[k-1] >= p) {
					t.Fatalf("n=%d shard %d: positions %v", n, s, ps)
				}
			}
			got += len(ps)
		}
		if got != n || g.start[mask+1] != int32(n) {
			t.Fatalf("n=%d: %d positions grouped", n, got)
		}
	}
}

// A record of a chain confirmed whole stands while every block holds the
// backend's live confirmed location, and goes with the first thing that
// removes one, or with the clock.
func TestWholeRecord(t *testing.T) {
	long := func(seed uint64, n int) []uint64 {
		rng := rand.New(rand.NewPCG(seed, 1))
		ch := make([]uint64, n)
		for i := range ch {
			ch[i] = rng.Uint64()
		}
		return ch
	}
	fresh := func() (*Table, *clock, []uint64) {
		tb, c := newTestTable(time.Second, 1<<20)
		ch := long(1, 700)
		tb.Touch(ch, 2, tb.Now())
		if b, ok := tb.wholeHolder(ch, tb.Now()); !ok || b != 2 {
			t.Fatalf("no record after a confirmation: %d %v", b, ok)
		}
		return tb, c, ch
	}
	gone := func(name string, tb *Table, ch []uint64) {
		t.Helper()
		if _, ok := tb.wholeHolder(ch, tb.Now()); ok {
			t.Errorf("%s: the record still stands", name)
		}
	}

	tb, _, ch := fresh()
	tb.Predict(long(2, 700), 3, tb.Now())
	gone("a prediction of another chain", tb, long(2, 700))
	if _, ok := tb.wholeHolder(ch[:600], tb.Now()); ok {
		t.Error("a record stands for a chain's prefix")
	}

	tb, _, ch = fresh()
	tb.Forget(ch[:10], 2)
	gone("forgotten in part", tb, ch)

	tb, _, ch = fresh()
	tb.Reset(2)
	gone("reset", tb, ch)

	tb, _, ch = fresh()
	tb.ResetBefore(2, tb.Now()+1)
	gone("a peer's reset", tb, ch)

	tb, _, ch = fresh()
	tb.SetBackendCapacity(2, 100)
	if tb.EnforceCapacity() == 0 {
		t.Fatal("the capacity bound dropped nothing")
	}
	gone("cut by the backend's capacity", tb, ch)

	tb, c, ch := fresh()
	c.add(time.Second)
	gone("past the TTL", tb, ch)

	tb, c, ch = fresh()
	c.add(300 * time.Millisecond)
	tb.SetRetention(2, 200*time.Millisecond)
	gone("past the backend's retention", tb, ch)

	// A full table evicts the least recently used block: a removal.
	small, _ := newTestTable(time.Minute, 1024)
	ch = long(1, 500)
	small.Touch(ch, 2, small.Now())
	if _, ok := small.wholeHolder(ch, small.Now()); !ok {
		t.Fatal("no record")
	}
	small.Touch(long(3, 700), 1, small.Now())
	gone("evicted by the table's capacity", small, ch)
}

// Touches racing forgets, resets and capacity cuts never leave a record
// standing for a chain a block of which lost its location: once they are
// done, every chain a record vouches for is held whole.
func TestWholeRecordRaces(t *testing.T) {
	for round := range 20 {
		tb, _ := newTestTable(time.Hour, 1<<20)
		chains := make([][]uint64, 4)
		for i := range chains {
			rng := rand.New(rand.NewPCG(uint64(round), uint64(i)))
			chains[i] = make([]uint64, 600)
			for j := range chains[i] {
				chains[i][j] = rng.Uint64()
			}
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(g+10)))
				for range 60 {
					ch := chains[rng.IntN(len(chains))]
					switch rng.IntN(6) {
					case 0:
						tb.Forget(ch[rng.IntN(len(ch)):], 0)
					case 1:
						tb.ResetBefore(0, tb.Now()+1)
					case 2:
						tb.SetBackendCapacity(0, 300)
						tb.EnforceCapacity()
						tb.SetBackendCapacity(0, 0)
					default:
						tb.Touch(ch, 0, tb.Now()+int64(rng.IntN(3)))
					}
				}
			}()
		}
		wg.Wait()
		now := tb.Now()
		for i, ch := range chains {
			b, ok := tb.wholeHolder(ch, now)
			if !ok {
				continue
			}
			for j, h := range ch {
				if s := tb.Lookup(h, now); !s.Has(b) {
					t.Fatalf("round %d: a record vouches for chain %d on %d, whose block %d it lost", round, i, b, j)
				}
			}
		}
	}
}
