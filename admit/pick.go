package admit

// pick chooses the waiter a free slot on b goes to, books the class it is
// taken from, and returns the rule that chose it. Strict priority across
// classes, except that a starved class is served next (the lowest such
// class first: starvation); within a class, by fair queuing across
// tenants (fair_queue). A waiter holding out for the holders of its
// prefix never lets a lower class take a slot it could use: it takes the
// slot, its holder wait ended (holder_turn). While the queue sheds, a
// tenant's turn goes to one of its waiters that would not be late on b,
// if it has one (stale_tenant, late). A class whose only tenant waiting
// has none passes its turn to the next class in order, and nil leaves the
// slot free for the next arrival. Classes the lane rules (high_reserve,
// max_prefill) or the high-priority pool close on b are passed over.
func (a *Admitter) pick(b int) (*Ticket, Rule) {
	if !a.healthy(b) {
		return nil, RuleNone
	}
	now := a.now()
	over := a.overloaded(now)
	late := func(t *Ticket) bool { return over && a.late(t, b, now) }
	others := a.slots[b].inflight.Load() - 1 // the slot to give is counted
	var skip func(*Ticket) bool
	if busiest := a.heavy(now, 1); busiest >= 0 {
		skip = func(t *Ticket) bool { return a.heldBack(t, busiest) }
	}
	passed := false                // a turn passed for lateness
	lower := a.poolOpen(Normal, 1) // classes below High may take the slot
	for c := Class(NumClasses - 1); c > High && lower; c-- {
		if starved(a.passed[c], a.k, a.q[c].n) && a.lane(b, c, others) == RuleNone {
			if t, _ := a.q[c].find(b, skip); t != nil {
				if g, r := a.book(c, t, b, now, late, RuleStarvation); g != nil {
					return g, r
				}
				passed = true
			}
		}
	}
	var held *Ticket
	heldClass := High
	for c := High; c < NumClasses; c++ {
		if a.lane(b, c, others) != RuleNone || c > High && !lower {
			break // closed for this class, so for every lower one
		}
		t, h := a.q[c].find(b, skip)
		if t != nil {
			if held != nil {
				if g, r := a.book(heldClass, held, b, now, late, RuleHolderTurn); g != nil {
					return g, r
				}
			}
			r := RuleFairQueue
			if !t.usable(b) {
				r = RuleHolderTurn // bound elsewhere, its turn came here
			}
			if g, r := a.book(c, t, b, now, late, r); g != nil {
				return g, r
			}
			passed = true
			held = nil // both late: the turn passes to the next class
			continue
		}
		if held == nil && h != nil {
			held, heldClass = h, c
		}
	}
	if passed {
		a.m.decided(RuleLate)
	}
	return nil, RuleNone
}

// book serves class c's turn, which find gave to t, and returns the
// waiter served and the rule that chose it (r, or stale_tenant when the
// turn went to another of t's tenant's waiters), or nil when the turn
// passes for lateness (classQueue.take).
func (a *Admitter) book(c Class, t *Ticket, b int, now int64, late func(*Ticket) bool, r Rule) (*Ticket, Rule) {
	stale := waitedHalf(now-t.enq, a.timeout) && !a.spared(t, now)
	g := a.q[c].take(t, b, stale, func(x *Ticket) int64 { return a.ttftOn(x, b, now) }, late)
	if g == nil {
		return nil, RuleNone
	}
	a.served(c)
	if g != t {
		r = RuleStaleTenant
	}
	return g, r
}
