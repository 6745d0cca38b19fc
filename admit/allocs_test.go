package admit

import "testing"

// The admission path allocates nothing: an immediate grant, and a request
// queued, granted on a release and taken, with the rule each decision
// names counted (make allocs runs this without -race, whose sync.Pool
// drops items at random).
func TestAdmitNoAllocs(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 8})
	a := r.a
	woken := func(*Ticket, uint64) {}
	h := &Ticket{Eligible: setOf(0), Tenant: 3, Wake: woken}
	w := &Ticket{Eligible: setOf(0), Tenant: 5, Wake: woken}
	free := &Ticket{Eligible: setOf(1), Tenant: 7}
	if a.Admit(h) != Go || !a.Take(h, 0) {
		t.Fatal("no first slot")
	}
	if n := testing.AllocsPerRun(100, func() {
		if a.Admit(free) != Go || !a.Take(free, 1) {
			t.Fatal("no immediate grant")
		}
		a.Done(free)
	}); n != 0 {
		t.Errorf("immediate grant: %v allocs", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if a.Admit(w) != Queued {
			t.Fatal("not queued")
		}
		a.Done(h)
		if w.State() != Granted || a.Admit(w) != Go || !a.Take(w, 0) {
			t.Fatal("not granted")
		}
		h, w = w, h
	}); n != 0 {
		t.Errorf("queued and granted: %v allocs", n)
	}
}
