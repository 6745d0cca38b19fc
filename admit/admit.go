// Package admit holds overload at the edge: a concurrency limit per
// backend, one bounded queue for requests no eligible backend has room
// for, served by priority class (strict, with starvation protection) and
// fairly across tenants within a class, and slots released exactly once.
//
// The API never blocks, so an event loop can drive it: Admit either lets
// a request go (to be routed among the backends with room) or queues it;
// a queued request learns that it got a slot, or was shed, through its
// ticket's Wake callback, called from whichever goroutine freed the slot
// or ran the deadline timer.
//
// The package is a mechanism and a policy. The mechanism (slots.go,
// queue.go, list.go, wake.go, sweep.go, pick.go, room.go) counts slots,
// keeps the waiters, hands a freed slot on and wakes its waiter. The
// policy is small named rules, one to a rule_*.go file, each a pure
// decision tested alone; every decision a ticket gets names the rule
// that made it (Ticket.Rule, kvca_admission_decisions_total).
package admit

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// Admitter is the admission control of one server.
type Admitter struct {
	cfg        Config
	limited    bool
	now        func() int64
	timeout    int64
	holderWait int64
	maxPrefill time.Duration
	reserve    int32
	tenantRes  int32
	pool       int32
	k          int
	size       int
	seed       maphash.Seed
	slots      []backendSlots
	used       atomic.Int32 // slots ever configured
	// waiting counts queued tickets, and one being enqueued: a release
	// that sees it 0 need not look at the queue (see enqueue).
	waiting  atomic.Int64
	released atomic.Uint64
	m        *meters

	mu     sync.Mutex
	n      int
	q      [NumClasses]classQueue
	passed [NumClasses]int // grants to higher classes since the class was last served
	// The holder-bound waiters in order of the end of their holder wait:
	// those that wait at most half the timeout, and those that wait until
	// just before it (holderWaitOf). Two lists, so that each one's order
	// is mostly its arrival order and a push is one step.
	hold    [2]list[Ticket, byHold]
	free    list[flow, byFlow] // tenant FIFOs to reuse
	order   uint64             // arrivals so far
	rate    float64            // releases per second, smoothed
	rateAt  int64
	rateN   uint64
	timer   *time.Timer
	timerAt int64
	closed  bool
	// shedAt is when a waiter was last shed for its timeout or a full
	// queue: the queue is over capacity (see Sweep).
	shedAt atomic.Int64
	// load counts the slots held per tenant, in buckets of the tenant
	// key: enough to tell a tenant holding a small share from the
	// busiest one (spared), with neither a lock nor a map that the end
	// users a body names could grow. Two tenants may share a bucket and
	// count as one. held marks the buckets that may be non-zero, one bit
	// each, so that a look at the counts reads those only.
	load [tenantBuckets]atomic.Int32
	held [tenantBuckets / 64]atomic.Uint64
}

// SetBackends installs the backends in force, in Index order (a removed
// backend's slot holds it retired). A slot that changes backend gets the
// configured limit again; the caller reuses a slot only once the previous
// backend's requests have ended, so none of theirs is counted there.
func (a *Admitter) SetBackends(bs []*sched.Backend) {
	for i, b := range bs {
		s := &a.slots[i]
		if b.Retired() {
			a.m.dropBackend(b.Name)
		}
		if s.b.Swap(b) == b {
			continue
		}
		s.limit.Store(int32(a.cfg.MaxInflight))
		a.m.backend(s, b.Name)
		a.Refill(i)
	}
	if n := int32(len(bs)); n > a.used.Load() {
		a.used.Store(n)
	}
}

// Limited reports whether a limit is set; if not, the edge may skip the
// admitter altogether (its calls would return at once anyway).
func (a *Admitter) Limited() bool { return a != nil && a.limited }

// TenantKey turns a tenant's name (an API key's tenant or X-KVCA-Tenant)
// into the ticket's Tenant; an empty name is 0, the one tenant of every
// request that names none.
func (a *Admitter) TenantKey(name []byte) uint64 {
	if len(name) == 0 {
		return 0
	}
	return maphash.Bytes(a.seed, name) | 1
}

// TenantHash is the tenant key of a tenant known by a hash of its name
// (the end user a body names, which kvca keeps only hashed); 0 for none.
func TenantHash(h uint64) uint64 {
	if h == 0 {
		return 0
	}
	return h | 1
}

// Admit decides whether t may go now. Go: route among t.Room() and Take
// the chosen backend. Queued: wait for t.Wake. Shed: answer 429.
//
// Call it when the request is planned, again after a grant (Wake with
// State Granted), and again after a failed attempt once the failed
// backend has left t.Eligible (the slot held there is released then).
func (a *Admitter) Admit(t *Ticket) Verdict {
	if !a.limited {
		t.room = t.Eligible
		t.rule = RuleUnlimited
		return Go
	}
	return a.admit(t)
}

func (a *Admitter) admit(t *Ticket) Verdict {
	if h := t.Backend(); h >= 0 {
		if t.Eligible.Has(h) {
			// Held since a grant or a Take: the grant's rule stays.
			t.idle()
			t.room = chain.Set{}
			if !t.moved {
				a.roomFor(t)
			}
			t.room.Add(h)
			return Go
		}
		// An attempt on h failed and the request looks elsewhere.
		if old := t.slot.Swap(0); old != 0 {
			a.releaseOf(t, int(old-1))
		}
	}
	if t.Class >= NumClasses {
		t.Class = Normal
	}
	t.moved = false
	t.idle()
	t.room = chain.Set{}
	a.roomFor(t)
	bind := a.binds(t)
	if !t.room.Empty() && (bind != RuleHolderWait || intersects(&t.room, &t.Preferred)) {
		// Counted at its Take, once a slot is held.
		t.rule = RuleRoom
		if bind == RuleSpared && !intersects(&t.room, &t.Preferred) {
			t.rule = RuleSpared
		}
		return Go
	}
	// The queue looks again under its lock, and names the rule.
	return a.enqueue(t, bind)
}

// AdmitWait is Admit for a goroutine that may block: while t is queued it
// waits until t is granted (then Go, as Admit answers after a grant), shed
// (Shed), or done is closed (Left: t has been ended with Done). t.Wake
// must be nil; AdmitWait wakes itself, through a channel the ticket keeps
// for its next waits.
func (a *Admitter) AdmitWait(t *Ticket, done <-chan struct{}) Verdict {
	if !a.limited {
		return a.Admit(t)
	}
	if t.woken == nil {
		t.woken = make(chan uint64, 1)
	}
	for {
		v := a.Admit(t)
		if v != Queued {
			return v
		}
		for waiting := true; waiting; {
			select {
			case seq := <-t.woken:
				waiting = seq != t.Seq()
			case <-done:
				a.Done(t)
				return Left
			}
		}
		if t.State() == Dropped {
			return Shed
		}
	}
}

// Take makes t hold a slot on b, the backend routing chose among t.Room();
// false when another request took b's last slot first: release the
// routing's reservation and Admit again (after a false with a slot held
// elsewhere, Room shrinks to that slot's backend, so the loop ends).
func (a *Admitter) Take(t *Ticket, b int) bool {
	return !a.limited || a.take(t, b)
}

func (a *Admitter) take(t *Ticket, b int) bool {
	if t.Backend() != b {
		s := &a.slots[b]
		if !s.tryAcquire() {
			if !a.highPreempts(t) || !s.acquireHigh() {
				if t.Backend() >= 0 {
					t.moved = true
				}
				return false
			}
			if !t.fromQueue {
				t.rule = RuleHighPreempts
			}
		}
		if a.highPreempts(t) {
			s.high.Add(1)
		}
		a.charge(t)
		if old := t.slot.Swap(int32(b + 1)); old != 0 {
			a.releaseOf(t, int(old-1))
		}
	}
	t.moved = false
	if !t.counted {
		t.counted = true
		a.m.admitted(t)
		if !t.fromQueue {
			// A grant from the queue was counted as it was made.
			a.m.decided(t.rule)
		}
	}
	return true
}

// Done ends t's admission, whatever state it is in: a queued ticket
// leaves the queue at once (a client that left), and a held slot is
// released, exactly once however often Done is called, passing it to the
// next waiter that can use it. A grant racing with Done is not lost: it
// either comes before (and Done releases the granted slot) or never.
func (a *Admitter) Done(t *Ticket) {
	if a.limited {
		a.done(t)
	}
}

func (a *Admitter) done(t *Ticket) {
	st := t.state.Load()
	if st == Waiting {
		a.mu.Lock()
		if st = t.state.Load(); st == Waiting {
			a.remove(t)
		}
		a.mu.Unlock()
	}
	if (st == Waiting || st == Granted) && !t.counted {
		a.m.cancelled(t.Class)
	}
	if old := t.slot.Swap(0); old != 0 {
		a.releaseOf(t, int(old-1))
	}
	t.idle()
	t.moved, t.counted, t.fromQueue, t.bound = false, false, false, false
	t.reason, t.retryAfter = ReasonNone, 0
}

// Refill grants b's free slots to the waiters that can use them. Call it
// when b becomes eligible without a slot being released there (it turned
// healthy again, or was added): waiters are otherwise granted only when a
// slot is released.
func (a *Admitter) Refill(b int) {
	if a.limited && b >= 0 && b < len(a.slots) && a.waiting.Load() > 0 {
		a.fill(b)
	}
}

// Inflight returns the slots held on b.
func (a *Admitter) Inflight(b int) int { return int(a.slots[b].inflight.Load()) }

// Limit returns b's current limit (0: unlimited).
func (a *Admitter) Limit(b int) int {
	if !a.limited {
		return 0
	}
	return int(a.slots[b].limit.Load())
}

// Queued returns the number of waiters.
func (a *Admitter) Queued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// Close stops the deadline timer. Waiters stay; their owners end them.
func (a *Admitter) Close() {
	a.mu.Lock()
	a.closed = true
	if a.timer != nil {
		a.timer.Stop()
	}
	a.mu.Unlock()
}
