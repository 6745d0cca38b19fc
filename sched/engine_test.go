package sched

import (
	"testing"
	"time"
)

// fresh publishes engine signals read just now.
func fresh(b *Backend, s EngineSignals) {
	s.At = time.Now().UnixMilli()
	b.SetEngine(s)
}

func TestEngineQueueWeighsInCost(t *testing.T) {
	s := newSched(t, 2, "cost")
	s.SetEngineMaxAge(time.Hour)
	c := chainOf(0, 8)
	// Backend 0 runs two requests kvca did not send: load 2×4 = 8 > 0.
	fresh(s.Backends[0], EngineSignals{Running: 2, Foreign: 2})
	for range 3 {
		d, res := route(t, s, &Request{Chain: c})
		if d.Backend.Index != 1 {
			t.Fatalf("chose %d despite its engine's foreign load", d.Backend.Index)
		}
		res.ReleaseActive()
	}
	// Queued foreign requests cost the mean novel blocks routed there too:
	// backend 1 has had 3×8 novel blocks over 3 requests, so 1 waiting
	// request is 8 blocks + 4 for being active = 12 > backend 0's 8.
	fresh(s.Backends[1], EngineSignals{Waiting: 1, Foreign: 1, ForeignWaiting: 1})
	d, res := route(t, s, &Request{Chain: c})
	if d.Backend.Index != 0 {
		t.Fatalf("chose %d", d.Backend.Index)
	}
	res.ReleaseActive()
	if got := s.engineLoad(s.Backends[1], time.Now().UnixMilli()); got != 4+8 {
		t.Fatalf("engine load %d", got)
	}
	// Stale signals are ignored: both loads are 0 again and the two
	// backends take turns.
	for _, b := range s.Backends {
		sig, _ := b.EngineLatest()
		sig.At = time.Now().Add(-2 * time.Hour).UnixMilli()
		b.SetEngine(sig)
	}
	seen := map[int]bool{}
	for range 2 {
		d, res := route(t, s, &Request{Chain: c})
		seen[d.Backend.Index] = true
		res.ReleaseActive()
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("stale signals still weigh: %v", seen)
	}
}

func TestEngineSignalsOffByDefault(t *testing.T) {
	s := newSched(t, 2, "cost")
	fresh(s.Backends[0], EngineSignals{Running: 50, Foreign: 50, KVUsage: 1})
	if got := s.engineLoad(s.Backends[0], s.engineNow(&Decision{})); got != 0 {
		t.Fatalf("engine load %d with signals off", got)
	}
	seen := map[int]bool{}
	for range 2 {
		d, res := route(t, s, &Request{Chain: chainOf(0, 4)})
		seen[d.Backend.Index] = true
		res.ReleaseActive()
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("signals weigh while off: %v", seen)
	}
}

func TestNearFullHolderAvoidedForLongPrefill(t *testing.T) {
	s := newSched(t, 3, "kvca-cost")
	s.SetEngineMaxAge(time.Hour)
	c := chainOf(100, 40)
	now := s.Table.Now()
	// Backends 0 and 1 hold the first 8 blocks; 0 is the less loaded.
	s.Table.Touch(c[:8], 0, now)
	s.Table.Touch(c[:8], 1, now)
	s.Backends[1].state.Add(activeUnit)
	fresh(s.Backends[0], EngineSignals{KVUsage: 0.99})
	// 32 novel blocks ≥ LongPrefixBlocks: the full holder is passed over.
	d, res := route(t, s, &Request{Chain: c, Followup: true})
	if d.Backend.Index != 1 || d.Cached != 8 || d.Phase != PhaseFollowup {
		t.Fatalf("long prefill: %+v on %d", d, d.Backend.Index)
	}
	res.ReleaseActive()
	// A short one (4 novel blocks) still goes to the less loaded holder.
	d, res = route(t, s, &Request{Chain: c[:12], Followup: true})
	if d.Backend.Index != 0 {
		t.Fatalf("short prefill went to %d", d.Backend.Index)
	}
	res.ReleaseActive()
	// When every holder is near full, the rule cannot choose: load does.
	fresh(s.Backends[1], EngineSignals{KVUsage: 0.97})
	d, res = route(t, s, &Request{Chain: c, Followup: true})
	if d.Backend.Index != 0 {
		t.Fatalf("all full: went to %d", d.Backend.Index)
	}
	res.ReleaseActive()
	// A first turn (cost) passes over a near-full backend too, when its
	// novel part is long: backend 2 is idle but full.
	fresh(s.Backends[2], EngineSignals{KVUsage: 0.96})
	fresh(s.Backends[1], EngineSignals{})
	fresh(s.Backends[0], EngineSignals{})
	s.Backends[0].state.Add(2 * activeUnit)
	d, res = route(t, s, &Request{Chain: chainOf(500, 20)})
	if d.Backend.Index != 1 {
		t.Fatalf("first turn went to %d", d.Backend.Index)
	}
	res.ReleaseActive()
}

func TestRoutedCounters(t *testing.T) {
	s := newSched(t, 1, "kvca-cost")
	c := chainOf(0, 10)
	d, res := route(t, s, &Request{Chain: c[:6]})
	res.ReleaseActive()
	s.Table.Touch(c[:6], d.Backend.Index, s.Table.Now())
	_, res = route(t, s, &Request{Chain: c, Followup: true})
	res.ReleaseActive()
	if r, b, cached := s.Backends[0].Routed(); r != 2 || b != 16 || cached != 6 {
		t.Fatalf("routed %d requests, %d blocks, %d cached", r, b, cached)
	}
	if got := s.Backends[0].meanNovel(); got != 5 {
		t.Fatalf("mean novel %d", got)
	}
}

// BenchmarkPickEngineSignals is BenchmarkPickFollowup's "same-ms" case with
// fresh engine signals on every backend: reading them costs a clock read
// and one atomic load per backend, and allocates nothing.
func BenchmarkPickEngineSignals(b *testing.B) {
	for _, policy := range []string{"cost", "kvca-cost"} {
		b.Run(policy, func(b *testing.B) {
			s := newSched(b, 8, policy)
			s.SetEngineMaxAge(time.Hour)
			for i, be := range s.Backends {
				fresh(be, EngineSignals{Running: int32(i), Foreign: int32(i % 2), ForeignWaiting: int32(i % 2), KVUsage: 0.5})
			}
			c := chainOf(0, 64)
			now := s.Table.Now()
			s.Table.Touch(c[:60], 3, now)
			r := &Request{Chain: c, Followup: true, Now: now}
			var d Decision
			var res Reservation
			b.ReportAllocs()
			for b.Loop() {
				s.Route(r, &d, &res)
				res.ReleaseActive()
			}
		})
	}
}

// Engine signals are judged at the request's own instant when it has one
// (Request.T, an event loop's clock), not at the wall clock: signals read
// just before a request of long ago are fresh for it.
func TestEngineSignalsJudgedAtTheRequestsTime(t *testing.T) {
	t.Parallel()
	s := newSched(t, 2, "cost")
	s.SetEngineMaxAge(time.Second)
	then := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	s.Backends[0].SetEngine(EngineSignals{Running: 2, Foreign: 2, At: then.UnixMilli()})
	c := chainOf(0, 8)
	for range 3 {
		d, res := route(t, s, &Request{Chain: c, T: then.Add(500 * time.Millisecond)})
		if d.Backend.Index != 1 {
			t.Fatalf("chose %d despite its engine's foreign load at the request's time", d.Backend.Index)
		}
		res.ReleaseActive()
	}
	// Without an instant the wall clock is used: the same signals are
	// years old, so ignored, and the two backends take turns.
	seen := map[int]bool{}
	for range 2 {
		d, res := route(t, s, &Request{Chain: c})
		seen[d.Backend.Index] = true
		res.ReleaseActive()
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("signals of 2020 weigh at the wall clock: %v", seen)
	}
}
