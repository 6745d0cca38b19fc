package mock

import (
	"sort"
	"sync"
	"time"
)

// scheduler admits at most maxSeqs sequences at a time and runs prefills
// one after another: prefill is compute bound, so a burst of uncached
// prompts delays every first token behind it, which is the cost that
// cache-aware routing avoids.
//
// Waiting sequences are served first come first served, or, with
// priority on, by their priority (lower first, as vLLM's `priority`
// field), then by arrival. With priority on, a sequence arriving while
// every slot is taken also preempts the lowest-priority running one
// (of equals the latest admitted) if that one's priority is lower than
// its own, as SGLang does with --enable-priority-scheduling: the preempted
// sequence goes back to the queue in its place and, once running again,
// recomputes what it generated before it continues.
type scheduler struct {
	mu       sync.Mutex
	maxSeqs  int
	priority bool
	running  int
	order    uint64
	queue    []*seqSlot // waiting, in serving order
	run      []*seqSlot // running (priority on only: the preemption candidates)
	prefill  time.Time  // when the prefill lane frees up
	lane     []booking  // priority on: the prefills not yet over, in order
	since    time.Time  // start of the current busy period
	busy     time.Duration
	admitted uint64
	preempts uint64
}

// seqSlot is one sequence's place in the scheduler. A job keeps its own
// (jobs are pooled), so a wait allocates nothing.
type seqSlot struct {
	prio    int64
	order   uint64 // arrival; kept when preempted, so it keeps its place
	running bool
	wake    chan struct{} // granted a slot while waiting
	preempt chan struct{} // lost its slot while running
	moved   chan struct{} // its prefill moved on the lane (shift says by how much)
	shift   time.Duration
}

// booking is one prefill on the lane.
type booking struct {
	q          *seqSlot
	start, end time.Time
}

func newSeqSlot() *seqSlot {
	return &seqSlot{wake: make(chan struct{}, 1), preempt: make(chan struct{}, 1), moved: make(chan struct{}, 1)}
}

func newScheduler(maxSeqs int, priority bool) *scheduler {
	return &scheduler{maxSeqs: maxSeqs, priority: priority}
}

// arrive gives q its arrival order and priority (0 without priority).
func (s *scheduler) arrive(q *seqSlot, prio int64) {
	s.mu.Lock()
	s.order++
	q.order = s.order
	q.prio = 0
	if s.priority {
		q.prio = prio
	}
	q.running = false
	q.shift = 0
	drain(q.preempt)
	drain(q.moved)
	s.mu.Unlock()
}

// drain takes a signal left in c, if any.
func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// acquire blocks until q may run. It returns false if quit closed first,
// in which case q holds no slot.
func (s *scheduler) acquire(q *seqSlot, quit <-chan struct{}) bool {
	s.mu.Lock()
	s.markActive()
	if s.running < s.maxSeqs && len(s.queue) == 0 {
		s.running++
		s.start(q)
		s.mu.Unlock()
		return true
	}
	if v := s.victim(q.prio); v != nil {
		// v's slot passes to q: the running count does not change.
		v.running = false
		s.unrun(v)
		s.unbook(v, time.Now())
		// A move of the prefill it no longer has must not shift the one
		// it books when it runs again.
		v.shift = 0
		drain(v.moved)
		s.preempts++
		v.preempt <- struct{}{}
		s.start(q)
		s.mu.Unlock()
		return true
	}
	i := sort.Search(len(s.queue), func(i int) bool { return before(q, s.queue[i]) })
	s.queue = append(s.queue, nil)
	copy(s.queue[i+1:], s.queue[i:])
	s.queue[i] = q
	s.mu.Unlock()
	select {
	case <-q.wake:
		return true
	case <-quit:
		s.mu.Lock()
		for i, c := range s.queue {
			if c == q {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				s.markIdle()
				s.mu.Unlock()
				return false
			}
		}
		// Admitted while quitting: give the slot back.
		s.mu.Unlock()
		<-q.wake
		s.release(q)
		return false
	}
}

func before(x, y *seqSlot) bool {
	return x.prio < y.prio || x.prio == y.prio && x.order < y.order
}

// victim is the running sequence a newcomer of priority prio preempts, or
// nil. Called with mu held.
func (s *scheduler) victim(prio int64) *seqSlot {
	var v *seqSlot
	for _, r := range s.run {
		if r.prio > prio && (v == nil || r.prio > v.prio || r.prio == v.prio && r.order > v.order) {
			v = r
		}
	}
	return v
}

// start marks q running; its slot is already counted. Called with mu held.
func (s *scheduler) start(q *seqSlot) {
	q.running = true
	s.admitted++
	if s.priority {
		s.run = append(s.run, q)
	}
}

func (s *scheduler) unrun(q *seqSlot) {
	for i, r := range s.run {
		if r == q {
			s.run[i] = s.run[len(s.run)-1]
			s.run = s.run[:len(s.run)-1]
			return
		}
	}
}

// release frees q's slot, handing it to the first waiter. A sequence
// preempted meanwhile holds no slot, and nothing is released.
func (s *scheduler) release(q *seqSlot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !q.running {
		return
	}
	q.running = false
	s.unrun(q)
	if len(s.queue) > 0 {
		w := s.queue[0]
		copy(s.queue, s.queue[1:])
		s.queue = s.queue[:len(s.queue)-1]
		s.start(w)
		w.wake <- struct{}{}
		return
	}
	s.running--
	s.markIdle()
}

func (s *scheduler) preemptions() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.preempts
}

// reservePrefill books d on the prefill lane for q and returns when it
// ends. Without priority the lane is first come first served. With it, q
// goes ahead of the prefills of lower priority not yet begun, as an
// engine that schedules by priority builds its next prefill batch from
// its queue in priority order; those move later by d, and their
// sequences are told (moved).
func (s *scheduler) reservePrefill(q *seqSlot, now time.Time, d time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.priority {
		start := s.prefill
		if start.Before(now) {
			start = now
		}
		s.prefill = start.Add(d)
		return s.prefill
	}
	s.trim(now)
	i := len(s.lane)
	for k, b := range s.lane {
		if b.start.After(now) && q.prio < b.q.prio {
			i = k
			break
		}
	}
	start := now
	if i > 0 && s.lane[i-1].end.After(now) {
		start = s.lane[i-1].end
	}
	s.lane = append(s.lane, booking{})
	copy(s.lane[i+1:], s.lane[i:])
	s.lane[i] = booking{q: q, start: start, end: start.Add(d)}
	s.relay(i+1, now)
	return s.lane[i].end
}

// unbook takes q's prefill off the lane if it has not begun (a preempted
// sequence computes nothing until it runs again); the later ones move up.
// Called with mu held.
func (s *scheduler) unbook(q *seqSlot, now time.Time) {
	for k, b := range s.lane {
		if b.q == q && b.start.After(now) {
			s.lane = append(s.lane[:k], s.lane[k+1:]...)
			s.relay(k, now)
			return
		}
	}
}

// relay lays the bookings from k on out again: each one not begun
// starts when the one before it ends (or now), and its sequence is told
// when that moves it. A begun prefill never moves, and every one not
// begun comes after those. Called with mu held.
func (s *scheduler) relay(k int, now time.Time) {
	for ; k < len(s.lane); k++ {
		b := &s.lane[k]
		if !b.start.After(now) {
			continue
		}
		start := now
		if k > 0 && s.lane[k-1].end.After(now) {
			start = s.lane[k-1].end
		}
		if shift := start.Sub(b.start); shift != 0 {
			b.start, b.end = start, b.end.Add(shift)
			b.q.shift += shift
			select {
			case b.q.moved <- struct{}{}:
			default:
			}
		}
	}
	if n := len(s.lane); n > 0 {
		s.prefill = s.lane[n-1].end
	}
}

// trim drops the prefills that are over. Called with mu held.
func (s *scheduler) trim(now time.Time) {
	n := 0
	for n < len(s.lane) && !s.lane[n].end.After(now) {
		n++
	}
	if n > 0 {
		s.lane = append(s.lane[:0], s.lane[n:]...)
	}
}

// moved returns how far q's prefill moved since it was last asked.
func (s *scheduler) moved(q *seqSlot) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := q.shift
	q.shift = 0
	return d
}

// markActive and markIdle keep busy time: the wall time during which the
// engine had at least one sequence running or waiting. Called with mu held.
func (s *scheduler) markActive() {
	if s.running == 0 && len(s.queue) == 0 {
		s.since = time.Now()
	}
}

func (s *scheduler) markIdle() {
	if s.running == 0 && len(s.queue) == 0 {
		s.busy += time.Since(s.since)
	}
}

func (s *scheduler) snapshot() (running, waiting int, busy time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy = s.busy
	if s.running > 0 || len(s.queue) > 0 {
		busy += time.Since(s.since)
	}
	return s.running, len(s.queue), busy
}
