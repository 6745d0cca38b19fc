package sched

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/kvca/kvca/chain"
)

// pack is a backend state word: active requests and reserved prefill.
func pack(active, prefill uint32) uint64 { return uint64(active)<<32 | uint64(prefill) }

func TestNewBounds(t *testing.T) {
	t.Parallel()
	tb := chain.NewTable(chain.Config{TTL: 1000, MaxBlocks: 1024})
	backends := func(n int) []*Backend {
		bs := make([]*Backend, n)
		for i := range bs {
			bs[i] = NewBackend(i, "http://b", "b")
		}
		return bs
	}
	for _, tc := range []struct {
		name   string
		n, w   int
		policy string
		ok     bool
	}{
		{"no backends", 0, 1, "kvca", false},
		{"as many as a set holds", chain.MaxBackends, 1, "kvca", true},
		{"one more than a set holds", chain.MaxBackends + 1, 1, "kvca", false},
		{"active weight 0", 2, 0, "kvca", true},
		{"negative active weight", 2, -1, "kvca", false},
		{"unknown policy", 2, 1, "nope", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(backends(tc.n), tb, tc.w, tc.policy)
			if (err == nil) != tc.ok {
				t.Fatalf("New(%d backends, weight %d, %q): %v, want ok=%v", tc.n, tc.w, tc.policy, err, tc.ok)
			}
			if tc.ok && (s.ActiveWeight != uint64(tc.w) || s.Policy.Name() != tc.policy || len(s.Backends) != tc.n) {
				t.Fatalf("scheduler %+v", s)
			}
		})
	}
}

func TestSetHealthyReportsChange(t *testing.T) {
	t.Parallel()
	b := NewBackend(0, "http://b", "b")
	for i, step := range []struct{ set, changed, healthy bool }{
		{true, false, true}, {false, true, false}, {false, false, false}, {true, true, true},
	} {
		if got := b.SetHealthy(step.set); got != step.changed || b.Healthy() != step.healthy {
			t.Fatalf("step %d SetHealthy(%v) = %v, healthy %v; want %v, %v", i, step.set, got, b.Healthy(), step.changed, step.healthy)
		}
	}
}

// TestLeastLoadedWeighsActiveAndPrefill: load is active×weight + prefill,
// local plus remote, and the smallest wins.
func TestLeastLoadedWeighsActiveAndPrefill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		local, remote  [2]uint64
		want           int
		wantA, wantP   int64
		wantNovelCount int
	}{
		// weight 4: 3 active = 12 beats 2 active + 5 prefill = 13.
		{name: "prefill adds to load", local: [2]uint64{pack(3, 0), pack(2, 5)}, want: 0, wantA: 4, wantP: 0},
		{name: "lighter by prefill", local: [2]uint64{pack(3, 1), pack(2, 4)}, want: 1, wantA: 3, wantP: 4},
		// Remote load counts: 1 remote active (4) beats 1 local active + 1 prefill (5).
		{name: "remote load adds to load", local: [2]uint64{0, pack(1, 1)}, remote: [2]uint64{pack(1, 0), 0}, want: 0, wantA: 1, wantP: 0},
		{name: "remote load can lose", local: [2]uint64{0, pack(1, 0)}, remote: [2]uint64{pack(1, 1), 0}, want: 1, wantA: 2, wantP: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(t, 2, "least-loaded")
			for i, b := range s.Backends {
				b.state.Store(tc.local[i])
				b.remote.Store(tc.remote[i])
			}
			d, _ := route(t, s, &Request{})
			b := d.Backend
			if b.Index != tc.want || b.Active() != tc.wantA || b.Prefill() != tc.wantP {
				t.Fatalf("picked %d with %d active %d prefill, want %d with %d, %d", b.Index, b.Active(), b.Prefill(), tc.want, tc.wantA, tc.wantP)
			}
			other := s.Backends[1-tc.want]
			if other.state.Load() != tc.local[1-tc.want] {
				t.Fatalf("the other backend's load moved: %x", other.state.Load())
			}
		})
	}
}

// TestTiesTakeTurns: equal backends are taken in turn, each exactly once
// per round, whatever the tie size.
func TestTiesTakeTurns(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := newSched(t, n, "least-loaded")
			for round := range 3 {
				var got []int
				for range n {
					d, res := route(t, s, &Request{})
					got = append(got, d.Backend.Index)
					res.ReleaseActive()
				}
				sorted := slices.Clone(got)
				slices.Sort(sorted)
				for i, b := range sorted {
					if b != i {
						t.Fatalf("round %d picked %v, want each of %d backends once", round, got, n)
					}
				}
			}
		})
	}
}

// TestTiesAmongSomeOnly: only backends at the least load share the turns.
func TestTiesAmongSomeOnly(t *testing.T) {
	t.Parallel()
	s := newSched(t, 4, "least-loaded")
	s.Backends[0].state.Store(pack(1, 0))
	s.Backends[2].state.Store(pack(0, 1))
	seen := map[int]int{}
	for range 6 {
		d, res := route(t, s, &Request{})
		seen[d.Backend.Index]++
		res.ReleaseActive()
	}
	if len(seen) != 2 || seen[1] != 3 || seen[3] != 3 {
		t.Fatalf("picks %v, want backends 1 and 3 three times each", seen)
	}
}

// TestEveryRouteReserves: however routes race, each successful one adds
// exactly one active request, and releasing them all leaves nothing.
func TestEveryRouteReserves(t *testing.T) {
	t.Parallel()
	s := newSched(t, 2, "least-loaded")
	const goroutines, each = 8, 10000
	var wg sync.WaitGroup
	held := make([][]*Reservation, goroutines)
	start := make(chan struct{}) // all at once, so their compare-and-swaps collide
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range each {
				var d Decision
				res := &Reservation{}
				if s.Route(&Request{Chain: chainOf(0, 2)}, &d, res) {
					held[g] = append(held[g], res)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	var total, prefill int64
	n := 0
	for _, b := range s.Backends {
		total += b.Active()
		prefill += b.Prefill()
	}
	for _, h := range held {
		n += len(h)
	}
	if n != goroutines*each || total != int64(n) || prefill != 2*int64(n) {
		t.Fatalf("%d routes succeeded, %d active and %d prefill reserved; want %d, %d, %d", n, total, prefill, goroutines*each, goroutines*each, 2*goroutines*each)
	}
	for _, h := range held {
		for _, r := range h {
			r.ReleaseActive()
		}
	}
	for _, b := range s.Backends {
		if b.state.Load() != 0 {
			t.Fatalf("backend %d keeps %x after every release", b.Index, b.state.Load())
		}
	}
}

func TestReleasedAfterBothParts(t *testing.T) {
	t.Parallel()
	s := newSched(t, 1, "kvca")
	d, res := route(t, s, &Request{Chain: chainOf(0, 3)})
	b := d.Backend
	if res.Released() || res.Backend() != b || b.Active() != 1 || b.Prefill() != 3 {
		t.Fatalf("after route: released %v, %d active %d prefill", res.Released(), b.Active(), b.Prefill())
	}
	res.ReleasePrefill()
	if res.Released() || b.Active() != 1 || b.Prefill() != 0 {
		t.Fatalf("after prefill: released %v, %d active %d prefill", res.Released(), b.Active(), b.Prefill())
	}
	res.ReleaseActive()
	if !res.Released() || b.state.Load() != 0 {
		t.Fatalf("after active: released %v, state %x", res.Released(), b.state.Load())
	}
	var never Reservation
	if !never.Released() {
		t.Fatal("an unarmed reservation holds nothing and counts as released")
	}
	never.ReleaseActive() // must not panic
}

func TestReserveOn(t *testing.T) {
	t.Parallel()
	s := newSched(t, 2, "kvca")
	b := s.Backends[1]
	var res Reservation
	if !s.ReserveOn(b, 5, &res) || b.Active() != 1 || b.Prefill() != 5 || res.Backend() != b {
		t.Fatalf("ReserveOn a healthy backend: %d active %d prefill", b.Active(), b.Prefill())
	}
	res.ReleaseActive()
	b.SetHealthy(false)
	var res2 Reservation
	if s.ReserveOn(b, 5, &res2) || b.state.Load() != 0 || res2.Backend() != nil {
		t.Fatalf("ReserveOn an unhealthy backend reserved: %x", b.state.Load())
	}
}

// TestEveryPolicyRefusesWhenNothingIsEligible: no backend means no
// decision and no load anywhere.
func TestEveryPolicyRefusesWhenNothingIsEligible(t *testing.T) {
	t.Parallel()
	for _, p := range Policies() {
		t.Run(p, func(t *testing.T) {
			s := newSched(t, 3, p)
			c := chainOf(0, 4)
			s.Table.Touch(c, 1, s.Table.Now())
			r := &Request{Chain: c, Followup: true, Session: 7, Now: s.Table.Now()}
			for i := range 3 {
				r.Exclude.Add(i)
			}
			var d Decision
			var res Reservation
			if s.Route(r, &d, &res) || d.Backend != nil {
				t.Fatalf("routed to %+v with every backend excluded", d.Backend)
			}
			for _, b := range s.Backends {
				if b.state.Load() != 0 {
					t.Fatalf("backend %d holds %x", b.Index, b.state.Load())
				}
			}
		})
	}
}

// TestRoundRobinOrderAndCounts: turns start at the first backend, and a
// baseline reports (and reserves) only what its pick must compute.
func TestRoundRobinOrderAndCounts(t *testing.T) {
	t.Parallel()
	s := newSched(t, 3, "round-robin")
	c := chainOf(0, 5)
	s.Table.Touch(c[:2], 1, s.Table.Now())
	want := []struct {
		backend int
		cached  int
		phase   Phase
	}{{0, 0, PhaseFallback}, {1, 2, PhaseFollowup}, {2, 0, PhaseFallback}, {0, 0, PhaseFallback}}
	for i, w := range want {
		d, res := route(t, s, &Request{Chain: c, Followup: true})
		b := d.Backend
		if b.Index != w.backend || d.Cached != w.cached || d.Novel != 5-w.cached || d.Phase != w.phase ||
			b.Active() != 1 || b.Prefill() != int64(5-w.cached) {
			t.Fatalf("pick %d: %+v on %d (%d active %d prefill), want backend %d cached %d phase %v",
				i, d, b.Index, b.Active(), b.Prefill(), w.backend, w.cached, w.phase)
		}
		res.ReleaseActive()
	}
	d, res := route(t, s, &Request{Chain: c})
	if d.Phase != PhaseBootstrap {
		t.Fatalf("a first turn is %v", d.Phase)
	}
	res.ReleaseActive()
}

// TestSessionHashIsRendezvous: each session goes to the eligible backend
// with the highest mix of its id and the backend's seed.
func TestSessionHashIsRendezvous(t *testing.T) {
	t.Parallel()
	s := newSched(t, 5, "session-hash")
	s.Backends[3].SetHealthy(false)
	for sess := uint64(0); sess < 200; sess++ {
		want, top := -1, uint64(0)
		for _, b := range s.Backends {
			if sc := mix64(sess ^ b.seed); b.Healthy() && (want < 0 || sc > top) {
				want, top = b.Index, sc
			}
		}
		d, res := route(t, s, &Request{Session: sess})
		if d.Backend.Index != want {
			t.Fatalf("session %d on backend %d, want %d", sess, d.Backend.Index, want)
		}
		res.ReleaseActive()
	}
}

func TestNth(t *testing.T) {
	t.Parallel()
	var e chain.Set
	for _, b := range []int{3, 64, 128, 200} {
		e.Add(b)
	}
	for k, want := range []int{3, 64, 128, 200, -1} {
		if got := nth(&e, k); got != want {
			t.Errorf("nth(%d) = %d, want %d", k, got, want)
		}
	}
	var hi chain.Set
	hi.Add(64)
	hi.Add(128)
	if got := nth(&hi, 1); got != 128 {
		t.Errorf("nth(1) of {64, 128} = %d", got)
	}
}

// TestEmptyFollowupPhase: a follow-up too short for one block has no
// prefix to follow; kvca reports it as a first turn, while the cost
// policies (kvca-cost routes it as cost does) call it a fallback.
func TestEmptyFollowupPhase(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]Phase{"kvca": PhaseBootstrap, "kvca-cost": PhaseFallback, "cost": PhaseFallback} {
		s := newSched(t, 2, p)
		d, res := route(t, s, &Request{Followup: true})
		if d.Phase != want {
			t.Errorf("%s: phase %v, want %v", p, d.Phase, want)
		}
		res.ReleaseActive()
	}
}

// TestCostPhases: cost reports a follow-up with an eligible holder as
// such, one without as fallback, and counts the holder's cached blocks.
func TestCostPhases(t *testing.T) {
	t.Parallel()
	s := newSched(t, 2, "cost")
	c := chainOf(0, 8)
	s.Table.Touch(c[:6], 1, s.Table.Now())
	d, res := route(t, s, &Request{Chain: c, Followup: true})
	if d.Backend.Index != 1 || d.Phase != PhaseFollowup || d.Cached != 6 || d.Novel != 2 || d.Backend.Prefill() != 2 {
		t.Fatalf("follow-up with a holder: %+v on %d", d, d.Backend.Index)
	}
	res.ReleaseActive()
	r := &Request{Chain: c, Followup: true}
	r.Exclude.Add(1)
	d, res = route(t, s, r)
	if d.Backend.Index != 0 || d.Phase != PhaseFallback || d.Cached != 0 || d.Novel != 8 {
		t.Fatalf("follow-up whose holder is excluded: %+v on %d", d, d.Backend.Index)
	}
	res.ReleaseActive()
}

func TestEngineSignalsStaleness(t *testing.T) {
	t.Parallel()
	b := NewBackend(0, "http://b", "b")
	if _, ok := b.Engine(1000, 500); ok {
		t.Fatal("signals reported before any were set")
	}
	b.SetEngine(EngineSignals{Running: 2, Waiting: 3, KVUsage: 0.5, CapacityTokens: 100, At: 1000})
	for _, tc := range []struct {
		now   int64
		fresh bool
	}{{1000, true}, {1500, true}, {1501, false}} {
		got, ok := b.Engine(tc.now, 500)
		if ok != tc.fresh || (ok && got != (EngineSignals{Running: 2, Waiting: 3, KVUsage: 0.5, CapacityTokens: 100, At: 1000})) {
			t.Errorf("Engine(%d, 500) = %+v, %v; want fresh=%v", tc.now, got, ok, tc.fresh)
		}
	}
	b.SetEngine(EngineSignals{Running: 1})
	if _, ok := b.Engine(0, 500); ok {
		t.Fatal("signals without a read time count as fresh")
	}
}
