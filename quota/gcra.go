package quota

// Window is the period a limit is per: a limit of N is N per minute.
const Window int64 = 60e9 // ns

// bucket is one limit (requests or tokens) of one tenant, as the generic
// cell rate algorithm keeps it: tat is the theoretical arrival time, the
// instant at which everything charged so far would have been paid back at
// limit per Window. Each unit charged moves it on by Window/limit ns,
// kept exactly as tat + rem/limit ns with 0 <= rem < limit, so no
// rounding ever lets one unit more or less through. The bucket is full
// (limit units available) when tat <= now; a charge of c is admitted
// when, after it, tat - now <= Window: a burst of exactly limit from
// full, then one unit every Window/limit.
type bucket struct {
	limit int64 // 0: unlimited
	tat   int64
	rem   int64
}

// debt is how far tat is ahead of now, in 1/limit ns (units of Window
// per unit of quota); ok is false when it exceeds the whole Window (the
// product would not fit, and nothing is available anyway).
func (b *bucket) debt(now int64) (d uint64, ok bool) {
	if b.tat < now || (b.tat == now && b.rem == 0) {
		return 0, true
	}
	ahead := b.tat - now
	if ahead > Window {
		return 0, false
	}
	return uint64(ahead)*uint64(b.limit) + uint64(b.rem), true
}

// fits reports whether c units may be charged now; when not, wait is how
// long until they would be (c <= limit, so they fit eventually).
func (b *bucket) fits(now, c int64) (ok bool, wait int64) {
	capacity := uint64(Window) * uint64(b.limit)
	need := uint64(c) * uint64(Window)
	d, small := b.debt(now)
	if small && d+need <= capacity {
		return true, 0
	}
	// Waiting w ns pays back w*limit; want d + need - w*limit <= capacity.
	var over uint64
	if small {
		over = d + need - capacity
	} else {
		// tat - now > Window: count in ns to stay in range.
		ahead := uint64(b.tat - now)
		return false, int64(ahead - uint64(Window) + (need+uint64(b.rem)+uint64(b.limit)-1)/uint64(b.limit))
	}
	return false, int64((over + uint64(b.limit) - 1) / uint64(b.limit))
}

// charge moves tat on by c units (c may exceed what is available: that is
// debt, paid back before anything else is admitted) or back by -c units
// (a refund, never past a full bucket).
func (b *bucket) charge(now, c int64) {
	if b.limit == 0 || c == 0 {
		return
	}
	if b.tat < now {
		b.tat, b.rem = now, 0
	}
	neg := c < 0
	if neg {
		c = -c
	}
	for c > 0 {
		// c*Window must stay in an int64: 1e8 units at a time.
		k := min(c, 100_000_000)
		c -= k
		q, r := k*Window/b.limit, k*Window%b.limit
		if !neg {
			b.tat += q
			b.rem += r
			if b.rem >= b.limit {
				b.rem -= b.limit
				b.tat++
			}
			continue
		}
		b.tat -= q
		b.rem -= r
		if b.rem < 0 {
			b.rem += b.limit
			b.tat--
		}
		if b.tat < now {
			b.tat, b.rem = now, 0
			return
		}
	}
}

// remaining is how many units could be charged now.
func (b *bucket) remaining(now int64) int64 {
	d, ok := b.debt(now)
	if !ok {
		return 0
	}
	capacity := uint64(Window) * uint64(b.limit)
	if d >= capacity {
		return 0
	}
	return int64((capacity - d) / uint64(Window))
}

// reset is how long until the bucket is full again.
func (b *bucket) reset(now int64) int64 {
	if b.tat < now {
		return 0
	}
	r := b.tat - now
	if b.rem > 0 {
		r++
	}
	return r
}

// setLimit changes the limit, keeping the debt's time (what is owed is
// paid back by the same instant, at the new rate).
func (b *bucket) setLimit(limit int64) {
	if limit != b.limit {
		b.limit, b.rem = limit, 0
	}
}
