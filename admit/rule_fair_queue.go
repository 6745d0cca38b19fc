package admit

// The fair_queue rule: tenants share a class by start-time fair queuing.
// Each request gets a virtual start tag, its tenant's previous tag plus
// one (its cost), or the class's virtual time if that is later (a tenant
// that had nothing waiting), and the waiter with the smallest tag that
// can use the freed backend is served (the earlier arrival of equals),
// the class's virtual time advancing to its tag. Backlogged tenants are
// thus served one request each in turn, whatever they queue, and a tenant
// that starts waiting is served next rather than after a whole round of
// the others.

// tag gives t, arriving for tenant f, its virtual start.
func (q *classQueue) tag(f *flow, t *Ticket) {
	t.vstart = max(q.vt, f.finish)
	f.finish = t.vstart + 1
}

// find returns the waiter a free slot on b goes to within the class, or
// nil: the one with the smallest tag (of equal tags, the earlier arrival)
// among each tenant's first waiter that can use b. A waiter that could
// use b but waits for its holders elsewhere lets its own tenant's later
// requests go first, and nobody else: when another tenant's waiter would
// be served ahead of it, it is chosen instead and its holder wait ends.
// held is the best such holder-bound waiter of the class (by tag), which
// the caller gives b rather than let a lower class have it.
//
// A tenant none of whose waiters can use b keeps its small tags, so it is
// served first when a backend it can use frees. A tenant whose first
// waiter skip holds back (the tenant reserve; nil: none) is passed over
// the same way.
func (q *classQueue) find(b int, skip func(*Ticket) bool) (t, held *Ticket) {
	var best *Ticket
	// The best holder-bound candidates of the two best tenants by their
	// bound waiters, so that one of another tenant than best's remains.
	var h1, h2 *Ticket
	for f := q.tenants.head; f != nil; f = f.next {
		if skip != nil && skip(f.head) {
			continue
		}
		var bound *Ticket
		for w := f.head; w != nil; w = w.fnext {
			if !w.Eligible.Has(b) {
				continue
			}
			if w.usable(b) {
				if before(w, best) {
					best = w
				}
				break
			}
			if bound == nil {
				bound = w // the tenant's first waiter for b, bound elsewhere
			}
		}
		if bound != nil {
			if before(bound, h1) {
				h1, h2 = bound, h1
			} else if before(bound, h2) {
				h2 = bound
			}
		}
	}
	if best != nil {
		alt := h1
		if alt != nil && alt.flow == best.flow {
			alt = h2
		}
		if alt != nil && before(alt, best) {
			best = alt
		}
	}
	return best, h1
}

// before reports whether x comes before y (nil: never served) in fair
// queuing order: the smaller tag, of equal tags the earlier arrival.
func before(x, y *Ticket) bool {
	return y == nil || x.vstart < y.vstart || x.vstart == y.vstart && x.order < y.order
}
