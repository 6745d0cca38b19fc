package admit

// The holder_wait rule (Config.HolderWait, --queue-holder-wait, or the
// request's own Ticket.HolderWait): a request with preferred backends
// (the holders of its prefix) waits for one of them rather than take
// another backend's free slot, for its holder wait. Its end is decided
// by Sweep: holder_wait_end (any eligible backend with room) or
// holder_late (shed); while it waits, holder_turn may end it early.

// holderWait is the holder wait of a request of class c: base, or
// override when set, at most half the queue timeout, so that a request
// whose holders stay full still has the rest of its wait to be granted
// any backend instead of being shed with other backends freeing slots
// meanwhile. Unless leaving its holders would cost it more than that half
// in prefill (leaving: it would recompute what they hold): its first
// token would then come later elsewhere, after half its wait, than on a
// holder at the end of it, so it waits for them until just before its
// timeout. Class High does not wait for its holders: it is served first
// wherever a slot frees, and under load the first free slot anywhere
// comes sooner than one on its holders (one backend frees a slot a
// batch's worth of times less often than the fleet), while a wait for
// them could shed it.
func holderWait(c Class, base, override, timeout, leaving int64) int64 {
	if c == High {
		return 0
	}
	w := base
	if override > 0 {
		w = override
	}
	if w > 0 && timeout > 1 && leaving > timeout/2 {
		return timeout - 1
	}
	return min(w, timeout/2)
}

// holderEnd decides a holder wait that ended: one that waited until just
// before its timeout (toTimeout) is shed while the queue sheds (over),
// since it would recompute its prefix past its timeout in a slot that a
// cheaper request, or the next one, serves better; any other takes an
// eligible backend with room if one has it (else it waits on, unbound).
func holderEnd(toTimeout, over bool) Rule {
	if toTimeout && over {
		return RuleHolderLate
	}
	return RuleHolderWaitEnd
}

// holderWaitOf is holderWait for t.
func (a *Admitter) holderWaitOf(t *Ticket) int64 {
	if t.Class == High {
		return 0
	}
	leaving := int64(0)
	if (a.holderWait > 0 || t.HolderWait > 0) && a.timeout > 1 {
		leaving = a.leaving(t) // only then does it count: no walk of the holders
	}
	return holderWait(t.Class, a.holderWait, int64(t.HolderWait), a.timeout, leaving)
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

// binds returns RuleHolderWait when t should wait for its preferred
// backends (it has a holder wait, and one of them is eligible and
// healthy), RuleSpared when it would but its tenant is spared, else
// RuleNone.
func (a *Admitter) binds(t *Ticket) Rule {
	if a.holderWaitOf(t) <= 0 {
		return RuleNone
	}
	for wi := range t.Preferred {
		for word := t.Preferred[wi] & t.Eligible[wi]; word != 0; word &= word - 1 {
			if i := wi<<6 | trailingZeros(word); i < len(a.slots) && a.healthy(i) {
				if a.spared(t, a.now()) {
					return RuleSpared
				}
				return RuleHolderWait
			}
		}
	}
	return RuleNone
}
