package admit

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

// grant gives t a slot on b, already counted in b's in-flight slots, by
// rule r.
func (a *Admitter) grant(t *Ticket, b int, r Rule) wake {
	now := a.now()
	a.remove(t)
	if a.highPreempts(t) {
		a.slots[b].high.Add(1)
	}
	a.charge(t)
	t.slot.Store(int32(b + 1))
	t.fromQueue = true
	t.waitNs = now - t.enq
	a.decide(t, r)
	w := wake{t: t, fn: t.Wake, ch: t.woken, seq: t.seq, class: t.Class, waited: t.waitNs}
	t.state.Store(Granted)
	return w
}

// drop sheds a queued t for reason why, by rule r.
func (a *Admitter) drop(t *Ticket, why Reason, r Rule, now int64) wake {
	if why == ReasonTimeout || why == ReasonQueueFull {
		a.shedAt.Store(now)
	}
	a.remove(t)
	t.reason = why
	t.retryAfter = a.retryAfterLocked(now)
	a.decide(t, r)
	w := wake{t: t, fn: t.Wake, ch: t.woken, seq: t.seq, class: t.Class, reason: why}
	t.state.Store(Dropped)
	return w
}
