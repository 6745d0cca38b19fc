package admit

import "testing"

func TestRuleStaleTenantWaited(t *testing.T) {
	for _, c := range []struct {
		waited, timeout int64
		want            bool
	}{{4, 10, false}, {5, 10, true}, {9, 10, true}, {0, 1, true}} {
		if got := waitedHalf(c.waited, c.timeout); got != c.want {
			t.Errorf("waitedHalf(%d, %d) = %v", c.waited, c.timeout, got)
		}
	}
}

// staleQueue is one class with the tenants given, each with waiters of
// the first-token estimates given (oldest first), all eligible for
// backend 0, tagged in arrival order.
func staleQueue(tenants ...[]int64) (*classQueue, [][]*Ticket, map[*Ticket]int64) {
	q := &classQueue{flows: map[uint64]*flow{}}
	ttft := map[*Ticket]int64{}
	var all [][]*Ticket
	order := uint64(0)
	for i, ests := range tenants {
		f := &flow{key: uint64(i)}
		q.flows[f.key] = f
		q.tenants.pushBack(f)
		var ts []*Ticket
		for _, e := range ests {
			order++
			x := &Ticket{Eligible: setOf(0), order: order, flow: f}
			q.tag(f, x)
			q.pushBack(x)
			f.pushBack(x)
			ttft[x] = e
			ts = append(ts, x)
		}
		all = append(all, ts)
	}
	return q, all, ttft
}

func TestRuleStaleTenant(t *testing.T) {
	never := func(*Ticket) bool { return false }
	for _, c := range []struct {
		name    string
		tenants [][]int64
		stale   bool
		late    func(x *Ticket, ts [][]*Ticket) bool
		want    func(ts [][]*Ticket) *Ticket
	}{
		{"not stale: its turn", [][]int64{{9, 1, 5}}, false, nil,
			func(ts [][]*Ticket) *Ticket { return ts[0][0] }},
		{"stale: the soonest first token", [][]int64{{9, 1, 5}}, true, nil,
			func(ts [][]*Ticket) *Ticket { return ts[0][1] }},
		{"stale: of equals the newest", [][]int64{{9, 1, 1}}, true, nil,
			func(ts [][]*Ticket) *Ticket { return ts[0][2] }},
		{"stale: not a late one", [][]int64{{9, 1, 5}}, true,
			func(x *Ticket, ts [][]*Ticket) bool { return x == ts[0][1] },
			func(ts [][]*Ticket) *Ticket { return ts[0][2] }},
		{"all late, alone: the slot stays free", [][]int64{{9, 1}}, true,
			func(*Ticket, [][]*Ticket) bool { return true },
			func([][]*Ticket) *Ticket { return nil }},
		{"all late, another tenant waits: its turn", [][]int64{{9, 1}, {3}}, true,
			func(x *Ticket, ts [][]*Ticket) bool { return x.flow == ts[0][0].flow },
			func(ts [][]*Ticket) *Ticket { return ts[0][0] }},
	} {
		q, ts, est := staleQueue(c.tenants...)
		late := never
		if c.late != nil {
			late = func(x *Ticket) bool { return c.late(x, ts) }
		}
		turn := ts[0][0].vstart
		got := q.take(ts[0][0], 0, c.stale, func(x *Ticket) int64 { return est[x] }, late)
		if want := c.want(ts); got != want {
			t.Errorf("%s: served %v, want %v", c.name, got, want)
			continue
		}
		if got != nil && got.vstart != turn {
			t.Errorf("%s: the served waiter has tag %d, not the turn's %d", c.name, got.vstart, turn)
		}
	}
}
