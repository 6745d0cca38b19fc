package admit

// The slots each tenant holds, counted without a lock in buckets of the
// tenant key (Admitter.load): what the spared and tenant-reserve rules
// compare.

import "math/bits"

func trailingZeros(w uint64) int { return bits.TrailingZeros64(w) }

const tenantBuckets = 4096

func bucket(tenant uint64) uint16 { return uint16(tenant>>1) & (tenantBuckets - 1) } // bit 0 is set in every key

// charge counts in load the slot t is about to hold, and marks its
// bucket when it was empty and unmarked.
func (a *Admitter) charge(t *Ticket) {
	t.lb = bucket(t.Tenant)
	if a.load[t.lb].Add(1) == 1 {
		if w, bit := &a.held[t.lb>>6], uint64(1)<<(t.lb&63); w.Load()&bit == 0 {
			w.Or(bit)
		}
	}
}

// discharge uncounts t's slot; its bucket stays marked until spread
// finds it empty, so that a tenant taking and releasing one slot at a
// time pays one atomic add for each.
func (a *Admitter) discharge(t *Ticket) { a.load[t.lb].Add(-1) }

// spread returns the fewest slots a tenant holding any holds and the
// most any holds (0, 0: none holds any). It unmarks the empty buckets
// it meets, and marks one again if a charge came in between: a charge
// that saw the mark before it went is then seen here, so a bucket
// holding slots keeps its mark.
func (a *Admitter) spread() (lo, hi int32) {
	for wi := range a.held {
		for w := a.held[wi].Load(); w != 0; w &= w - 1 {
			i := wi<<6 | trailingZeros(w)
			n := a.load[i].Load()
			if n <= 0 {
				bit := uint64(1) << (i & 63)
				a.held[wi].And(^bit)
				if n = a.load[i].Load(); n <= 0 {
					continue
				}
				a.held[wi].Or(bit)
			}
			if lo == 0 || n < lo {
				lo = n
			}
			hi = max(hi, n)
		}
	}
	return lo, hi
}
