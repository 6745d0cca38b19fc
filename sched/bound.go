package sched

import "github.com/kvca/kvca/chain"

// A conversation the client named (a session key) or continues (a
// Responses API thread) is bound to the backend that served it. The binding
// is what a first turn of a known session, or a sibling request fired
// before any answer arrived, has instead of a known prefix: whatever prefix
// the table knows of a bootstrap is one other conversations share too (a
// system prompt, tool definitions), while the binding knows this one. So a
// bound bootstrap goes to its backend, and so does a follow-up of which no
// eligible backend holds anything; a follow-up whose prefix the table
// knows goes by its prefix, and the binding only breaks ties.

// boundDecides reports whether the binding, not the prefix, places r, the
// longest eligible match being best blocks.
func boundDecides(r *Request, best int) bool {
	return r.Bound != 0 && (!r.Followup || best == 0)
}

// pickBound reserves r on its bound backend if that one is eligible; false
// if r has none or it is not eligible, and nothing is reserved.
func (s *Scheduler) pickBound(r *Request, d *Decision) bool {
	i := r.Bound - 1
	if i < 0 || i >= len(s.Backends) {
		return false
	}
	b := s.Backends[i]
	if !b.Healthy() || r.Exclude.Has(i) || (r.Allowed != nil && !r.Allowed.Has(i)) {
		return false
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
