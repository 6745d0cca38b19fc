package sched

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvca/kvca/chain"
)

var boundPolicies = []string{"kvca", "cost", "kvca-cost"}

func noLoadLeft(t *testing.T, s *Scheduler) {
	t.Helper()
	for _, b := range s.Backends {
		if b.state.Load() != 0 {
			t.Fatalf("load left on %d: %x", b.Index, b.state.Load())
		}
	}
}

// A known session's first requests, fired together before any answer
// (sub-agents sharing a new prefix after a system prompt that other
// backends already hold), go to its backend while its load is within the
// load bound, and past it to the least loaded (cost, kvca-cost). Under
// kvca, Phase 1 is least-loaded: the binding only breaks its ties.
func TestBoundSiblingsLandTogether(t *testing.T) {
	for _, p := range boundPolicies {
		s := newSched(t, 4, p)
		s.SetAffinityEpsilon(0.25)
		shared := chainOf(0, 3)
		s.Table.Touch(shared, 0, s.Table.Now())
		s.Table.Touch(shared, 1, s.Table.Now())
		var held []*Reservation
		for k := 0; k < 5; k++ {
			c := append(append([]uint64(nil), shared...), chainOf(1000+k*100, 5)...)
			var all chain.Set
			for i := range 4 {
				all.Add(i)
			}
			room := s.Backends[2].Active()+1 <= s.LoadCap(&all)
			d, res := route(t, s, &Request{Chain: c, Bound: 3})
			held = append(held, res)
			// On 4 idle backends the bound holds two requests: a third
			// exceeds max(1.25 × 3 / 4, 2).
			if k < 2 && !room {
				t.Fatalf("%s sibling %d: no room on an idle fleet", p, k)
			}
			switch {
			case p == "kvca":
				if d.Bound || d.Rule != RuleLeastLoaded || (k == 0 && d.Backend.Index != 2) {
					t.Fatalf("%s sibling %d: %+v", p, k, d)
				}
			case room:
				if d.Backend.Index != 2 || !d.Bound || d.Phase != PhaseBootstrap || d.Novel != 8 || d.Cached != 0 || d.Rule != RuleSession {
					t.Fatalf("%s sibling %d: %+v", p, k, d)
				}
			default:
				if d.Backend.Index == 2 || d.Bound || d.Rule != RuleOverflow || d.Overflowed != RuleSession {
					t.Fatalf("%s sibling %d past the bound: %+v", p, k, d)
				}
			}
		}
		if a := s.Backends[2].Active(); p != "kvca" && a != 2 {
			t.Fatalf("%s: %d active on the bound backend", p, a)
		}
		// A follow-up whose prefix nobody knows yet (its siblings' answers
		// have not come) goes there too, as a fallback, while within the
		// bound.
		for _, r := range held[1:] {
			r.ReleaseActive()
		}
		held = held[:1]
		if p == "kvca" {
			for _, r := range held {
				r.ReleaseActive()
			}
			held = held[:0]
		}
		d, res := route(t, s, &Request{Chain: chainOf(5000, 4), Followup: true, Bound: 3})
		if d.Backend.Index != 2 || !d.Bound || d.Phase != PhaseFallback {
			t.Fatalf("%s follow-up: %+v", p, d)
		}
		held = append(held, res)
		for _, r := range held {
			r.ReleaseActive()
		}
		if got := s.Overflows()[RuleSession]; (p == "kvca") != (got == 0) {
			t.Fatalf("%s: %d session overflows", p, got)
		}
		noLoadLeft(t, s)
	}
}

// Once the table knows where the prefix lives, the prefix decides.
func TestPrefixWinsOverBinding(t *testing.T) {
	for _, p := range boundPolicies {
		s := newSched(t, 3, p)
		c := chainOf(0, 12)
		s.Table.Touch(c[:10], 0, s.Table.Now())
		d, res := route(t, s, &Request{Chain: c, Followup: true, Bound: 2})
		if d.Backend.Index != 0 || d.Bound || d.Phase != PhaseFollowup || d.Cached != 10 || d.Novel != 2 {
			t.Fatalf("%s: %+v", p, d)
		}
		res.ReleaseActive()
		// A first turn sharing a known prefix (another conversation's
		// system prompt): the binding knows this conversation, the prefix
		// only what it shares with others.
		// Under kvca, Phase 1 is least-loaded, and the idle backends tie:
		// the binding breaks the tie.
		d, res = route(t, s, &Request{Chain: c, Bound: 2})
		if d.Backend.Index != 1 || d.Bound != (p != "kvca") || d.Phase != PhaseBootstrap || d.Cached != 0 || d.Novel != 12 {
			t.Fatalf("%s first turn: %+v", p, d)
		}
		res.ReleaseActive()
		// Without a binding, cost and kvca-cost weigh the shared prefix.
		d, res = route(t, s, &Request{Chain: c})
		if want := 0; p != "kvca" && (d.Backend.Index != want || d.Cached != 10) {
			t.Fatalf("%s unbound first turn: %+v", p, d)
		}
		res.ReleaseActive()
		noLoadLeft(t, s)
	}
}

// Among replicas of the longest prefix with equal load, the bound one is
// taken every time (without a binding they take turns).
func TestBindingBreaksTies(t *testing.T) {
	for _, p := range boundPolicies {
		s := newSched(t, 4, p)
		c := chainOf(0, 12)
		now := s.Table.Now()
		for _, b := range []int{0, 1, 3} {
			s.Table.Touch(c[:10], b, now)
		}
		for k := 0; k < 6; k++ {
			d, res := route(t, s, &Request{Chain: c, Followup: true, Bound: 4})
			if d.Backend.Index != 3 || d.Bound || d.Cached != 10 {
				t.Fatalf("%s round %d: %+v", p, k, d)
			}
			res.ReleaseActive()
		}
		seen := map[int]bool{}
		for k := 0; k < 6; k++ {
			d, res := route(t, s, &Request{Chain: c, Followup: true})
			seen[d.Backend.Index] = true
			res.ReleaseActive()
		}
		if len(seen) != 3 || seen[2] {
			t.Fatalf("%s: without a binding the replicas %v did not take turns", p, seen)
		}
		// A bound backend that is not among the best is not preferred.
		d, res := route(t, s, &Request{Chain: c, Followup: true, Bound: 3})
		if d.Backend.Index == 2 {
			t.Fatalf("%s: %+v", p, d)
		}
		res.ReleaseActive()
		noLoadLeft(t, s)
	}
}

// A bound backend that cannot take the request is passed over.
func TestBindingToUnavailableBackend(t *testing.T) {
	for _, p := range boundPolicies {
		s := newSched(t, 3, p)
		s.Backends[1].SetHealthy(false)
		d, res := route(t, s, &Request{Chain: chainOf(0, 4), Bound: 2})
		if d.Backend.Index == 1 || d.Bound {
			t.Fatalf("%s unhealthy: %+v", p, d)
		}
		res.ReleaseActive()
		s.Backends[1].SetHealthy(true)
		r := &Request{Chain: chainOf(0, 4), Bound: 2}
		r.Exclude.Add(1)
		d, res = route(t, s, r)
		if d.Backend.Index == 1 || d.Bound {
			t.Fatalf("%s excluded: %+v", p, d)
		}
		res.ReleaseActive()
		var only chain.Set
		only.Add(0)
		d, res = route(t, s, &Request{Chain: chainOf(0, 4), Bound: 2, Allowed: &only})
		if d.Backend.Index != 0 || d.Bound {
			t.Fatalf("%s not allowed: %+v", p, d)
		}
		res.ReleaseActive()
		d, res = route(t, s, &Request{Chain: chainOf(0, 4), Bound: 99})
		if d.Bound {
			t.Fatalf("%s out of range: %+v", p, d)
		}
		res.ReleaseActive()
		noLoadLeft(t, s)
	}
}

// A pinned request (a Responses API continuation) reaches its backend
// under every policy, whatever the prefix says, while it is eligible.
func TestPinnedUnderEveryPolicy(t *testing.T) {
	for _, p := range Policies() {
		s := newSched(t, 4, p)
		c := chainOf(0, 8)
		s.Table.Touch(c[:6], 0, s.Table.Now())
		for k := 0; k < 4; k++ {
			d, res := route(t, s, &Request{Chain: c, Followup: true, Bound: 3, Pin: true})
			if d.Backend.Index != 2 || !d.Bound || d.Cached != 0 || d.Novel != 8 || d.Phase != PhaseFallback {
				t.Fatalf("%s: %+v", p, d)
			}
			if d.Backend.Active() != 1 || d.Backend.Prefill() != 8 {
				t.Fatalf("%s: reservation %d %d", p, d.Backend.Active(), d.Backend.Prefill())
			}
			res.ReleaseActive()
		}
		s.Backends[2].SetHealthy(false)
		d, res := route(t, s, &Request{Chain: c, Followup: true, Bound: 3, Pin: true})
		if d.Backend.Index == 2 || d.Bound {
			t.Fatalf("%s failover: %+v", p, d)
		}
		res.ReleaseActive()
		noLoadLeft(t, s)
	}
}

// Baselines route as before when a binding is only a hint.
func TestBaselinesIgnoreUnpinnedBinding(t *testing.T) {
	s := newSched(t, 4, "round-robin")
	got := map[int]bool{}
	for k := 0; k < 4; k++ {
		d, res := route(t, s, &Request{Chain: chainOf(0, 2), Bound: 1})
		got[d.Backend.Index] = true
		if d.Bound {
			t.Fatalf("%+v", d)
		}
		res.ReleaseActive()
	}
	if len(got) != 4 {
		t.Fatalf("round-robin followed a binding: %v", got)
	}
}

// LoadCap's arithmetic: ε 0 is a bound (only negative turns it off), the
// other replicas' requests count, a product that is whole in exact
// arithmetic is not rounded down through float error, and the least
// loaded backend always has room.
func TestLoadCapArithmetic(t *testing.T) {
	t.Parallel()
	all := func(n int) *chain.Set {
		var e chain.Set
		for i := range n {
			e.Add(i)
		}
		return &e
	}
	s := newSched(t, 4, "kvca")
	s.SetAffinityEpsilon(0)
	if got := s.LoadCap(all(4)); got != 2 { // ceil(1 × 1 / 4) + 1
		t.Fatalf("ε 0 on an idle fleet: cap %d, want 2", got)
	}
	s.Backends[1].SetRemoteLoad(11, 0)
	if got := s.LoadCap(all(4)); got != 3 { // 12 / 4
		t.Fatalf("with 11 requests from other replicas: cap %d, want 3", got)
	}
	s.SetAffinityEpsilon(-0.5)
	if got := s.LoadCap(all(4)); got != math.MaxInt64 {
		t.Fatalf("negative ε: cap %d, want none", got)
	}
	s = newSched(t, 5, "kvca")
	s.SetAffinityEpsilon(0.15)
	for i, a := range []uint64{20, 20, 20, 20, 19} {
		s.Backends[i].state.Add(a * activeUnit)
	}
	// 1.15 × 100 / 5 is 23 exactly, 22.999999999999996 in floating point.
	if got := s.LoadCap(all(5)); got != 23 {
		t.Fatalf("a whole product: cap %d, want 23", got)
	}
	// The least loaded is always within the bound, whatever ε.
	s.SetAffinityEpsilon(0)
	s.Backends[4].state.Add(activeUnit)
	if got := s.LoadCap(all(5)); got != 21 { // 101 / 5 = 20.2; the least holds 20
		t.Fatalf("all at 20: cap %d, want 21", got)
	}
}

// An affinity holding a conversation yields only to real overload: its
// holder saturated (by the engine's queue or KV cache, or past a capacity
// set or learned) and the request predicted to answer sooner elsewhere,
// recomputing what the holder has cached. Below saturation, or at an
// unknown capacity, no load moves it; a long history outweighs a queue.
func TestHolderYieldsOnlyToOverload(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_000_000, 0).UnixMilli()
	cases := []struct {
		name     string
		history  int // blocks the holder has cached
		inflight int64
		pending  int64         // prefill blocks reserved on the holder
		capacity int           // --batch-capacity; 0: unknown
		service  time.Duration // the holder's learned service time; 0: unknown
		engine   *EngineSignals
		moves    bool
	}{
		{name: "idle fleet, two in flight", history: 8, inflight: 2, moves: false},
		{name: "unknown capacity, 40 in flight", history: 8, inflight: 40, moves: false},
		{name: "below a capacity of 8", history: 8, inflight: 7, capacity: 8, moves: false},
		{name: "at a capacity of 8", history: 8, inflight: 8, capacity: 8, moves: true},
		{name: "at capacity, a history longer than the queue", history: 3000, inflight: 8, capacity: 8, moves: false},
		{name: "engine queue", history: 8, inflight: 3, engine: &EngineSignals{Running: 6, Waiting: 4, At: at}, moves: true},
		{name: "engine running, none waiting", history: 8, inflight: 3, engine: &EngineSignals{Running: 6, At: at}, moves: false},
		{name: "engine KV cache full, not predicted slower", history: 8, inflight: 1, engine: &EngineSignals{Running: 1, KVUsage: 0.99, At: at}, moves: false},
		{name: "engine KV cache full, long prefill queued", history: 8, inflight: 1, pending: 400, engine: &EngineSignals{Running: 1, KVUsage: 0.99, At: at}, moves: true},
		{name: "long prefill queued, KV cache not full", history: 8, inflight: 1, pending: 400, engine: &EngineSignals{Running: 1, KVUsage: 0.5, At: at}, moves: false},
		{name: "prefill queued past a request's service time, below capacity", history: 8, inflight: 2, pending: 400, service: 300 * time.Millisecond, moves: false},
		{name: "stale engine queue", history: 8, inflight: 3, engine: &EngineSignals{Running: 6, Waiting: 4, At: at - 60_000}, moves: false},
	}
	for _, tc := range cases {
		for _, p := range []string{"kvca-cost", "ttft", "kvca"} {
			s := newFixed(t, 4, p)
			if err := s.SetTTFT(TTFTConfig{Capacity: tc.capacity, Base: 20 * time.Millisecond, BlockTime: time.Millisecond, ResidentEpsilon: -1}); err != nil {
				t.Fatal(err)
			}
			c := chainOf(0, tc.history+2)
			s.Table.Touch(c[:tc.history], 1, s.Table.Now())
			s.Backends[1].state.Add(uint64(tc.inflight)*activeUnit + uint64(tc.pending))
			if tc.engine != nil {
				s.Backends[1].SetEngine(*tc.engine)
			}
			s.Backends[1].model.service.Store(int64(tc.service))
			d, res := route(t, s, &Request{Chain: c, Followup: true})
			moved := d.Backend.Index != 1
			// ttft also moves a follow-up whose holder is predicted
			// moveFactor times slower, saturated or not (a long prefill
			// queued there): its own rule, not the affinity's.
			ttftOwn := p == "ttft" && d.Rule == RuleTTFT && d.Overflowed == RuleNone
			if want := tc.moves && p != "kvca"; moved != want && !ttftOwn {
				t.Errorf("%s, %s: routed to %d (%v, overflowed %v), moved %v, want %v", tc.name, p, d.Backend.Index, d.Rule, d.Overflowed, moved, want)
			}
			if moved && !ttftOwn && (d.Overflowed != RulePrefix || d.Cached != 0) {
				t.Errorf("%s, %s: a move not reported as the prefix's: %+v", tc.name, p, d)
			}
			res.ReleaseActive()
			// With the bound off (negative ε) nothing yields (ttft keeps
			// its own move rule).
			s.SetAffinityEpsilon(-1)
			d, res = route(t, s, &Request{Chain: c, Followup: true})
			if d.Backend.Index != 1 && p != "ttft" {
				t.Errorf("%s, %s, bound off: moved to %d", tc.name, p, d.Backend.Index)
			}
			res.ReleaseActive()
			s.Backends[1].state.Add(^uint64(tc.inflight*activeUnit+tc.pending) + 1)
			noLoadLeft(t, s)
		}
	}
}

// A session's conversation is a holder too: a follow-up nobody else knows
// stays on the session's backend below saturation, however many requests
// it has in flight, and leaves it at capacity; the session's new
// conversations are bounded in request counts (TestBoundSiblingsLandTogether).
func TestSessionFollowupYieldsOnlyToOverload(t *testing.T) {
	t.Parallel()
	for _, p := range boundPolicies {
		s := newFixed(t, 4, p)
		if err := s.SetTTFT(TTFTConfig{Capacity: 6, Base: 20 * time.Millisecond, BlockTime: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		s.Backends[2].state.Add(5 * activeUnit)
		d, res := route(t, s, &Request{Chain: chainOf(0, 6), Followup: true, Bound: 3})
		if d.Backend.Index != 2 || d.Rule != RuleSession || !d.Bound {
			t.Fatalf("%s below capacity: %+v", p, d)
		}
		// Now at capacity: the next one waits for a slot there.
		d2, res2 := route(t, s, &Request{Chain: chainOf(0, 6), Followup: true, Bound: 3})
		if d2.Backend.Index == 2 || d2.Overflowed != RuleSession || d2.Bound {
			t.Fatalf("%s at capacity: %+v", p, d2)
		}
		res.ReleaseActive()
		res2.ReleaseActive()
		s.Backends[2].state.Add(^uint64(5*activeUnit) + 1)
		noLoadLeft(t, s)
	}
}

// A capacity learned from first-byte latencies is not the engine's word:
// slow answers at some concurrency are as often the host's noise as a
// full batch. While the engine reports its queue, its batch is judged by
// that queue alone, so a follow-up stays on its holder at any count the
// latencies suggested, and moves when the engine queues; when the
// engine's telemetry stops (a failed scrape), the learned capacity
// judges again.
func TestLearnedCapacityGivesWayToEngineQueue(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"kvca-cost", "ttft"} {
		s := newFixed(t, 4, p)
		if err := s.SetTTFT(TTFTConfig{ResidentEpsilon: -1}); err != nil {
			t.Fatal(err)
		}
		m := &s.Backends[1].model
		teach(m, 2*ms, 300_000, 0)
		// Answers at 5 and more in flight were slow: read as slot waits.
		slowFrom(m, minSeen, 9, 5)
		if got := m.capacity.Load(); got != 5 {
			t.Fatalf("%s: learned capacity %d, want 5", p, got)
		}
		m.service.Store(300 * ms)
		at := s.Table.TimeOf(s.Table.Now()).UnixMilli()
		c := chainOf(0, 10)
		s.Table.Touch(c[:8], 1, s.Table.Now())
		s.Backends[1].state.Add(6 * activeUnit)
		for _, tc := range []struct {
			name   string
			engine *EngineSignals
			moves  bool
		}{
			{"no engine telemetry: the learned capacity judges", nil, true},
			{"the engine runs 6 and queues none", &EngineSignals{Running: 6, Queue: true, At: at, Status: "on"}, false},
			{"the engine queues", &EngineSignals{Running: 5, Waiting: 2, Queue: true, At: at, Status: "on"}, true},
			{"its telemetry failed: the learned capacity judges again", &EngineSignals{Running: 6, At: at, Status: "error"}, true},
			{"an engine that exports no queue", &EngineSignals{Running: 6, At: at, Status: "on"}, true},
		} {
			if tc.engine != nil {
				s.Backends[1].SetEngine(*tc.engine)
			}
			d, res := route(t, s, &Request{Chain: c, Followup: true})
			if moved := d.Backend.Index != 1; moved != tc.moves {
				t.Errorf("%s, %s: routed to %d (%v, overflowed %v), want moved %v", p, tc.name, d.Backend.Index, d.Rule, d.Overflowed, tc.moves)
			}
			res.ReleaseActive()
		}
		s.Backends[1].state.Add(^uint64(6*activeUnit) + 1)
		noLoadLeft(t, s)
	}
}

// The invariant of judging a batch by the engine's queue, on randomized
// fleets: whatever kvca learned from latencies (random slow answers at
// random in-flight levels, so that learned capacities are anywhere from
// none to a few requests) and whatever the requests in flight, a holder
// whose engine reports no queue and a KV cache below full keeps every
// follow-up of its prefix under kvca-cost. The same fleets with engines
// that report no queue must move some (the learned capacities judge):
// otherwise this test could not fail.
func TestQueueReportingHolderKeepsFollowupsRandomized(t *testing.T) {
	t.Parallel()
	movedSilent := 0
	for seed := uint64(1); seed <= 20; seed++ {
		for _, reports := range []bool{true, false} {
			rng := rand.New(rand.NewPCG(seed, 7))
			n := 2 + rng.IntN(7)
			s := newFixed(t, n, "kvca-cost")
			if err := s.SetTTFT(TTFTConfig{ResidentEpsilon: -1}); err != nil {
				t.Fatal(err)
			}
			at := s.Table.TimeOf(s.Table.Now()).UnixMilli()
			loads := make([]uint64, n)
			for i, b := range s.Backends {
				m := &b.model
				teach(m, 2*ms, 300_000, 0)
				slowFrom(m, minSeen+rng.IntN(4), 2+rng.IntN(10), 1+rng.IntN(6))
				m.service.Store(int64(10+rng.IntN(300)) * ms)
				b.SetEngine(EngineSignals{Running: int32(rng.IntN(6)), KVUsage: rng.Float32() * 0.9, Queue: reports, At: at, Status: "on"})
				loads[i] = uint64(rng.IntN(12))
				b.state.Add(loads[i] * activeUnit)
			}
			for k := range 40 {
				h := rng.IntN(n)
				c := chainOf(100_000*int(seed)+1000*k, 2+rng.IntN(40))
				s.Table.Touch(c[:len(c)-1], h, s.Table.Now())
				d, res := route(t, s, &Request{Chain: c, Followup: true})
				res.ReleaseActive()
				if d.Backend.Index == h {
					continue
				}
				if reports {
					t.Fatalf("seed %d: a follow-up left holder %d (in flight %d, learned capacity %d, engine idle) for %d (%v, overflowed %v)",
						seed, h, loads[h], s.Backends[h].model.capacity.Load(), d.Backend.Index, d.Rule, d.Overflowed)
				}
				movedSilent++
			}
			for i, b := range s.Backends {
				b.state.Add(^(loads[i] * activeUnit) + 1)
			}
			noLoadLeft(t, s)
		}
	}
	if movedSilent == 0 {
		t.Fatal("no follow-up moved where the learned capacities judge: the fleets never reached them")
	}
	t.Logf("%d follow-ups moved by learned capacities where the engines report no queue", movedSilent)
}
