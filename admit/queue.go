package admit

import (
	"math/bits"
	"sync/atomic"
	"time"
)

func trailingZeros(w uint64) int { return bits.TrailingZeros64(w) }

// classQueue is one priority class: its waiters in arrival order (the
// order of their deadlines, all waits being equally long) and, for
// fairness, one FIFO per tenant with waiters, served in turn.
type classQueue struct {
	head, tail *Ticket
	n          int
	length     atomic.Int64 // n, for the metrics
	flows      map[uint64]*flow
	// cur is the tenant whose turn it is; the ring runs through every
	// tenant with waiters, newcomers joining at the end of the round.
	cur    *flow
	nflows int
}

// flow is one tenant's waiters within a class.
type flow struct {
	key        uint64
	n          int
	head, tail *Ticket
	prev, next *flow
}

// join puts f at the end of the round (just before the tenant whose turn
// it is).
func (q *classQueue) join(f *flow) {
	if q.cur == nil {
		f.prev, f.next = f, f
		q.cur = f
	} else {
		f.prev, f.next = q.cur.prev, q.cur
		q.cur.prev.next = f
		q.cur.prev = f
	}
	q.nflows++
}

func (q *classQueue) leave(f *flow) {
	q.nflows--
	if q.nflows == 0 {
		q.cur = nil
	} else {
		f.prev.next = f.next
		f.next.prev = f.prev
		if q.cur == f {
			q.cur = f.next
		}
	}
	f.prev, f.next = nil, nil
}

// pick returns the first waiter that can use b of the first tenant in
// turn that has one, and passes the turn to the tenant after it. This is
// deficit round robin with equal quanta and a cost of one per request:
// tenants with waiters are served one request each in turn, so a tenant
// gets an equal share of the grants however many it queues. A tenant
// with no waiter that can use b keeps its turn for the next slot.
func (q *classQueue) pick(b int) *Ticket {
	f := q.cur
	for i := 0; i < q.nflows; i++ {
		for t := f.head; t != nil; t = t.fnext {
			if t.usable(b) {
				q.cur = f.next
				return t
			}
		}
		f = f.next
	}
	return nil
}

// biggest is the tenant with the most waiters (the first in turn of
// equals), or nil.
func (q *classQueue) biggest() *flow {
	var big *flow
	for i, f := 0, q.cur; i < q.nflows; i, f = i+1, f.next {
		if big == nil || f.n > big.n {
			big = f
		}
	}
	return big
}

// arm makes the timer fire by at (unix ns), if a timer runs.
func (a *Admitter) arm(at, now int64) {
	if a.timer == nil || a.closed || (a.timerAt != 0 && a.timerAt <= at) {
		return
	}
	a.timerAt = at
	a.timer.Reset(time.Duration(max(at-now, 0)))
}

func (a *Admitter) onTimer() {
	a.mu.Lock()
	a.timerAt = 0
	a.mu.Unlock()
	a.Sweep()
}

// next returns the earliest deadline or end of a holder wait, or 0.
func (a *Admitter) next() int64 {
	at := int64(0)
	for c := range a.q {
		if h := a.q[c].head; h != nil && (at == 0 || h.deadline < at) {
			at = h.deadline
		}
	}
	if a.phead != nil && (at == 0 || a.phead.until < at) {
		at = a.phead.until
	}
	return at
}

// Sweep sheds the waiters whose queue timeout has passed and lets those
// whose holder wait has ended take any eligible backend with room. The
// admitter's own timer calls it at each deadline; with Config.Clock set
// the caller does.
func (a *Admitter) Sweep() {
	if !a.limited {
		return
	}
	for {
		var ws [16]wake
		n := 0
		a.mu.Lock()
		now := a.now()
		for c := range a.q {
			for n < len(ws) {
				h := a.q[c].head
				if h == nil || h.deadline > now {
					break
				}
				ws[n] = a.drop(h, ReasonTimeout, now)
				n++
			}
		}
		for n < len(ws) && a.phead != nil && a.phead.until <= now {
			t := a.phead
			a.unbind(t)
			if b := a.freeFor(t); b >= 0 {
				ws[n] = a.grant(t, b)
				n++
			}
		}
		more := n == len(ws)
		if !more {
			if at := a.next(); at != 0 {
				a.arm(at, now)
			}
		}
		a.mu.Unlock()
		for i := 0; i < n; i++ {
			a.deliver(&ws[i])
		}
		if !more {
			return
		}
	}
}

// freeFor takes a free slot on the least busy backend t may use, or
// returns -1.
func (a *Admitter) freeFor(t *Ticket) int {
	for {
		best, bestN := -1, int32(0)
		for wi, word := range t.Eligible {
			for word != 0 {
				i := wi<<6 | trailingZeros(word)
				word &= word - 1
				if i >= len(a.slots) {
					continue
				}
				s := &a.slots[i]
				if n := s.inflight.Load(); s.free() && (best < 0 || n < bestN) {
					best, bestN = i, n
				}
			}
		}
		if best < 0 || a.slots[best].tryAcquire() {
			return best
		}
	}
}
