package sched

import (
	"testing"
	"time"

	"github.com/kvca/kvca/chain"
)

// newFixed is newSched on a table whose clock stands still, so resident
// work does not decay between the steps of a test.
func newFixed(t testing.TB, n int, policy string) *Scheduler {
	bs := make([]*Backend, n)
	for i := range bs {
		bs[i] = NewBackend(i, "http://b", "b")
	}
	at := time.Unix(1_000_000, 0)
	tab := chain.NewTable(chain.Config{TTL: time.Minute, MaxBlocks: 1 << 16, Now: func() time.Time { return at }})
	s, err := New(bs, tab, 4, policy)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const ms = int64(time.Millisecond)

// teach feeds answers on the line base + block*m with m = 0..9, 40 times.
func teach(m *predictor, base, block int64, inflight int) {
	for k := 0; k < 40; k++ {
		for x := int64(0); x < 10; x++ {
			m.learn(x, inflight, base+block*x, 0)
		}
	}
}

// slowFrom feeds m rounds of answers of 2 blocks at every in-flight level
// below levels, on the line teach(m, 2ms, 300µs) drew, those at level
// from and above 30 ms late (read as slot waits).
func slowFrom(m *predictor, rounds, levels, from int) {
	for range rounds {
		for a := range levels {
			ttft := 2*ms + 600_000
			if a >= from {
				ttft += 30 * ms
			}
			m.learn(2, a, ttft, 0)
		}
	}
}

func TestTTFTLearnsBaseAndBlockTime(t *testing.T) {
	s := newFixed(t, 1, "ttft")
	m := &s.Backends[0].model
	if m.base.Load() != int64(priorBase) || m.block.Load() != int64(priorBlock) {
		t.Fatalf("prior %d %d", m.base.Load(), m.block.Load())
	}
	teach(m, 2*ms, 300_000, 0)
	if m.base.Load() != 2*ms || m.block.Load() != 300_000 {
		t.Fatalf("learned base %d block %d, want 2000000 300000", m.base.Load(), m.block.Load())
	}
	// Answers of one size teach no slope: a fresh model keeps the prior
	// block time and fits the base alone.
	m1 := &newFixed(t, 1, "ttft").Backends[0].model
	for k := 0; k < 20; k++ {
		m1.learn(4, 0, 5*ms+4*300_000, 0)
	}
	if m1.block.Load() != int64(priorBlock) || m1.base.Load() != 5*ms+4*300_000-4*int64(priorBlock) {
		t.Fatalf("one size: base %d block %d", m1.base.Load(), m1.block.Load())
	}
	if m.capacity.Load() != 0 || m.waits.Load() != 0 {
		t.Fatalf("capacity %d waits %d from answers that never waited", m.capacity.Load(), m.waits.Load())
	}
}

// TestTTFTLeansOnTheFleet: a backend with two answers of its own, both of
// one size (no slope of their own), takes the block time the fleet has
// learned; one with hundreds of answers of its own keeps its own rates.
func TestTTFTLeansOnTheFleet(t *testing.T) {
	s := newFixed(t, 3, "ttft")
	teach(&s.Backends[0].model, 2*ms, 300_000, 0)
	m := &s.Backends[1].model
	m.learn(4, 0, 2*ms+4*300_000, 0)
	m.learn(4, 0, 2*ms+4*300_000, 0)
	if m.block.Load() != 300_000 || m.base.Load() != 2*ms {
		t.Fatalf("pooled: base %d block %d, want 2000000 300000", m.base.Load(), m.block.Load())
	}
	// A slower backend's own history outweighs the fleet's 16 answers.
	slow := &s.Backends[2].model
	teach(slow, 10*ms, 900_000, 0)
	if b := slow.block.Load(); b < 880_000 || b > 900_000 {
		t.Fatalf("own block %d, want about 900000", b)
	}
}

func TestTTFTFixedRatesAreKept(t *testing.T) {
	s := newFixed(t, 1, "ttft")
	if err := s.SetTTFT(TTFTConfig{BlockTime: 300 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	m := &s.Backends[0].model
	teach(m, 3*ms, 300_000, 0)
	if m.block.Load() != 300_000 || m.base.Load() != 3*ms {
		t.Fatalf("base %d block %d", m.base.Load(), m.block.Load())
	}
	s2 := newFixed(t, 1, "ttft")
	if err := s2.SetTTFT(TTFTConfig{Base: 2 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	m2 := &s2.Backends[0].model
	teach(m2, 2*ms, 300_000, 0)
	if m2.block.Load() != 300_000 || m2.base.Load() != 2*ms {
		t.Fatalf("base %d block %d", m2.base.Load(), m2.block.Load())
	}
	if err := s.SetTTFT(TTFTConfig{Capacity: -1}); err == nil {
		t.Fatal("negative capacity accepted")
	}
}

func TestTTFTLearnsCapacityFromTheTransition(t *testing.T) {
	s := newFixed(t, 1, "ttft")
	m := &s.Backends[0].model
	teach(m, 2*ms, 300_000, 0)
	line := func(x int64) int64 { return 2*ms + 300_000*x }
	for k := 0; k < minSeen; k++ {
		for a := 0; a < 6; a++ {
			m.learn(2, a, line(2), 0)
		}
		for a := 6; a < 9; a++ {
			m.learn(2, a, line(2)+30*ms, 0) // waited for a batch slot
		}
	}
	if m.capacity.Load() != 6 {
		t.Fatalf("capacity %d, want 6", m.capacity.Load())
	}
	// The highest level served without a wait: 5 already in flight.
	if m.served.Load() != 5 {
		t.Fatalf("served %d, want 5", m.served.Load())
	}
	if m.waits.Load() != 3*minSeen {
		t.Fatalf("waits %d, want %d", m.waits.Load(), 3*minSeen)
	}
	// Waits never enter the rate fit.
	if m.base.Load() != 2*ms || m.block.Load() != 300_000 {
		t.Fatalf("rates moved: %d %d", m.base.Load(), m.block.Load())
	}

	// Slow at every level is no capacity: the host or the backend is slow.
	s2 := newFixed(t, 1, "ttft")
	m2 := &s2.Backends[0].model
	teach(m2, 2*ms, 300_000, 0)
	for k := 0; k < minSeen; k++ {
		for a := 0; a < 9; a++ {
			m2.learn(2, a, line(2)+30*ms, 0)
		}
	}
	if m2.capacity.Load() != 0 || m2.served.Load() != 0 {
		t.Fatalf("capacity %d, served %d learned without a transition", m2.capacity.Load(), m2.served.Load())
	}
	// Never waiting: no capacity, and the levels seen are served.
	s3 := newFixed(t, 1, "ttft")
	m3 := &s3.Backends[0].model
	teach(m3, 2*ms, 300_000, 3)
	if m3.capacity.Load() != 0 || m3.served.Load() != 3 {
		t.Fatalf("capacity %d, served %d; want 0 and 3", m3.capacity.Load(), m3.served.Load())
	}
}

func TestTTFTPredict(t *testing.T) {
	s := newFixed(t, 1, "ttft")
	if err := s.SetTTFT(TTFTConfig{Capacity: 2, BlockTime: 300 * time.Microsecond, Base: 2 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	b := s.Backends[0]
	b.model.service.Store(100 * ms)
	// Below capacity: base + (5 pending + 4 novel) blocks.
	st := uint64(1)<<32 | 5
	if got := s.predict(b, st, 4, 0); got != 2*ms+9*300_000 {
		t.Fatalf("below capacity %d", got)
	}
	// 3 in flight on 2 slots: 2 must free before this one runs, 50ms each.
	st = uint64(3)<<32 | 5
	if got := s.predict(b, st, 4, 0); got != 2*ms+9*300_000+100*ms {
		t.Fatalf("above capacity %d", got)
	}
	// The engine's own queue counts when telemetry reports it.
	now := time.Now().UnixMilli()
	b.SetEngine(EngineSignals{Running: 2, Waiting: 3, At: now})
	st = uint64(1)<<32 | 5
	if got := s.predict(b, st, 4, now); got != 2*ms+9*300_000+4*50*ms {
		t.Fatalf("engine queue %d", got)
	}
	// Stale signals are ignored.
	if got := s.predict(b, st, 4, now+60_000); got != 2*ms+9*300_000 {
		t.Fatalf("stale engine signals used: %d", got)
	}
}

// prime gives every backend the same learned rates and capacity.
func prime(t *testing.T, s *Scheduler, capacity int) {
	t.Helper()
	if err := s.SetTTFT(TTFTConfig{Capacity: capacity, BlockTime: 300 * time.Microsecond, Base: 2 * time.Millisecond, ResidentEpsilon: DefaultResidentEpsilon}); err != nil {
		t.Fatal(err)
	}
	for _, b := range s.Backends {
		b.model.service.Store(100 * ms)
	}
}

func TestTTFTFirstTurnGoesToThePromptsHolderWhileItHasRoom(t *testing.T) {
	s := newFixed(t, 2, "ttft")
	prime(t, s, 2)
	sys := chainOf(0, 20)
	s.Table.Touch(sys, 1, s.Table.Now())
	first := append(append([]uint64(nil), sys...), chainOf(500, 3)...)
	s.Backends[1].state.Add(activeUnit) // busier, but with room
	d, res := route(t, s, &Request{Chain: first})
	if d.Backend.Index != 1 || d.Cached != 20 || d.Novel != 3 || d.Phase != PhaseBootstrap {
		t.Fatalf("%+v", d)
	}
	if d.Predicted != time.Duration(2*ms+3*300_000) {
		t.Fatalf("predicted %v", d.Predicted)
	}
	res.ReleaseActive()
	// Full (2 of 2 slots): waiting 50ms costs more than 20 blocks (6ms).
	s.Backends[1].state.Add(activeUnit)
	d, res = route(t, s, &Request{Chain: first})
	if d.Backend.Index != 0 || d.Novel != 23 {
		t.Fatalf("%+v", d)
	}
	res.ReleaseActive()
}

func TestTTFTFollowupStaysUnlessFarSlower(t *testing.T) {
	s := newFixed(t, 2, "ttft")
	s.SetAffinityEpsilon(-1) // ttft's own move rule, without the load bound
	prime(t, s, 2)
	conv := chainOf(0, 40)
	s.Table.Touch(conv[:30], 0, s.Table.Now())
	// Holder full by one: 2 + 10*0.3 + 50 = 55ms; elsewhere 2 + 40*0.3 =
	// 14ms plus 30 lost blocks (9ms) is 23ms: not 8x, stay.
	s.Backends[0].state.Add(2 * activeUnit)
	d, res := route(t, s, &Request{Chain: conv, Followup: true})
	if d.Backend.Index != 0 || d.Phase != PhaseFollowup || d.Cached != 30 {
		t.Fatalf("%+v", d)
	}
	res.ReleaseActive()
	// Four queued ahead: 2 + 3 + 4*50 = 205ms > 8*23: move.
	s.Backends[0].state.Add(3 * activeUnit)
	d, res = route(t, s, &Request{Chain: conv, Followup: true})
	if d.Backend.Index != 1 || d.Novel != 40 || d.Phase != PhaseFollowup {
		t.Fatalf("%+v", d)
	}
	res.ReleaseActive()
	if s.ttft.moves.Load() != 1 {
		t.Fatalf("moves %d", s.ttft.moves.Load())
	}
}

func TestTTFTTiesTakeTurns(t *testing.T) {
	s := newFixed(t, 4, "ttft")
	prime(t, s, 0)
	s.ttft.eps = -1 // turns alone, not the bound, spread these
	got := map[int]int{}
	for k := 0; k < 8; k++ {
		d, res := route(t, s, &Request{Chain: chainOf(1000*k, 5)})
		got[d.Backend.Index]++
		res.ReleaseActive()
	}
	// Each request leaves one resident turn, so the next one prefers the
	// others: every backend gets exactly two.
	for i := 0; i < 4; i++ {
		if got[i] != 2 {
			t.Fatalf("spread %v", got)
		}
	}
}

func TestResidentBound(t *testing.T) {
	s := newFixed(t, 4, "ttft")
	now := s.Table.Now()
	r := &Request{Chain: chainOf(0, 1), Now: now}
	for k := 0; k < 5; k++ {
		s.noteResident(s.Backends[0], r)
	}
	for i := 1; i < 4; i++ {
		s.noteResident(s.Backends[i], r)
	}
	elig := s.Eligible(&Request{})
	var res [chain.MaxBackends]float32
	// Mean after one more turn: 9/4; the bound is 1.25x that, 2.8125:
	// backend 0 (5+1) is out, the others (1+1) are in.
	open := s.residentBound(&elig, now, &res, 0)
	if open.Has(0) || !open.Has(1) || !open.Has(2) || !open.Has(3) {
		t.Fatalf("open %v", open)
	}
	if res[0] != 5 || res[1] != 1 {
		t.Fatalf("resident %v", res[:4])
	}
	// A first turn sharing only a short opening with backend 0 (one
	// block, worth 0.3ms against a near margin of 2ms/4) goes elsewhere.
	prime(t, s, 2)
	c := chainOf(0, 20)
	s.Table.Touch(c[:1], 0, now)
	d, rs := route(t, s, &Request{Chain: c, Now: now})
	if d.Backend.Index == 0 {
		t.Fatalf("bound ignored: %+v", d)
	}
	rs.ReleaseActive()
	// Negative epsilon: no bound.
	s.ttft.eps = -1
	if open := s.residentBound(&elig, now, &res, 0); open.Len() != 4 {
		t.Fatalf("open %v", open)
	}
	// Equal work always leaves every backend open, even at epsilon 0.
	s2 := newFixed(t, 3, "ttft")
	s2.ttft.eps = 0
	e2 := s2.Eligible(&Request{})
	if open := s2.residentBound(&e2, now, &res, 0); open.Len() != 3 {
		t.Fatalf("open %v", open)
	}
}

// TestPromptHoldersPassTheResidentBound: a new conversation whose prompt
// a backend holds goes there, beyond the resident bound, while that
// backend is predicted about as fast as the best open one; once its batch
// is full the prediction sends the conversation to an open backend.
func TestPromptHoldersPassTheResidentBound(t *testing.T) {
	s := newFixed(t, 3, "ttft")
	prime(t, s, 2)
	now := s.Table.Now()
	for k := 0; k < 6; k++ {
		s.noteResident(s.Backends[0], &Request{Chain: chainOf(0, 1), Now: now})
	}
	sys := chainOf(0, 20)
	s.Table.Touch(sys, 0, now)
	first := append(append([]uint64(nil), sys...), chainOf(900, 2)...)
	elig := s.Eligible(&Request{})
	var res [chain.MaxBackends]float32
	if open := s.residentBound(&elig, now, &res, 0); open.Has(0) {
		t.Fatalf("backend 0 within the bound: %v", res[:3])
	}
	// Holder: 2ms + 2 blocks; elsewhere 2ms + 22 blocks.
	d, r1 := route(t, s, &Request{Chain: first, Now: now})
	if d.Backend.Index != 0 || d.Cached != 20 || d.Novel != 2 {
		t.Fatalf("%+v", d)
	}
	// One running, one slot left; the same prompt arrives again while
	// the first still prefills there: 2ms + (2 pending + 2) blocks,
	// against 2ms + 22 blocks elsewhere.
	d, r2 := route(t, s, &Request{Chain: first, Now: now})
	if d.Backend.Index != 0 {
		t.Fatalf("second: %+v", d)
	}
	// Full: a slot wait of 50ms is slower than recomputing the prompt.
	d, r3 := route(t, s, &Request{Chain: first, Now: now})
	if d.Backend.Index == 0 || d.Novel != 22 {
		t.Fatalf("third: %+v", d)
	}
	for _, r := range []*Reservation{r1, r2, r3} {
		r.ReleaseActive()
	}
	// Rates that put a block's time at zero (learned from engines whose
	// prefills do not queue behind each other) make the prompt worth
	// nothing by the clock; being most of the request, it still decides.
	for _, b := range s.Backends {
		b.model.block.Store(0)
	}
	d, r4 := route(t, s, &Request{Chain: first, Now: now})
	if d.Backend.Index != 0 {
		t.Fatalf("no block time: %+v", d)
	}
	r4.ReleaseActive()
}

func TestResidentDecays(t *testing.T) {
	s := newFixed(t, 1, "ttft")
	s.ttft.window = 1000
	b := s.Backends[0]
	s.noteResident(b, &Request{Chain: chainOf(0, 1), Now: 5000})
	s.noteResident(b, &Request{Chain: chainOf(0, 1), Now: 5000})
	if got := b.model.residentAt(5000, 1000); got != 2 {
		t.Fatalf("%v", got)
	}
	// One time constant later: 2/e.
	if got := b.model.residentAt(6000, 1000); got < 0.7357 || got > 0.7359 {
		t.Fatalf("%v", got)
	}
}

func TestFirstByteObservesOnceAndLearnsService(t *testing.T) {
	s := newFixed(t, 1, "ttft")
	d, res := route(t, s, &Request{Chain: chainOf(0, 4)})
	if d.Predicted <= 0 {
		t.Fatalf("no prediction: %+v", d)
	}
	res.ReleasePrefill()
	res.FirstByte()
	res.FirstByte()
	m := &s.Backends[0].model
	if m.observed.Load() != 1 {
		t.Fatalf("observed %d", m.observed.Load())
	}
	res.ReleaseActive()
	res.ReleaseActive()
	if m.service.Load() <= 0 {
		t.Fatal("service time not learned")
	}
	if s.Backends[0].state.Load() != 0 {
		t.Fatalf("load left: %x", s.Backends[0].state.Load())
	}
	// Without a first byte (an error, a disconnect) nothing is learned.
	m.service.Store(0)
	_, res = route(t, s, &Request{Chain: chainOf(0, 4)})
	res.ReleaseActive()
	if m.service.Load() != 0 || m.observed.Load() != 1 {
		t.Fatal("learned from an answer that never came")
	}
	snap := s.TTFTSnapshot()
	if len(snap.Backends) != 1 || snap.Backends[0].Observations != 1 {
		t.Fatalf("%+v", snap)
	}
}

func BenchmarkPickTTFT(b *testing.B) {
	s := newSched(b, 8, "ttft")
	c := chainOf(0, 64)
	s.Table.Touch(c[:48], 3, s.Table.Now())
	r := &Request{Chain: c, Followup: true}
	var d Decision
	var res Reservation
	b.ReportAllocs()
	for b.Loop() {
		r.Now = s.Table.Now()
		if !s.Route(r, &d, &res) {
			b.Fatal("no backend")
		}
		res.ReleaseActive()
	}
}

// kvca-cost sends a new conversation to the holders of its prompt while
// they are predicted to answer it about as fast as any other backend and
// stay within the resident bound, although their load (here the prompt's
// first prefill, still pending) outweighs the prompt's blocks in the cost;
// past the bound, or once they are full, the cost decides. cost, the
// baseline, weighs load and blocks alone.
func TestKvcaCostFirstTurnToThePromptsHolders(t *testing.T) {
	// held is backend 0's resident work, the others' being 2.
	setup := func(policy string, eps float64, held float32) (*Scheduler, []uint64) {
		s := newFixed(t, 3, policy)
		if err := s.SetTTFT(TTFTConfig{Capacity: 2, BlockTime: 300 * time.Microsecond, Base: 2 * time.Millisecond, ResidentEpsilon: eps}); err != nil {
			t.Fatal(err)
		}
		for i, b := range s.Backends {
			b.model.service.Store(100 * ms)
			x := float32(2)
			if i == 0 {
				x = held
			}
			setResident(b, x, s.Table.Now())
		}
		sys := chainOf(0, 20)
		s.Table.Touch(sys, 0, s.Table.Now())
		s.Backends[0].state.Add(activeUnit + 22) // the prompt's first sight
		return s, append(append([]uint64(nil), sys...), chainOf(900, 2)...)
	}
	// Costs: 4 + 22 + 2 on 0, 22 elsewhere. Predictions: 2ms + 24
	// blocks on 0, 2ms + 22 elsewhere, within a quarter.
	s, first := setup("cost", DefaultResidentEpsilon, 2)
	if d, _ := route(t, s, &Request{Chain: first}); d.Backend.Index == 0 {
		t.Fatalf("cost: %+v, want the least cost", d)
	}
	s, first = setup("kvca-cost", DefaultResidentEpsilon, 2)
	d, _ := route(t, s, &Request{Chain: first})
	if d.Backend.Index != 0 || d.Cached != 20 || d.Novel != 2 || d.Phase != PhaseBootstrap {
		t.Fatalf("kvca-cost: %+v, want the prompt's holder", d)
	}
	// 0 holds 6 resident turns against 2 and 2: one more would be 7,
	// past both (1+ε)× and residentSlack above the mean of 11/3.
	s, first = setup("kvca-cost", DefaultResidentEpsilon, 6)
	if d, _ = route(t, s, &Request{Chain: first}); d.Backend.Index == 0 || d.Novel != 22 {
		t.Fatalf("kvca-cost, holder past the resident bound: %+v", d)
	}
	// Past the bound, but far below its batch: a turn every second, a
	// window of 3s, 100ms of service keep 6×0.1/3 + 0.1/1 = 0.3 turns in
	// flight, under half the capacity of 2. At 1s of service, 3 would.
	// While no capacity is known, one more than the most requests seen
	// served without a wait (2 here) bounds the turns in flight, whole:
	// 3 at 1s of service fit, 4.5 at 1.5s do not.
	for _, c := range []struct {
		svc    int64
		served int32 // 0: the capacity of 2 is known
		want   bool
	}{{100 * ms, 0, true}, {1000 * ms, 0, false}, {1000 * ms, 2, true}, {1500 * ms, 2, false}} {
		s, first = setup("kvca-cost", DefaultResidentEpsilon, 6)
		setGap(s, 1000, 16)
		for _, b := range s.Backends {
			b.model.service.Store(c.svc)
			if c.served > 0 {
				b.model.fixCap = 0
				b.model.served.Store(c.served)
			}
		}
		if d, _ = route(t, s, &Request{Chain: first}); (d.Backend.Index == 0) != c.want {
			t.Fatalf("kvca-cost, holder past the bound, service %dms, served %d: %+v", c.svc/ms, c.served, d)
		}
	}
	// Without the bound the holder takes it while it has a free slot,
	// and not once both of its slots are taken (a 50ms wait).
	s, first = setup("kvca-cost", -1, 2)
	for k, want := range []bool{true, false} {
		if d, _ = route(t, s, &Request{Chain: first}); (d.Backend.Index == 0) != want {
			t.Fatalf("kvca-cost without a bound, request %d: %+v", k, d)
		}
	}
}

// TestTTFTUnansweredBackendTakesTheFleetFit: a backend that has not
// answered yet is predicted with the rates the fleet has learned, not the
// priors, so it looks neither slower nor faster than its peers; a fixed
// rate stays its own, and its first answer puts it on its own fit.
func TestTTFTUnansweredBackendTakesTheFleetFit(t *testing.T) {
	s := newFixed(t, 3, "ttft")
	fresh, fixed := s.Backends[1], s.Backends[2]
	if got, want := fresh.PrefillTime(10), time.Duration(priorBase+10*priorBlock); got != want {
		t.Fatalf("before any answer: %v, want the priors' %v", got, want)
	}
	fixed.model.fix(TTFTConfig{BlockTime: 500 * time.Microsecond})
	teach(&s.Backends[0].model, 2*ms, 300_000, 0)
	if got, want := fresh.PrefillTime(10), time.Duration(2*ms+10*300_000); got != want {
		t.Fatalf("unanswered: %v, want the fleet's %v", got, want)
	}
	if got, want := fixed.PrefillTime(10), time.Duration(2*ms+10*500_000); got != want {
		t.Fatalf("fixed block: %v, want the fleet's base and its own block, %v", got, want)
	}
	fresh.model.learn(4, 0, 9*ms, 0)
	if base, block := fresh.model.rates(); base != fresh.model.base.Load() || block != fresh.model.block.Load() {
		t.Fatalf("after an answer: rates %d %d, own fit %d %d", base, block, fresh.model.base.Load(), fresh.model.block.Load())
	}
}

// TestTTFTResidentBoundYieldsToThePrediction: a new conversation keeps to
// the resident bound while the backends it leaves open are predicted
// about as fast as the best of all (within the near margin). Beyond that
// the bound would cost the request's first token more than it buys, and
// a backend of unknown batch capacity it excludes is open again; one
// whose capacity is known stays excluded, as there its resident turns
// will queue for slots when they come back.
func TestTTFTResidentBoundYieldsToThePrediction(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int
		pending  uint32 // blocks waiting on each backend the bound leaves open
		want     func(int) bool
	}{
		// Open backends: 2ms + (5+20) × 0.3ms = 9.5ms, within a quarter
		// of the busy one's 2ms + 20 × 0.3ms = 8ms.
		{name: "open ones about as fast", pending: 5, want: func(i int) bool { return i != 0 }},
		// 2ms + 40 × 0.3ms = 14ms: the busy backend is open again.
		{name: "open ones far slower", pending: 20, want: func(i int) bool { return i == 0 }},
		{name: "open ones far slower, capacity known", capacity: 8, pending: 20, want: func(i int) bool { return i != 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFixed(t, 4, "ttft")
			prime(t, s, tc.capacity)
			now := s.Table.Now()
			setResident(s.Backends[0], 5, now)
			for i := 1; i < 4; i++ {
				setResident(s.Backends[i], 1, now)
				s.Backends[i].state.Store(pack(0, tc.pending))
			}
			d, res := route(t, s, &Request{Chain: chainOf(0, 20)})
			defer res.ReleaseActive()
			if !tc.want(d.Backend.Index) {
				t.Fatalf("went to %d", d.Backend.Index)
			}
		})
	}
}
