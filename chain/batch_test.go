package chain

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Touching a long chain a shard at a time leaves every block exactly as
// touching it block by block does, and walking it a shard at a time finds
// what walking it block by block finds: random long chains sharing prefixes,
// confirmed, predicted, pinned, learned late from a peer and reset, on
// random backends as the clock moves past TTLs, applied to a table of
// many shards (grouped) and to one of a single shard (block by block), and
// every block's locations compared after each step. No capacity pressure:
// each shard keeps its own LRU order, so evictions differ by design.
func TestGroupedTouchMatchesBlockByBlock(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		c := &clock{t: time.Unix(1000, 0)}
		cfg := Config{TTL: 200 * time.Millisecond, MaxBlocks: 1 << 22, Now: c.now}
		grouped := NewTable(Config{TTL: cfg.TTL, MaxBlocks: cfg.MaxBlocks, Now: c.now, Shards: 64})
		cfg.Shards = 1
		single := NewTable(cfg)
		if len(grouped.shards) < 2 || len(single.shards) != 1 {
			t.Fatalf("shards %d and %d", len(grouped.shards), len(single.shards))
		}
		predTTL := 50 * time.Millisecond
		grouped.SetPredictTTL(predTTL)
		single.SetPredictTTL(predTTL)
		// A few trunks; each chain is a trunk's prefix plus its own tail.
		var trunks [][]uint64
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
			for _, h := range ch {
				seen[h] = true
			}
			b := rng.IntN(4)
			now := grouped.Now()
			switch op := rng.IntN(10); {
			case op < 4:
				grouped.Touch(ch, b, now)
				single.Touch(ch, b, now)
			case op < 7:
				grouped.Predict(ch, b, now)
				single.Predict(ch, b, now)
			case op < 8:
				at := now - int64(rng.IntN(300))
				grouped.TouchAt(ch, b, at)
				single.TouchAt(ch, b, at)
			case op < 9:
				grouped.Pin(ch, b, now)
				single.Pin(ch, b, now)
				if rng.IntN(2) == 0 {
					grouped.Unpin(ch, b)
					single.Unpin(ch, b)
				}
			default:
				if rng.IntN(8) == 0 {
					grouped.Reset(b)
					single.Reset(b)
				}
			}
			c.add(time.Duration(rng.IntN(40)) * time.Millisecond)
			if step%20 == 0 || step == 399 {
				now := grouped.Now()
				// The walks, which also forget what expired on their way.
				for range 8 {
					tr := trunks[rng.IntN(len(trunks))]
					ch := slices.Clone(tr[:1+rng.IntN(len(tr)-1)])
					if rng.IntN(3) == 0 {
						ch = append(ch, rng.Uint64())
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
					a := grouped.Locations(h, now, nil)
					s := single.Locations(h, now, nil)
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
