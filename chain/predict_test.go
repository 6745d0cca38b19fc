package chain

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A prediction lives min(predict TTL, TTL) unless confirmed, never
// refreshes a confirmed location, and is cleared by a confirmation.
func TestPredictedLocationLivesAtMostTheTTL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ ttl, pred, life time.Duration }{
		{time.Second, 10 * time.Second, time.Second},         // the TTL bounds a long prediction
		{10 * time.Second, 2 * time.Second, 2 * time.Second}, // a short prediction ends first
		{5 * time.Second, 0, 5 * time.Second},                // 0: as long as the TTL
	} {
		tb, clk := newTestTable(c.ttl, 1000)
		tb.SetPredictTTL(c.pred)
		if got := tb.PredictTTL(); got != c.life {
			t.Fatalf("%+v: PredictTTL %v", c, got)
		}
		tb.Predict([]uint64{1, 2}, 3, tb.Now())
		l, ok := tb.LocationOf(2, 3, tb.Now())
		if !ok || !l.Predicted {
			t.Fatalf("%+v: predicted location %+v %v", c, l, ok)
		}
		clk.add(c.life - time.Millisecond)
		if got := tb.Lookup(2, tb.Now()); got != set(3) {
			t.Fatalf("%+v: gone before its life: %v", c, got)
		}
		clk.add(time.Millisecond)
		if got := tb.Lookup(2, tb.Now()); !got.Empty() {
			t.Fatalf("%+v: outlived its life: %v", c, got)
		}
	}
}

func TestPredictionNeverRefreshesAConfirmedLocation(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Second, 1000)
	tb.SetPredictTTL(10 * time.Second)
	ch := []uint64{7, 8, 9}
	tb.Touch(ch, 1, tb.Now())
	clk.add(900 * time.Millisecond)
	tb.Predict(ch, 1, tb.Now()) // must not extend the confirmed access
	if l, _ := tb.LocationOf(9, 1, tb.Now()); l.Predicted || l.Last != 0 {
		t.Fatalf("prediction rewrote a confirmed location: %+v", l)
	}
	clk.add(100 * time.Millisecond)
	if got := tb.Lookup(9, tb.Now()); !got.Empty() {
		t.Fatalf("confirmed location outlived the TTL through a prediction: %v", got)
	}
	// Once gone, a prediction records it anew, and a confirmation within
	// the same millisecond clears its mark (the recent-touch memo must not
	// take the prediction for a confirmation).
	tb.Predict(ch, 1, tb.Now())
	tb.Touch(ch, 1, tb.Now())
	for _, h := range ch {
		if l, ok := tb.LocationOf(h, 1, tb.Now()); !ok || l.Predicted {
			t.Fatalf("block %d after confirmation: %+v %v", h, l, ok)
		}
	}
}

// SetRetention: a backend's unpinned locations live at most the retention
// after their last access, below the TTL; other backends' and pinned ones
// are untouched, and removing it restores the TTL.
func TestRetentionBoundsABackendsLocations(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(time.Hour, 1000)
	tb.Touch([]uint64{1, 2}, 0, tb.Now())
	tb.Touch([]uint64{1, 2}, 1, tb.Now())
	tb.Pin([]uint64{5}, 0, tb.Now())
	clk.add(time.Second)
	tb.Touch([]uint64{3, 4}, 0, tb.Now())
	clk.add(100 * time.Millisecond)
	tb.SetRetention(0, 500*time.Millisecond)
	if got := tb.Retention(0); got != 500*time.Millisecond {
		t.Fatalf("Retention %v", got)
	}
	now := tb.Now()
	for h, want := range map[uint64]Set{1: set(1), 2: set(1), 3: set(0), 4: set(0), 5: set(0)} {
		if got := tb.Lookup(h, now); got != want {
			t.Fatalf("block %d: %v, want %v", h, got, want)
		}
	}
	clk.add(400 * time.Millisecond) // 500 ms since blocks 3 and 4 were used
	if got := tb.Lookup(3, tb.Now()); !got.Empty() {
		t.Fatalf("block 3 outlived the retention: %v", got)
	}
	tb.SetRetention(0, 0)
	tb.Touch([]uint64{6}, 0, tb.Now())
	clk.add(time.Minute)
	if got := tb.Lookup(6, tb.Now()); got != set(0) {
		t.Fatalf("without a retention the TTL applies: %v", got)
	}
}

// Randomized: whatever mix of predictions, confirmations, peers' touches,
// retentions and clock steps, no location is live more than TTL after its last
// confirmation, nor a prediction more than min(predict TTL, TTL) after it
// was made.
func TestNoLocationOutlivesItsTTLRandomized(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		ttl := time.Duration(1+rng.IntN(5)) * time.Second
		pred := time.Duration(rng.IntN(8)) * time.Second
		tb, clk := newTestTable(ttl, 1<<14)
		tb.SetPredictTTL(pred)
		life := tb.PredictTTL()
		// latest confirmation and latest prediction per (block, backend)
		type key struct {
			h uint64
			b int
		}
		conf, predAt := map[key]int64{}, map[key]int64{}
		for step := 0; step < 400; step++ {
			now := tb.Now()
			b := rng.IntN(4)
			ch := []uint64{1 + uint64(rng.IntN(3))}
			for i := 0; i < rng.IntN(4); i++ {
				ch = append(ch, ch[len(ch)-1]*31+uint64(rng.IntN(2)))
			}
			switch rng.IntN(4) {
			case 0, 1:
				tb.Predict(ch, b, now)
				for _, h := range ch {
					predAt[key{h, b}] = now
				}
			case 2:
				tb.Touch(ch, b, now)
				for _, h := range ch {
					conf[key{h, b}] = now
				}
			case 3:
				at := max(now-int64(rng.IntN(3000)), 0)
				tb.TouchAt(ch, b, at)
				for _, h := range ch {
					conf[key{h, b}] = max(conf[key{h, b}], at)
				}
			}
			if rng.IntN(10) == 0 {
				// The cache check's retention only ever shortens a life.
				tb.SetRetention(rng.IntN(4), time.Duration(rng.IntN(3000))*time.Millisecond)
			}
			clk.add(time.Duration(rng.IntN(700)) * time.Millisecond)
			now = tb.Now()
			for k := range mergeKeys(conf, predAt) {
				got := tb.Lookup(k.h, now).Has(k.b)
				c, hc := conf[k]
				p, hp := predAt[k]
				ok := (hc && now < c+ttl.Milliseconds()) || (hp && now < p+life.Milliseconds())
				if got && !ok {
					t.Fatalf("seed %d: block %d on %d live at %d (confirmed %d %v, predicted %d %v, ttl %v, life %v)",
						seed, k.h, k.b, now, c, hc, p, hp, ttl, life)
				}
			}
		}
	}
}

func mergeKeys[K comparable](a, b map[K]int64) map[K]struct{} {
	m := map[K]struct{}{}
	for k := range a {
		m[k] = struct{}{}
	}
	for k := range b {
		m[k] = struct{}{}
	}
	return m
}

// A location the retention ended (the TTL would not have) is remembered
// as departed when it is pruned, as a capacity drop is; one the TTL ended
// is not.
func TestRetentionDropsAreDeparted(t *testing.T) {
	t.Parallel()
	tb, clk := newTestTable(10*time.Second, 1000)
	tb.Touch([]uint64{1, 2, 3}, 2, tb.Now())
	clk.add(time.Second)
	tb.SetRetention(2, 500*time.Millisecond)
	if got := tb.Lookup(3, tb.Now()); !got.Empty() {
		t.Fatalf("live past the retention: %v", got)
	}
	if b, ok := tb.Departed(3); !ok || b != 2 {
		t.Fatalf("departed %d %v, want 2", b, ok)
	}
	tb.SetRetention(2, 0)
	tb.Touch([]uint64{7}, 1, tb.Now())
	clk.add(11 * time.Second)
	tb.Lookup(7, tb.Now())
	if _, ok := tb.Departed(7); ok {
		t.Fatal("a location the TTL ended is remembered as departed")
	}
}
