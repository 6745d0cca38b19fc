package admit

import "time"

// The max_prefill rule (Config.MaxPrefill, --queue-max-prefill): a
// backend whose requests from kvca, sent and not yet at their first byte,
// would take longer than the bound to prefill (at its learned rate) takes
// no request but of class High, so a request does not find more prefill
// than that ahead of it there.

// prefillOpen reports whether a backend with pending prefill takes a
// request of class c: c is High, no bound is set, or the pending prefill
// is within the bound. A backend with nothing pending is open, so a
// request larger than the bound still goes.
func prefillOpen(c Class, bound, pending time.Duration) bool {
	return c == High || bound <= 0 || pending <= bound
}

// PrefillDone tells the admitter that a request on b reached its first
// byte (its prefill is done): with a prefill bound, b may have room again
// for the waiters it held back.
func (a *Admitter) PrefillDone(b int) {
	if a.maxPrefill > 0 && a.limited && b >= 0 && b < len(a.slots) && a.waiting.Load() > 0 {
		// One grant per prefill done: a granted request reserves its own
		// prefill only once routed, so granting every free slot at once
		// would overshoot the bound.
		a.fillUpTo(b, 1)
	}
}
