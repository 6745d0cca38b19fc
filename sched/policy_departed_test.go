package sched

import "testing"

// A follow-up whose conversation the capacity bound dropped knows only the
// system prompt every backend holds; it goes back to the backend its
// conversation was dropped from, however busy, where the engine may still
// hold part of it, rather than to the least loaded holder of the prompt.
func TestFollowupReturnsToTheDepartedHolder(t *testing.T) {
	for _, policy := range []string{"kvca-cost", "kvca"} {
		s := newFixed(t, 3, policy)
		s.SetAffinityEpsilon(0.5)
		now := s.Table.Now()
		sys := chainOf(0, 8)
		conv := append(append([]uint64(nil), sys...), chainOf(100, 4)...)
		for b := 0; b < 3; b++ {
			s.Table.Touch(sys, b, now)
		}
		s.Table.Touch(conv, 1, now)
		s.Table.SetBackendCapacity(1, 8)
		if n := s.Table.EnforceCapacity(); n != 4 {
			t.Fatalf("%s: dropped %d, want the conversation's 4 blocks", policy, n)
		}
		// The busiest, within the load bound: a 4th request of at most
		// 1.5 × 8 / 3 = 4.
		s.Backends[0].state.Add(2 * activeUnit)
		s.Backends[1].state.Add(3 * activeUnit)
		s.Backends[2].state.Add(2 * activeUnit)
		next := append(append([]uint64(nil), conv...), chainOf(200, 2)...)
		d, res := route(t, s, &Request{Chain: next, Followup: true, Now: now + 1})
		if d.Backend.Index != 1 || d.Phase != PhaseFollowup || d.Cached != 8 || d.Rule != RuleDeparted {
			t.Fatalf("%s: routed to %d (%v, %d cached, %v), want back to 1 with the prompt cached", policy, d.Backend.Index, d.Phase, d.Cached, d.Rule)
		}
		res.ReleaseActive()
		// Past the bound (6 requests there, 2 and 2 elsewhere: a 7th
		// exceeds 1.5 × 11 / 3 = 5.5) it goes to the prompt's other
		// holders.
		s.Backends[1].state.Add(3 * activeUnit)
		d, res = route(t, s, &Request{Chain: next, Followup: true, Now: now + 1})
		if d.Backend.Index == 1 || d.Cached != 8 || d.Overflowed != RuleDeparted {
			t.Fatalf("%s past the bound: routed to %d (%d cached, overflowed %v)", policy, d.Backend.Index, d.Cached, d.Overflowed)
		}
		res.ReleaseActive()

		// Without that memory it is placed by load among the prompt's
		// holders.
		other := append(append([]uint64(nil), sys...), chainOf(300, 6)...)
		d, res = route(t, s, &Request{Chain: other, Followup: true, Now: now + 1})
		if d.Backend.Index == 1 {
			t.Fatalf("%s: a follow-up with no departed holder went to the busiest backend", policy)
		}
		res.ReleaseActive()
		s.Backends[0].state.Add(^uint64(2*activeUnit) + 1)
		s.Backends[1].state.Add(^uint64(6*activeUnit) + 1)
		s.Backends[2].state.Add(^uint64(2*activeUnit) + 1)
		noLoadLeft(t, s)
	}
}
