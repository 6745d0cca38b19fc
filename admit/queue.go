package admit

import (
	"math/bits"
	"sync/atomic"
	"time"
)

func trailingZeros(w uint64) int { return bits.TrailingZeros64(w) }

// classQueue is one priority class: its waiters in arrival order (the
// order of their deadlines, all waits being equally long) and, for
// fairness, one FIFO per tenant with waiters.
//
// Tenants share the class by start-time fair queuing: each request gets a
// virtual start tag, its tenant's previous tag plus one (its cost), or the
// class's virtual time if that is later (a tenant that had nothing
// waiting), and the waiter with the smallest tag that can use the freed
// backend is served (the earlier arrival of equals), the class's virtual
// time advancing to its tag. Backlogged tenants are thus served one
// request each in turn, whatever they queue, and a tenant that starts
// waiting is served next rather than after a whole round of the others.
type classQueue struct {
	head, tail *Ticket
	n          int
	length     atomic.Int64 // n, for the metrics
	flows      map[uint64]*flow
	first      *flow // the tenants with waiters, in no particular order
	nflows     int
	vt         int64 // virtual time: the tag of the latest grant
}

// flow is one tenant's waiters within a class.
type flow struct {
	key        uint64
	n          int
	finish     int64 // the next tag of this tenant's requests
	head, tail *Ticket
	prev, next *flow
}

func (q *classQueue) join(f *flow) {
	f.prev, f.next = nil, q.first
	if q.first != nil {
		q.first.prev = f
	}
	q.first = f
	q.nflows++
}

func (q *classQueue) leave(f *flow) {
	if f.prev != nil {
		f.prev.next = f.next
	} else {
		q.first = f.next
	}
	if f.next != nil {
		f.next.prev = f.prev
	}
	f.prev, f.next = nil, nil
	q.nflows--
}

// tag gives t, arriving for tenant f, its virtual start.
func (q *classQueue) tag(f *flow, t *Ticket) {
	t.vstart = max(q.vt, f.finish)
	f.finish = t.vstart + 1
}

// find returns the waiter a free slot on b goes to within the class, or
// nil: the one with the smallest tag (of equal tags, the earlier arrival)
// among each tenant's first waiter that can use b. A waiter that could
// use b but waits for its holders elsewhere lets its own tenant's later
// requests go first, and nobody else: when another tenant's waiter would
// be served ahead of it, it is chosen instead and its holder wait ends.
// held is the best such holder-bound waiter of the class (by tag), which
// the caller gives b rather than let a lower class have it.
//
// A tenant none of whose waiters can use b keeps its small tags, so it is
// served first when a backend it can use frees. A tenant whose first
// waiter skip holds back (the tenant reserve; nil: none) is passed over
// the same way.
func (q *classQueue) find(b int, skip func(*Ticket) bool) (t, held *Ticket) {
	var best *Ticket
	// The best holder-bound candidates of the two best tenants by their
	// bound waiters, so that one of another tenant than best's remains.
	var h1, h2 *Ticket
	for f := q.first; f != nil; f = f.next {
		if skip != nil && skip(f.head) {
			continue
		}
		var bound *Ticket
		for w := f.head; w != nil; w = w.fnext {
			if !w.Eligible.Has(b) {
				continue
			}
			if w.usable(b) {
				if before(w, best) {
					best = w
				}
				break
			}
			if bound == nil {
				bound = w // the tenant's first waiter for b, bound elsewhere
			}
		}
		if bound != nil {
			if before(bound, h1) {
				h1, h2 = bound, h1
			} else if before(bound, h2) {
				h2 = bound
			}
		}
	}
	if best != nil {
		alt := h1
		if alt != nil && alt.flow == best.flow {
			alt = h2
		}
		if alt != nil && before(alt, best) {
			best = alt
		}
	}
	return best, h1
}

// before reports whether x comes before y (nil: never served) in fair
// queuing order: the smaller tag, of equal tags the earlier arrival.
func before(x, y *Ticket) bool {
	return y == nil || x.vstart < y.vstart || x.vstart == y.vstart && x.order < y.order
}

// take books the grant of b at the turn of t (find's choice) and returns
// the waiter served in that turn, one of t's tenant's: t, unless t is
// stale (it has waited half the queue timeout). A tenant whose oldest
// request has waited that long sends more than it is served, so its older
// requests would reach the client late or time out anyway: its newest
// waiter still waiting for b as the holder of its prefix (within its
// holder wait) is served instead, else, of those that can use b, the one
// that would see its first token soonest on b (ttft: its wait so far plus
// b's prefill of what b lacks of its prompt; of equals the newest), and
// the others are shed at their timeout. So the slot goes to a request that
// can still be answered fast, not to one that would recompute a long
// prompt after a long wait. Nor to a late one (late: while the queue
// sheds, its wait plus its prefill on b would pass the timeout, so it has
// waited past half the timeout): when every candidate is late, t is
// served while another tenant waits in the class, so no tenant loses its
// turn for being late; the only tenant waiting gets nil, and the slot
// stays free for the next arrival, which can still be served in time. The
// tags between move down one place, so the tenant's turns stay those of
// its waiters before, one fewer: only the tenant's own order changes.
func (q *classQueue) take(t *Ticket, b int, stale bool, ttft func(*Ticket) int64, late func(*Ticket) bool) *Ticket {
	if !stale {
		q.vt = max(q.vt, t.vstart)
		return t
	}
	var w, any *Ticket
	var anyT int64
	for x := t.flow.tail; ; x = x.fprev {
		if x.usable(b) && !late(x) {
			if x.bound {
				w = x // bound and usable: b holds its prefix
				break
			}
			if xt := ttft(x); any == nil || xt < anyT {
				any, anyT = x, xt
			}
		}
		if x == t {
			break
		}
	}
	if w == nil {
		w = any
	}
	if w == nil && q.nflows == 1 {
		return nil
	}
	q.vt = max(q.vt, t.vstart)
	if w == nil || w == t {
		return t
	}
	turn := t.vstart
	for x := t; x != w; x = x.fnext {
		x.vstart = x.fnext.vstart
	}
	w.vstart = turn
	return w
}

// biggest is the tenant with the most waiters (of equals, the one
// waiting longest), or nil.
func (q *classQueue) biggest() *flow {
	var big *flow
	for f := q.first; f != nil; f = f.next {
		if big == nil || f.n > big.n || f.n == big.n && f.head.order < big.head.order {
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
	if h := a.firstHold(); h != nil && (at == 0 || h.until < at) {
		at = h.until
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
		// Holder waits first: one that ends just before its timeout (see
		// holderWaitOf) takes a free slot rather than be shed when the
		// timer fires a little late, past both; unless the queue sheds
		// requests: it would then recompute its prefix past its timeout
		// in a slot that a cheaper request, or the next one, serves better,
		// so it is shed now, before a slot freed elsewhere until the timer
		// fires again could go to it.
		for n < len(ws) {
			t := a.firstHold()
			if t == nil || t.until > now {
				break
			}
			late := t.hold == holdToTimeout
			a.unbind(t)
			if late && a.overloaded(now) {
				ws[n] = a.drop(t, ReasonTimeout, now)
				n++
				continue
			}
			if a.heldBack(t, a.heavy(now, 0)) {
				continue
			}
			if b := a.freeFor(t); b >= 0 {
				ws[n] = a.grant(t, b)
				n++
			}
		}
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
	if !a.poolOpen(t.Class, 0) {
		return -1
	}
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
				if n := s.inflight.Load(); s.free() && a.laneOpen(i, t.Class, n) && (best < 0 || n < bestN) {
					best, bestN = i, n
				}
			}
		}
		if best < 0 || a.slots[best].tryAcquire() {
			return best
		}
	}
}
