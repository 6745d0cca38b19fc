package sched

import (
	"testing"
	"time"
)

// A follow-up whose conversation the capacity bound dropped knows only the
// system prompt every backend holds; it goes back to the backend its
// conversation was dropped from, however busy below its batch capacity,
// where the engine may still hold part of it, rather than to the least
// loaded holder of the prompt. Past its capacity, and predicted slower
// than another holder of the prompt, it gives the request up (kvca-cost);
// under kvca, Phase 2 of the two dispatch phases, it never does.
func TestFollowupReturnsToTheDepartedHolder(t *testing.T) {
	for _, policy := range []string{"kvca-cost", "kvca"} {
		s := newFixed(t, 3, policy)
		if err := s.SetTTFT(TTFTConfig{Capacity: 6, Base: 20 * time.Millisecond, BlockTime: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
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
		// The busiest, below its capacity of 6: five requests there, one
		// elsewhere (a count bound of 1.5 × the mean would refuse it).
		s.Backends[0].state.Add(1 * activeUnit)
		s.Backends[1].state.Add(5 * activeUnit)
		s.Backends[2].state.Add(1 * activeUnit)
		next := append(append([]uint64(nil), conv...), chainOf(200, 2)...)
		d, res := route(t, s, &Request{Chain: next, Followup: true, Now: now + 1})
		if d.Backend.Index != 1 || d.Phase != PhaseFollowup || d.Cached != 8 || d.Rule != RuleDeparted {
			t.Fatalf("%s: routed to %d (%v, %d cached, %v), want back to 1 with the prompt cached", policy, d.Backend.Index, d.Phase, d.Cached, d.Rule)
		}
		res.ReleaseActive()
		// At its capacity a 7th request waits for a slot there, longer
		// than the other holders take to compute what it holds: kvca-cost
		// sends it to them.
		s.Backends[1].state.Add(2 * activeUnit)
		d, res = route(t, s, &Request{Chain: next, Followup: true, Now: now + 1})
		switch {
		case policy == "kvca" && (d.Backend.Index != 1 || d.Rule != RuleDeparted):
			t.Fatalf("kvca at capacity: routed to %d (%v), want back to 1 whatever its load", d.Backend.Index, d.Rule)
		case policy == "kvca-cost" && (d.Backend.Index == 1 || d.Cached != 8 || d.Overflowed != RuleDeparted || d.Rule != RulePrefix):
			t.Fatalf("kvca-cost at capacity: routed to %d (%d cached, %v, overflowed %v)", d.Backend.Index, d.Cached, d.Rule, d.Overflowed)
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
		s.Backends[0].state.Add(^uint64(1*activeUnit) + 1)
		s.Backends[1].state.Add(^uint64(7*activeUnit) + 1)
		s.Backends[2].state.Add(^uint64(1*activeUnit) + 1)
		noLoadLeft(t, s)
	}
}
