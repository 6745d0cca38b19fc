package sched

import (
	"sync"
	"testing"
	"time"

	"github.com/kvca/kvca/chain"
)

func newSched(t testing.TB, n int, policy string) *Scheduler {
	bs := make([]*Backend, n)
	for i := range bs {
		bs[i] = NewBackend(i, "http://b", "b")
	}
	s, err := New(bs, chain.NewTable(chain.Config{TTL: time.Minute, MaxBlocks: 1 << 16}), 4, policy)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func chainOf(start, n int) []uint64 {
	c := make([]uint64, n)
	for i := range c {
		c[i] = uint64(start+i+1) * 0x9e3779b97f4a7c15
	}
	return c
}

func route(t testing.TB, s *Scheduler, r *Request) (Decision, *Reservation) {
	var d Decision
	res := &Reservation{}
	r.Now = s.Table.Now()
	if !s.Route(r, &d, res) {
		t.Fatal("no backend")
	}
	return d, res
}

func TestKvcaPhases(t *testing.T) {
	t.Parallel()
	s := newSched(t, 4, "kvca")
	s.SetAffinityEpsilon(0.25)
	c := chainOf(0, 10)
	// Phase 1: all novel, least loaded.
	d, res := route(t, s, &Request{Chain: c[:6]})
	if d.Phase != PhaseBootstrap || d.Novel != 6 || d.Cached != 0 {
		t.Fatalf("bootstrap %+v", d)
	}
	if d.Backend.Active() != 1 || d.Backend.Prefill() != 6 {
		t.Fatalf("reservation not made: %d %d", d.Backend.Active(), d.Backend.Prefill())
	}
	res.ReleasePrefill()
	s.Table.Touch(c[:6], d.Backend.Index, s.Table.Now())
	res.ReleaseActive()
	home := d.Backend.Index

	// Phase 2: divergence point 6, novel 4, the holder is chosen even
	// though it is now more loaded than the others (within the load
	// bound, which always allows 2 requests).
	s.Backends[home].state.Add(1 * activeUnit)
	d2, res2 := route(t, s, &Request{Chain: c, Followup: true})
	if d2.Phase != PhaseFollowup || d2.Backend.Index != home || d2.Cached != 6 || d2.Novel != 4 {
		t.Fatalf("followup %+v (home %d)", d2, home)
	}
	res2.ReleaseActive()
	s.Backends[home].state.Add(^uint64(1*activeUnit - 1))

	// Unknown prefix: fallback.
	d3, res3 := route(t, s, &Request{Chain: chainOf(100, 3), Followup: true})
	if d3.Phase != PhaseFallback || d3.Novel != 3 {
		t.Fatalf("fallback %+v", d3)
	}
	res3.ReleaseActive()

	// Holder unhealthy: fallback to the others.
	s.Backends[home].SetHealthy(false)
	d4, res4 := route(t, s, &Request{Chain: c, Followup: true})
	if d4.Phase != PhaseFallback || d4.Backend.Index == home {
		t.Fatalf("unhealthy holder %+v", d4)
	}
	res4.ReleaseActive()
	for _, b := range s.Backends {
		if b.state.Load() != 0 {
			t.Fatalf("load left on %d: %x", b.Index, b.state.Load())
		}
	}
}

func TestCostTradesLoadAgainstPrefill(t *testing.T) {
	t.Parallel()
	s := newSched(t, 2, "cost")
	c := chainOf(0, 20)
	s.Table.Touch(c[:10], 0, s.Table.Now())
	// Backend 0 saves 10 blocks; 2 active requests (weight 4) cost 8: still wins.
	s.Backends[0].state.Add(2 * activeUnit)
	d, res := route(t, s, &Request{Chain: c, Followup: true})
	if d.Backend.Index != 0 || d.Cached != 10 || d.Novel != 10 {
		t.Fatalf("%+v", d)
	}
	res.ReleaseActive()
	// 3 active (12) outweigh the 10 blocks saved: go elsewhere.
	s.Backends[0].state.Add(activeUnit)
	d, res = route(t, s, &Request{Chain: c, Followup: true})
	if d.Backend.Index != 1 || d.Novel != 20 {
		t.Fatalf("%+v", d)
	}
	res.ReleaseActive()
}

func TestKvcaCostFollowupsStickFirstTurnsWeighPrefix(t *testing.T) {
	t.Parallel()
	s := newSched(t, 2, "kvca-cost")
	s.SetAffinityEpsilon(0.25)
	c := chainOf(0, 20)
	s.Table.Touch(c[:10], 0, s.Table.Now())
	// Backend 0 is far busier than the 10 blocks it saves, yet a follow-up
	// stays with its prefix (Phase 2), where cost would move it, while its
	// requests stay within the load bound (which always allows 2).
	s.Backends[0].state.Add(activeUnit + 100)
	d, res := route(t, s, &Request{Chain: c, Followup: true})
	if d.Backend.Index != 0 || d.Phase != PhaseFollowup || d.Cached != 10 || d.Novel != 10 {
		t.Fatalf("follow-up: %+v", d)
	}
	res.ReleaseActive()
	// A first turn sharing the prefix weighs it against load: here the
	// load wins and it goes to the idle backend, with every block novel.
	d, res = route(t, s, &Request{Chain: c})
	if d.Backend.Index != 1 || d.Phase != PhaseBootstrap || d.Novel != 20 {
		t.Fatalf("loaded holder: %+v", d)
	}
	res.ReleaseActive()
	// With backend 0 lightly loaded (one active request, weight 4, less
	// than the 10 blocks saved) the first turn goes to the holder.
	s.Backends[0].state.Add(^uint64(100) + 1)
	d, res = route(t, s, &Request{Chain: c})
	if d.Backend.Index != 0 || d.Phase != PhaseBootstrap || d.Cached != 10 {
		t.Fatalf("light holder: %+v", d)
	}
	res.ReleaseActive()
	// A follow-up whose longest prefix has no eligible holder weighs the
	// shorter prefixes others hold, as cost does (kvca would take the
	// least-loaded backend with nothing cached).
	other := chainOf(200, 20)
	s.Table.Touch(other[:5], 1, s.Table.Now())
	s.Table.Touch(other[:10], 0, s.Table.Now())
	var ex chain.Set
	ex.Add(0)
	d, res = route(t, s, &Request{Chain: other, Followup: true, Exclude: ex})
	if d.Backend.Index != 1 || d.Phase != PhaseFollowup || d.Cached != 5 {
		t.Fatalf("fallback: %+v", d)
	}
	res.ReleaseActive()
	// Without a known prefix it is least-loaded.
	d, res = route(t, s, &Request{Chain: chainOf(100, 20)})
	if d.Backend.Index != 1 || d.Cached != 0 {
		t.Fatalf("novel first turn: %+v", d)
	}
	res.ReleaseActive()
	s.Backends[0].state.Add(^uint64(activeUnit) + 1)
	for _, b := range s.Backends {
		if b.state.Load() != 0 {
			t.Fatalf("load left on %d: %x", b.Index, b.state.Load())
		}
	}
}

func TestReservationReleasesExactlyOnce(t *testing.T) {
	t.Parallel()
	s := newSched(t, 1, "least-loaded")
	_, res := route(t, s, &Request{Chain: chainOf(0, 5)})
	b := s.Backends[0]
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res.ReleasePrefill()
			res.ReleaseActive()
			res.ReleasePrefill()
		}()
	}
	wg.Wait()
	if b.state.Load() != 0 || !res.Released() {
		t.Fatalf("state %x after concurrent releases", b.state.Load())
	}
}

func TestConcurrentReservationsStayBalanced(t *testing.T) {
	t.Parallel()
	s := newSched(t, 4, "least-loaded")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var held []*Reservation
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				// Not route: its t.Fatal must stay on the test goroutine.
				var d Decision
				res := &Reservation{}
				if !s.Route(&Request{}, &d, res) {
					t.Error("no backend")
					return
				}
				mu.Lock()
				held = append(held, res)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// 200 requests held concurrently: least-loaded with atomic
	// reservation gives exactly 50 each.
	for _, b := range s.Backends {
		if b.Active() != 50 {
			t.Fatalf("backend %d has %d active", b.Index, b.Active())
		}
	}
	for _, r := range held {
		r.ReleaseActive()
	}
	for _, b := range s.Backends {
		if b.state.Load() != 0 {
			t.Fatal("load left")
		}
	}
}

func TestBaselines(t *testing.T) {
	t.Parallel()
	s := newSched(t, 3, "round-robin")
	seen := map[int]int{}
	for i := 0; i < 9; i++ {
		d, res := route(t, s, &Request{})
		seen[d.Backend.Index]++
		res.ReleaseActive()
	}
	if len(seen) != 3 || seen[0] != 3 {
		t.Fatalf("round robin %v", seen)
	}
	s = newSched(t, 5, "session-hash")
	d1, r1 := route(t, s, &Request{Session: 42})
	d2, r2 := route(t, s, &Request{Session: 42})
	r1.ReleaseActive()
	r2.ReleaseActive()
	if d1.Backend != d2.Backend {
		t.Fatal("session hash not sticky")
	}
	// Only the sessions of a removed backend move.
	moved := 0
	before := map[uint64]int{}
	for sess := uint64(0); sess < 500; sess++ {
		d, r := route(t, s, &Request{Session: sess})
		before[sess] = d.Backend.Index
		r.ReleaseActive()
	}
	s.Backends[2].SetHealthy(false)
	for sess := uint64(0); sess < 500; sess++ {
		d, r := route(t, s, &Request{Session: sess})
		if d.Backend.Index != before[sess] {
			moved++
			if before[sess] != 2 {
				t.Fatal("a session not on the removed backend moved")
			}
		}
		r.ReleaseActive()
	}
	if moved == 0 {
		t.Fatal("nothing moved")
	}
	s = newSched(t, 3, "random")
	for i := 0; i < 10; i++ {
		_, r := route(t, s, &Request{})
		r.ReleaseActive()
	}
	if _, err := New(s.Backends, s.Table, 1, "nope"); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

func TestExcludeAndAllowed(t *testing.T) {
	t.Parallel()
	s := newSched(t, 3, "kvca")
	r := &Request{}
	r.Exclude.Add(0)
	r.Exclude.Add(1)
	d, res := route(t, s, r)
	if d.Backend.Index != 2 {
		t.Fatal(d.Backend.Index)
	}
	res.ReleaseActive()
	r.Exclude.Add(2)
	var dd Decision
	if s.Route(r, &dd, &Reservation{}) {
		t.Fatal("routed with every backend excluded")
	}
	var allowed chain.Set
	allowed.Add(1)
	d, res = route(t, s, &Request{Allowed: &allowed})
	if d.Backend.Index != 1 {
		t.Fatal("allowed set ignored")
	}
	res.ReleaseActive()
}

// BenchmarkPickFollowup routes a 64-block follow-up. "walk" gives every
// request its own millisecond, so the table is walked block by block each
// time; "same-ms" is concurrent traffic of one prompt, which reuses the
// walk the table remembers for the millisecond (chain.Table.Prefix).
func BenchmarkPickFollowup(b *testing.B) {
	for _, policy := range []string{"kvca", "cost", "kvca-cost"} {
		for _, walk := range []bool{true, false} {
			name := policy + "/same-ms"
			if walk {
				name = policy + "/walk"
			}
			b.Run(name, func(b *testing.B) {
				s := newSched(b, 8, policy)
				c := chainOf(0, 64)
				now := s.Table.Now()
				s.Table.Touch(c[:60], 3, now)
				r := &Request{Chain: c, Followup: true, Now: now}
				var d Decision
				var res Reservation
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if walk {
						// Alternate two milliseconds: the remembered walk is
						// always the other one's.
						r.Now = now + int64(i&1)
					}
					s.Route(r, &d, &res)
					res.ReleaseActive()
				}
			})
		}
	}
}
