package admit

// The high_pool rule (Config.HighPool, --queue-high-pool): a lower class
// is granted a slot only while more than the pool of the fleet's slots
// stay free, so that a high-priority request under overload finds a slot
// at once instead of waiting for the next release.

// poolIsOpen reports whether a request of class c may take one of the
// fleet's free slots: c is High, no pool is set, or more than pool are
// free.
func poolIsOpen(c Class, pool, free int32) bool { return c == High || pool <= 0 || free > pool }

// poolOpen is poolIsOpen now (given as in fleetFree); the fleet is
// counted only when a pool is set.
func (a *Admitter) poolOpen(c Class, given int32) bool {
	return c == High || a.pool <= 0 || poolIsOpen(c, a.pool, a.fleetFree(given))
}

// fillPool offers the free slots of the backends other than b to the
// waiters once the slot freed on b has opened the pool: a waiter that
// may not use b may use one of them, kept free until then. Under load
// few slots are free, so this looks at few backends.
func (a *Admitter) fillPool(b int) {
	if a.fleetFree(0) <= a.pool {
		return
	}
	for i := range int(a.used.Load()) {
		if s := &a.slots[i]; i != b && s.healthy() && s.free() {
			a.fill(i)
		}
	}
}
