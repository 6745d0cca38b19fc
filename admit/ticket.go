package admit

import (
	"sync/atomic"
	"time"

	"github.com/kvca/kvca/chain"
)

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
	rule       Rule   // the rule of the latest decision (Rule)
	lb         uint16 // its tenant's bucket in Admitter.load while it holds a slot
	reason     Reason
	retryAfter int
	room       chain.Set
	enq        int64
	deadline   int64
	until      int64 // end of the holder wait
	waitNs     int64
	vstart     int64  // virtual start tag within the class (fair queuing)
	order      uint64 // arrival order
	// Intrusive links (list): the class's arrival order, the tenant's
	// FIFO, the holder-bound waiters by the end of their holder wait.
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

// Rule is the rule that made the ticket's latest decision: its grant
// (once it holds a slot, the one that gave it: read it after Take), its
// wait while queued, its shed or drop. Done keeps it, so the access log
// written after Done still has it; the next Admit of a new request
// replaces it. Read it on the owner's goroutine.
func (t *Ticket) Rule() Rule { return t.rule }

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
