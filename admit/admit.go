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
package admit

import (
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// Defaults the command line offers.
const (
	DefaultQueueSize       = 1024
	DefaultQueueTimeout    = 10 * time.Second
	DefaultHolderWait      = 250 * time.Millisecond
	DefaultStarvationLimit = 8
	DefaultTenantReserve   = 2
)

// Config sets up an Admitter.
type Config struct {
	// Backends are the scheduler's backends, in Index order: admission
	// grants only healthy ones, and labels its metrics with their names.
	Backends []*sched.Backend
	// MaxInflight is each backend's concurrency limit; 0 is unlimited,
	// and then the admitter is bypassed (Admit, Take and Done return at
	// once and count nothing).
	MaxInflight int
	// QueueSize bounds the waiters; 0 with a limit means no queue: a
	// request no backend has room for is shed at once.
	QueueSize int
	// QueueTimeout is the longest a request waits; 0: DefaultQueueTimeout.
	QueueTimeout time.Duration
	// HolderWait is how long a request with preferred backends (the
	// holders of its prefix) waits for one of them before it may take any
	// eligible backend; 0: it never waits for them.
	HolderWait time.Duration
	// StarvationLimit is K in the starvation rule: a class that has
	// waiters is passed over by at most K grants to higher classes in a
	// row; 0: DefaultStarvationLimit.
	StarvationLimit int
	// EngineAware lets AdaptToEngine lower a backend's limit while its
	// engine reports a queue of its own.
	EngineAware bool
	// MaxPrefill bounds the prefill a request may find waiting ahead of it
	// on a backend: while kvca's requests sent there and not yet at their
	// first byte would take longer than this to prefill (at the backend's
	// learned rate), it takes no request but of class High; 0: no bound.
	// The edge calls PrefillDone as answers begin.
	MaxPrefill time.Duration
	// HighReserve is how many of each backend's MaxInflight slots only
	// class High may take: a lower class is granted a slot there only
	// while more than HighReserve stay free; 0: none.
	HighReserve int
	// TenantReserve is how many of the fleet's free slots the tenants that
	// are not spared (holding at least half the busiest tenant's slots)
	// may not take while the queue sheds and a spared tenant holds slots:
	// they wait for the spared tenants' next requests, which would
	// otherwise wait for a release behind the heavy tenants' waiters;
	// class High is never held back; 0: none.
	TenantReserve int
	// HighPool is how many of the fleet's free slots only class High may
	// take: a lower class is granted a slot only while more than HighPool
	// of the fleet's slots stay free, so that a high-priority request
	// under overload finds a slot at once instead of waiting for the
	// next release; 0: none.
	HighPool int
	// HighPreempts says that the engines preempt a running sequence of
	// lower priority for a high-priority one (SGLang's
	// --enable-priority-scheduling, with the priority in the request's
	// body): a class High request may then take a slot past a backend's
	// limit while fewer than the limit of class High requests hold slots
	// there, since the engine then runs a lower-class sequence it can set
	// aside for it.
	HighPreempts bool
	// Metrics receives the admission metrics; nil: none.
	Metrics *metrics.Set
	// Clock returns unix nanoseconds; nil: the real clock. With a Clock
	// no timer runs, and the caller drives deadlines with Sweep.
	Clock func() int64
}

// Verdict is Admit's answer.
type Verdict uint8

const (
	// Go: route now, among Ticket.Room, then Take the chosen backend.
	Go Verdict = iota
	// Queued: the ticket waits; its Wake is called once it leaves the
	// queue, granted or shed.
	Queued
	// Shed: answer 429 with Ticket.Reason and Ticket.RetryAfter.
	Shed
	// Left: AdmitWait's done closed while the ticket waited; it has been
	// ended (Done).
	Left
)

// ErrorType is the OpenAI error type of a shed request's 429 answer; its
// code is Reason.Code.
const ErrorType = "rate_limit_exceeded"

// Reason says why a request was shed.
type Reason uint8

const (
	ReasonNone      Reason = iota
	ReasonQueueFull        // the queue was full on arrival
	ReasonTimeout          // it waited --queue-timeout without a slot
	ReasonPreempted        // a higher class took its place in a full queue
	numReasons
)

var reasonCodes = [numReasons]string{"", "queue_full", "queue_timeout", "queue_preempted"}

// Code is the reason as the error's code and the shed metric's label.
func (r Reason) Code() string { return reasonCodes[r] }

// Message is the error message for the client.
func (r Reason) Message() string {
	switch r {
	case ReasonQueueFull:
		return "every backend is at its concurrency limit and the admission queue is full; retry later"
	case ReasonTimeout:
		return "the request waited in the admission queue for longer than the queue timeout; retry later"
	case ReasonPreempted:
		return "the request gave its place in the full admission queue to one of a higher priority class or of a tenant with fewer requests waiting; retry later"
	}
	return ""
}

// Ticket states.
const (
	Idle    uint32 = iota // not queued (admitted, done, or never queued)
	Waiting               // in the queue
	Granted               // left the queue with a slot
	Dropped               // left the queue shed (Reason says why)
)

// Ticket is one request's admission. The caller owns it (embed it in the
// request's state to spare an allocation), fills the exported fields
// before Admit, and calls Done once the request is over, whatever
// happened. Admit, Take and Done for one ticket are called by its owner
// only, one at a time; the queue's grants and timeouts may run on other
// goroutines meanwhile, and Done is safe against them.
type Ticket struct {
	Class  Class
	Tenant uint64 // Admitter.TenantKey of the request's tenant; 0: none
	// Eligible holds the backends that may serve the request: those
	// serving its model and not yet tried. Health may be left out (a
	// waiter is granted only healthy backends, and one that recovers can
	// serve it: Refill); sched.Scheduler.Eligible, which also leaves out
	// unhealthy backends, will do too.
	Eligible chain.Set
	// Preferred holds the backends it would rather wait for (the holders
	// of its longest known prefix); empty: none.
	Preferred chain.Set
	// HolderWait overrides Config.HolderWait for this request when > 0.
	HolderWait time.Duration
	// Blocks is the request's chain length, Held the blocks of it the
	// Preferred backends hold, Shared the most any Sharing backend holds
	// (some other prefix of it, such as a system prompt): what the request
	// would prefill on each backend, for the grant rule of a backlogged
	// tenant and late grants (Estimate fills them); Blocks 0: unknown.
	Blocks, Held, Shared int32
	Sharing              chain.Set
	// Wake is called once when the ticket leaves the queue (State then
	// says Granted or Dropped), with the Seq of that wait, from any
	// goroutine, never under the admitter's lock. It must not block: an
	// event loop posts the ticket to its own inbox. A wake whose seq is no
	// longer t.Seq() is stale (the request ended meanwhile).
	Wake func(t *Ticket, seq uint64)
	// Owner is the caller's, e.g. the connection the wake is for.
	Owner any

	// woken carries AdmitWait's wakes when Wake is nil.
	woken chan uint64

	state atomic.Uint32
	slot  atomic.Int32 // held backend + 1; 0: none
	seq   uint64
	// moved: a Take on another backend than the held one failed, so the
	// room shrinks to the held one and the next route cannot fail again.
	moved      bool
	counted    bool // admitted counted
	fromQueue  bool
	bound      bool   // waits for Preferred only
	hold       uint8  // which of Admitter.hold t is on while bound
	lb         uint16 // its tenant's bucket in Admitter.load while it holds a slot
	reason     Reason
	retryAfter int
	room       chain.Set
	enq        int64
	deadline   int64
	until      int64 // end of the holder wait
	waitNs     int64
	vstart     int64  // virtual start tag within the class (classQueue)
	order      uint64 // arrival order
	// Intrusive links: the class's arrival order, the tenant's FIFO, the
	// holder-bound waiters' arrival order.
	cprev, cnext *Ticket
	fprev, fnext *Ticket
	pprev, pnext *Ticket
	flow         *flow
}

// State is the ticket's state (Idle, Waiting, Granted, Dropped).
func (t *Ticket) State() uint32 { return t.state.Load() }

// Seq identifies the ticket's latest wait, unique across the admitter's
// tickets (so a wake that outlives its request, its ticket reused by a
// pooled request, is recognised as stale); Wake passes it.
func (t *Ticket) Seq() uint64 { return t.seq }

// Room holds the backends to route among after Go: the eligible ones with
// a free slot, and the one the ticket holds. Point sched.Request.Allowed
// at it (it is a subset of the eligible set, so of the model's backends).
func (t *Ticket) Room() *chain.Set { return &t.room }

// Reason says why the ticket was shed; read it (and RetryAfter) before
// Done, which clears them.
func (t *Ticket) Reason() Reason { return t.reason }

// RetryAfter is the Retry-After value (seconds) to answer a shed with.
func (t *Ticket) RetryAfter() int { return t.retryAfter }

// Backend returns the backend whose slot the ticket holds, or -1.
func (t *Ticket) Backend() int { return int(t.slot.Load()) - 1 }

// Waited is how long the ticket waited in the queue before its grant.
func (t *Ticket) Waited() time.Duration { return time.Duration(t.waitNs) }

func (t *Ticket) usable(b int) bool {
	return t.Eligible.Has(b) && (!t.bound || t.Preferred.Has(b))
}

// idle marks t not queued; most tickets never were, and a plain load
// spares them an atomic store.
func (t *Ticket) idle() {
	if t.state.Load() != Idle {
		t.state.Store(Idle)
	}
}

// healthy reports whether b may be granted.
func (a *Admitter) healthy(b int) bool { return a.slots[b].healthy() }

// backendSlots is one backend's limit, padded to its own cache line: every
// loop touches these words on every request.
type backendSlots struct {
	inflight atomic.Int32
	limit    atomic.Int32
	high     atomic.Int32                  // slots held by class High (Config.HighPreempts only)
	b        atomic.Pointer[sched.Backend] // nil: a slot never configured
	_        [44]byte
}

func (s *backendSlots) healthy() bool {
	b := s.b.Load()
	return b != nil && b.Healthy()
}

// free reports whether the backend is healthy and has a free slot.
func (s *backendSlots) free() bool {
	return s.inflight.Load() < s.limit.Load() && s.healthy()
}

func (s *backendSlots) tryAcquire() bool {
	for {
		n := s.inflight.Load()
		if n >= s.limit.Load() {
			return false
		}
		if s.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// preemptible reports whether a class High request may take a slot on
// the healthy backend past its limit (Config.HighPreempts): fewer than
// the limit of its slots are High, so the engine runs a lower-class
// sequence it can preempt for this one, and none of kvca's requests there
// is still before its first token. The engine preempts its latest
// arrival of the lowest priority, and a sequence preempted before its
// first token waits for a slot again: its first token would pay for this
// one's. One preempted while it streams only pauses.
func (s *backendSlots) preemptible() bool {
	return s.high.Load() < s.limit.Load() && s.healthy() && s.b.Load().PendingPrefillTime() == 0
}

// acquireHigh takes a slot past the limit for a class High request while
// fewer than the limit are High. Not preemptible's prefill test: the
// routing that chose the backend has booked its own prefill there. Two
// High requests racing may both pass; the second then waits in the
// engine's queue, at its head.
func (s *backendSlots) acquireHigh() bool {
	if s.high.Load() >= s.limit.Load() {
		return false
	}
	s.inflight.Add(1)
	return true
}

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
	hold    [2]holdList
	free    *flow
	order   uint64  // arrivals so far
	rate    float64 // releases per second, smoothed
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

const tenantBuckets = 4096

func bucket(tenant uint64) uint16 { return uint16(tenant>>1) & (tenantBuckets - 1) } // bit 0 is set in every key

// charge counts in load the slot t is about to hold, and marks its
// bucket when it was empty and unmarked.
func (a *Admitter) charge(t *Ticket) {
	t.lb = bucket(t.Tenant)
	if a.load[t.lb].Add(1) == 1 {
		if w, bit := &a.held[t.lb>>6], uint64(1)<<(t.lb&63); w.Load()&bit == 0 {
			w.Or(bit)
		}
	}
}

// discharge uncounts t's slot; its bucket stays marked until spread
// finds it empty, so that a tenant taking and releasing one slot at a
// time pays one atomic add for each.
func (a *Admitter) discharge(t *Ticket) { a.load[t.lb].Add(-1) }

// spread returns the fewest slots a tenant holding any holds and the
// most any holds (0, 0: none holds any). It unmarks the empty buckets
// it meets, and marks one again if a charge came in between: a charge
// that saw the mark before it went is then seen here, so a bucket
// holding slots keeps its mark.
func (a *Admitter) spread() (lo, hi int32) {
	for wi := range a.held {
		for w := a.held[wi].Load(); w != 0; w &= w - 1 {
			i := wi<<6 | trailingZeros(w)
			n := a.load[i].Load()
			if n <= 0 {
				bit := uint64(1) << (i & 63)
				a.held[wi].And(^bit)
				if n = a.load[i].Load(); n <= 0 {
					continue
				}
				a.held[wi].Or(bit)
			}
			if lo == 0 || n < lo {
				lo = n
			}
			hi = max(hi, n)
		}
	}
	return lo, hi
}

// spared reports whether the queue's bets that shed are not made for t:
// while the queue sheds (overloaded), t's tenant holds fewer than half
// the slots that the busiest tenant holds. It sends less than another
// tenant is served, so its holders are busy with that tenant's requests
// as much as with its own, and a wait for them, a long holder wait that
// ends in a shed, or its newest request served before its oldest would
// shed its requests to the benefit of a tenant over its share. A tenant
// alone, or one of equals, is never spared.
func (a *Admitter) spared(t *Ticket, now int64) bool {
	if !a.overloaded(now) {
		return false
	}
	_, hi := a.spread()
	return hi > 2*a.load[bucket(t.Tenant)].Load()
}

// overloaded reports whether a waiter was shed within the last second.
func (a *Admitter) overloaded(now int64) bool {
	at := a.shedAt.Load()
	return at != 0 && now-at < int64(time.Second)
}

// heavy returns, while the tenant reserve applies, the slots the busiest
// tenant holds; -1: it does not apply. It applies while the queue sheds,
// at most Config.TenantReserve slots of the fleet are free (given counts
// one being handed on, already held), and a tenant holding slots is
// spared (holds fewer than half the busiest's).
func (a *Admitter) heavy(now int64, given int32) int32 {
	if a.tenantRes <= 0 || !a.overloaded(now) {
		return -1
	}
	lo, hi := a.spread()
	if lo == 0 || 2*lo >= hi {
		return -1
	}
	if a.fleetFree(given) > a.tenantRes {
		return -1
	}
	return hi
}

// fleetFree counts the free slots of the healthy backends, and given:
// one being handed on, still counted as held.
func (a *Admitter) fleetFree(given int32) int32 {
	free := given
	for i := range int(a.used.Load()) {
		s := &a.slots[i]
		if s.healthy() {
			free += max(s.limit.Load()-s.inflight.Load(), 0)
		}
	}
	return free
}

// poolOpen reports whether a request of class c may take one of the
// fleet's free slots (given as in fleetFree): c is High, or more than
// the high-priority pool (Config.HighPool) are free.
func (a *Admitter) poolOpen(c Class, given int32) bool {
	return c == High || a.pool <= 0 || a.fleetFree(given) > a.pool
}

// heldBack reports whether the tenant reserve keeps t from a free slot:
// t's tenant is not spared beside the busiest one, holding busiest slots
// (heavy's answer), and t is not class High.
func (a *Admitter) heldBack(t *Ticket, busiest int32) bool {
	return busiest >= 0 && t.Class != High && 2*a.load[bucket(t.Tenant)].Load() >= busiest
}

// New builds an admitter.
func New(cfg Config) (*Admitter, error) {
	if len(cfg.Backends) == 0 || len(cfg.Backends) > chain.MaxBackends {
		return nil, errors.New("admit: backends must be between 1 and the maximum number of backends")
	}
	if cfg.MaxInflight < 0 || cfg.QueueSize < 0 || cfg.QueueTimeout < 0 || cfg.HolderWait < 0 || cfg.StarvationLimit < 0 {
		return nil, errors.New("admit: limits, sizes and durations must not be negative")
	}
	if cfg.MaxInflight > 1<<30 {
		return nil, errors.New("admit: max in-flight per backend is too large")
	}
	if cfg.HighReserve < 0 || cfg.MaxInflight > 0 && cfg.HighReserve >= cfg.MaxInflight {
		return nil, errors.New("admit: the high-priority reserve must be below the in-flight limit")
	}
	if cfg.TenantReserve < 0 || cfg.HighPool < 0 {
		return nil, errors.New("admit: the tenant reserve and the high-priority pool must not be negative")
	}
	if cfg.MaxInflight > 0 && cfg.HighPool >= cfg.MaxInflight*len(cfg.Backends) {
		return nil, errors.New("admit: the high-priority pool must be below the fleet's slots (backends times the in-flight limit)")
	}
	if cfg.QueueTimeout == 0 {
		cfg.QueueTimeout = DefaultQueueTimeout
	}
	if cfg.StarvationLimit == 0 {
		cfg.StarvationLimit = DefaultStarvationLimit
	}
	a := &Admitter{
		cfg:        cfg,
		limited:    cfg.MaxInflight > 0,
		now:        cfg.Clock,
		timeout:    int64(cfg.QueueTimeout),
		holderWait: int64(cfg.HolderWait),
		maxPrefill: cfg.MaxPrefill,
		reserve:    int32(cfg.HighReserve),
		tenantRes:  int32(cfg.TenantReserve),
		pool:       int32(cfg.HighPool),
		k:          cfg.StarvationLimit,
		size:       cfg.QueueSize,
		seed:       maphash.MakeSeed(),
		// Every slot exists from the start, so backends added later
		// (SetBackends) need no resizing under traffic.
		slots: make([]backendSlots, chain.MaxBackends),
	}
	for i, b := range cfg.Backends {
		if b.Index != i {
			return nil, errors.New("admit: backends must be in index order")
		}
	}
	for c := range a.q {
		a.q[c].flows = map[uint64]*flow{}
	}
	if a.now == nil {
		a.now = func() int64 { return time.Now().UnixNano() }
		if a.limited {
			a.timer = time.AfterFunc(time.Hour, a.onTimer)
			a.timer.Stop()
		}
	}
	if cfg.Metrics != nil {
		a.m = newMeters(a, cfg.Metrics)
	}
	a.SetBackends(cfg.Backends)
	return a, nil
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
		return Go
	}
	return a.admit(t)
}

func (a *Admitter) admit(t *Ticket) Verdict {
	if h := t.Backend(); h >= 0 {
		if t.Eligible.Has(h) {
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
	bound := a.binds(t)
	if !t.room.Empty() && (!bound || intersects(&t.room, &t.Preferred)) {
		return Go
	}
	return a.enqueue(t, bound)
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
		if !a.acquire(t, b) {
			if t.Backend() >= 0 {
				t.moved = true
			}
			return false
		}
		if a.highPreempts(t) {
			a.slots[b].high.Add(1)
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

// laneOpen reports whether b takes a request of class c in a slot while
// others of its slots are held: c is High, or the slots left free would
// be more than the high-priority reserve (Config.HighReserve), and the
// prefill of kvca's requests on b not yet at their first byte would take
// at most the prefill bound (Config.MaxPrefill). A backend with nothing
// waiting to prefill is open to the bound, so a request larger than the
// bound still goes.
func (a *Admitter) laneOpen(b int, c Class, others int32) bool {
	if c == High {
		return true
	}
	if a.reserve > 0 {
		// A limit an engine's queue lowered keeps one slot for every class.
		limit := a.slots[b].limit.Load()
		if others+min(a.reserve, limit-1) >= limit {
			return false
		}
	}
	if a.maxPrefill <= 0 {
		return true
	}
	be := a.slots[b].b.Load()
	return be == nil || be.PendingPrefillTime() <= a.maxPrefill
}

// PrefillDone tells the admitter that a request on b reached its first
// byte (its prefill is done): with a prefill bound, b may have room again
// for the waiters it held back.
func (a *Admitter) PrefillDone(b int) {
	if a.maxPrefill > 0 && a.limited && b >= 0 && b < len(a.slots) && a.waiting.Load() > 0 {
		// One grant per prefill done: a granted request reserves its own
		// prefill only once routed, so granting every free slot at once
		// would overshoot the bound.
		a.fillUpTo(b, 1)
	}
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

// roomFor adds to t's room the eligible backends with a free slot it may
// take, none while the tenant reserve holds it back (no clock read
// without a reserve).
func (a *Admitter) roomFor(t *Ticket) {
	if a.tenantRes == 0 || !a.heldBack(t, a.heavy(a.now(), 0)) {
		a.addRoom(&t.Eligible, &t.room, t.Class)
	}
}

func (a *Admitter) addRoom(elig, room *chain.Set, c Class) {
	if !a.poolOpen(c, 0) {
		return
	}
	for wi, word := range elig {
		for word != 0 {
			i := wi<<6 | trailingZeros(word)
			word &= word - 1
			if i < len(a.slots) {
				s := &a.slots[i]
				if s.free() && a.laneOpen(i, c, s.inflight.Load()) || c == High && a.cfg.HighPreempts && s.preemptible() {
					room.Add(i)
				}
			}
		}
	}
}

// binds reports whether t should wait for its preferred backends: it
// has a holder wait, one of them is eligible and healthy, and t is not
// spared.
func (a *Admitter) binds(t *Ticket) bool {
	if a.holderWaitOf(t) <= 0 {
		return false
	}
	for wi := range t.Preferred {
		for word := t.Preferred[wi] & t.Eligible[wi]; word != 0; word &= word - 1 {
			if i := wi<<6 | trailingZeros(word); i < len(a.slots) && a.healthy(i) {
				return !a.spared(t, a.now())
			}
		}
	}
	return false
}

// holderWaitOf is t's holder wait, at most half the queue timeout: a
// request whose holders stay full then still has the rest of its wait to
// be granted any backend, instead of being shed with other backends
// freeing slots meanwhile. Unless leaving its holders would cost it more
// than that half in prefill (it would recompute what they hold): then its
// first token would come later elsewhere, after half its wait, than on a
// holder at the end of it, so it waits for them until just before its
// timeout, and only then takes another backend's free slot if one has
// room and the queue is not shedding (Sweep; else it is shed at the
// timeout). A high-priority request does not wait for its holders: it is
// served first wherever a slot frees, and under load the first free slot
// anywhere comes sooner than one on its holders (one backend frees a slot
// a batch's worth of times less often than the fleet), while a wait for
// them could shed it.
func (a *Admitter) holderWaitOf(t *Ticket) int64 {
	if t.Class == High {
		return 0
	}
	w := a.holderWait
	if t.HolderWait > 0 {
		w = int64(t.HolderWait)
	}
	if w > 0 && a.timeout > 1 && a.leaving(t) > a.timeout/2 {
		return a.timeout - 1
	}
	return min(w, a.timeout/2)
}

// leaving is what t's first token would lose by going elsewhere than its
// holders: the prefill of the blocks they hold, at the fastest holder's
// learned rate.
func (a *Admitter) leaving(t *Ticket) int64 {
	if t.Held <= 0 {
		return 0
	}
	cost := int64(-1)
	t.Preferred.Each(func(b int) {
		if b >= len(a.slots) {
			return
		}
		if be := a.slots[b].b.Load(); be != nil {
			c := int64(be.PrefillTime(int(t.Held)) - be.PrefillTime(0))
			if cost < 0 || c < cost {
				cost = c
			}
		}
	})
	return max(cost, 0)
}

func intersects(x, y *chain.Set) bool {
	return x[0]&y[0]|x[1]&y[1]|x[2]&y[2]|x[3]&y[3] != 0
}

// highPreempts reports whether t is class High with HighPreempts: its
// slots count in backendSlots.high.
func (a *Admitter) highPreempts(t *Ticket) bool { return t.Class == High && a.cfg.HighPreempts }

// acquire takes a slot on b for t: a free one, or, for class High with
// HighPreempts, one past the limit where the engine can preempt for it.
func (a *Admitter) acquire(t *Ticket, b int) bool {
	s := &a.slots[b]
	return s.tryAcquire() || a.highPreempts(t) && s.acquireHigh()
}

// releaseOf gives back t's slot on b.
func (a *Admitter) releaseOf(t *Ticket, b int) {
	a.discharge(t)
	if a.highPreempts(t) {
		a.slots[b].high.Add(-1)
	}
	a.release(b)
}

// release gives back one slot on b: handed straight to the next waiter
// that can use it, so a newcomer cannot overtake the queue, or freed.
func (a *Admitter) release(b int) {
	a.released.Add(1)
	s := &a.slots[b]
	if a.waiting.Load() > 0 {
		a.mu.Lock()
		// With a lowered limit the slot may be one too many to pass on.
		if s.inflight.Load() <= s.limit.Load() {
			if t := a.pick(b); t != nil {
				w := a.grant(t, b)
				a.mu.Unlock()
				a.deliver(&w)
				return
			}
		}
		a.mu.Unlock()
	}
	s.inflight.Add(-1)
	// An enqueue that did not see this slot free has made waiting
	// non-zero before it looked (enqueue), so this sees it.
	if a.waiting.Load() > 0 {
		a.fill(b)
	}
	if a.pool > 0 && a.waiting.Load() > 0 {
		a.fillPool(b)
	}
}

// fillPool offers the free slots of the backends other than b to the
// waiters once the slot freed on b has opened the high-priority pool:
// a waiter that may not use b may use one of them, kept free until then.
// Under load few slots are free, so this looks at few backends.
func (a *Admitter) fillPool(b int) {
	if a.fleetFree(0) <= a.pool {
		return
	}
	for i := range int(a.used.Load()) {
		if s := &a.slots[i]; i != b && s.healthy() && s.free() {
			a.fill(i)
		}
	}
}

// fill grants b's free slots to waiters that can use them.
func (a *Admitter) fill(b int) { a.fillUpTo(b, -1) }

// fillUpTo is fill with at most n grants (n < 0: no limit).
func (a *Admitter) fillUpTo(b, n int) {
	for ; n != 0; n-- {
		a.mu.Lock()
		if a.n == 0 || !a.slots[b].tryAcquire() {
			a.mu.Unlock()
			return
		}
		t := a.pick(b)
		if t == nil {
			// Nobody waits for b; an enqueue after this unlock sees the
			// slot free.
			a.slots[b].inflight.Add(-1)
			a.mu.Unlock()
			return
		}
		w := a.grant(t, b)
		a.mu.Unlock()
		a.deliver(&w)
	}
}

// wake is a queue departure to announce once the lock is released.
type wake struct {
	t      *Ticket
	fn     func(*Ticket, uint64)
	ch     chan uint64
	seq    uint64
	class  Class
	reason Reason // ReasonNone: granted
	waited int64
}

func (a *Admitter) deliver(w *wake) {
	if w.reason == ReasonNone {
		a.m.granted(w.class, w.waited)
	} else {
		a.m.shed(w.class, w.reason)
	}
	if w.fn != nil {
		w.fn(w.t, w.seq)
	} else if w.ch != nil {
		// The channel holds one wake. One still unread there may be
		// stale (its wait ended with the client leaving), and it must
		// not keep this one out: wait sequences only grow, so the
		// larger of the two stays, and AdmitWait skips a stale one.
		seq := w.seq
		for {
			select {
			case w.ch <- seq:
				return
			default:
			}
			select {
			case old := <-w.ch:
				seq = max(seq, old)
			default:
			}
		}
	}
}

// grant gives t a slot on b, already counted in b's in-flight slots.
func (a *Admitter) grant(t *Ticket, b int) wake {
	now := a.now()
	a.remove(t)
	if a.highPreempts(t) {
		a.slots[b].high.Add(1)
	}
	a.charge(t)
	t.slot.Store(int32(b + 1))
	t.fromQueue = true
	t.waitNs = now - t.enq
	w := wake{t: t, fn: t.Wake, ch: t.woken, seq: t.seq, class: t.Class, waited: t.waitNs}
	t.state.Store(Granted)
	return w
}

// drop sheds a queued t for r.
func (a *Admitter) drop(t *Ticket, r Reason, now int64) wake {
	if r == ReasonTimeout || r == ReasonQueueFull {
		a.shedAt.Store(now)
	}
	a.remove(t)
	t.reason = r
	t.retryAfter = a.retryAfterLocked(now)
	w := wake{t: t, fn: t.Wake, ch: t.woken, seq: t.seq, class: t.Class, reason: r}
	t.state.Store(Dropped)
	return w
}

func (a *Admitter) enqueue(t *Ticket, bound bool) Verdict {
	a.mu.Lock()
	// Counted before looking again: a release either freed its slot
	// before this look, or sees waiting > 0 and fills after this unlock.
	a.waiting.Add(1)
	t.room = chain.Set{}
	a.roomFor(t)
	if !t.room.Empty() && (!bound || intersects(&t.room, &t.Preferred) || a.n >= a.size) {
		// Room after all, or the holders are full and so is the queue:
		// another backend serves it now rather than nobody.
		a.waiting.Add(-1)
		a.mu.Unlock()
		return Go
	}
	now := a.now()
	var ev wake
	if a.n >= a.size {
		v := a.victim(t)
		if v == nil {
			a.waiting.Add(-1)
			t.reason = ReasonQueueFull
			t.retryAfter = a.retryAfterLocked(now)
			t.state.Store(Dropped)
			a.shedAt.Store(now)
			a.mu.Unlock()
			a.m.shed(t.Class, ReasonQueueFull)
			return Shed
		}
		ev = a.drop(v, ReasonPreempted, now)
	}
	a.push(t, bound, now)
	a.mu.Unlock()
	if ev.t != nil {
		a.deliver(&ev)
	}
	return Queued
}

// victim is the waiter a newcomer t takes the place of in a full queue,
// or nil: from the lowest class below t's that holds more than its
// reserve of places (QueueSize/(StarvationLimit+1)), the youngest of its
// tenant with the most waiters; else, within t's class, the youngest of the
// tenant with the most waiters if that tenant has at least two more than
// t's. So a tenant that floods the queue loses its own places to the
// others' newcomers, not theirs.
func (a *Admitter) victim(t *Ticket) *Ticket {
	for l := Class(NumClasses - 1); l > t.Class; l-- {
		if a.q[l].n <= a.size/(a.k+1) {
			continue // its reserve: starvation protection needs waiters
		}
		if big := a.q[l].biggest(); big != nil {
			return big.tail
		}
	}
	q := &a.q[t.Class]
	own := 0
	if f := q.flows[t.Tenant]; f != nil {
		own = f.n
	}
	if big := q.biggest(); big != nil && big.n > own+1 {
		return big.tail
	}
	return nil
}

// push queues t; waiting already counts it.
func (a *Admitter) push(t *Ticket, bound bool, now int64) {
	a.sampleRate(now)
	t.enq = now
	t.deadline = now + a.timeout
	t.bound = bound
	t.reason, t.retryAfter = ReasonNone, 0
	q := &a.q[t.Class]
	t.cprev, t.cnext = q.tail, nil
	if q.tail != nil {
		q.tail.cnext = t
	} else {
		q.head = t
	}
	q.tail = t
	q.n++
	q.length.Store(int64(q.n))
	f := q.flows[t.Tenant]
	if f == nil {
		f = a.newFlow(t.Tenant)
		q.flows[t.Tenant] = f
		q.join(f)
	}
	t.flow = f
	q.tag(f, t)
	a.order++
	t.order = a.order
	t.seq = a.order
	t.fprev, t.fnext = f.tail, nil
	if f.tail != nil {
		f.tail.fnext = t
	} else {
		f.head = t
	}
	f.tail = t
	f.n++
	next := t.deadline
	if bound {
		t.until = now + a.holderWaitOf(t)
		t.hold = holdHalf
		if t.until == t.deadline-1 {
			t.hold = holdToTimeout
		}
		a.hold[t.hold].insert(t)
		next = min(next, t.until)
	}
	a.n++
	t.state.Store(Waiting)
	a.arm(next, now)
}

// remove takes a queued t out of every list.
func (a *Admitter) remove(t *Ticket) {
	q := &a.q[t.Class]
	if t.cprev != nil {
		t.cprev.cnext = t.cnext
	} else {
		q.head = t.cnext
	}
	if t.cnext != nil {
		t.cnext.cprev = t.cprev
	} else {
		q.tail = t.cprev
	}
	t.cprev, t.cnext = nil, nil
	q.n--
	q.length.Store(int64(q.n))
	if q.n == 0 {
		a.passed[t.Class] = 0
	}
	f := t.flow
	if t.fprev != nil {
		t.fprev.fnext = t.fnext
	} else {
		f.head = t.fnext
	}
	if t.fnext != nil {
		t.fnext.fprev = t.fprev
	} else {
		f.tail = t.fprev
	}
	t.fprev, t.fnext, t.flow = nil, nil, nil
	f.n--
	if f.head == nil {
		q.leave(f)
		delete(q.flows, f.key)
		f.next = a.free
		a.free = f
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

// The holder lists: waits of at most half the timeout, and waits until
// just before it (holderWaitOf).
const (
	holdHalf uint8 = iota
	holdToTimeout
)

// holdList is holder-bound waiters in order of the end of their holder
// wait (Ticket.until).
type holdList struct{ head, tail *Ticket }

// insert places t after every waiter whose holder wait ends no later:
// from the tail, as waits of one length end in arrival order.
func (l *holdList) insert(t *Ticket) {
	p := l.tail
	for p != nil && p.until > t.until {
		p = p.pprev
	}
	t.pprev = p
	if p != nil {
		t.pnext, p.pnext = p.pnext, t
	} else {
		t.pnext, l.head = l.head, t
	}
	if t.pnext != nil {
		t.pnext.pprev = t
	} else {
		l.tail = t
	}
}

func (l *holdList) remove(t *Ticket) {
	if t.pprev != nil {
		t.pprev.pnext = t.pnext
	} else {
		l.head = t.pnext
	}
	if t.pnext != nil {
		t.pnext.pprev = t.pprev
	} else {
		l.tail = t.pprev
	}
	t.pprev, t.pnext = nil, nil
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
	f := a.free
	if f != nil {
		a.free = f.next
		*f = flow{}
	} else {
		f = &flow{}
	}
	f.key = key
	return f
}

// pick chooses the waiter a free slot on b goes to, and books the class
// it is taken from. Strict priority across classes, except that a class
// passed over StarvationLimit times in a row while it waited is served
// next (the lowest such class first); within a class, by fair queuing
// across tenants (classQueue.find). A waiter holding out for the holders
// of its prefix never lets a lower class take a slot it could use: it
// takes the slot, its holder wait ended. While the queue sheds, a tenant's
// turn goes to one of its waiters that would not be late on b, if it has
// one (classQueue.take). A class whose only tenant waiting has none
// passes its turn to the next class in order, and nil leaves the slot
// free for the next arrival.
func (a *Admitter) pick(b int) *Ticket {
	if !a.healthy(b) {
		return nil
	}
	now := a.now()
	over := a.overloaded(now)
	late := func(t *Ticket) bool { return over && a.late(t, b, now) }
	others := a.slots[b].inflight.Load() - 1 // the slot to give is counted
	var skip func(*Ticket) bool
	if busiest := a.heavy(now, 1); busiest >= 0 {
		skip = func(t *Ticket) bool { return a.heldBack(t, busiest) }
	}
	lower := a.poolOpen(Normal, 1) // classes below High may take the slot
	for c := Class(NumClasses - 1); c > High && lower; c-- {
		if a.passed[c] >= a.k && a.q[c].n > 0 && a.laneOpen(b, c, others) {
			if t, _ := a.q[c].find(b, skip); t != nil {
				if g := a.book(c, t, b, now, late); g != nil {
					return g
				}
			}
		}
	}
	var held *Ticket
	heldClass := High
	for c := High; c < NumClasses; c++ {
		if !a.laneOpen(b, c, others) || c > High && !lower {
			break // closed for this class, so for every lower one
		}
		t, h := a.q[c].find(b, skip)
		if t != nil {
			if held != nil {
				if g := a.book(heldClass, held, b, now, late); g != nil {
					return g
				}
			}
			if g := a.book(c, t, b, now, late); g != nil {
				return g
			}
			held = nil // both late: the turn passes to the next class
			continue
		}
		if held == nil && h != nil {
			held, heldClass = h, c
		}
	}
	return nil
}

func (a *Admitter) book(c Class, t *Ticket, b int, now int64, late func(*Ticket) bool) *Ticket {
	stale := now-t.enq >= a.timeout/2 && !a.spared(t, now)
	t = a.q[c].take(t, b, stale, func(x *Ticket) int64 { return a.ttftOn(x, b, now) }, late)
	if t != nil {
		a.served(c)
	}
	return t
}

func (a *Admitter) served(g Class) {
	a.passed[g] = 0
	for l := g + 1; l < NumClasses; l++ {
		if a.q[l].n > 0 {
			a.passed[l]++
		}
	}
}

// retryAfterLocked estimates, in whole seconds, how long the queue takes
// to drain what is waiting now at the rate slots have lately been freed,
// between 1 and the queue timeout (rounded up); the timeout when no rate
// is known yet.
func (a *Admitter) retryAfterLocked(now int64) int {
	a.sampleRate(now)
	hi := int((a.timeout + int64(time.Second) - 1) / int64(time.Second))
	hi = max(hi, 1)
	if a.rate <= 0 {
		return hi
	}
	s := int(float64(a.n+1)/a.rate + 0.999999)
	return min(max(s, 1), hi)
}

// sampleRate refreshes the release rate at most once a second.
func (a *Admitter) sampleRate(now int64) {
	c := a.released.Load()
	if a.rateAt == 0 {
		a.rateAt, a.rateN = now, c
		return
	}
	dt := now - a.rateAt
	if dt < int64(time.Second) {
		return
	}
	r := float64(c-a.rateN) / (float64(dt) / float64(time.Second))
	if a.rate == 0 {
		a.rate = r
	} else {
		a.rate = (a.rate + r) / 2
	}
	a.rateAt, a.rateN = now, c
}

// Candidates is the eligible set for a ticket: the backends r allows (all
// when r.Allowed is nil) that it has not tried, health aside, so that a
// backend recovering while the request waits can still serve it.
func (a *Admitter) Candidates(r *sched.Request) chain.Set {
	var e chain.Set
	if r.Allowed != nil {
		e = *r.Allowed
	} else {
		for i := range int(a.used.Load()) {
			e.Add(i)
		}
	}
	for i := range e {
		e[i] &^= r.Exclude[i]
	}
	return e
}

// Estimate fills t's Preferred (the backends holding the longest known
// prefix of r's chain when r is a follow-up: those its routing would
// prefer) and its prefill estimate (Blocks, Held, Shared, Sharing) from
// the table, with one walk of r's chain.
func Estimate(table *chain.Table, r *sched.Request, t *Ticket) {
	t.Preferred, t.Sharing = chain.Set{}, chain.Set{}
	t.Blocks, t.Held, t.Shared = int32(len(r.Chain)), 0, 0
	if len(r.Chain) == 0 {
		return
	}
	var match [chain.MaxBackends]int32
	holders := table.Matches(r.Chain, r.Now, &match)
	best := int32(0)
	holders.Each(func(b int) { best = max(best, match[b]) })
	holders.Each(func(b int) {
		switch m := match[b]; {
		case m == best && r.Followup:
			t.Preferred.Add(b)
		case m > 0:
			t.Sharing.Add(b)
			t.Shared = max(t.Shared, m)
		}
	})
	if r.Followup {
		t.Held = best
	}
}

// late reports whether t, granted b now, would pass its timeout in wait
// and prefill together: what it has waited plus b's prefill of what b
// lacks of its prompt (at most half the timeout of it, so that a request
// with a long prefill may still wait half the timeout). Only while the
// queue sheds, and never class High: a late grant then serves a request
// past the extra time to first token its client accepts, in a slot that a
// cheaper waiter of its tenant serves within it.
func (a *Admitter) late(t *Ticket, b int, now int64) bool {
	if t.Class == High {
		return false
	}
	p := int64(0)
	if be := a.slots[b].b.Load(); be != nil && t.Blocks > 0 {
		p = int64(be.PrefillTime(t.novelOn(b)) - be.PrefillTime(0))
	}
	return now-t.enq+min(p, a.timeout/2) > a.timeout
}

// ttftOn estimates t's time to its first token if granted b now: what it
// has waited plus b's prefill of the blocks b lacks (novelOn).
func (a *Admitter) ttftOn(t *Ticket, b int, now int64) int64 {
	w := now - t.enq
	if t.Blocks <= 0 {
		return w
	}
	if be := a.slots[b].b.Load(); be != nil {
		w += int64(be.PrefillTime(t.novelOn(b)))
	}
	return w
}

// novelOn is how many blocks of t's chain b lacks: the Preferred hold
// Held, the Sharing Shared, the others none.
func (t *Ticket) novelOn(b int) int {
	novel := t.Blocks
	switch {
	case t.Preferred.Has(b):
		novel -= t.Held
	case t.Sharing.Has(b):
		novel -= t.Shared
	}
	return int(max(novel, 0))
}
