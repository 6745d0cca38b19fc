package admit

import (
	"sync/atomic"

	"github.com/kvca/kvca/chain"
)

// classQueue is one priority class: its waiters in arrival order (the
// order of their deadlines, all waits being equally long) and, for
// fairness (rule_fair_queue.go), one FIFO per tenant with waiters.
type classQueue struct {
	list[Ticket, byClass]
	length  atomic.Int64 // n, for the metrics
	flows   map[uint64]*flow
	tenants list[flow, byFlow] // the tenants with waiters, in no particular order
	vt      int64              // virtual time: the tag of the latest grant
}

// flow is one tenant's waiters within a class, in arrival order.
type flow struct {
	list[Ticket, byTenant]
	key        uint64
	finish     int64 // the next tag of this tenant's requests
	prev, next *flow
}

// The holder lists: waits of at most half the timeout, and waits until
// just before it (holderWaitOf).
const (
	holdHalf uint8 = iota
	holdToTimeout
)

// enqueue queues t, which found no room it may take, unless the queue's
// own look under its lock finds room after all; bind is the holder wait
// rule's answer for t (binds).
func (a *Admitter) enqueue(t *Ticket, bind Rule) Verdict {
	bound := bind == RuleHolderWait
	a.mu.Lock()
	// Counted before looking again: a release either freed its slot
	// before this look, or sees waiting > 0 and fills after this unlock.
	a.waiting.Add(1)
	t.room = chain.Set{}
	closed := a.roomFor(t)
	onHolders := intersects(&t.room, &t.Preferred)
	if !t.room.Empty() && (!bound || onHolders || a.n >= a.size) {
		// Room after all, or the holders are full and so is the queue:
		// another backend serves it now rather than nobody.
		a.waiting.Add(-1)
		a.mu.Unlock()
		t.rule = RuleRoom
		switch {
		case bound && !onHolders:
			t.rule = RuleHolderOverflow
		case bind == RuleSpared && !onHolders:
			t.rule = RuleSpared
		}
		return Go
	}
	if bound && !t.room.Empty() {
		closed = RuleHolderWait
	}
	now := a.now()
	var ev wake
	if a.n >= a.size {
		v, r := a.victim(t)
		if v == nil {
			a.waiting.Add(-1)
			t.reason = ReasonQueueFull
			t.retryAfter = a.retryAfterLocked(now)
			t.state.Store(Dropped)
			t.rule = RuleQueueFull
			a.shedAt.Store(now)
			a.mu.Unlock()
			a.m.shed(t.Class, ReasonQueueFull)
			a.m.decided(RuleQueueFull)
			return Shed
		}
		ev = a.drop(v, ReasonPreempted, r, now)
	}
	a.decide(t, closed)
	a.push(t, bound, now)
	a.mu.Unlock()
	if ev.t != nil {
		a.deliver(&ev)
	}
	return Queued
}

// victim is the waiter a newcomer t takes the place of in a full queue,
// and the rule that chose it, or nil: one of a lower class (lower_class),
// else one of t's class from a tenant flooding it (flood).
func (a *Admitter) victim(t *Ticket) (*Ticket, Rule) {
	var lens [NumClasses]int
	for c := range a.q {
		lens[c] = a.q[c].n
	}
	if c, ok := lowerClassVictim(t.Class, lens, a.size, a.k); ok {
		return a.q[c].biggest().tail, RuleLowerClass
	}
	q := &a.q[t.Class]
	own := 0
	if f := q.flows[t.Tenant]; f != nil {
		own = f.n
	}
	if big := q.biggest(); big != nil && floods(big.n, own) {
		return big.tail, RuleFlood
	}
	return nil, RuleNone
}

// biggest is the tenant with the most waiters (of equals, the one
// waiting longest), or nil.
func (q *classQueue) biggest() *flow {
	var big *flow
	for f := q.tenants.head; f != nil; f = f.next {
		if big == nil || f.n > big.n || f.n == big.n && f.head.order < big.head.order {
			big = f
		}
	}
	return big
}

// push queues t; waiting already counts it.
func (a *Admitter) push(t *Ticket, bound bool, now int64) {
	a.sampleRate(now)
	t.enq = now
	t.deadline = now + a.timeout
	t.bound = bound
	t.reason, t.retryAfter = ReasonNone, 0
	q := &a.q[t.Class]
	q.pushBack(t)
	q.length.Store(int64(q.n))
	f := q.flows[t.Tenant]
	if f == nil {
		f = a.newFlow(t.Tenant)
		q.flows[t.Tenant] = f
		q.tenants.pushFront(f)
	}
	t.flow = f
	q.tag(f, t)
	a.order++
	t.order = a.order
	t.seq = a.order
	f.pushBack(t)
	next := t.deadline
	if bound {
		t.until = now + a.holderWaitOf(t)
		t.hold = holdHalf
		if t.until == t.deadline-1 {
			t.hold = holdToTimeout
		}
		insertByUntil(&a.hold[t.hold], t)
		next = min(next, t.until)
	}
	a.n++
	t.state.Store(Waiting)
	a.arm(next, now)
}

// remove takes a queued t out of every list.
func (a *Admitter) remove(t *Ticket) {
	q := &a.q[t.Class]
	q.list.remove(t)
	q.length.Store(int64(q.n))
	if q.n == 0 {
		a.passed[t.Class] = 0
	}
	f := t.flow
	f.remove(t)
	t.flow = nil
	if f.n == 0 {
		q.tenants.remove(f)
		delete(q.flows, f.key)
		a.free.pushFront(f)
	}
	if t.bound {
		a.unbind(t)
	}
	a.n--
	a.waiting.Add(-1)
}

func (a *Admitter) unbind(t *Ticket) {
	a.hold[t.hold].remove(t)
	t.bound = false
}

// insertByUntil places t on l after every waiter whose holder wait ends
// no later: from the tail, as waits of one length end in arrival order.
func insertByUntil(l *list[Ticket, byHold], t *Ticket) {
	p := l.tail
	for p != nil && p.until > t.until {
		p = p.pprev
	}
	l.insertAfter(p, t)
}

// firstHold is the bound waiter whose holder wait ends first, or nil.
func (a *Admitter) firstHold() *Ticket {
	var t *Ticket
	for i := range a.hold {
		if h := a.hold[i].head; h != nil && (t == nil || h.until < t.until) {
			t = h
		}
	}
	return t
}

func (a *Admitter) newFlow(key uint64) *flow {
	f := a.free.popFront()
	if f != nil {
		*f = flow{}
	} else {
		f = &flow{}
	}
	f.key = key
	return f
}
