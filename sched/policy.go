package sched

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sort"

	"github.com/kvca/kvca/chain"
)

var policies = map[string]Policy{
	"kvca":         kvcaPolicy{},
	"cost":         costPolicy{},
	"kvca-cost":    kvcaCost{},
	"round-robin":  roundRobin{},
	"least-loaded": leastLoaded{},
	"random":       randomPolicy{},
	"session-hash": sessionHash{},
	"ttft":         ttftPolicy{},
}

// DefaultPolicy is what serve uses when --policy is not given; the bench
// chose it (see README).
const DefaultPolicy = "kvca-cost"

// Policies lists the policy names, sorted.
func Policies() []string {
	names := make([]string, 0, len(policies))
	for n := range policies {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PolicyByName returns the named policy.
func PolicyByName(name string) (Policy, error) {
	if p, ok := policies[name]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("unknown policy %q (want one of %v)", name, Policies())
}

func trailingZeros(w uint64) int { return bits.TrailingZeros64(w) }

// kvcaPolicy is the two dispatch phases: bootstrap requests to the least
// loaded backend (a binding only breaks its ties), follow-ups to the least
// loaded holder of their longest known prefix, whatever its load (fallback
// to the least loaded when none is eligible).
type kvcaPolicy struct{}

func (kvcaPolicy) Name() string { return "kvca" }

func (kvcaPolicy) Pick(s *Scheduler, r *Request, d *Decision) bool {
	elig := s.Eligible(r)
	d.prefer = r.Bound
	var match *[chain.MaxBackends]int32
	if r.Followup && len(r.Chain) > 0 {
		if phase2(s, r, elig, d, false) {
			return true
		}
		d.Phase = PhaseFallback
		if s.pickBound(r, d) {
			return true
		}
		if d.Overflowed != RuleNone {
			// The binding was refused for load: count what the chosen
			// backend holds, though load alone chooses.
			var m [chain.MaxBackends]int32
			if prefixMatch(s, r, elig, &m) > 0 {
				match = &m
			}
		}
	}
	// Phase 1 (and fallback): every eligible backend by load alone.
	dropYielded(&elig, d)
	d.Rule = loadRule(d, RuleLeastLoaded)
	if !s.reserveMin(&elig, len(r.Chain), match, false, d) {
		return false
	}
	if d.Overflowed != RuleNone {
		d.Phase = phaseOf(r, d.Cached)
	}
	return true
}

// phase2 walks the chain to the divergence point and reserves the
// least-loaded eligible holder of the block before it (the replicas of the
// longest known prefix); false if there is none. With overload (kvca-cost,
// session-hash), holders that are really overloaded give the request up
// (yields), and false then means none kept it (counted in d.Overflowed);
// without it (kvca, Phase 2 of the two dispatch phases), a holder keeps it whatever its
// load.
func phase2(s *Scheduler, r *Request, elig chain.Set, d *Decision, overload bool) bool {
	div, prev := s.Table.Prefix(r.Chain, r.Now)
	if div == 0 {
		return false
	}
	prev.And(&elig)
	if prev.Empty() {
		return false
	}
	s.noteGap(r, &prev, div)
	s.avoidFull(&prev, d, func(int) int { return len(r.Chain) - div })
	var unix int64
	if overload {
		unix = s.unixNow(r)
	}
	if div < len(r.Chain) && prev.Len() > 1 {
		// The rest of the conversation was dropped for capacity: go back
		// to the holder it was dropped from, as a table without the bound
		// would, unless it is overloaded.
		if b, ok := s.Table.Departed(r.Chain[div]); ok && prev.Has(b) {
			if !overload || !s.yields(b, r, &elig, nil, unix) {
				var one chain.Set
				one.Add(b)
				return holderPick(s, r, &one, div, RuleDeparted, d)
			}
			d.yielded.Add(b)
			prev.Remove(b)
			s.overflowed(RuleDeparted, d)
		}
	}
	open := prev
	if overload {
		open = s.unyielding(&prev, r, &elig, nil, unix, d)
	}
	if open.Empty() {
		s.overflowed(RulePrefix, d)
		return false
	}
	return holderPick(s, r, &open, div, RulePrefix, d)
}

// holderPick reserves the least loaded of holders, which hold the chain's
// first div blocks, under rule (a prefix holder is reported as predicted
// when its location was recorded at routing and no answer confirmed it).
func holderPick(s *Scheduler, r *Request, holders *chain.Set, div int, rule Rule, d *Decision) bool {
	var match [chain.MaxBackends]int32
	holders.Each(func(b int) { match[b] = int32(div) })
	d.Phase = PhaseFollowup
	if !s.reserveMin(holders, len(r.Chain), &match, false, d) {
		return false
	}
	d.Rule = rule
	if l, ok := s.Table.LocationOf(r.Chain[div-1], d.Backend.Index, r.Now); ok {
		d.cachedAt = l.Last + 1 // the answer's cache check reads it
		if rule == RulePrefix && l.Predicted {
			d.Rule = RulePredicted
		}
	}
	return true
}

// kvcaCost routes follow-ups as kvca's Phase 2 does and everything else
// (first turns, and follow-ups whose longest prefix has no eligible
// holder within the load bound) as cost does. A conversation stays with
// the replicas of its longest known prefix whatever their prefill backlog,
// while their load is within the bound: moving it would trade a short wait
// for a recomputation that every later turn pays for too, which is why
// cost alone loses hit rate once loads include the prefill still running.
// Past the bound, cost decides, the blocks a holder saves still counting
// for it. A first turn has no conversation to keep, only a prefix it may
// share with others (a document, a long system prompt, tool definitions),
// so it goes to the backend that is best by a cache-locality utility:
// cost, the least load after counting the blocks each backend would have
// to compute.
type kvcaCost struct{}

func (kvcaCost) Name() string { return "kvca-cost" }

func (kvcaCost) Pick(s *Scheduler, r *Request, d *Decision) bool {
	d.prefer = r.Bound
	if r.Followup && len(r.Chain) > 0 && phase2(s, r, s.Eligible(r), d, true) {
		return true
	}
	return pickCost(s, r, d, true)
}

// costPolicy weighs load against the prefill a cached prefix saves:
// cost(b) = load(b) + blocks b would have to compute.
type costPolicy struct{}

func (costPolicy) Name() string { return "cost" }

func (costPolicy) Pick(s *Scheduler, r *Request, d *Decision) bool {
	return pickCost(s, r, d, false)
}

// pickCost is the cost policy's choice. With holders, a new conversation
// whose prompt some backends hold goes to one of them while they are
// predicted to answer it about as fast as any other (promptHolders) and
// their resident work stays within its bound (residentBound) or their
// batch is expected to stay at most half full with it (roomy), unless
// they are overloaded (yields: they hold the prompt, an affinity holding
// cached work): counted as
// load, the prompt's first prefill there, or a conversation or two more
// than elsewhere, would otherwise outweigh the prompt and send it to
// recompute the prompt on an engine with as much batch room, a cold first
// turn that spreads the prompt over one more backend. The resident bound
// keeps the holders of a popular prompt from gathering more conversations
// than their batches serve once the follow-ups, which stay, come back;
// below half their batch there is no such risk to bound. Ties on cost go
// to the least resident backend (spread), so the first sights of
// different prompts land on different backends.
func pickCost(s *Scheduler, r *Request, d *Decision, holders bool) bool {
	elig := s.Eligible(r)
	var match [chain.MaxBackends]int32
	best := prefixMatch(s, r, elig, &match)
	d.prefer = r.Bound
	if boundDecides(r, best) && s.pickBound(r, d) {
		return true
	}
	d.spread, d.tableNow = holders && !r.Followup, r.Now
	rule := loadRule(d, RuleCost)
	if holders && !r.Followup && best > 0 {
		if held := s.promptHolders(&elig, &elig, r, &match, best, s.unixNow(r)); held != elig {
			var res [chain.MaxBackends]float32
			open := s.residentBound(&elig, r.Now, &res, residentSlack)
			var take chain.Set
			held.Each(func(i int) {
				if open.Has(i) || s.roomy(s.Backends[i], float64(res[i])) {
					take.Add(i)
				}
			})
			if !take.Empty() {
				if take = s.unyielding(&take, r, &elig, &match, s.unixNow(r), d); take.Empty() {
					s.overflowed(RulePromptHolder, d)
					rule = RuleOverflow
				} else {
					elig, rule = take, RulePromptHolder
				}
			}
		}
	}
	switch {
	case !r.Followup:
		d.Phase = PhaseBootstrap
	case best > 0:
		d.Phase = PhaseFollowup
	default:
		d.Phase = PhaseFallback
	}
	d.Rule = rule
	dropYielded(&elig, d)
	s.avoidFull(&elig, d, func(i int) int { return len(r.Chain) - int(match[i]) })
	return s.reserveMin(&elig, len(r.Chain), &match, true, d)
}

// prefixMatch sets match[b] to the number of leading blocks of the chain
// that b holds, for b in elig, and returns the longest.
func prefixMatch(s *Scheduler, r *Request, elig chain.Set, match *[chain.MaxBackends]int32) int {
	held := s.Table.Matches(r.Chain, r.Now, match)
	best := int32(0)
	held.Each(func(b int) {
		if !elig.Has(b) {
			match[b] = 0
			return
		}
		best = max(best, match[b])
	})
	return int(best)
}

// matchOf is the cached prefix of one chosen backend, so baselines report
// truthful cached/novel counts and reserve the right prefill.
func matchOf(s *Scheduler, r *Request, b int) int {
	n := 0
	for _, h := range r.Chain {
		locs := s.Table.Lookup(h, r.Now)
		if !locs.Has(b) {
			break
		}
		n++
	}
	return n
}

func phaseOf(r *Request, cached int) Phase {
	switch {
	case !r.Followup:
		return PhaseBootstrap
	case cached > 0:
		return PhaseFollowup
	}
	return PhaseFallback
}

// pickFixed finishes a baseline's choice of backend index i.
func pickFixed(s *Scheduler, r *Request, i int, d *Decision) bool {
	m := matchOf(s, r, i)
	reserveOn(s.Backends[i], len(r.Chain)-m, d)
	d.Cached = m
	d.Phase = phaseOf(r, m)
	return true
}

// nth returns the k-th member (0-based) of a set.
func nth(e *chain.Set, k int) int {
	for wi, word := range e {
		c := bits.OnesCount64(word)
		if k >= c {
			k -= c
			continue
		}
		for ; k > 0; k-- {
			word &= word - 1
		}
		return wi<<6 | bits.TrailingZeros64(word)
	}
	return -1
}

type roundRobin struct{}

func (roundRobin) Name() string { return "round-robin" }

func (roundRobin) Pick(s *Scheduler, r *Request, d *Decision) bool {
	elig := s.Eligible(r)
	n := elig.Len()
	if n == 0 {
		return false
	}
	k := int((s.rr.Add(1) - 1) % uint64(n))
	d.Rule = RuleRoundRobin
	return pickFixed(s, r, nth(&elig, k), d)
}

type leastLoaded struct{}

func (leastLoaded) Name() string { return "least-loaded" }

func (leastLoaded) Pick(s *Scheduler, r *Request, d *Decision) bool {
	elig := s.Eligible(r)
	d.Rule = RuleLeastLoaded
	if !s.reserveMin(&elig, len(r.Chain), nil, false, d) {
		return false
	}
	// Reserved with every block novel; correct the report only.
	d.Cached = matchOf(s, r, d.Backend.Index)
	d.Phase = phaseOf(r, d.Cached)
	return true
}

type randomPolicy struct{}

func (randomPolicy) Name() string { return "random" }

func (randomPolicy) Pick(s *Scheduler, r *Request, d *Decision) bool {
	elig := s.Eligible(r)
	n := elig.Len()
	if n == 0 {
		return false
	}
	d.Rule = RuleRandom
	return pickFixed(s, r, nth(&elig, rand.IntN(n)), d)
}

// sessionHash sends a conversation (identified by its first user message)
// to the same backend with rendezvous hashing, so only the conversations of
// a backend that leaves move. Its choice is an affinity: a first turn's
// holds nothing yet and is bounded by load (consistent hashing with
// bounded loads: past the load bound, the conversation takes the next
// backend in its rendezvous order that has room); a follow-up's holds the
// conversation and gives way only to real overload (yields), to the next
// backend in that order.
type sessionHash struct{}

func (sessionHash) Name() string { return "session-hash" }

func (sessionHash) Pick(s *Scheduler, r *Request, d *Decision) bool {
	elig := s.Eligible(r)
	top, topScore := -1, uint64(0)
	elig.Each(func(i int) {
		if sc := mix64(r.Session ^ s.Backends[i].seed); top < 0 || sc > topScore {
			top, topScore = i, sc
		}
	})
	if top < 0 {
		return false
	}
	var room func(i int) bool
	if r.Followup {
		unix := s.unixNow(r)
		room = func(i int) bool { return !s.yields(i, r, &elig, nil, unix) }
	} else {
		cap := s.LoadCap(&elig)
		room = func(i int) bool { return s.active(i)+1 <= cap }
	}
	best, bestScore := -1, uint64(0)
	if room(top) {
		best = top
	} else {
		elig.Each(func(i int) {
			if sc := mix64(r.Session ^ s.Backends[i].seed); i != top && room(i) && (best < 0 || sc > bestScore) {
				best, bestScore = i, sc
			}
		})
	}
	d.Rule = RuleHash
	if best != top {
		s.overflowed(RuleHash, d)
		d.Rule = RuleOverflow
	}
	if best < 0 {
		// The least loaded is within the cap read above, unless loads
		// moved since: then the top choice, as without a bound.
		best = top
	}
	return pickFixed(s, r, best, d)
}

// mix64 is SplitMix64's finaliser: a fast, well-spread 64-bit mix.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
