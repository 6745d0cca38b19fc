package admit

// The late rule: while the queue sheds, a waiter that would pass its
// queue timeout in wait and prefill together if granted a backend now is
// not served there when its tenant has another that would not be; when
// it is the only tenant waiting in its class, the slot is left free for
// the next arrival, which can still be served in time (a pass).

// isLate reports whether a waiter of class c that has waited waited, and
// would prefill for prefill on the backend, would be late: at most half
// the timeout of the prefill counts, so that a request with a long
// prefill may still wait half the timeout. Class High is never late.
func isLate(c Class, waited, prefill, timeout int64) bool {
	return c != High && waited+min(prefill, timeout/2) > timeout
}

// late is isLate for t granted b now: b's prefill of what b lacks of its
// prompt (novelOn) at b's learned rate. The caller applies it only while
// the queue sheds.
func (a *Admitter) late(t *Ticket, b int, now int64) bool {
	if t.Class == High {
		return false
	}
	p := int64(0)
	if be := a.slots[b].b.Load(); be != nil && t.Blocks > 0 {
		p = int64(be.PrefillTime(t.novelOn(b)) - be.PrefillTime(0))
	}
	return isLate(t.Class, now-t.enq, p, a.timeout)
}
