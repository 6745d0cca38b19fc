package sched

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/chain"
)

// The invariants every policy keeps, whatever the affinities a workload
// brings, checked on randomized workloads of every affinity source: one
// user value for every conversation, session fan-outs, hot shared
// prefixes, bursts of near-identical requests, predicted locations,
// follow-ups, clock steps past the TTL, answers reporting any number of
// cached blocks.
//
//   - No affinity that holds nothing yet (a session's new conversation,
//     session-hash's first turn)
//     sends a request to a backend past the load bound (another having
//     room).
//   - A follow-up's holders below saturation keep it: under kvca and
//     kvca-cost, while a holder of its longest known prefix is below its
//     batch capacity, the request goes to a holder of that prefix.
//   - A saturated holder keeps a request only while no other backend
//     below saturation is predicted to answer it sooner by more than the
//     near margin, that
//     one recomputing what the holder has cached (kvca-cost, ttft,
//     session-hash; the predictions are recomputed here from the fixed
//     model, not read from the scheduler).
//   - Under kvca, a follow-up with an eligible holder goes to a holder
//     whatever its load, and a first turn to a least-loaded backend.
//   - Every load returns to exactly zero.
//   - No location is live after the TTL since its last touch, whatever
//     the engines report to the cache check (the retention it learns
//     stays below the TTL).
func TestRoutingInvariantsRandomized(t *testing.T) {
	t.Parallel()
	for _, policy := range Policies() {
		for seed := uint64(1); seed <= 12; seed++ {
			checkInvariants(t, policy, seed)
		}
	}
}

func checkInvariants(t *testing.T, policy string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	n := 2 + rng.IntN(7)
	bs := make([]*Backend, n)
	for i := range bs {
		bs[i] = NewBackend(i, "http://b", "b")
	}
	var elapsed atomic.Int64 // the table's clock, moved by hand
	base := time.Unix(1_000_000, 0)
	ttl := time.Duration(2+rng.IntN(10)) * time.Second
	tab := chain.NewTable(chain.Config{TTL: ttl, MaxBlocks: 1 << 15, Now: func() time.Time { return base.Add(time.Duration(elapsed.Load())) }})
	tab.SetPredictTTL(time.Duration(rng.IntN(4)) * time.Second)
	s, err := New(bs, tab, 1+rng.IntN(8), policy)
	if err != nil {
		t.Fatal(err)
	}
	eps := []float64{0, 0.1, 0.25, 0.5, 1}[rng.IntN(5)]
	s.SetAffinityEpsilon(eps)
	// A fixed model, so that saturation and predictions are known here:
	// nothing is learned (no answer reports a first byte), and the
	// service time stays the prior.
	capacity := 2 + rng.IntN(6)
	firstBase, blockTime := 20*time.Millisecond, time.Duration(1+rng.IntN(20))*time.Millisecond
	if err := s.SetTTFT(TTFTConfig{Capacity: capacity, Base: firstBase, BlockTime: blockTime, ResidentEpsilon: DefaultResidentEpsilon}); err != nil {
		t.Fatal(err)
	}
	// predicted is the fixed model's first-token time on backend i for a
	// request computing novel blocks: base, the prefill reserved ahead
	// and its own, and past the capacity the wait for a slot.
	predicted := func(i, novel int) int64 {
		b := bs[i]
		p := int64(firstBase) + int64(blockTime)*(b.Prefill()+int64(novel))
		if a := b.Active(); a >= int64(capacity) {
			p += (a - int64(capacity) + 1) * int64(priorService) / int64(capacity)
		}
		return p
	}
	saturated := func(i int) bool { return bs[i].Active() >= int64(capacity) }

	type flight struct {
		res   *Reservation
		chain []uint64
		b     int
	}
	var inflight []flight
	sessions := map[uint64]int{} // session key → bound backend, as the proxy keeps them
	// Conversations: a shared system prompt (hot prefix) plus their own
	// turns; each keeps the chain of its latest turn.
	systems := [][]uint64{chainOf(0, 4+rng.IntN(20)), chainOf(10_000, 2+rng.IntN(6))}
	convs := make([][]uint64, 8+rng.IntN(40))
	convSession := make([]uint64, len(convs))
	constUser := rng.IntN(2) == 0
	for i := range convs {
		sys := systems[rng.IntN(len(systems))]
		convs[i] = append(append([]uint64(nil), sys...), chainOf(100_000+i*1000, 1+rng.IntN(6))...)
		switch {
		case constUser:
			convSession[i] = 42 // one user value for every conversation
		case rng.IntN(3) == 0:
			convSession[i] = uint64(1 + rng.IntN(3)) // fan-outs under a few session keys
		}
	}
	var all chain.Set
	for i := range n {
		all.Add(i)
	}
	next := 1_000_000
	for step := 0; step < 600; step++ {
		switch op := rng.IntN(10); {
		case op < 6: // route a turn
			ci := rng.IntN(len(convs))
			c := convs[ci]
			followup := len(c) > len(systems[0])+7 || rng.IntN(3) == 0
			if rng.IntN(4) == 0 {
				// a burst of near-identical requests: the same new prefix
				c = append(append([]uint64(nil), c...), chainOf(next, 2)...)
			} else {
				c = append(append([]uint64(nil), c...), chainOf(next, 1+rng.IntN(4))...)
				next += 10
			}
			r := &Request{Chain: c, Followup: followup, Session: convSession[ci], Now: tab.Now()}
			if k := convSession[ci]; k != 0 {
				if b, ok := sessions[k]; ok {
					r.Bound = b + 1
				}
			}
			if rng.IntN(20) == 0 && r.Bound != 0 {
				r.Pin = true // a Responses continuation: required, not an affinity
			}
			elig := s.Eligible(r)
			cap := s.LoadCap(&elig)
			var before [chain.MaxBackends]int64
			var cost [chain.MaxBackends]uint64
			var pred [chain.MaxBackends]int64
			var sat [chain.MaxBackends]bool
			var match [chain.MaxBackends]int32
			tab.Matches(c, r.Now, &match)
			for i := range n {
				before[i] = bs[i].Active()
				cost[i] = loadOf(bs[i].state.Load(), s.ActiveWeight)
				pred[i] = predicted(i, len(c)-int(match[i]))
				sat[i] = saturated(i)
			}
			div, holders := tab.Prefix(c, r.Now)
			holders.And(&elig)
			// soonerElsewhere: another backend, not saturated itself, is
			// predicted to answer sooner than b by more than the near
			// margin.
			soonerElsewhere := func(b int) bool {
				best := int64(-1)
				for i := range n {
					p := pred[i] + int64(max(match[b]-match[i], 0))*int64(blockTime)
					if i != b && !sat[i] && (best < 0 || p < best) {
						best = p
					}
				}
				return best >= 0 && pred[b] > best+best/nearDiv
			}
			var d Decision
			res := &Reservation{}
			if !s.Route(r, &d, res) {
				t.Fatalf("%s seed %d: no backend", policy, seed)
			}
			b := d.Backend.Index
			if d.Rule == RuleNone {
				t.Fatalf("%s seed %d: a decision without a rule: %+v", policy, seed, d)
			}
			countBounded := (d.Rule == RuleSession || d.Rule == RuleHash) && !r.Followup
			if countBounded && before[b]+1 > cap {
				t.Fatalf("%s seed %d step %d: affinity %v sent a request to backend %d at %d requests, past the bound %d (ε %v, loads %v)",
					policy, seed, step, d.Rule, b, before[b], cap, eps, before[:n])
			}
			if r.Followup && !r.Pin && div > 0 && !holders.Empty() && (policy == "kvca" || policy == "kvca-cost") {
				keeps := policy == "kvca"
				holders.Each(func(i int) { keeps = keeps || !sat[i] })
				if keeps && !holders.Has(b) {
					t.Fatalf("%s seed %d step %d: a follow-up left its holders %v (in flight %v, capacity %d) for %d (%v)",
						policy, seed, step, holders, before[:n], capacity, b, d.Rule)
				}
			}
			holding := d.Rule == RulePrefix || d.Rule == RulePredicted || d.Rule == RuleDeparted || d.Rule == RulePromptHolder ||
				(d.Rule == RuleSession || d.Rule == RuleHash) && r.Followup
			if policy != "kvca" && holding && sat[b] && soonerElsewhere(b) {
				t.Fatalf("%s seed %d step %d: saturated holder %d kept a request (%v) another backend answers sooner: predicted %v (in flight %v, capacity %d)",
					policy, seed, step, b, d.Rule, pred[:n], before[:n], capacity)
			}
			if policy != "kvca" && d.Overflowed != RuleNone && r.Followup && sat[b] && holders.Has(b) && soonerElsewhere(b) {
				t.Fatalf("%s seed %d step %d: the load placement took back holder %d that gave the request up", policy, seed, step, b)
			}
			if d.Rule == RuleProducer && !r.Pin {
				t.Fatalf("%s seed %d: producer rule without a pin", policy, seed)
			}
			if policy == "kvca" && !r.Followup && !r.Pin {
				for i := range n {
					if cost[i] < cost[b] {
						t.Fatalf("kvca seed %d step %d: a first turn went to %d (load %d), %d had %d", seed, step, b, cost[b], i, cost[i])
					}
				}
			}
			if k := convSession[ci]; k != 0 {
				sessions[k] = b
			}
			if rng.IntN(2) == 0 {
				tab.Predict(c, b, r.Now)
			}
			convs[ci] = c
			inflight = append(inflight, flight{res, c, b})
		case op < 9 && len(inflight) > 0: // an answer ends
			k := rng.IntN(len(inflight))
			f := inflight[k]
			if rng.IntN(5) > 0 {
				tab.Touch(f.chain, f.b, tab.Now())
			}
			if rng.IntN(2) == 0 {
				// The engine reports its cached blocks: any number.
				pred := rng.IntN(len(f.chain) + 1)
				s.CheckCached(bs[f.b], Check{PredictedBlocks: pred, ReportedBlocks: rng.IntN(len(f.chain) + 1), Tolerance: 1,
					LastAccess: tab.Now() - int64(rng.IntN(5000)), Now: tab.Now()}, time.Now())
				if r := tab.Retention(f.b); r < 0 || r >= ttl {
					t.Fatalf("%s seed %d: retention %v, TTL %v", policy, seed, r, ttl)
				}
			}
			f.res.ReleasePrefill()
			f.res.ReleaseActive()
			f.res.ReleaseActive() // exactly once, however often called
			inflight = append(inflight[:k], inflight[k+1:]...)
		default:
			elapsed.Add(int64(time.Duration(rng.IntN(1500)) * time.Millisecond))
		}
	}
	for _, f := range inflight {
		f.res.ReleaseActive()
	}
	for _, b := range bs {
		if b.state.Load() != 0 {
			t.Fatalf("%s seed %d: load left on %d: %x", policy, seed, b.Index, b.state.Load())
		}
	}
	elapsed.Add(int64(ttl))
	now := tab.Now()
	for _, c := range convs {
		for _, h := range c {
			if got := tab.Lookup(h, now); !got.Empty() {
				t.Fatalf("%s seed %d: a location outlived the TTL: %v", policy, seed, got)
			}
		}
	}
}
