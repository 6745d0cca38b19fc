package sched

import (
	"testing"

	"github.com/kvca/kvca/chain"
)

// TestContendedReserveSettlesForTheLastChoice: when another request moves
// the chosen backend between the read of its load and the compare-and-swap
// every time, reserveMin tries exactly nine times (attempts 0 to 8) and
// then reserves on its last choice unconditionally, reporting the load word
// it actually reserved on top of.
func TestContendedReserveSettlesForTheLastChoice(t *testing.T) {
	t.Parallel()
	s := newSched(t, 1, "least-loaded")
	b := s.Backends[0]
	calls := 0
	// ExtraLoad is read between the load and the compare-and-swap; a
	// prefill block reserved there by "another request" makes it fail.
	s.ExtraLoad = func(b *Backend) uint64 {
		calls++
		b.state.Add(1)
		return 0
	}
	d, res := route(t, s, &Request{Chain: chainOf(0, 2)})
	if calls != 9 {
		t.Fatalf("%d attempts, want 9", calls)
	}
	if d.Backend != b || d.Novel != 2 || d.Cached != 0 {
		t.Fatalf("decision %+v", d)
	}
	// Nine foreign blocks came before this request's reservation.
	if d.before != pack(0, 9) || res.before != pack(0, 9) {
		t.Fatalf("before %x (reservation %x), want %x", d.before, res.before, pack(0, 9))
	}
	if b.state.Load() != pack(1, 11) {
		t.Fatalf("state %x, want %x", b.state.Load(), pack(1, 11))
	}
	s.ExtraLoad = nil
	res.ReleaseActive()
	if b.state.Load() != pack(0, 9) {
		t.Fatalf("after release %x, want the foreign %x", b.state.Load(), pack(0, 9))
	}
}

// TestReservationRecordsTheLoadBefore: every way of reserving records the
// backend's load word just before the request, which the ttft model learns
// from (in flight ahead of it, blocks to prefill before it).
func TestReservationRecordsTheLoadBefore(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"least-loaded", "round-robin", "kvca", "cost", "ttft"} {
		t.Run(p, func(t *testing.T) {
			s := newSched(t, 1, p)
			b := s.Backends[0]
			b.state.Store(pack(2, 3))
			d, res := route(t, s, &Request{Chain: chainOf(0, 5)})
			if d.before != pack(2, 3) || res.before != pack(2, 3) || res.novel != 5 {
				t.Fatalf("before %x/%x novel %d, want %x, 5", d.before, res.before, res.novel, pack(2, 3))
			}
			if b.state.Load() != pack(3, 8) {
				t.Fatalf("state %x", b.state.Load())
			}
			res.ReleaseActive()
			if b.state.Load() != pack(2, 3) {
				t.Fatalf("after release %x", b.state.Load())
			}
		})
	}
	t.Run("ReserveOn", func(t *testing.T) {
		s := newSched(t, 1, "kvca")
		b := s.Backends[0]
		b.state.Store(pack(2, 3))
		var res Reservation
		if !s.ReserveOn(b, 5, &res) {
			t.Fatal("refused")
		}
		if res.before != pack(2, 3) || res.novel != 5 || b.state.Load() != pack(3, 8) {
			t.Fatalf("before %x novel %d state %x", res.before, res.novel, b.state.Load())
		}
		res.ReleaseActive()
		if b.state.Load() != pack(2, 3) {
			t.Fatalf("after release %x", b.state.Load())
		}
	})
	t.Run("bound", func(t *testing.T) {
		s := newSched(t, 2, "kvca")
		b := s.Backends[0]
		b.state.Store(pack(2, 3))
		d, res := route(t, s, &Request{Chain: chainOf(0, 5), Bound: 1, Pin: true})
		if d.Backend != b || d.before != pack(2, 3) || b.state.Load() != pack(3, 8) {
			t.Fatalf("%+v state %x", d, b.state.Load())
		}
		res.ReleaseActive()
	})
}

// TestPinnedToTheFirstBackend: backend 0 is a binding like any other, and
// the blocks it already holds are not reserved again.
func TestPinnedToTheFirstBackend(t *testing.T) {
	t.Parallel()
	for _, p := range Policies() {
		t.Run(p, func(t *testing.T) {
			s := newSched(t, 3, p)
			c := chainOf(0, 6)
			s.Table.Touch(c[:4], 0, s.Table.Now())
			s.Table.Touch(c, 2, s.Table.Now())
			s.Backends[0].state.Store(pack(5, 0)) // the busiest
			d, res := route(t, s, &Request{Chain: c, Followup: true, Bound: 1, Pin: true})
			b := d.Backend
			if b.Index != 0 || !d.Bound || d.Cached != 4 || d.Novel != 2 || d.Phase != PhaseFollowup || b.state.Load() != pack(6, 2) {
				t.Fatalf("%+v on %d, state %x", d, b.Index, b.state.Load())
			}
			res.ReleaseActive()
		})
	}
}

// TestBindingBeyondTheBackends: a binding to an index the scheduler does
// not have (the backend list shrank) binds nothing, even with every index
// a set can hold in use.
func TestBindingBeyondTheBackends(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, chain.MaxBackends} {
		for _, pin := range []bool{false, true} {
			s := newSched(t, n, "kvca")
			c := chainOf(0, 4)
			s.Table.Touch(c, 0, s.Table.Now())
			s.Table.Touch(c, 1, s.Table.Now())
			// A follow-up tied between backends 0 and 1: the tie goes by
			// turns, not to the binding.
			d, res := route(t, s, &Request{Chain: c, Followup: true, Bound: n + 1, Pin: pin})
			if d.Bound || d.Backend.Index != 1 || d.Cached != 4 {
				t.Fatalf("%d backends, pin %v: %+v on %d", n, pin, d, d.Backend.Index)
			}
			res.ReleaseActive()
		}
	}
}

// TestBindingToTheFirstBackendBreaksTies: among tied holders the binding
// to backend 0 wins every time, where turns would alternate.
func TestBindingToTheFirstBackendBreaksTies(t *testing.T) {
	t.Parallel()
	for _, p := range boundPolicies {
		t.Run(p, func(t *testing.T) {
			s := newSched(t, 2, p)
			c := chainOf(0, 4)
			s.Table.Touch(c, 0, s.Table.Now())
			s.Table.Touch(c, 1, s.Table.Now())
			for k := range 3 {
				d, res := route(t, s, &Request{Chain: c, Followup: true, Bound: 1})
				if d.Backend.Index != 0 || d.Bound || d.Cached != 4 {
					t.Fatalf("turn %d: %+v on %d", k, d, d.Backend.Index)
				}
				res.ReleaseActive()
			}
		})
	}
}
