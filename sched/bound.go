package sched

import (
	"math"
	"sync/atomic"

	"github.com/kvca/kvca/chain"
)

// A conversation the client named (a session key) or continues (a
// Responses API thread) is bound to the backend that served it. The binding
// is what a first turn of a known session, or a sibling request fired
// before any answer arrived, has instead of a known prefix: whatever prefix
// the table knows of a bootstrap is one other conversations share too (a
// system prompt, tool definitions), while the binding knows this one. So a
// bound bootstrap goes to its backend (under kvca-cost and cost; under
// kvca, Phase 1 is least-loaded and the binding only breaks its ties), and
// so does a follow-up of which no eligible backend holds anything; a
// follow-up whose prefix the table knows goes by its prefix, and the
// binding only breaks ties.
//
// Every such preference for a backend, other than load, is an affinity,
// and every affinity gives way to load, in one of two ways, by what
// moving the request would cost:
//
//   - An affinity that holds cached work (the holders of a follow-up's
//     longest known prefix, confirmed, predicted or departed; the
//     holders of a new conversation's prompt; the backend a session's
//     conversation lives on) yields only to real
//     overload, judged in time (yields): its holder is saturated and
//     the request's predicted first token there is later than the best
//     other backend's, that one recomputing everything the holder would
//     have served from cache. Below saturation nothing moves: a
//     conversation moved off its holder pays its whole history's
//     prefill, on this turn and in the cache it leaves behind.
//   - An affinity that holds nothing of the request's yet (a session
//     key's new conversation, session-hash's first turn) is bounded in
//     request counts (the load bound below): spreading it costs no
//     cache, and it keeps fan-outs under one key from piling up.
//
// What correctness requires is not an affinity: a previous_response_id
// whose response only its producer stores (Request.Pin) goes there
// whatever its load.

// Rule names what chose a decision's backend; the access log and the
// explain header print it.
type Rule uint8

const (
	RuleNone         Rule = iota
	RuleLeastLoaded       // the least loaded (Phase 1, fallback, least-loaded)
	RuleCost              // the least cost: load plus the blocks to compute
	RulePrefix            // a holder of the follow-up's longest known prefix (Phase 2)
	RulePredicted         // as RulePrefix, the holder known from a prediction made at routing
	RuleDeparted          // the holder the capacity bound dropped the conversation's rest from
	RulePromptHolder      // a holder of a new conversation's prompt (kvca-cost, ttft)
	RuleSession           // the backend the conversation is bound to (a session key)
	RuleProducer          // the only backend storing previous_response_id's response
	RuleOverflow          // an affinity's backends were past the load bound: placed by load
	RuleTTFT              // the least predicted time to first token (ttft)
	RuleRoundRobin
	RuleRandom
	RuleHash // session-hash's rendezvous choice
	NumRules
)

var ruleNames = [NumRules]string{"none", "least_loaded", "cost", "prefix", "predicted", "departed",
	"prompt_holder", "session", "producer", "overflow", "ttft", "round_robin", "random", "hash"}

func (r Rule) String() string {
	if r < NumRules {
		return ruleNames[r]
	}
	return "unknown"
}

// Affinity reports whether r prefers a backend for a reason other than
// load, and so is bounded by load.
func (r Rule) Affinity() bool {
	switch r {
	case RulePrefix, RulePredicted, RuleDeparted, RulePromptHolder, RuleSession, RuleHash:
		return true
	}
	return false
}

// The load bound (consistent hashing with bounded loads): an affinity
// that holds nothing yet may send a request to backend b only while
//
//	active(b) + 1 <= max((1+ε) × (Σ active + 1) / n, 2)
//
// over the n backends eligible for the request, active being the requests
// in flight there (this replica's and, with clustering, the others'): b's
// share of the fleet's requests, this one included, at most (1+ε) times
// the mean, and always two, so that two siblings of a new prefix land
// together on an idle fleet. The least loaded backend is always within
// it. Past it the request is placed as if it had no affinity, and the
// overflow is counted per affinity. The check and the reservation are two
// steps: requests routed at the same instant may each pass it, so a
// backend can exceed the bound by at most the routes racing on it.

// DefaultAffinityEpsilon is ε of the load bound (--affinity-epsilon), as
// the bench chose it (docs/routing.md): on the Mooncake trace, where load
// is even anyway, 0.5 cost 0.8 points of hit rate against no bound and
// 0.25 cost 2.3; on agent sessions any ε evened the load (max÷mean
// 1.2-1.5 against 2.1-2.3) at the same hit rate.
const DefaultAffinityEpsilon = 0.5

// boundState is the bound's setting and counts, shared by the schedulers
// Rebuild makes.
type boundState struct {
	eps      atomic.Uint64 // float64 bits; negative: no bound
	overflow [NumRules]atomic.Uint64
}

// SetAffinityEpsilon sets ε of the load bound; negative turns the bound
// and the overload rule off (affinities unbounded, as before either
// existed).
func (s *Scheduler) SetAffinityEpsilon(eps float64) { s.bound.eps.Store(math.Float64bits(eps)) }

// AffinityEpsilon returns ε of the load bound.
func (s *Scheduler) AffinityEpsilon() float64 { return math.Float64frombits(s.bound.eps.Load()) }

// Overflows returns, per affinity rule, the requests it would have placed
// that the load bound sent elsewhere.
func (s *Scheduler) Overflows() (n [NumRules]uint64) {
	for i := range n {
		n[i] = s.bound.overflow[i].Load()
	}
	return n
}

// active is b's in-flight requests as the bound counts them.
func (s *Scheduler) active(i int) int64 {
	b := s.Backends[i]
	ra, _ := b.RemoteLoad()
	return b.Active() + int64(ra)
}

// LoadCap is the load bound over elig: the most requests a backend may
// hold, this one included, for an affinity to send it there.
// math.MaxInt64 when the bound is off.
func (s *Scheduler) LoadCap(elig *chain.Set) int64 {
	eps := s.AffinityEpsilon()
	if eps < 0 {
		return math.MaxInt64
	}
	var sum, n int64
	least := int64(math.MaxInt64)
	eachIn(elig, func(i int) {
		a := s.active(i)
		sum += a
		n++
		least = min(least, a)
	})
	if n == 0 {
		return 0
	}
	// The small addition keeps a product that is whole in exact
	// arithmetic from rounding down through float error.
	return max(int64(math.Floor((1+eps)*float64(sum+1)/float64(n)+1e-9)), 2, least+1)
}

// bounded returns the members of set whose load leaves room under cap.
func (s *Scheduler) bounded(set *chain.Set, cap int64) chain.Set {
	var in chain.Set
	eachIn(set, func(i int) {
		if s.active(i)+1 <= cap {
			in.Add(i)
		}
	})
	return in
}

// overflowed books that affinity r's backends were past the bound for d's
// request; the first affinity refused is the one d reports.
func (s *Scheduler) overflowed(r Rule, d *Decision) {
	s.bound.overflow[r].Add(1)
	if d.Overflowed == RuleNone {
		d.Overflowed = r
	}
}

// loadRule is the rule d reports when a load rule placed it: overflow if
// an affinity was refused on the way.
func loadRule(d *Decision, r Rule) Rule {
	if d.Overflowed != RuleNone {
		return RuleOverflow
	}
	return r
}

// boundDecides reports whether the binding, not the prefix, places r, the
// longest eligible match being best blocks.
func boundDecides(r *Request, best int) bool {
	return r.Bound != 0 && (!r.Followup || best == 0)
}

// pickBound reserves r on its bound backend if that one is eligible and,
// unless the binding is required (Pin), the binding may send it there:
// a follow-up's conversation lives there, and it stays unless the backend
// is overloaded (yields); a first turn is a new conversation, within the
// load bound. False if r has none, it is not eligible, or it was refused
// (counted), and nothing is reserved.
func (s *Scheduler) pickBound(r *Request, d *Decision) bool {
	i := r.Bound - 1
	if i < 0 || i >= len(s.Backends) {
		return false
	}
	b := s.Backends[i]
	if !b.Healthy() || r.Exclude.Has(i) || (r.Allowed != nil && !r.Allowed.Has(i)) {
		return false
	}
	d.Rule = RuleProducer
	if !r.Pin {
		elig := s.Eligible(r)
		if r.Followup && s.yields(i, r, &elig, nil, s.unixNow(r)) {
			d.yielded.Add(i)
			s.overflowed(RuleSession, d)
			return false
		}
		if !r.Followup && s.active(i)+1 > s.LoadCap(&elig) {
			s.overflowed(RuleSession, d)
			return false
		}
		d.Rule = RuleSession
	}
	m := matchOf(s, r, i)
	reserveOn(b, len(r.Chain)-m, d)
	d.Cached = m
	d.Phase = phaseOf(r, m)
	d.Bound = true
	return true
}

// preferTied moves the choice to the preferred backend (1 + index, 0:
// none) when it is in elig and costs exactly bestCost.
func (s *Scheduler) preferTied(elig *chain.Set, prefer int, bestCost uint64, cost func(int) (uint64, uint64), best *int, bestSt *uint64) bool {
	p := prefer - 1
	if p < 0 || p >= len(s.Backends) || !elig.Has(p) {
		return false
	}
	c, st := cost(p)
	if c != bestCost {
		return false
	}
	*best, *bestSt = p, st
	return true
}

// saturated reports whether backend i is at or beyond its batch
// capacity, so that a request sent there now waits for a slot: by its
// engine's queue (fresh telemetry: requests waiting beside running ones
// mean a full batch, whatever the capacity) or KV cache near full (the
// engine preempts or queues), else by its requests in flight (every
// replica's, or the engine's count when larger) against its capacity,
// set by --batch-capacity or, for an engine that does not report its
// queue, learned from the concurrency past which its answers waited for a
// slot (cap), else fleet (0: none). A capacity nobody
// knows is never reached: kvca moves nothing on a guess. The prefill
// queued on a backend is not saturation by itself: read against the
// backend's mean request it moved follow-ups on a fleet answering in
// milliseconds (2 of 15 runs of the SDK's twelve parallel conversations),
// and the prediction below weighs it anyway. It returns the capacity it
// judged by (0: none known). unix is the wall clock for engine signals
// (0: ignore them).
func (s *Scheduler) saturated(i int, unix int64, fleet int64) (bool, int64) {
	inflight, c, full := s.engineBatch(s.Backends[i], s.active(i), unix)
	if c == 0 {
		c = fleet
	}
	return full || c > 0 && inflight >= c, c
}

// yields reports whether holder h, an affinity holding cached work for r,
// gives r up to real overload: h is saturated, and r's predicted time to
// first token there (the queue for a batch slot, the prefill reserved
// ahead of it, its own uncached blocks) is more than the near margin
// above the best other eligible backend's that is not saturated itself,
// each predicted with the blocks it would compute and those it would
// recompute of what h holds counted once more, for the requests that
// queue behind that recomputation there. When every backend
// is saturated the fleet is overloaded, not h: a move would only trade
// one queue for another and add the recomputation to the fleet's work,
// which lowers every backend's hit rate and lengthens every queue (in
// front of the simulator under overload, moving between saturated
// backends cost 9 points of hit rate and half a second of TTFT p99).
// match holds each backend's cached blocks of the
// chain (nil: read from the table, only when h is saturated). The near
// margin is the predictions' noise: within it the cache decides. With the
// bound off (negative ε) nothing yields.
func (s *Scheduler) yields(h int, r *Request, elig *chain.Set, match *[chain.MaxBackends]int32, unix int64) bool {
	if s.AffinityEpsilon() < 0 {
		return false
	}
	full, c := s.saturated(h, unix, 0)
	if !full {
		return false
	}
	var own [chain.MaxBackends]int32
	if match == nil {
		prefixMatch(s, r, *elig, &own)
		match = &own
	}
	n := len(r.Chain)
	hb := s.Backends[h]
	ph := s.predict(hb, hb.state.Load(), n-int(match[h]), unix)
	pa := int64(-1)
	eachIn(elig, func(i int) {
		// A backend of unknown capacity is judged by the holder's: a
		// fleet's engines are alike, and one that has not shown its
		// capacity yet is not thereby free.
		if full, _ := s.saturated(i, unix, c); i == h || full {
			return
		}
		b := s.Backends[i]
		p := s.predict(b, b.state.Load(), n-int(match[i]), unix)
		if lost := match[h] - match[i]; lost > 0 {
			// The recomputation delays, besides this request, every
			// request that queues behind it there.
			p += int64(lost) * b.model.blockTime()
		}
		if pa < 0 || p < pa {
			pa = p
		}
	})
	return pa >= 0 && ph > pa+pa/nearDiv
}

// unyielding returns the members of holders that keep r (yields), given
// elig and the holders' cached blocks match (nil: read when needed); those
// that gave it up are added to d.yielded.
func (s *Scheduler) unyielding(holders *chain.Set, r *Request, elig *chain.Set, match *[chain.MaxBackends]int32, unix int64, d *Decision) chain.Set {
	keep := *holders
	eachIn(holders, func(i int) {
		if s.yields(i, r, elig, match, unix) {
			keep.Remove(i)
			d.yielded.Add(i)
		}
	})
	return keep
}

// dropYielded removes from elig the backends that gave d's request up to
// overload, unless none would be left.
func dropYielded(elig *chain.Set, d *Decision) {
	if d.yielded.Empty() {
		return
	}
	rest := *elig
	for w := range rest {
		rest[w] &^= d.yielded[w]
	}
	if !rest.Empty() {
		*elig = rest
	}
}
