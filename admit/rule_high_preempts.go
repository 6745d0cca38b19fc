package admit

import "time"

// The high_preempts rule (Config.HighPreempts, --queue-high-preempts):
// when the engines preempt a running sequence of lower priority for a
// high-priority one, a class High request may take a slot past a
// backend's limit while fewer than the limit of class High requests hold
// slots there, since the engine then runs a lower-class sequence it can
// set aside for it.

// canPreempt reports whether a class High request may take a slot past
// the limit of a backend where high of its slots are High: fewer than the
// limit are, it is healthy, and none of kvca's requests there is still
// before its first token (pending prefill 0). The engine preempts its
// latest arrival of the lowest priority, and a sequence preempted before
// its first token waits for a slot again: its first token would pay for
// this one's. One preempted while it streams only pauses.
func canPreempt(high, limit int32, healthy bool, pending time.Duration) bool {
	return high < limit && healthy && pending == 0
}

// preemptible is canPreempt for the backend in s.
func (s *backendSlots) preemptible() bool {
	h, l := s.high.Load(), s.limit.Load()
	if h >= l || !s.healthy() {
		return false // and the backend's prefill is not read
	}
	return canPreempt(h, l, true, s.b.Load().PendingPrefillTime())
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

// highPreempts reports whether t is class High with HighPreempts: its
// slots count in backendSlots.high.
func (a *Admitter) highPreempts(t *Ticket) bool { return t.Class == High && a.cfg.HighPreempts }
