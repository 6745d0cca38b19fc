package admit

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A fleet under twice its capacity, simulated on the manual clock in 1 ms
// steps: 4 backends of 4 slots, service times of 250-750 ms, arrivals at
// twice the rate the fleet completes, 10% high and 10% low priority, one
// tenant sending 80% of the traffic and nine others the rest, a quarter of the requests waiting for a
// holder. Checked at every step: no slot is idle while an unbound waiter
// could use it (so goodput is the fleet's capacity); and at the end: every
// high-priority request was admitted and waited less than normal ones,
// low priority still got its guaranteed share, and every request was
// admitted, shed with 429, or is still waiting.
func TestOverloadSimulation(t *testing.T) {
	const backends, limit = 4, 4
	const step = time.Millisecond
	const seconds = 60
	r := newRig(t, Config{Backends: fleet(backends), MaxInflight: limit, QueueSize: 64,
		QueueTimeout: 2 * time.Second, HolderWait: 100 * time.Millisecond})
	a := r.a
	rng := rand.New(rand.NewPCG(1, 2))
	type job struct {
		tk  *Ticket
		end int64
	}
	var running []job
	var granted []*Ticket
	var waits [NumClasses][]time.Duration
	var arrived, admitted, shedN, completed int
	var arrivedC, admittedC [NumClasses]int
	var floodWaits, otherWaits, otherFree []time.Duration // normal class
	var floodIn, floodAdm, otherIn, otherAdm int
	var reasons [numReasons]int
	wake := func(tk *Ticket, seq uint64) {
		if tk.State() == Granted {
			granted = append(granted, tk)
			return
		}
		shedN++
		reasons[tk.Reason()]++
		a.Done(tk)
	}
	var busy int64 // slot-milliseconds of service given
	begin := func(tk *Ticket) bool {
		for {
			switch a.Admit(tk) {
			case Queued:
				return false
			case Shed:
				shedN++
				reasons[tk.Reason()]++
				a.Done(tk)
				return false
			}
			// The policy: the least busy backend of the room.
			best := -1
			tk.Room().Each(func(b int) {
				if best < 0 || a.Inflight(b) < a.Inflight(best) {
					best = b
				}
			})
			if a.Take(tk, best) {
				break
			}
		}
		admitted++
		admittedC[tk.Class]++
		if tk.fromQueue {
			waits[tk.Class] = append(waits[tk.Class], tk.Waited())
		}
		if tk.Class == Normal {
			if tk.Tenant == 1 {
				floodAdm++
				floodWaits = append(floodWaits, tk.Waited())
			} else {
				otherAdm++
				otherWaits = append(otherWaits, tk.Waited())
				if tk.Preferred.Empty() {
					otherFree = append(otherFree, tk.Waited())
				}
			}
		}
		running = append(running, job{tk, r.clk.now() + int64(250+rng.IntN(501))*int64(time.Millisecond)})
		return true
	}
	all := setOf(0, 1, 2, 3)
	steps := seconds * int(time.Second/step)
	for s := 0; s < steps; s++ {
		r.clk.advance(step)
		now := r.clk.now()
		keep := running[:0]
		for _, j := range running {
			if j.end <= now {
				completed++
				a.Done(j.tk)
			} else {
				keep = append(keep, j)
			}
		}
		running = keep
		a.Sweep()
		for len(granted) > 0 {
			tk := granted[0]
			granted = granted[1:]
			begin(tk)
		}
		// Capacity is 16 slots / 0.5 s = 32 per second; 64 arrive.
		// The last 3 s only drain what waits.
		for k := 0; k < 2 && s%(1000/32) == 0 && s < steps-3000; k++ {
			arrived++
			tk := &Ticket{Eligible: all, Wake: wake}
			switch p := rng.IntN(10); {
			case p == 0:
				tk.Class = High
			case p == 1:
				tk.Class = Low
			default:
				tk.Class = Normal
			}
			arrivedC[tk.Class]++
			if rng.IntN(5) != 0 {
				tk.Tenant = 1 // the flood
			} else {
				tk.Tenant = uint64(2 + rng.IntN(9))
			}
			if rng.IntN(4) == 0 {
				tk.Preferred = setOf(rng.IntN(backends))
			}
			if tk.Class == Normal {
				if tk.Tenant == 1 {
					floodIn++
				} else {
					otherIn++
				}
			}
			begin(tk)
		}
		for len(granted) > 0 {
			tk := granted[0]
			granted = granted[1:]
			begin(tk)
		}
		if s < steps-3000 {
			busy += int64(len(running))
		}
		// Work conservation.
		a.mu.Lock()
		for b := 0; b < backends; b++ {
			if a.Inflight(b) >= limit {
				continue
			}
			for c := range a.q {
				for w := a.q[c].head; w != nil; w = w.cnext {
					if !w.bound && w.usable(b) {
						a.mu.Unlock()
						t.Fatalf("step %d: backend %d has a free slot while a waiter could use it", s, b)
					}
				}
			}
		}
		a.mu.Unlock()
	}
	util := float64(busy) / float64((steps-3000)*backends*limit)
	p99of := func(w []time.Duration) time.Duration {
		w = slices.Clone(w)
		slices.Sort(w)
		if len(w) == 0 {
			return 0
		}
		return w[len(w)*99/100]
	}
	p99 := func(c Class) time.Duration { return p99of(waits[c]) }
	t.Logf("arrived %d admitted %d shed %d (full %d, timeout %d, preempted %d) completed %d; slots busy %.3f; wait p99 high %v normal %v low %v",
		arrived, admitted, shedN, reasons[ReasonQueueFull], reasons[ReasonTimeout], reasons[ReasonPreempted], completed, util, p99(High), p99(Normal), p99(Low))
	for c := High; c < NumClasses; c++ {
		t.Logf("%s: arrived %d admitted %d (%.2f)", c, arrivedC[c], admittedC[c], float64(admittedC[c])/float64(arrivedC[c]))
	}
	t.Logf("normal, the flooding tenant: arrived %d admitted %d, wait p99 %v; the nine others: arrived %d admitted %d, wait p99 %v (%v without a holder to wait for)",
		floodIn, floodAdm, p99of(floodWaits), otherIn, otherAdm, p99of(otherWaits), p99of(otherFree))
	// Ten tenants share the normal class's slots: the nine others, each
	// asking for less than a tenth, are all served, and wait less.
	if otherAdm != otherIn || p99of(otherWaits) >= p99of(floodWaits) {
		t.Errorf("the flood took the others' capacity")
	}
	if util < 0.95 {
		t.Errorf("slots busy %.3f of the time, want at least 0.95", util)
	}
	if p99(High) >= p99(Normal) || admittedC[High] != arrivedC[High] {
		t.Errorf("high: wait p99 %v (normal %v), admitted %d of %d", p99(High), p99(Normal), admittedC[High], arrivedC[High])
	}
	// Low is passed over at most K=8 times in a row while it waits: it
	// gets at least about one slot in nine (while normal, with more
	// demand than the fleet has room for, gets the rest).
	if minLow := completed / 9 * 9 / 10; admittedC[Low] < min(minLow, arrivedC[Low]) {
		t.Errorf("low admitted %d, want at least %d", admittedC[Low], minLow)
	}
	if got := admitted + shedN + a.Queued(); got != arrived {
		t.Errorf("admitted %d + shed %d + queued %d != arrived %d", admitted, shedN, a.Queued(), arrived)
	}
}
