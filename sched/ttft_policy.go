package sched

import (
	"time"

	"github.com/kvca/kvca/chain"
)

// ttftPolicy places every request where its predicted time to first token
// is smallest (predict): the queueing a backend's batch imposes, plus the
// prefill of the blocks it would compute and of those already waiting
// there. A follow-up stays with the holders of its longest known prefix
// (Phase 2) unless waiting there is predicted to cost more than
// recomputing elsewhere; a new conversation goes only where resident work
// stays within (1+ε)× the mean, unless the holders of its prompt take it
// as fast (promptHolders) or the bound would cost it more than the near
// margin (yieldBound). Predictions within a quarter of the best count as
// equal, and among equals the one holding the longest prefix, then the
// least resident, then the least busy, backend wins, in turns on a full
// tie.
type ttftPolicy struct{}

func (ttftPolicy) Name() string { return "ttft" }

// moveFactor is how many times slower than the best alternative a
// follow-up's holders must be predicted before it moves.
const moveFactor = 8

func (ttftPolicy) Pick(s *Scheduler, r *Request, d *Decision) bool {
	elig := s.Eligible(r)
	if elig.Empty() {
		return false
	}
	var match [chain.MaxBackends]int32
	best := prefixMatch(s, r, elig, &match)
	follow := r.Followup && best > 0
	switch {
	case !r.Followup:
		d.Phase = PhaseBootstrap
	case follow:
		d.Phase = PhaseFollowup
	default:
		d.Phase = PhaseFallback
	}
	var res [chain.MaxBackends]float32
	var holders chain.Set
	open := elig
	unix := s.unixNow(r)
	if follow {
		elig.Each(func(i int) {
			if int(match[i]) == best {
				holders.Add(i)
			}
		})
		s.noteGap(r, &holders, best)
		// The holders are an affinity holding the conversation: those
		// really overloaded give it up; with none left, prediction
		// places it among all.
		if holders = s.unyielding(&holders, r, &elig, &match, unix, d); holders.Empty() {
			s.overflowed(RulePrefix, d)
		}
		// Residency only breaks ties among a follow-up's candidates.
		tau := float64(s.residentWindow())
		elig.Each(func(i int) { res[i] = float32(s.Backends[i].model.residentAt(r.Now, tau)) })
	}
	if !follow {
		open = s.residentBound(&elig, r.Now, &res, 0)
		s.yieldBound(&elig, &open, r, &match, unix)
	}
	rule := loadRule(d, RuleTTFT)
	if !follow && best > 0 {
		if held := s.promptHolders(&elig, &open, r, &match, best, unix); held != open {
			// The holders hold the prompt: those really overloaded
			// give the conversation up.
			if held = s.unyielding(&held, r, &elig, &match, unix, d); held.Empty() {
				s.overflowed(RulePromptHolder, d)
				rule = RuleOverflow
			} else {
				open, rule = held, RulePromptHolder
			}
		}
	}
	n := len(r.Chain)
	for attempt := 0; ; attempt++ {
		cand := &open
		if follow {
			// Moving costs the recomputed blocks twice: this request
			// waits for them, and so does whoever queues behind them
			// on the new backend. And a move is a bet on predictions
			// that carry noise, paid for by the hit rate at once: the
			// holder must be predicted moveFactor times slower.
			ph, _ := s.minPred(&holders, r, &match, unix)
			pa, at := s.minPred(&elig, r, &match, unix)
			if lost := best - int(match[at]); lost > 0 {
				pa += int64(lost) * s.Backends[at].model.blockTime()
			}
			cand = &elig
			if !holders.Empty() && ph <= moveFactor*pa {
				cand = &holders
			}
		}
		pmin, at := s.minPred(cand, r, &match, unix)
		limit := pmin + pmin/nearDiv
		pick, ties := -1, 0
		var pickSt uint64
		var pickPred int64
		var pickRes float32
		var pickAct uint64
		var pickMatch int32
		eachIn(cand, func(i int) {
			b := s.Backends[i]
			st := b.state.Load()
			p := s.predict(b, st, n-int(match[i]), unix)
			if p > limit {
				return
			}
			act := st >> 32
			mi := match[i]
			switch {
			case pick < 0 || mi > pickMatch || (mi == pickMatch && (res[i] < pickRes || (res[i] == pickRes && act < pickAct))):
				pick, pickSt, pickPred, pickRes, pickAct, pickMatch, ties = i, st, p, res[i], act, mi, 1
			case mi == pickMatch && res[i] == pickRes && act == pickAct:
				ties++
			}
		})
		if pick < 0 {
			// Another request moved the load between minPred and this
			// pass: every prediction is now past the limit. Choose again.
			if attempt < 8 {
				continue
			}
			if at < 0 {
				return false
			}
			pick, pickSt, pickPred = at, s.Backends[at].state.Load(), pmin
		}
		if ties > 1 {
			k := int(s.ties[ties&15].Add(1) % uint64(ties))
			eachIn(cand, func(i int) {
				if k < 0 {
					return
				}
				b := s.Backends[i]
				st := b.state.Load()
				p := s.predict(b, st, n-int(match[i]), unix)
				if p <= limit && res[i] == pickRes && st>>32 == pickAct && match[i] == pickMatch {
					if k == 0 {
						pick, pickSt, pickPred = i, st, p
					}
					k--
				}
			})
		}
		b := s.Backends[pick]
		novel := n - int(match[pick])
		if b.state.CompareAndSwap(pickSt, pickSt+activeUnit+uint64(novel)) || attempt >= 8 {
			d.before = pickSt
			if attempt >= 8 {
				d.before = b.state.Add(activeUnit+uint64(novel)) - activeUnit - uint64(novel)
			}
			d.Backend = b
			d.Novel = novel
			d.Cached = n - novel
			d.Predicted = time.Duration(pickPred)
			d.Rule = rule
			if follow && holders.Has(pick) {
				d.Rule = RulePrefix
			} else if follow {
				d.Rule = loadRule(d, RuleTTFT)
				s.ttft.moves.Add(1)
			}
			return true
		}
	}
}

// yieldBound opens again the backends of elig of unknown batch capacity
// that the resident bound left out of open, when the best prediction in
// open is more than the near margin above the best in elig: the bound
// would then cost this first token more than it buys. Where a capacity is
// known the resident turns coming back will queue for its slots, which one
// request's prediction does not see, and the bound holds.
func (s *Scheduler) yieldBound(elig, open *chain.Set, r *Request, match *[chain.MaxBackends]int32, unix int64) {
	if *open == *elig {
		return
	}
	po, _ := s.minPred(open, r, match, unix)
	if pe, _ := s.minPred(elig, r, match, unix); po < 0 || po <= pe+pe/nearDiv {
		return
	}
	elig.Each(func(i int) {
		// Known as routing knows it: the flag's, the engine's queue, or
		// learned where the engine reports none (engineBatch).
		if _, c, _ := s.engineBatch(s.Backends[i], 0, unix); c == 0 {
			open.Add(i)
		}
	})
}

// promptHolders returns where a new conversation may go, open being the
// backends the resident bound leaves it: the holders of its longest known prefix
// (its system prompt, most often) if they are predicted about as fast as
// the best open backend (within the near margin) and the prefix is worth
// more than that margin (its recomputation on that open backend, at that
// backend's learned rate) or is at least half the request (rates learned
// from few answers, or from engines whose concurrent prefills do not
// queue behind each other, can put a block's time near zero); else open. Sending the conversation elsewhere
// would recompute the prompt for no gain in this request's first token,
// and spread the prompt over more backends, each new one a cold first
// turn; the prediction still sends it away once the holders are full.
// A short shared opening (a template's first block) is worth too little
// to override the bound.
func (s *Scheduler) promptHolders(elig, open *chain.Set, r *Request, match *[chain.MaxBackends]int32, best int, unix int64) chain.Set {
	var held chain.Set
	elig.Each(func(i int) {
		if int(match[i]) == best {
			held.Add(i)
		}
	})
	po, at := s.minPred(open, r, match, unix)
	if at < 0 {
		return held
	}
	// The prefix is worth what the best open backend would spend
	// recomputing it, at its own rate.
	worth := int64(best-int(match[at])) * s.Backends[at].model.blockTime()
	ph, _ := s.minPred(&held, r, match, unix)
	if ph <= po+po/nearDiv && (worth > po/nearDiv || 2*best >= len(r.Chain)) {
		return held
	}
	return *open
}

// minPred is the smallest prediction over set and where it is.
func (s *Scheduler) minPred(set *chain.Set, r *Request, match *[chain.MaxBackends]int32, unix int64) (int64, int) {
	best, at := int64(-1), -1
	n := len(r.Chain)
	eachIn(set, func(i int) {
		b := s.Backends[i]
		if p := s.predict(b, b.state.Load(), n-int(match[i]), unix); best < 0 || p < best {
			best, at = p, i
		}
	})
	return best, at
}

func eachIn(set *chain.Set, f func(i int)) {
	for wi, word := range set {
		for word != 0 {
			f(wi<<6 | trailingZeros(word))
			word &= word - 1
		}
	}
}
