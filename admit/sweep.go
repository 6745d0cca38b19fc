package admit

import "time"

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
		// Holder waits first: one that ends just before its timeout takes
		// a free slot rather than be shed when the timer fires a little
		// late, past both (holderEnd says when it is shed instead).
		for n < len(ws) {
			t := a.firstHold()
			if t == nil || t.until > now {
				break
			}
			toTimeout := t.hold == holdToTimeout
			a.unbind(t)
			if holderEnd(toTimeout, a.overloaded(now)) == RuleHolderLate {
				ws[n] = a.drop(t, ReasonTimeout, RuleHolderLate, now)
				n++
				continue
			}
			if a.heldBack(t, a.heavy(now, 0)) {
				continue
			}
			if b := a.freeFor(t); b >= 0 {
				ws[n] = a.grant(t, b, RuleHolderWaitEnd)
				n++
			}
		}
		for c := range a.q {
			for n < len(ws) {
				h := a.q[c].head
				if h == nil || h.deadline > now {
					break
				}
				ws[n] = a.drop(h, ReasonTimeout, RuleQueueTimeout, now)
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
				if n := s.inflight.Load(); s.free() && a.lane(i, t.Class, n) == RuleNone && (best < 0 || n < bestN) {
					best, bestN = i, n
				}
			}
		}
		if best < 0 || a.slots[best].tryAcquire() {
			return best
		}
	}
}
