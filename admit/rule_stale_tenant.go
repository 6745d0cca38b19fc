package admit

// The stale_tenant rule (and the late rule's pass, rule_late.go): a
// tenant whose oldest waiter has waited half the queue timeout is served,
// in its turn, the waiter that can still be answered fastest.

// waitedHalf reports whether a waiter that has waited this long is stale:
// half the queue timeout or more. The caller exempts spared tenants.
func waitedHalf(waited, timeout int64) bool { return waited >= timeout/2 }

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
	if w == nil && q.tenants.n == 1 {
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
