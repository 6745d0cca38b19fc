package admit

import "github.com/kvca/kvca/chain"

// roomFor adds to t's room the eligible backends with a free slot it may
// take, and returns RuleRoom if it added any, else the rule that closed
// the room: the tenant reserve (no clock read without one), the
// high-priority pool, a lane rule of a backend with a free slot, or the
// limit.
func (a *Admitter) roomFor(t *Ticket) Rule {
	if a.tenantRes != 0 && a.heldBack(t, a.heavy(a.now(), 0)) {
		return RuleTenantReserve
	}
	return a.addRoom(&t.Eligible, &t.room, t.Class)
}

func (a *Admitter) addRoom(elig, room *chain.Set, c Class) Rule {
	if !a.poolOpen(c, 0) {
		return RuleHighPool
	}
	closed, added := RuleLimit, false
	for wi, word := range elig {
		for word != 0 {
			i := wi<<6 | trailingZeros(word)
			word &= word - 1
			if i >= len(a.slots) {
				continue
			}
			s := &a.slots[i]
			if s.free() {
				r := a.lane(i, c, s.inflight.Load())
				if r == RuleNone {
					room.Add(i)
					added = true
					continue
				}
				closed = r
			}
			// A lane is never closed to class High, so a High request
			// reaches this only for a full or unhealthy backend.
			if c == High && a.cfg.HighPreempts && s.preemptible() {
				room.Add(i)
				added = true
			}
		}
	}
	if added {
		return RuleRoom
	}
	return closed
}

// lane returns the rule that closes b to a request of class c while
// others of its slots are held, or RuleNone: the high-priority reserve,
// then the prefill bound. Class High is never closed out.
func (a *Admitter) lane(b int, c Class, others int32) Rule {
	if c == High {
		return RuleNone
	}
	// A limit an engine's queue lowered keeps one slot for every class.
	if a.reserve > 0 && !highReserveOpen(c, a.reserve, a.slots[b].limit.Load(), others) {
		return RuleHighReserve
	}
	if a.maxPrefill <= 0 {
		return RuleNone
	}
	if be := a.slots[b].b.Load(); be != nil && !prefillOpen(c, a.maxPrefill, be.PendingPrefillTime()) {
		return RuleMaxPrefill
	}
	return RuleNone
}

func intersects(x, y *chain.Set) bool {
	return x[0]&y[0]|x[1]&y[1]|x[2]&y[2]|x[3]&y[3] != 0
}
