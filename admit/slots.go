package admit

import (
	"sync/atomic"

	"github.com/kvca/kvca/sched"
)

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

// healthy reports whether b may be granted.
func (a *Admitter) healthy(b int) bool { return a.slots[b].healthy() }

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
			if t, r := a.pick(b); t != nil {
				w := a.grant(t, b, r)
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
		t, r := a.pick(b)
		if t == nil {
			// Nobody waits for b; an enqueue after this unlock sees the
			// slot free.
			a.slots[b].inflight.Add(-1)
			a.mu.Unlock()
			return
		}
		w := a.grant(t, b, r)
		a.mu.Unlock()
		a.deliver(&w)
	}
}
