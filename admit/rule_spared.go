package admit

// The spared rule: while the queue sheds, a tenant holding fewer than
// half the slots the busiest tenant holds is spared the queue's bets
// that shed. It sends less than another tenant is served, so its holders
// are busy with that tenant's requests as much as with its own, and a
// wait for them (holder_wait), a long holder wait that ends in a shed
// (holder_late), or its newest request served before its oldest
// (stale_tenant) would shed its requests to the benefit of a tenant over
// its share. A tenant alone, or one of equals, is never spared.

// isSpared reports whether a tenant holding own slots is spared beside
// the busiest tenant's busiest, while the queue sheds (over).
func isSpared(over bool, own, busiest int32) bool { return over && busiest > 2*own }

// spared is isSpared for t's tenant now.
func (a *Admitter) spared(t *Ticket, now int64) bool {
	if !a.overloaded(now) {
		return false
	}
	_, hi := a.spread()
	return isSpared(true, a.load[bucket(t.Tenant)].Load(), hi)
}
