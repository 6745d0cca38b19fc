package admit

import (
	"testing"
)

// Without a limit the edge's calls return at once and allocate nothing.
func BenchmarkBypass(b *testing.B) {
	a, _ := New(Config{Backends: fleet(8)})
	tk := &Ticket{Eligible: setOf(0, 1, 2, 3, 4, 5, 6, 7)}
	b.ReportAllocs()
	for b.Loop() {
		if a.Admit(tk) != Go || !a.Take(tk, 3) {
			b.Fatal("refused")
		}
		a.Done(tk)
	}
}

// With a limit and room: the steady state of a loaded but not
// overloaded fleet.
func BenchmarkAdmitImmediate(b *testing.B) {
	a, _ := New(Config{Backends: fleet(8), MaxInflight: 64, QueueSize: 64})
	defer a.Close()
	tk := &Ticket{Eligible: setOf(0, 1, 2, 3, 4, 5, 6, 7)}
	b.ReportAllocs()
	for b.Loop() {
		if a.Admit(tk) != Go || !a.Take(tk, 3) {
			b.Fatal("refused")
		}
		a.Done(tk)
	}
}

func BenchmarkAdmitImmediateParallel(b *testing.B) {
	a, _ := New(Config{Backends: fleet(8), MaxInflight: 1 << 20, QueueSize: 64})
	defer a.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		tk := &Ticket{Eligible: setOf(0, 1, 2, 3, 4, 5, 6, 7)}
		i := 0
		for pb.Next() {
			i++
			if a.Admit(tk) != Go || !a.Take(tk, i&7) {
				b.Fatal("refused")
			}
			a.Done(tk)
		}
	})
}

// One request queued and granted per iteration: enqueue behind a full
// backend, the holder's release hands the slot over, the waiter is
// admitted and becomes the next holder. Tenants vary so flows come and go.
func BenchmarkEnqueueGrant(b *testing.B) {
	a, _ := New(Config{Backends: fleet(4), MaxInflight: 1, QueueSize: 64})
	defer a.Close()
	woken := 0
	wake := func(*Ticket, uint64) { woken++ }
	h := &Ticket{Eligible: setOf(0), Wake: wake}
	w := &Ticket{Eligible: setOf(0), Wake: wake}
	a.Admit(h)
	a.Take(h, 0)
	i := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		i++
		w.Tenant = i & 7
		w.Class = Class(i % NumClasses)
		if a.Admit(w) != Queued {
			b.Fatal("not queued")
		}
		a.Done(h)
		if w.State() != Granted || a.Admit(w) != Go || !a.Take(w, 0) {
			b.Fatal("not granted")
		}
		h, w = w, h
	}
	if woken != b.N {
		b.Fatalf("woken %d of %d", woken, b.N)
	}
}
