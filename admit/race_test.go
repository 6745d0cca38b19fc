package admit

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/sched"
)

// A grant and a cancellation of the same waiter race: whichever comes
// first, the slot ends with the next waiter and nothing leaks.
func TestWakeCancelRace(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 4})
	a := r.a
	for i := 0; i < 2000; i++ {
		h, x, y := r.ticket(Normal, "", 0), r.ticket(Normal, "", 0), r.ticket(Normal, "", 0)
		r.hold(t, h, 0)
		if a.Admit(x) != Queued || a.Admit(y) != Queued {
			t.Fatal("not queued")
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); <-start; a.Done(h) }()
		go func() { defer wg.Done(); <-start; a.Done(x) }()
		close(start)
		wg.Wait()
		if y.State() != Granted || y.Backend() != 0 || x.Backend() != -1 || a.Inflight(0) != 1 || a.Queued() != 0 {
			t.Fatalf("iteration %d: y state %d backend %d, x backend %d, inflight %d, queued %d",
				i, y.State(), y.Backend(), x.Backend(), a.Inflight(0), a.Queued())
		}
		r.hold(t, y, 0)
		a.Done(y)
		if a.Inflight(0) != 0 {
			t.Fatalf("iteration %d: inflight %d", i, a.Inflight(0))
		}
		r.w.take()
	}
}

// Many owners admit, queue, cancel, take and release at once: no backend
// ever holds more than its limit, and every slot comes back; without and
// with a high-priority pool.
func TestExactReleaseUnderStress(t *testing.T) {
	for _, pool := range []int{0, 2} {
		t.Run(fmt.Sprintf("pool %d", pool), func(t *testing.T) { exactReleaseUnderStress(t, pool) })
	}
}

func exactReleaseUnderStress(t *testing.T, pool int) {
	const backends, limit, workers, rounds = 4, 3, 24, 300
	r := newRig(t, Config{Backends: fleet(backends), MaxInflight: limit, QueueSize: 6,
		QueueTimeout: 50 * time.Millisecond, EngineAware: true, HighPool: pool})
	a := r.a
	// Meanwhile time passes: deadlines and holder waits expire, engines
	// report queues and stop, a backend fails and recovers.
	stop := make(chan struct{})
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		rng := rand.New(rand.NewPCG(99, 1))
		for {
			select {
			case <-stop:
				return
			default:
			}
			r.clk.advance(time.Millisecond)
			a.Sweep()
			b := rng.IntN(backends)
			a.AdaptToEngine(b, sched.EngineSignals{Waiting: int32(rng.IntN(2))}, rng.IntN(3) != 0)
			if rng.IntN(50) == 0 {
				be := a.cfg.Backends[b]
				be.SetHealthy(!be.Healthy())
				a.Refill(b)
			}
			runtime.Gosched()
		}
	}()
	var holding [backends]atomic.Int32
	var over atomic.Int32
	var granted, shed, cancelled atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			woken := make(chan uint64, rounds+1) // stale wakes of cancelled waits pile up here
			tk := &Ticket{Wake: func(_ *Ticket, seq uint64) { woken <- seq }}
			for i := 0; i < rounds; i++ {
				tk.Class = Class(rng.IntN(NumClasses))
				tk.Tenant = uint64(rng.IntN(3))
				tk.Eligible = setOf()
				for tk.Eligible.Empty() {
					for b := 0; b < backends; b++ {
						if rng.IntN(2) == 0 {
							tk.Eligible.Add(b)
						}
					}
				}
				tk.Preferred = setOf()
				if rng.IntN(4) == 0 {
					tk.Preferred.Add(rng.IntN(backends))
					tk.HolderWait = time.Duration(rng.IntN(10)) * time.Millisecond
				}
				b := -1
			admit:
				for b < 0 {
					switch a.Admit(tk) {
					case Shed:
						shed.Add(1)
						a.Done(tk)
						break admit
					case Queued:
						if rng.IntN(4) == 0 {
							runtime.Gosched()
							a.Done(tk) // the client leaves, maybe as it is granted
							cancelled.Add(1)
							break admit
						}
						for seq := <-woken; seq != tk.Seq(); seq = <-woken {
						}
						if tk.State() == Dropped {
							shed.Add(1)
							a.Done(tk)
							break admit
						}
						granted.Add(1)
						continue // Admit again: Go
					}
					room := tk.Room()
					var cand []int
					room.Each(func(i int) { cand = append(cand, i) })
					c := cand[rng.IntN(len(cand))]
					if a.Take(tk, c) {
						b = c
					}
				}
				if b < 0 {
					continue
				}
				if n := holding[b].Add(1); n > limit {
					over.Add(1)
				}
				runtime.Gosched()
				holding[b].Add(-1)
				a.Done(tk)
			}
		}(uint64(w))
	}
	wg.Wait()
	close(stop)
	<-chaosDone
	if over.Load() != 0 {
		t.Fatalf("a backend held more than %d slots %d times", limit, over.Load())
	}
	for b := 0; b < backends; b++ {
		if a.Inflight(b) != 0 {
			t.Fatalf("backend %d keeps %d slots", b, a.Inflight(b))
		}
	}
	if a.Queued() != 0 {
		t.Fatalf("%d left queued", a.Queued())
	}
	if n := tenantSlots(a); n != 0 {
		t.Fatalf("tenants keep %d slots", n)
	}
	t.Logf("granted from the queue %d, shed %d, cancelled %d", granted.Load(), shed.Load(), cancelled.Load())
	if granted.Load() == 0 {
		t.Fatal("the queue was never used")
	}
}

// The admitter's own timer sheds and unbinds while owners admit, wait and
// cancel: every wait ends, and every slot comes back.
func TestStressWithTimer(t *testing.T) {
	const backends, limit, workers, rounds = 2, 2, 8, 300
	a, err := New(Config{Backends: fleet(backends), MaxInflight: limit, QueueSize: 4,
		QueueTimeout: time.Millisecond, HolderWait: 200 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var holding [backends]atomic.Int32
	var over, timedOut atomic.Int32
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 3))
			tk := &Ticket{}
			for i := 0; i < rounds; i++ {
				tk.Class = Class(rng.IntN(NumClasses))
				tk.Tenant = uint64(rng.IntN(4))
				tk.Eligible = setOf(0, 1)
				tk.Preferred = setOf()
				if rng.IntN(3) == 0 {
					tk.Preferred.Add(rng.IntN(backends))
				}
				var done chan struct{}
				if rng.IntN(5) == 0 {
					done = make(chan struct{})
					close(done) // the client is already gone: if it waits, it leaves
				}
				b := -1
				for b < 0 {
					v := a.AdmitWait(tk, done)
					if v != Go {
						if v == Shed && tk.Reason() == ReasonTimeout {
							timedOut.Add(1)
						}
						break
					}
					c := 0
					if !tk.Room().Has(0) || tk.Room().Has(1) && rng.IntN(2) == 0 {
						c = 1
					}
					if a.Take(tk, c) {
						b = c
					}
				}
				if b >= 0 {
					if holding[b].Add(1) > limit {
						over.Add(1)
					}
					runtime.Gosched()
					holding[b].Add(-1)
				}
				a.Done(tk)
			}
		}(uint64(w))
	}
	wg.Wait()
	if over.Load() != 0 || a.Inflight(0) != 0 || a.Inflight(1) != 0 || a.Queued() != 0 {
		t.Fatalf("over the limit %d times; left in flight %d %d, queued %d", over.Load(), a.Inflight(0), a.Inflight(1), a.Queued())
	}
	t.Logf("timed out %d", timedOut.Load())
}

// A wake left unread in the channel (a wait that ended with the client
// leaving) does not keep the next wait's wake out: AdmitWait would wait
// for it forever.
func TestStaleWakeDoesNotHideTheNext(t *testing.T) {
	a, err := New(Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 1, QueueTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tk := &Ticket{woken: make(chan uint64, 1)}
	a.deliver(&wake{t: tk, ch: tk.woken, seq: 1})
	a.deliver(&wake{t: tk, ch: tk.woken, seq: 2})
	a.deliver(&wake{t: tk, ch: tk.woken, seq: 1}) // a stale one delivered late
	if got := <-tk.woken; got != 2 {
		t.Fatalf("channel holds wake %d, want 2", got)
	}
}

// Slots of one tenant taken and released on many goroutines at once
// leave its bucket marked whenever it holds any, though spread unmarks
// the buckets it finds empty meanwhile: the tenants' spread, read from
// the marked buckets only, counts every slot held.
func TestTenantCountsRace(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1})
	a := r.a
	key := r.key("acme")
	const workers = 8
	for i := 0; i < 500; i++ {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tk := &Ticket{Tenant: key}
				for range 4 {
					a.charge(tk)
					a.discharge(tk)
					a.spread() // unmarks the bucket when it finds it empty
				}
				if w%2 == 0 {
					a.charge(tk) // half of them end holding a slot
				}
			}()
		}
		close(start)
		wg.Wait()
		if lo, hi := a.spread(); lo != workers/2 || hi != workers/2 {
			t.Fatalf("iteration %d: spread %d, %d, want %d, %d", i, lo, hi, workers/2, workers/2)
		}
		for range workers / 2 {
			a.discharge(&Ticket{Tenant: key, lb: bucket(key)})
		}
		if lo, hi := a.spread(); lo != 0 || hi != 0 {
			t.Fatalf("iteration %d: spread %d, %d after every release", i, lo, hi)
		}
	}
}
