package admit

// The tenant_reserve rule (Config.TenantReserve, --queue-tenant-reserve):
// while the queue sheds and a spared tenant holds slots, the tenants that
// are not spared may not take the fleet's last free slots: those wait for
// the spared tenants' next requests, which would otherwise wait for a
// release behind the heavy tenants' waiters. Class High is never held
// back.

// reserveBusiest returns the slots the busiest tenant holds while the
// reserve applies, -1 when it does not: a reserve is set, the queue sheds
// (over), some tenant holding slots is spared (holds lo, fewer than half
// the busiest's hi), and at most reserve of the fleet's slots are free.
func reserveBusiest(reserve int32, over bool, lo, hi, free int32) int32 {
	if reserve <= 0 || !over || lo == 0 || 2*lo >= hi || free > reserve {
		return -1
	}
	return hi
}

// isHeldBack reports whether the reserve keeps a request of class c, its
// tenant holding own slots, from a free slot: the reserve applies
// (busiest >= 0) and its tenant is not spared beside the busiest.
func isHeldBack(c Class, own, busiest int32) bool {
	return busiest >= 0 && c != High && 2*own >= busiest
}

// heavy is reserveBusiest now (given counts one slot being handed on,
// already held). It looks at the tenants and the fleet only as far as
// needed.
func (a *Admitter) heavy(now int64, given int32) int32 {
	if a.tenantRes <= 0 || !a.overloaded(now) {
		return -1
	}
	lo, hi := a.spread()
	if lo == 0 || 2*lo >= hi {
		return -1
	}
	return reserveBusiest(a.tenantRes, true, lo, hi, a.fleetFree(given))
}

// heldBack is isHeldBack for t, with heavy's answer.
func (a *Admitter) heldBack(t *Ticket, busiest int32) bool {
	return busiest >= 0 && isHeldBack(t.Class, a.load[bucket(t.Tenant)].Load(), busiest)
}
