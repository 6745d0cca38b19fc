package admit

import (
	"testing"
	"time"

	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// call is what the edge keeps per request, as far as admission goes.
type call struct {
	req sched.Request
	dec sched.Decision
	res sched.Reservation
	tk  Ticket
}

func chainOf(n int) []uint64 {
	c := make([]uint64, n)
	for i := range c {
		c[i] = uint64(i+1) * 0x9e3779b97f4a7c15
	}
	return c
}

// start runs the edge's steps from a planned request (or a granted one)
// to a backend: Admit, route among the room, Take.
func start(t *testing.T, a *Admitter, s *sched.Scheduler, c *call) Verdict {
	t.Helper()
	for {
		c.tk.Eligible = a.Candidates(&c.req)
		Estimate(s.Table, &c.req, &c.tk)
		if v := a.Admit(&c.tk); v != Go {
			return v
		}
		allowed := c.req.Allowed
		c.req.Allowed = c.tk.Room()
		ok := s.Route(&c.req, &c.dec, &c.res)
		c.req.Allowed = allowed
		if !ok {
			t.Fatal("no backend in the room")
		}
		if a.Take(&c.tk, c.dec.Backend.Index) {
			return Go
		}
		c.res.ReleaseActive()
	}
}

func finish(a *Admitter, c *call) {
	c.res.ReleaseActive()
	a.Done(&c.tk)
}

func TestWithScheduler(t *testing.T) {
	for _, wait := range []time.Duration{0, time.Second} {
		bs := fleet(2)
		table := chain.NewTable(chain.Config{TTL: time.Minute, MaxBlocks: 1 << 12})
		s, err := sched.New(bs, table, 4, "kvca-cost")
		if err != nil {
			t.Fatal(err)
		}
		r := newRig(t, Config{Backends: bs, MaxInflight: 1, QueueSize: 4, HolderWait: wait})
		a := r.a
		conv := chainOf(8)

		first := &call{req: sched.Request{Chain: conv[:4], Now: table.Now()}}
		first.tk.Wake = r.w.fn
		if start(t, a, s, first) != Go {
			t.Fatal("first turn not admitted")
		}
		home := first.dec.Backend.Index
		first.res.ReleasePrefill()
		table.Touch(conv[:4], home, table.Now()) // its answer began: learned
		// The first turn is still streaming: its backend is full.

		next := &call{req: sched.Request{Chain: conv, Followup: true, Now: table.Now()}}
		next.tk.Wake, next.tk.Class = r.w.fn, Normal
		v := start(t, a, s, next)
		if wait == 0 {
			// Not waiting for the holder: the other backend, recomputing.
			if v != Go || next.dec.Backend.Index == home || next.dec.Cached != 0 {
				t.Fatalf("no holder wait: verdict %d backend %d cached %d", v, next.dec.Backend.Index, next.dec.Cached)
			}
			finish(a, next)
			finish(a, first)
			continue
		}
		if v != Queued {
			t.Fatalf("verdict %d, want to wait for the holder", v)
		}
		finish(a, first) // the holder's slot passes to the follow-up
		if got := r.w.take(); len(got) != 1 || next.tk.State() != Granted || next.tk.Backend() != home {
			t.Fatalf("granted on %d, want %d", next.tk.Backend(), home)
		}
		next.req.Now = table.Now()
		if start(t, a, s, next) != Go || next.dec.Backend.Index != home || next.dec.Phase != sched.PhaseFollowup || next.dec.Cached != 4 {
			t.Fatalf("routed to %d phase %v cached %d", next.dec.Backend.Index, next.dec.Phase, next.dec.Cached)
		}
		finish(a, next)
		if a.Inflight(0)+a.Inflight(1) != 0 || bs[0].Active()+bs[1].Active() != 0 {
			t.Fatal("load left over")
		}
	}
}

// Estimate reads one walk of the chain: a follow-up prefers the holders of
// its longest known prefix, which hold Held of its Blocks; backends
// holding a shorter prefix share Shared blocks of it. A first turn
// prefers none.
func TestEstimate(t *testing.T) {
	table := chain.NewTable(chain.Config{TTL: time.Minute, MaxBlocks: 1 << 12})
	conv := chainOf(10)
	table.Touch(conv[:3], 0, table.Now()) // a system prompt, on 0 and 1
	table.Touch(conv[:3], 1, table.Now())
	table.Touch(conv[:6], 2, table.Now()) // the conversation so far, on 2
	table.Touch(conv[:2], 3, table.Now())
	var tk Ticket
	Estimate(table, &sched.Request{Chain: conv, Followup: true, Now: table.Now()}, &tk)
	if tk.Blocks != 10 || tk.Held != 6 || tk.Preferred != setOf(2) || tk.Shared != 3 || tk.Sharing != setOf(0, 1, 3) {
		t.Fatalf("follow-up: blocks %d held %d preferred %v shared %d sharing %v", tk.Blocks, tk.Held, tk.Preferred, tk.Shared, tk.Sharing)
	}
	Estimate(table, &sched.Request{Chain: conv, Now: table.Now()}, &tk)
	if tk.Blocks != 10 || tk.Held != 0 || !tk.Preferred.Empty() || tk.Shared != 6 || tk.Sharing != setOf(0, 1, 2, 3) {
		t.Fatalf("first turn: blocks %d held %d preferred %v shared %d sharing %v", tk.Blocks, tk.Held, tk.Preferred, tk.Shared, tk.Sharing)
	}
	Estimate(table, &sched.Request{Now: table.Now()}, &tk)
	if tk.Blocks != 0 || !tk.Preferred.Empty() || !tk.Sharing.Empty() {
		t.Fatal("no chain: an estimate left over")
	}
}

// ratedScheduler is n backends behind a kvca-cost scheduler whose
// learned prefill is fixed at 1ms plus 1ms per novel block.
func ratedScheduler(t *testing.T, n int) ([]*sched.Backend, *chain.Table, *sched.Scheduler) {
	t.Helper()
	bs := fleet(n)
	table := chain.NewTable(chain.Config{TTL: time.Minute, MaxBlocks: 1 << 12})
	s, err := sched.New(bs, table, 4, "kvca-cost")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetTTFT(sched.TTFTConfig{BlockTime: time.Millisecond, Base: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return bs, table, s
}

// With a prefill bound, a backend whose pending prefill (kvca's requests
// there not yet at their first byte) would take longer than the bound
// takes no new request but a high-priority one, though it has free slots;
// once that prefill is done, the held-back waiter is granted.
func TestPrefillBound(t *testing.T) {
	bs, table, s := ratedScheduler(t, 1)
	r := newRig(t, Config{Backends: bs, MaxInflight: 4, QueueSize: 4, MaxPrefill: 5 * time.Millisecond})
	a := r.a
	long := &call{req: sched.Request{Chain: chainOf(10), Now: table.Now()}}
	long.tk.Class = Normal
	if start(t, a, s, long) != Go || bs[0].PendingPrefillTime() != 10*time.Millisecond {
		t.Fatalf("the long prompt: pending prefill %v", bs[0].PendingPrefillTime())
	}
	normal := &call{req: sched.Request{Chain: chainOf(2), Now: table.Now()}}
	normal.tk.Wake, normal.tk.Class = r.w.fn, Normal
	if v := start(t, a, s, normal); v != Queued {
		t.Fatalf("normal request: verdict %d with 10 ms of prefill waiting, want queued", v)
	}
	high := &call{req: sched.Request{Chain: chainOf(3), Now: table.Now()}}
	high.tk.Class = High
	if v := start(t, a, s, high); v != Go {
		t.Fatalf("high request: verdict %d, want go", v)
	}
	// The high request's 3 blocks are still ahead: 3 ms, within the bound.
	long.res.ReleasePrefill()
	a.PrefillDone(0)
	if got := r.w.take(); len(got) != 1 || normal.tk.State() != Granted {
		t.Fatalf("after the prefill: woken %d, state %d", len(got), normal.tk.State())
	}
	for _, c := range []*call{long, high} {
		finish(a, c)
	}
	normal.req.Now = table.Now()
	if start(t, a, s, normal) != Go {
		t.Fatal("the granted request did not go")
	}
	finish(a, normal)
	if a.Inflight(0) != 0 || bs[0].Active() != 0 || bs[0].Prefill() != 0 {
		t.Fatal("load left over")
	}
}

// With engines that preempt for high priority, a high-priority follow-up
// preempts at its full holder only while none of kvca's requests there is
// before its first token: the engine would preempt that one, the latest
// arrival, whose first token would then pay for this one's. Until then it
// takes a backend with room; once the holder's prefill is done, the next
// one goes to the holder past its limit.
func TestHighPreemptsOnlyAfterTheHoldersPrefill(t *testing.T) {
	bs, table, s := ratedScheduler(t, 2)
	r := newRig(t, Config{Backends: bs, MaxInflight: 1, QueueSize: 4, HighPreempts: true})
	a := r.a
	conv := chainOf(8)
	table.Touch(conv[:6], 0, table.Now())
	only0 := setOf(0)
	busy := &call{req: sched.Request{Chain: []uint64{11, 12, 13}, Now: table.Now(), Allowed: &only0}}
	busy.tk.Class = Normal
	if start(t, a, s, busy) != Go || busy.dec.Backend.Index != 0 || bs[0].PendingPrefillTime() == 0 {
		t.Fatal("the normal request is not prefilling on the holder")
	}
	early := &call{req: sched.Request{Chain: conv, Followup: true, Now: table.Now()}}
	early.tk.Class = High
	if start(t, a, s, early) != Go || early.dec.Backend.Index != 1 || a.Inflight(0) != 1 {
		t.Fatalf("high follow-up while its holder prefills: backend %d, holder inflight %d; want the free backend", early.dec.Backend.Index, a.Inflight(0))
	}
	busy.res.ReleasePrefill()
	later := &call{req: sched.Request{Chain: conv, Followup: true, Now: table.Now()}}
	later.tk.Class = High
	if start(t, a, s, later) != Go || later.dec.Backend.Index != 0 || a.Inflight(0) != 2 {
		t.Fatalf("high follow-up after the prefill: backend %d, holder inflight %d; want its holder past the limit", later.dec.Backend.Index, a.Inflight(0))
	}
	for _, c := range []*call{busy, early, later} {
		finish(a, c)
	}
	if a.Inflight(0) != 0 || a.Inflight(1) != 0 || a.Snapshot().Backends[0].High != 0 || bs[0].Active() != 0 {
		t.Fatal("load left over")
	}
}
