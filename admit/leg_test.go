package admit

import (
	"testing"

	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// TestLeg: a leg takes a free slot at once or none, never waits, holds at
// most one, and gives it back once, to a waiter when one waits.
func TestLeg(t *testing.T) {
	bs := []*sched.Backend{sched.NewBackend(0, "http://a", "a"), sched.NewBackend(1, "http://b", "b")}
	a, err := New(Config{Backends: bs, MaxInflight: 1, QueueSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var both chain.Set
	both.Add(0)
	both.Add(1)
	if r := a.Free(&both, Normal); r.Len() != 2 {
		t.Fatalf("free %v, want both", r)
	}
	var l Leg
	if !a.TakeLeg(&l, 0) || l.Backend() != 0 || a.Inflight(0) != 1 {
		t.Fatalf("take: backend %d inflight %d", l.Backend(), a.Inflight(0))
	}
	if r := a.Free(&both, Normal); r.Has(0) || !r.Has(1) {
		t.Fatalf("free %v after the take", r)
	}
	var other Leg
	if a.TakeLeg(&other, 0) || other.Backend() != -1 {
		t.Fatal("a second leg took a full backend's slot")
	}
	if !a.TakeLeg(&l, 1) || a.Inflight(0) != 0 || a.Inflight(1) != 1 {
		t.Fatalf("moving the leg: inflight %d %d", a.Inflight(0), a.Inflight(1))
	}
	// A request waits for b's slot; the leg's release hands it over.
	woken := make(chan uint64, 1)
	tk := &Ticket{Wake: func(_ *Ticket, seq uint64) { woken <- seq }}
	tk.Eligible.Add(1)
	if v := a.Admit(tk); v != Queued {
		t.Fatalf("admit %v, want queued", v)
	}
	a.DoneLeg(&l)
	a.DoneLeg(&l)
	if <-woken != tk.Seq() || tk.State() != Granted || tk.Backend() != 1 || a.Inflight(1) != 1 {
		t.Fatalf("the waiter: state %d backend %d inflight %d", tk.State(), tk.Backend(), a.Inflight(1))
	}
	a.Done(tk)
	if a.Inflight(0)+a.Inflight(1) != 0 {
		t.Fatalf("slots held at the end: %d %d", a.Inflight(0), a.Inflight(1))
	}
	// Without a limit a leg holds nothing and may go anywhere.
	u, _ := New(Config{Backends: bs})
	var free Leg
	if !u.TakeLeg(&free, 0) || free.Backend() != -1 {
		t.Fatal("an unlimited admitter's leg")
	}
}

// TestFollow: a ticket's slot moves to where the request went, over that
// backend's limit if need be, and Done releases it there.
func TestFollow(t *testing.T) {
	bs := []*sched.Backend{sched.NewBackend(0, "http://a", "a"), sched.NewBackend(1, "http://b", "b")}
	a, err := New(Config{Backends: bs, MaxInflight: 1, QueueSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var other Leg
	if !a.TakeLeg(&other, 1) {
		t.Fatal("leg")
	}
	tk := &Ticket{}
	tk.Eligible.Add(0)
	tk.Eligible.Add(1)
	if a.Admit(tk) != Go || !a.Take(tk, 0) {
		t.Fatal("admit")
	}
	a.Follow(tk, 1)
	if tk.Backend() != 1 || a.Inflight(0) != 0 || a.Inflight(1) != 2 {
		t.Fatalf("after Follow: backend %d inflight %d %d", tk.Backend(), a.Inflight(0), a.Inflight(1))
	}
	a.Done(tk)
	a.DoneLeg(&other)
	if a.Inflight(0)+a.Inflight(1) != 0 {
		t.Fatalf("slots held at the end: %d %d", a.Inflight(0), a.Inflight(1))
	}
	a.Follow(&Ticket{}, 1) // holds none: takes none
	if a.Inflight(1) != 0 {
		t.Fatal("a ticket without a slot took one")
	}
}
