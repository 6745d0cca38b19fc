package admit

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// fleet is n healthy backends.
func fleet(n int) []*sched.Backend {
	bs := make([]*sched.Backend, n)
	for i := range bs {
		bs[i] = sched.NewBackend(i, "http://b", fmt.Sprintf("b%d:80", i))
	}
	return bs
}

// ratedFleet is n healthy backends whose learned prefill is fixed at 1ms
// plus 1ms per novel block.
func ratedFleet(t testing.TB, n int) []*sched.Backend {
	bs := fleet(n)
	s, err := sched.New(bs, chain.NewTable(chain.Config{TTL: time.Minute, MaxBlocks: 1 << 10}), 4, "kvca-cost")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetTTFT(sched.TTFTConfig{BlockTime: time.Millisecond, Base: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return bs
}

// clock is a manual clock: tests move time, Sweep applies it.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() int64              { return c.ns.Load() }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// wakes records the tickets woken, in order.
type wakes struct {
	mu   sync.Mutex
	list []*Ticket
}

func (w *wakes) fn(t *Ticket, seq uint64) {
	w.mu.Lock()
	w.list = append(w.list, t)
	w.mu.Unlock()
}

func (w *wakes) take() []*Ticket {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.list
	w.list = nil
	return l
}

type rig struct {
	a    *Admitter
	clk  *clock
	w    *wakes
	set  *metrics.Set
	keys map[string]uint64
}

func newRig(t testing.TB, cfg Config) *rig {
	r := &rig{clk: &clock{}, w: &wakes{}, set: metrics.NewSet()}
	r.clk.ns.Store(int64(time.Hour)) // any non-zero start
	cfg.Clock = r.clk.now
	cfg.Metrics = r.set
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.a = a
	return r
}

func setOf(bs ...int) chain.Set {
	var s chain.Set
	for _, b := range bs {
		s.Add(b)
	}
	return s
}

func (r *rig) ticket(c Class, tenant string, elig ...int) *Ticket {
	return &Ticket{Class: c, Tenant: r.key(tenant), Eligible: setOf(elig...), Wake: r.w.fn}
}

// key is the tenant key of a test's tenant name: its own bucket of the
// slot counts, unlike keys from TenantKey, which are seeded anew for each
// admitter and may share one, so that tests of those counts do not see
// two tenants as one.
func (r *rig) key(tenant string) uint64 {
	if tenant == "" {
		return 0
	}
	if k, ok := r.keys[tenant]; ok {
		return k
	}
	if r.keys == nil {
		r.keys = map[string]uint64{}
	}
	for i := 0; ; i++ {
		k := r.a.TenantKey([]byte(fmt.Sprintf("%s-%d", tenant, i)))
		clash := bucket(k) == bucket(0)
		for _, o := range r.keys {
			clash = clash || bucket(o) == bucket(k)
		}
		if !clash {
			r.keys[tenant] = k
			return k
		}
	}
}

// hold admits t and takes backend b for it, failing the test otherwise.
func (r *rig) hold(t testing.TB, tk *Ticket, b int) {
	t.Helper()
	if v := r.a.Admit(tk); v != Go {
		t.Fatalf("admit: verdict %d, want Go", v)
	}
	if !tk.Room().Has(b) {
		t.Fatalf("backend %d not in room %v", b, *tk.Room())
	}
	if !r.a.Take(tk, b) {
		t.Fatalf("take %d failed", b)
	}
}

// shedOne makes the queue shed: a waiter for the busy backend b times
// out after the queue timeout, and its wake is taken.
func (r *rig) shedOne(t testing.TB, b int, timeout time.Duration) {
	t.Helper()
	lost := r.ticket(Normal, "", b)
	if r.a.Admit(lost) != Queued {
		t.Fatal("not queued")
	}
	r.clk.advance(timeout)
	r.a.Sweep()
	if lost.State() != Dropped || lost.Reason() != ReasonTimeout {
		t.Fatalf("state %d reason %v", lost.State(), lost.Reason())
	}
	r.w.take()
	r.a.Done(lost)
}

func (r *rig) metric(name string) string {
	var b bytes.Buffer
	r.set.WritePrometheus(&b)
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, name+" ") {
			return strings.TrimPrefix(l, name+" ")
		}
	}
	return "absent"
}

func TestBypassWithoutLimit(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(3)})
	tk := r.ticket(Normal, "", 0, 2)
	for i := 0; i < 100; i++ {
		if v := r.a.Admit(tk); v != Go || *tk.Room() != setOf(0, 2) {
			t.Fatalf("verdict %d room %v", v, *tk.Room())
		}
		if !r.a.Take(tk, 2) {
			t.Fatal("take refused without a limit")
		}
	}
	r.a.Done(tk)
	if r.a.Limited() || r.a.Inflight(2) != 0 || r.a.Queued() != 0 {
		t.Fatalf("limited %v inflight %d queued %d", r.a.Limited(), r.a.Inflight(2), r.a.Queued())
	}
	if got := r.metric(`kvca_admission_admitted_total{class="normal",how="immediate"}`); got != "0" {
		t.Fatalf("bypass counted: %s", got)
	}
}

func TestRoomTakeAndGrant(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 2, QueueSize: 8})
	a := r.a
	h := make([]*Ticket, 4)
	for i := range h {
		h[i] = r.ticket(Normal, "", 0, 1)
	}
	r.hold(t, h[0], 0)
	r.hold(t, h[1], 0)
	// Backend 0 is full: only 1 has room.
	if a.Admit(h[2]) != Go || *h[2].Room() != setOf(1) {
		t.Fatalf("room %v, want {1}", *h[2].Room())
	}
	if a.Take(h[2], 0) {
		t.Fatal("took a full backend")
	}
	r.hold(t, h[2], 1)
	r.hold(t, h[3], 1)
	w := r.ticket(Normal, "", 0, 1)
	if v := a.Admit(w); v != Queued || w.State() != Waiting || a.Queued() != 1 {
		t.Fatalf("verdict %d state %d queued %d", v, w.State(), a.Queued())
	}
	seq := w.Seq()
	a.Done(h[2]) // frees a slot on 1: handed to w
	got := r.w.take()
	if len(got) != 1 || got[0] != w || w.State() != Granted || w.Backend() != 1 || w.Seq() != seq {
		t.Fatalf("wakes %v state %d backend %d", got, w.State(), w.Backend())
	}
	if a.Inflight(1) != 2 || a.Queued() != 0 {
		t.Fatalf("inflight %d queued %d", a.Inflight(1), a.Queued())
	}
	// Routed again: the room is the granted slot (nothing else is free).
	if a.Admit(w) != Go || *w.Room() != setOf(1) || !a.Take(w, 1) {
		t.Fatalf("after grant: room %v", *w.Room())
	}
	a.Done(w)
	a.Done(w) // twice: released once
	if a.Inflight(1) != 1 {
		t.Fatalf("inflight %d after double Done", a.Inflight(1))
	}
	for _, x := range h {
		a.Done(x)
	}
	if a.Inflight(0) != 0 || a.Inflight(1) != 0 {
		t.Fatalf("left %d %d", a.Inflight(0), a.Inflight(1))
	}
	if got := r.metric(`kvca_admission_admitted_total{class="normal",how="queued"}`); got != "1" {
		t.Fatalf("queued admissions %s", got)
	}
	if got := r.metric(`kvca_admission_admitted_total{class="normal",how="immediate"}`); got != "4" {
		t.Fatalf("immediate admissions %s", got)
	}
}

// grantOrder frees the single slot again and again and returns the
// tickets in the order they were granted it.
func grantOrder(t *testing.T, r *rig, holder *Ticket, n int) []*Ticket {
	t.Helper()
	var order []*Ticket
	for i := 0; i < n; i++ {
		r.a.Done(holder)
		got := r.w.take()
		if len(got) != 1 || got[0].State() != Granted {
			t.Fatalf("grant %d: %d wakes", i, len(got))
		}
		holder = got[0]
		r.hold(t, holder, 0)
		order = append(order, holder)
	}
	r.a.Done(holder)
	return order
}

func TestClassesInStrictOrder(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 16})
	h := r.ticket(Normal, "", 0)
	r.hold(t, h, 0)
	var names = map[*Ticket]string{}
	for _, x := range []struct {
		c    Class
		name string
	}{{Low, "L1"}, {Normal, "N1"}, {High, "H1"}, {Normal, "N2"}, {Low, "L2"}, {High, "H2"}} {
		tk := r.ticket(x.c, "", 0)
		names[tk] = x.name
		if r.a.Admit(tk) != Queued {
			t.Fatal("not queued")
		}
	}
	var got []string
	for _, tk := range grantOrder(t, r, h, 6) {
		got = append(got, names[tk])
	}
	if s := strings.Join(got, " "); s != "H1 H2 N1 N2 L1 L2" {
		t.Fatalf("order %s", s)
	}
}

func TestStarvationProtection(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 64, StarvationLimit: 2})
	h := r.ticket(High, "", 0)
	r.hold(t, h, 0)
	names := map[*Ticket]string{}
	for i := 0; i < 10; i++ {
		tk := r.ticket(High, "", 0)
		names[tk] = "H"
		r.a.Admit(tk)
	}
	for i := 0; i < 3; i++ {
		tk := r.ticket(Low, "", 0)
		names[tk] = "L"
		r.a.Admit(tk)
	}
	var got []string
	for _, tk := range grantOrder(t, r, h, 13) {
		got = append(got, names[tk])
	}
	// At most K=2 grants to a higher class pass a waiting lower class.
	if s := strings.Join(got, ""); s != "HHLHHLHHLHHHH" {
		t.Fatalf("order %s", s)
	}
}

func TestStarvationThreeClasses(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 64, StarvationLimit: 2})
	h := r.ticket(High, "", 0)
	r.hold(t, h, 0)
	names := map[*Ticket]string{}
	for _, c := range []Class{High, Normal, Low} {
		for i := 0; i < 6; i++ {
			tk := r.ticket(c, "", 0)
			names[tk] = c.String()[:1]
			r.a.Admit(tk)
		}
	}
	var got []string
	for _, tk := range grantOrder(t, r, h, 18) {
		got = append(got, names[tk])
	}
	// After two highs, low and normal have both been passed over twice:
	// the lowest goes first, then normal. Grants to normal pass over low
	// too, so low's turn comes every third grant.
	if s := strings.Join(got, ""); s != "hhlnhlhnlhhlnnlnnl" {
		t.Fatalf("order %s", s)
	}
}

func TestTenantsShareExactly(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 200})
	h := r.ticket(Normal, "", 0)
	r.hold(t, h, 0)
	tenantOf := map[*Ticket]string{}
	// The flood arrives first and is 20 times larger than each other
	// tenant's demand.
	for i := 0; i < 100; i++ {
		tk := r.ticket(Normal, "flood", 0)
		tenantOf[tk] = "F"
		r.a.Admit(tk)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		for i := 0; i < 5; i++ {
			tk := r.ticket(Normal, name, 0)
			tenantOf[tk] = name
			r.a.Admit(tk)
		}
	}
	var got []string
	for _, tk := range grantOrder(t, r, h, 120) {
		got = append(got, tenantOf[tk])
	}
	s := strings.Join(got, "")
	if want := strings.Repeat("Fabcd", 5) + strings.Repeat("F", 95); s != want {
		t.Fatalf("order\n%s\nwant\n%s", s, want)
	}
}

func TestTenantKeepsTurnWhenIneligible(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 8})
	h0, h1 := r.ticket(Normal, "", 0), r.ticket(Normal, "", 1)
	r.hold(t, h0, 0)
	r.hold(t, h1, 1)
	x := r.ticket(Normal, "x", 1) // x's turn comes first, but it wants 1
	y := r.ticket(Normal, "y", 0, 1)
	y2 := r.ticket(Normal, "y", 0, 1)
	r.a.Admit(x)
	r.a.Admit(y)
	r.a.Admit(y2)
	r.a.Done(h0) // backend 0: x cannot use it, y can
	if got := r.w.take(); len(got) != 1 || got[0] != y {
		t.Fatalf("backend 0 went to %v", got)
	}
	r.a.Done(h1) // backend 1: x kept its turn
	if got := r.w.take(); len(got) != 1 || got[0] != x {
		t.Fatalf("backend 1 went to %v", got)
	}
}

func TestTimeoutAndRetryAfter(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 4, QueueTimeout: 3 * time.Second})
	h := r.ticket(Normal, "", 0)
	r.hold(t, h, 0)
	w := r.ticket(High, "", 0)
	if r.a.Admit(w) != Queued {
		t.Fatal("not queued")
	}
	r.clk.advance(3*time.Second - 1)
	r.a.Sweep()
	if w.State() != Waiting || len(r.w.take()) != 0 {
		t.Fatal("expired early")
	}
	r.clk.advance(1)
	r.a.Sweep()
	if got := r.w.take(); len(got) != 1 || w.State() != Dropped || w.Reason() != ReasonTimeout {
		t.Fatalf("wakes %d state %d reason %v", len(got), w.State(), w.Reason())
	}
	// No release rate known yet: the timeout, in whole seconds.
	if w.RetryAfter() != 3 || r.a.Queued() != 0 {
		t.Fatalf("retry after %d queued %d", w.RetryAfter(), r.a.Queued())
	}
	r.a.Done(w)
	r.a.Done(h)
	if r.a.Inflight(0) != 0 {
		t.Fatal("slot kept")
	}
	if got := r.metric(`kvca_admission_shed_total{class="high",reason="queue_timeout"}`); got != "1" {
		t.Fatalf("shed metric %s", got)
	}
}

func TestRetryAfterFromReleaseRate(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 9, QueueTimeout: 30 * time.Second})
	h := r.ticket(Normal, "", 0)
	r.hold(t, h, 0)
	// 10 slots freed while the clock stands, each handed to a waiter.
	for i := 0; i < 10; i++ {
		w := r.ticket(Normal, "", 0)
		if r.a.Admit(w) != Queued {
			t.Fatal("not queued")
		}
		r.a.Done(h)
		h = r.w.take()[0]
		r.hold(t, h, 0)
	}
	r.clk.advance(2 * time.Second) // 10 releases in 2 s: 5 per second
	for i := 0; i < 9; i++ {
		if r.a.Admit(r.ticket(Normal, "", 0)) != Queued {
			t.Fatal("not queued")
		}
	}
	x := r.ticket(Normal, "", 0)
	if v := r.a.Admit(x); v != Shed || x.Reason() != ReasonQueueFull {
		t.Fatalf("verdict %d reason %v", v, x.Reason())
	}
	// 9 waiting and x: 10 requests at 5 per second.
	if x.RetryAfter() != 2 {
		t.Fatalf("retry after %d, want 2", x.RetryAfter())
	}
}

func TestNoQueueShedsAtOnce(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1})
	r.hold(t, r.ticket(Normal, "", 0), 0)
	x := r.ticket(High, "", 0)
	if v := r.a.Admit(x); v != Shed || x.Reason() != ReasonQueueFull || x.RetryAfter() < 1 {
		t.Fatalf("verdict %d reason %v retry %d", v, x.Reason(), x.RetryAfter())
	}
}

func TestFullQueuePreemptsLowerClass(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 2})
	r.hold(t, r.ticket(Normal, "", 0), 0)
	l1, l2 := r.ticket(Low, "", 0), r.ticket(Low, "", 0)
	r.a.Admit(l1)
	r.a.Admit(l2)
	low := r.ticket(Low, "", 0)
	if r.a.Admit(low) != Shed || low.Reason() != ReasonQueueFull {
		t.Fatal("a full queue took an equal class")
	}
	hi := r.ticket(High, "", 0)
	if r.a.Admit(hi) != Queued {
		t.Fatal("high not queued")
	}
	// The youngest of the lowest class made way.
	if got := r.w.take(); len(got) != 1 || got[0] != l2 || l2.State() != Dropped || l2.Reason() != ReasonPreempted {
		t.Fatalf("preempted %v", got)
	}
	if l1.State() != Waiting || r.a.Queued() != 2 {
		t.Fatalf("l1 state %d queued %d", l1.State(), r.a.Queued())
	}
}

func TestCancelWhileQueued(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 4})
	h := r.ticket(Normal, "", 0)
	r.hold(t, h, 0)
	gone := r.ticket(Normal, "a", 0)
	next := r.ticket(Normal, "b", 0)
	r.a.Admit(gone)
	r.a.Admit(next)
	r.a.Done(gone) // the client left
	if gone.State() != Idle || gone.Backend() != -1 || r.a.Queued() != 1 {
		t.Fatalf("state %d backend %d queued %d", gone.State(), gone.Backend(), r.a.Queued())
	}
	r.a.Done(h)
	if got := r.w.take(); len(got) != 1 || got[0] != next {
		t.Fatalf("slot went to %v", got)
	}
	r.hold(t, next, 0)
	r.a.Done(next)
	if r.a.Inflight(0) != 0 {
		t.Fatalf("inflight %d", r.a.Inflight(0))
	}
	if got := r.metric(`kvca_admission_cancelled_total{class="normal"}`); got != "1" {
		t.Fatalf("cancelled %s", got)
	}
	if got := r.metric(`kvca_admission_queue_length{class="normal"}`); got != "0" {
		t.Fatalf("queue length %s", got)
	}
}

func TestHolderWait(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 4, HolderWait: 100 * time.Millisecond})
	h := r.ticket(Normal, "", 0)
	r.hold(t, h, 0)
	f := r.ticket(Normal, "", 0, 1)
	f.Preferred = setOf(0)
	if r.a.Admit(f) != Queued {
		t.Fatal("a follow-up did not wait for its holder")
	}
	// Its holder frees first: it gets the holder.
	r.a.Done(h)
	if got := r.w.take(); len(got) != 1 || f.Backend() != 0 {
		t.Fatalf("granted on %d", f.Backend())
	}
	r.hold(t, f, 0)

	g := r.ticket(Normal, "", 0, 1)
	g.Preferred = setOf(0)
	if r.a.Admit(g) != Queued {
		t.Fatal("not queued")
	}
	r.clk.advance(100*time.Millisecond - 1)
	r.a.Sweep()
	if g.State() != Waiting {
		t.Fatal("gave up on the holder early")
	}
	r.clk.advance(1)
	r.a.Sweep()
	if got := r.w.take(); len(got) != 1 || g.State() != Granted || g.Backend() != 1 {
		t.Fatalf("after the holder wait: state %d backend %d", g.State(), g.Backend())
	}
	// A preferred set without a wait, or with the holder free, goes at once.
	x := r.ticket(Normal, "", 0, 1)
	x.Preferred = setOf(1)
	x.HolderWait = time.Second
	r.a.Done(g)
	if r.a.Admit(x) != Go || !x.Room().Has(1) {
		t.Fatalf("room %v", *x.Room())
	}
}

// Holder waits end on time whatever their order of arrival: a short one
// queued behind a longer one is not held until the longer one ends.
func TestHolderWaitsEndInTheirOwnOrder(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 4, QueueTimeout: 100 * time.Millisecond})
	r.hold(t, r.ticket(Normal, "", 0), 0)
	long := r.ticket(Normal, "", 0, 1)
	long.Preferred, long.HolderWait = setOf(0), 40*time.Millisecond
	short := r.ticket(Normal, "", 0, 1)
	short.Preferred, short.HolderWait = setOf(0), 10*time.Millisecond
	if r.a.Admit(long) != Queued || r.a.Admit(short) != Queued {
		t.Fatal("follow-ups did not wait for their full holder")
	}
	r.clk.advance(10 * time.Millisecond)
	r.a.Sweep()
	if got := r.w.take(); len(got) != 1 || short.State() != Granted || short.Backend() != 1 || long.State() != Waiting {
		t.Fatalf("at 10 ms: short state %d backend %d, long state %d", short.State(), short.Backend(), long.State())
	}
	r.a.Done(short)
	r.clk.advance(30 * time.Millisecond)
	r.a.Sweep()
	if got := r.w.take(); len(got) != 1 || long.State() != Granted || long.Backend() != 1 {
		t.Fatalf("at 40 ms: long state %d backend %d", long.State(), long.Backend())
	}
}

// tenantSlots is the slots the tenants are counted as holding, all
// together: the slots held, once each.
func tenantSlots(a *Admitter) int32 {
	n := int32(0)
	for i := range a.load {
		n += a.load[i].Load()
	}
	return n
}

// While the queue sheds, a tenant holding less than half of what the
// busiest one holds is spared its bets: its follow-up takes a free slot
// rather than wait for a full holder, and its oldest waiter is served
// first. The busiest tenant's follow-up still waits for its holder, and
// without shedding the small tenant's does too.
func TestSparedTenant(t *testing.T) {
	setup := func(t *testing.T, shed bool) (*rig, *Ticket) {
		r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 8, QueueTimeout: 100 * time.Millisecond, HolderWait: 50 * time.Millisecond})
		r.hold(t, r.ticket(Normal, "big", 0), 0)
		b1 := r.ticket(Normal, "big", 1)
		r.hold(t, b1, 1)
		if shed {
			r.shedOne(t, 0, 100*time.Millisecond)
		}
		return r, b1
	}
	followup := func(r *rig, tenant string) *Ticket {
		f := r.ticket(Normal, tenant, 0, 1)
		f.Preferred = setOf(0)
		return f
	}
	t.Run("its follow-up takes a free slot", func(t *testing.T) {
		for _, shed := range []bool{true, false} {
			r, b1 := setup(t, shed)
			big, small := followup(r, "big"), followup(r, "small")
			if r.a.Admit(small) != Queued || r.a.Admit(big) != Queued {
				t.Fatal("not queued with every backend full")
			}
			r.a.Done(b1)
			if shed && (small.State() != Granted || small.Backend() != 1 || big.State() != Waiting) {
				t.Fatalf("shedding: small state %d backend %d, big state %d", small.State(), small.Backend(), big.State())
			}
			if !shed && (small.State() != Waiting || big.State() != Waiting || r.a.Inflight(1) != 0) {
				t.Fatalf("not shedding: small state %d, big state %d, backend 1 in flight %d", small.State(), big.State(), r.a.Inflight(1))
			}
		}
	})
	t.Run("its oldest goes first", func(t *testing.T) {
		for _, tenant := range []string{"small", "big"} {
			r, b1 := setup(t, true)
			x := r.ticket(Normal, tenant, 0, 1)
			if r.a.Admit(x) != Queued {
				t.Fatal("x not queued")
			}
			r.clk.advance(55 * time.Millisecond)
			y := r.ticket(Normal, tenant, 0, 1)
			if r.a.Admit(y) != Queued {
				t.Fatal("y not queued")
			}
			r.clk.advance(5 * time.Millisecond) // x has waited past half the timeout
			r.a.Done(b1)
			first, second := x, y // spared: in order
			if tenant == "big" {
				first, second = y, x // a backlogged tenant: the sooner first token
			}
			if first.State() != Granted || second.State() != Waiting {
				t.Fatalf("%s: states x %d, y %d", tenant, x.State(), y.State())
			}
		}
	})
	t.Run("slots counted once", func(t *testing.T) {
		r, b1 := setup(t, true)
		small := followup(r, "small")
		if r.a.Admit(small) != Queued {
			t.Fatal("not queued")
		}
		r.a.Done(b1)
		r.w.take()
		if r.a.Admit(small) != Go || !r.a.Take(small, 1) {
			t.Fatal("granted slot not taken")
		}
		if n := tenantSlots(r.a); n != 2 {
			t.Fatalf("tenants hold %d slots, want 2", n)
		}
		r.a.Done(small)
		r.a.Done(small)
		if n := tenantSlots(r.a); n != 1 {
			t.Fatalf("after done: tenants hold %d slots, want 1", n)
		}
	})
}

// While the queue sheds, a tenant holding at least half the busiest's
// slots, beside one holding less than half, may not take the last
// TenantReserve free slots of the fleet: a slot it frees there stays free for the lighter tenant's next request,
// which takes it at once, and the heavy tenant's waiter is granted only a
// slot beyond the reserve. Its class High requests are not held back, and
// without shedding or without a reserve nothing is.
func TestTenantReserve(t *testing.T) {
	// Two backends of three slots: "big" holds five, "small" one.
	var small0 *Ticket
	setup := func(t *testing.T, reserve int, shed bool) (*rig, []*Ticket) {
		r := newRig(t, Config{Backends: fleet(2), MaxInflight: 3, QueueSize: 8, QueueTimeout: 100 * time.Millisecond, TenantReserve: reserve})
		var big []*Ticket
		for _, b := range []int{0, 0, 0, 1, 1} {
			tk := r.ticket(Normal, "big", 0, 1)
			r.hold(t, tk, b)
			big = append(big, tk)
		}
		small0 = r.ticket(Normal, "small", 0, 1)
		r.hold(t, small0, 1)
		if shed {
			r.shedOne(t, 0, 100*time.Millisecond)
		}
		return r, big
	}
	t.Run("the last free slot waits for the light tenant", func(t *testing.T) {
		r, big := setup(t, 1, true)
		w := r.ticket(Normal, "big", 0, 1)
		if r.a.Admit(w) != Queued {
			t.Fatal("big waiter not queued on a full fleet")
		}
		r.a.Done(big[0])
		if w.State() != Waiting || r.a.Inflight(0) != 2 {
			t.Fatalf("within the reserve: big waiter state %d, backend 0 in flight %d", w.State(), r.a.Inflight(0))
		}
		if nb := r.ticket(Normal, "big", 0, 1); r.a.Admit(nb) != Queued {
			t.Fatal("a new big request took the reserve")
		}
		if hi := r.ticket(High, "big", 0, 1); r.a.Admit(hi) != Go || !r.a.Take(hi, 0) {
			t.Fatal("a big high-priority request was held back")
		} else {
			r.a.Done(hi)
		}
		if w.State() != Waiting {
			t.Fatal("the reserve slot freed by high went to the big waiter")
		}
		small := r.ticket(Normal, "small", 0, 1)
		r.hold(t, small, 0)
		// The small tenant's first request ends on 1: its slot, the only
		// free one, stays free; a slot big frees beyond it goes to the
		// big waiter.
		r.a.Done(small0)
		if w.State() != Waiting || r.a.Inflight(1) != 2 {
			t.Fatalf("within the reserve: big waiter state %d, backend 1 in flight %d", w.State(), r.a.Inflight(1))
		}
		r.a.Done(big[1])
		if w.State() != Granted || w.Backend() != 0 {
			t.Fatalf("beyond the reserve: state %d backend %d, want granted on 0", w.State(), w.Backend())
		}
		r.a.Done(w)
		r.a.Done(small)
	})
	t.Run("a spared tenant is not held back", func(t *testing.T) {
		// Three backends of four slots: "big" holds seven, "mid" three
		// (less than half of big's), "small" one; one slot is free.
		r := newRig(t, Config{Backends: fleet(3), MaxInflight: 4, QueueSize: 8, QueueTimeout: 100 * time.Millisecond, TenantReserve: 1})
		for i, b := range []int{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2} {
			tenant := "big"
			switch {
			case i >= 10:
				tenant = "small"
			case i >= 7:
				tenant = "mid"
			}
			r.hold(t, r.ticket(Normal, tenant, 0, 1, 2), b)
		}
		r.shedOne(t, 0, 100*time.Millisecond)
		if nb := r.ticket(Normal, "big", 0, 1, 2); r.a.Admit(nb) != Queued {
			t.Fatal("big took the reserve")
		}
		r.hold(t, r.ticket(Normal, "mid", 0, 1, 2), 2)
	})
	for _, c := range []struct {
		name    string
		reserve int
		shed    bool
	}{{"no reserve", 0, true}, {"not shedding", 1, false}} {
		t.Run(c.name, func(t *testing.T) {
			r, big := setup(t, c.reserve, c.shed)
			w := r.ticket(Normal, "big", 0, 1)
			if r.a.Admit(w) != Queued {
				t.Fatal("big waiter not queued on a full fleet")
			}
			r.a.Done(big[0])
			if w.State() != Granted || w.Backend() != 0 {
				t.Fatalf("state %d backend %d, want granted on 0", w.State(), w.Backend())
			}
		})
	}
}

// waitBehindFullHolder queues a follow-up of class c that prefers backend
// 0 on two full backends of one slot each (a 50 ms queue timeout, a 250
// ms holder wait), and returns the rig, the ticket holding backend 1 and
// the follow-up.
func waitBehindFullHolder(t *testing.T, c Class) (*rig, *Ticket, *Ticket) {
	t.Helper()
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 4, QueueTimeout: 50 * time.Millisecond, HolderWait: 250 * time.Millisecond})
	r.hold(t, r.ticket(Normal, "", 0), 0)
	h1 := r.ticket(Normal, "", 1)
	r.hold(t, h1, 1)
	f := r.ticket(c, "", 0, 1)
	f.Preferred = setOf(0)
	if r.a.Admit(f) != Queued {
		t.Fatal("not queued with every backend full")
	}
	return r, h1, f
}

// A high-priority follow-up does not wait for its holders: served first
// wherever a slot frees, it takes the first one, and a free backend at once.
func TestHighPriorityTakesTheFirstFreeSlot(t *testing.T) {
	r, h1, f := waitBehindFullHolder(t, High)
	r.clk.advance(time.Millisecond)
	r.a.Done(h1)
	if got := r.w.take(); len(got) != 1 || f.State() != Granted || f.Backend() != 1 {
		t.Fatalf("backend 1 freed: state %d backend %d", f.State(), f.Backend())
	}
	r.a.Done(f)
	// Its holder full, backend 1 free: a normal follow-up waits for the
	// holder, a high one goes to backend 1 at once.
	n := r.ticket(Normal, "", 0, 1)
	n.Preferred = setOf(0)
	if v := r.a.Admit(n); v != Queued {
		t.Fatalf("normal follow-up: verdict %d, want queued for its holder", v)
	}
	g := r.ticket(High, "", 0, 1)
	g.Preferred = setOf(0)
	if v := r.a.Admit(g); v != Go || !g.Room().Has(1) {
		t.Fatalf("high follow-up: verdict %d room %v, want go on 1", v, *g.Room())
	}
}

// A holder wait as long as the queue timeout would shed the request at
// its deadline while another backend freed a slot meanwhile: the holder
// wait ends at half the timeout.
func TestHolderWaitEndsBeforeTimeout(t *testing.T) {
	r, h1, f := waitBehindFullHolder(t, Normal)
	// Backend 1 frees while f still waits for its holder, 0.
	r.clk.advance(10 * time.Millisecond)
	r.a.Done(h1)
	if f.State() != Waiting || r.a.Inflight(1) != 0 {
		t.Fatalf("state %d, inflight on 1: %d", f.State(), r.a.Inflight(1))
	}
	r.clk.advance(15*time.Millisecond - 1)
	r.a.Sweep()
	if f.State() != Waiting {
		t.Fatal("gave up on the holder before half the timeout")
	}
	r.clk.advance(1)
	r.a.Sweep()
	if got := r.w.take(); len(got) != 1 || f.State() != Granted || f.Backend() != 1 {
		t.Fatalf("at half the timeout: state %d backend %d", f.State(), f.Backend())
	}
	// A ticket's own longer holder wait is bounded the same way; f now
	// holds 1, and 0 is still held.
	g := r.ticket(Normal, "", 0, 1)
	g.Preferred, g.HolderWait = setOf(0), time.Minute
	if r.a.Admit(g) != Queued {
		t.Fatal("not queued")
	}
	r.clk.advance(25 * time.Millisecond)
	r.a.Sweep()
	if g.State() != Waiting {
		t.Fatalf("state %d", g.State())
	}
	r.a.Done(f)
	if g.State() != Granted || g.Backend() != 1 {
		t.Fatalf("after its holder wait, a slot on 1: state %d backend %d", g.State(), g.Backend())
	}
}

// A follow-up waiting for the holder of its prefix lets its own tenant's
// later requests of its class take a slot on another backend, and nobody
// else: a lower class or another tenant would overtake it, so it takes
// that slot itself, its holder wait over.
func TestHolderWaitOvertakenOnlyByItsOwnTenant(t *testing.T) {
	for _, c := range []struct {
		name          string
		other         Class
		tenant        string
		holderGranted bool // the bound waiter takes backend 1, not the other
	}{
		{"lower class", Low, "b", true},
		{"other tenant", Normal, "b", true},
		{"own tenant", Normal, "a", false},
		{"higher class", High, "b", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 8, HolderWait: time.Second})
			h1 := r.ticket(Normal, "", 1)
			r.hold(t, r.ticket(Normal, "", 0), 0)
			r.hold(t, h1, 1)
			f := r.ticket(Normal, "a", 0, 1)
			f.Preferred = setOf(0)
			o := r.ticket(c.other, c.tenant, 0, 1)
			if r.a.Admit(f) != Queued || r.a.Admit(o) != Queued {
				t.Fatal("not queued")
			}
			r.a.Done(h1)
			if got := r.w.take(); len(got) != 1 {
				t.Fatalf("%d wakes", len(got))
			}
			winner, loser := o, f
			if c.holderGranted {
				winner, loser = f, o
			}
			if winner.State() != Granted || winner.Backend() != 1 || loser.State() != Waiting {
				t.Fatalf("winner state %d backend %d, loser state %d", winner.State(), winner.Backend(), loser.State())
			}
		})
	}
}

// Alone in the queue, a follow-up keeps waiting for its holder while
// another backend frees: nobody would take its place.
func TestHolderWaitAloneKeepsWaiting(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 8, HolderWait: time.Second})
	h1 := r.ticket(High, "", 1)
	r.hold(t, r.ticket(Normal, "", 0), 0)
	r.hold(t, h1, 1)
	f := r.ticket(Normal, "a", 0, 1)
	f.Preferred = setOf(0)
	if r.a.Admit(f) != Queued {
		t.Fatal("not queued")
	}
	r.a.Done(h1)
	if f.State() != Waiting || r.a.Inflight(1) != 0 || len(r.w.take()) != 0 {
		t.Fatalf("state %d, inflight on 1: %d", f.State(), r.a.Inflight(1))
	}
}

// A tenant's requests are served in arrival order until its oldest has
// waited half the queue timeout; from then on its newest goes first, in
// the oldest's turn, and the oldest are shed at their timeout.
func TestStaleTenantServesNewestFirst(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 8, QueueTimeout: 100 * time.Millisecond})
	cur := r.ticket(Normal, "", 0)
	r.hold(t, cur, 0)
	var ts []*Ticket
	for i := 0; i < 4; i++ {
		tk := r.ticket(Normal, "a", 0)
		if r.a.Admit(tk) != Queued {
			t.Fatal("not queued")
		}
		ts = append(ts, tk)
		r.clk.advance(10 * time.Millisecond)
	}
	// t=40ms: the oldest has waited 40ms, under half the timeout.
	next := func(want *Ticket) {
		t.Helper()
		r.a.Done(cur)
		if got := r.w.take(); len(got) != 1 || got[0] != want || want.State() != Granted {
			t.Fatalf("granted %v, want ticket %p", got, want)
		}
		cur = want
	}
	next(ts[0])
	r.clk.advance(20 * time.Millisecond) // t=60ms: ts[1] waited 50ms
	next(ts[3])
	next(ts[2])
	// Another tenant still gets its turn between: fairness is kept.
	b := r.ticket(Normal, "b", 0)
	if r.a.Admit(b) != Queued {
		t.Fatal("not queued")
	}
	next(b)
	r.clk.advance(50 * time.Millisecond) // t=110ms: ts[1] has timed out
	r.a.Sweep()
	if got := r.w.take(); len(got) != 1 || got[0] != ts[1] || ts[1].State() != Dropped || ts[1].Reason() != ReasonTimeout {
		t.Fatalf("woken %v, state %d", got, ts[1].State())
	}
}

// Once a tenant is stale, a backend's slot goes first to its newest
// request waiting for that backend as the holder of its prefix, then to
// its newest that can go anywhere.
func TestStaleTenantServesHolderWaitersFirst(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 8, QueueTimeout: 100 * time.Millisecond, HolderWait: time.Second})
	h0, h1 := r.ticket(Normal, "", 0), r.ticket(Normal, "", 1)
	r.hold(t, h0, 0)
	r.hold(t, h1, 1)
	x, y, z := r.ticket(Normal, "a", 0, 1), r.ticket(Normal, "a", 0, 1), r.ticket(Normal, "a", 0, 1)
	y.Preferred = setOf(1)
	if r.a.Admit(x) != Queued {
		t.Fatal("not queued")
	}
	r.clk.advance(50 * time.Millisecond) // x is stale
	if r.a.Admit(y) != Queued {
		t.Fatal("not queued")
	}
	r.clk.advance(5 * time.Millisecond)
	if r.a.Admit(z) != Queued {
		t.Fatal("not queued")
	}
	r.a.Done(h1)
	if y.State() != Granted || y.Backend() != 1 || x.State() != Waiting || z.State() != Waiting {
		t.Fatalf("y state %d backend %d", y.State(), y.Backend())
	}
	r.a.Done(h0)
	if z.State() != Granted || z.Backend() != 0 || x.State() != Waiting {
		t.Fatalf("z state %d backend %d, x state %d", z.State(), z.Backend(), x.State())
	}
}

func TestHolderWaitFullQueueGoesElsewhere(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 0, HolderWait: time.Second})
	r.hold(t, r.ticket(Normal, "", 0), 0)
	f := r.ticket(Normal, "", 0, 1)
	f.Preferred = setOf(0)
	if r.a.Admit(f) != Go || *f.Room() != setOf(1) {
		t.Fatalf("room %v", *f.Room())
	}
}

func TestTakeLostRaceAfterGrant(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 4})
	h0 := r.ticket(Normal, "", 0)
	r.hold(t, h0, 0)
	h1 := r.ticket(Normal, "", 1)
	r.hold(t, h1, 1)
	w := r.ticket(Normal, "", 0, 1)
	r.a.Admit(w)
	r.a.Done(h0)
	r.w.take()
	r.a.Done(h1) // 1 is free too now
	if r.a.Admit(w) != Go || *w.Room() != setOf(0, 1) {
		t.Fatalf("room %v", *w.Room())
	}
	other := r.ticket(Normal, "", 1)
	r.hold(t, other, 1) // takes 1 before w does
	if r.a.Take(w, 1) {
		t.Fatal("took a full backend")
	}
	if r.a.Admit(w) != Go || *w.Room() != setOf(0) || !r.a.Take(w, 0) {
		t.Fatalf("room after a lost take %v", *w.Room())
	}
	// Moving a held slot to a free backend releases the old one.
	r.a.Done(other)
	if r.a.Admit(w) != Go || !r.a.Take(w, 1) || r.a.Inflight(0) != 0 || r.a.Inflight(1) != 1 {
		t.Fatalf("move: %d %d", r.a.Inflight(0), r.a.Inflight(1))
	}
}

func TestFailedAttemptPassesSlotOn(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 4})
	x := r.ticket(Normal, "", 0, 1)
	r.hold(t, x, 0)
	y := r.ticket(Normal, "", 1)
	r.hold(t, y, 1)
	w := r.ticket(Normal, "", 0)
	r.a.Admit(w)
	// x's attempt on 0 failed: 0 leaves its eligible set; it waits for 1
	// and its slot on 0 goes to w.
	x.Eligible = setOf(1)
	if v := r.a.Admit(x); v != Queued {
		t.Fatalf("verdict %d", v)
	}
	if got := r.w.take(); len(got) != 1 || got[0] != w || w.Backend() != 0 || r.a.Inflight(0) != 1 {
		t.Fatalf("slot 0 went to %v", got)
	}
	r.a.Done(y)
	if got := r.w.take(); len(got) != 1 || got[0] != x || x.Backend() != 1 {
		t.Fatalf("slot 1 went to %v", got)
	}
}

func TestEngineAwareLimit(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 4, QueueSize: 8, EngineAware: true})
	var hs []*Ticket
	for i := 0; i < 4; i++ {
		tk := r.ticket(Normal, "", 0)
		r.hold(t, tk, 0)
		hs = append(hs, tk)
	}
	w1, w2 := r.ticket(Normal, "", 0), r.ticket(Normal, "", 0)
	r.a.Admit(w1)
	r.a.Admit(w2)
	// The engine runs 2 of kvca's 4 and queues 2: the limit drops to 2.
	r.a.AdaptToEngine(0, sched.EngineSignals{Running: 2, Waiting: 2}, true)
	if r.a.Limit(0) != 2 {
		t.Fatalf("limit %d", r.a.Limit(0))
	}
	r.a.Done(hs[0])
	r.a.Done(hs[1])
	if len(r.w.take()) != 0 || r.a.Inflight(0) != 2 {
		t.Fatalf("granted above the lowered limit: inflight %d", r.a.Inflight(0))
	}
	r.a.Done(hs[2]) // now below it: passed on
	if got := r.w.take(); len(got) != 1 || got[0] != w1 {
		t.Fatalf("wakes %v", got)
	}
	// No queue reported: back up by one per reading, granting at once.
	r.a.AdaptToEngine(0, sched.EngineSignals{Running: 2}, true)
	if got := r.w.take(); r.a.Limit(0) != 3 || len(got) != 1 || got[0] != w2 {
		t.Fatalf("limit %d wakes %v", r.a.Limit(0), got)
	}
	r.a.AdaptToEngine(0, sched.EngineSignals{}, false)
	r.a.AdaptToEngine(0, sched.EngineSignals{}, false)
	if r.a.Limit(0) != 4 {
		t.Fatalf("limit %d, want the configured 4", r.a.Limit(0))
	}
}

func TestPriorityParsing(t *testing.T) {
	for _, c := range []struct {
		header, body string
		want         Class
	}{
		{"high", "", High}, {"HIGH", "5", High}, {"Low", "-3", Low}, {"normal", "-1", Normal},
		{"", "-1", High}, {"", "0", Normal}, {"", "7", Low}, {"urgent", "-2", High},
		{"", "1.5", Normal}, {"", "\"high\"", Normal}, {"", "", Normal}, {"", "-", Normal},
		{"", "007", Normal}, {"", "-9999999", High}, {"", "-0", Normal}, {"", "1e2", Normal},
		{"", "-123456789012345678901234567890", High}, {"", "123456789012345678901234567890", Low},
		{"", "2-", Normal}, {"low", "", Low},
	} {
		if got := ClassOf([]byte(c.header), []byte(c.body)); got != c.want {
			t.Errorf("ClassOf(%q, %q) = %v, want %v", c.header, c.body, got, c.want)
		}
	}
}

func TestTenantKey(t *testing.T) {
	a, _ := New(Config{Backends: fleet(1)})
	if a.TenantKey(nil) != 0 || a.TenantKey([]byte("x")) == 0 {
		t.Fatal("empty or named tenant key")
	}
	if a.TenantKey([]byte("acme")) != a.TenantKey([]byte("acme")) || a.TenantKey([]byte("acme")) == a.TenantKey([]byte("acm")) {
		t.Fatal("keys not stable or not distinct")
	}
}

// With a reserve, lower classes leave the last HighReserve slots of each
// backend free: they see no room there and queue, a freed slot within the
// reserve goes to a high-priority waiter and not to an older normal one,
// and a slot freed above the reserve goes to the normal waiter.
func TestHighReserve(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 3, QueueSize: 8, HighReserve: 1})
	a := r.a
	var held []*Ticket
	for _, b := range []int{0, 0, 1, 1} {
		tk := r.ticket(Normal, "", 0, 1)
		r.hold(t, tk, b)
		held = append(held, tk)
	}
	// Each backend has one free slot, the reserve: closed to normal and low.
	for _, c := range []Class{Normal, Low} {
		if tk := r.ticket(c, "", 0, 1); a.Admit(tk) != Queued {
			t.Fatalf("class %v: verdict not queued with only the reserve free", c)
		}
	}
	hi := r.ticket(High, "", 0, 1)
	if a.Admit(hi) != Go || *hi.Room() != setOf(0, 1) || !a.Take(hi, 0) {
		t.Fatalf("high: room %v, want both reserves", *hi.Room())
	}
	late := r.ticket(High, "", 0, 1)
	r.hold(t, late, 1)
	// Both backends full. A third high request queues behind the normal
	// and low waiters, and takes the first slot freed.
	hi2 := r.ticket(High, "", 0, 1)
	if a.Admit(hi2) != Queued {
		t.Fatal("high: not queued on a full fleet")
	}
	a.Done(hi)
	if got := r.w.take(); len(got) != 1 || got[0] != hi2 || hi2.Backend() != 0 {
		t.Fatalf("a freed reserve slot went to %v, want the high waiter", got)
	}
	// A normal request done on 0 frees a slot within the reserve again
	// (two held of three): no normal waiter may have it.
	a.Done(held[0])
	if got := r.w.take(); len(got) != 0 || a.Inflight(0) != 2 {
		t.Fatalf("a reserve slot went to a lower class: %d wakes, inflight %d", len(got), a.Inflight(0))
	}
	// Two slots free on 0 (one held): the normal waiter takes one.
	a.Done(held[1])
	if got := r.w.take(); len(got) != 1 || got[0].Class != Normal || got[0].Backend() != 0 {
		t.Fatalf("the slot above the reserve: wakes %v", got)
	}
	if a.Queued() != 1 || a.Inflight(0) != 2 {
		t.Fatalf("queued %d inflight %d, want the low waiter left and 2 held", a.Queued(), a.Inflight(0))
	}
}

// With a pool, lower classes leave the last HighPool free slots of the
// fleet, wherever they are, to high priority: they queue while no more
// are free, a slot freed into the pool stays free for the next high
// request, and one freed beyond it goes to the oldest normal waiter.
func TestHighPool(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 2, QueueSize: 8, HighPool: 1})
	a := r.a
	var held []*Ticket
	for _, b := range []int{0, 0, 1} {
		tk := r.ticket(Normal, "", 0, 1)
		r.hold(t, tk, b)
		held = append(held, tk)
	}
	var waiters []*Ticket
	for _, c := range []Class{Normal, Low} {
		tk := r.ticket(c, "", 0, 1)
		if a.Admit(tk) != Queued {
			t.Fatalf("class %v: not queued with only the pool free", c)
		}
		waiters = append(waiters, tk)
	}
	hi := r.ticket(High, "", 0, 1)
	if a.Admit(hi) != Go || *hi.Room() != setOf(1) || !a.Take(hi, 1) {
		t.Fatalf("high: room %v, want the pool's slot on 1", *hi.Room())
	}
	// The fleet is full. A normal request done on 0 frees one slot: the
	// pool again, so neither waiter may have it.
	a.Done(held[0])
	if got := r.w.take(); len(got) != 0 || a.Inflight(0) != 1 {
		t.Fatalf("a pool slot went to a lower class: %d wakes, inflight %d", len(got), a.Inflight(0))
	}
	if st := a.Snapshot(); st.HighPool != 1 || st.Free != 1 || st.Queued != 2 {
		t.Fatalf("snapshot: pool %d, free %d, queued %d", st.HighPool, st.Free, st.Queued)
	}
	// The high request done on 1: two free, the normal waiter takes one.
	a.Done(hi)
	if got := r.w.take(); len(got) != 1 || got[0] != waiters[0] {
		t.Fatalf("the slot beyond the pool: wakes %v, want the normal waiter", got)
	}
	if a.Queued() != 1 || a.Inflight(0)+a.Inflight(1) != 3 {
		t.Fatalf("queued %d, held %d+%d: want the low waiter left and 3 held", a.Queued(), a.Inflight(0), a.Inflight(1))
	}
	for _, tk := range append(held[1:], waiters...) {
		a.Done(tk)
	}
	if a.Queued() != 0 || a.Inflight(0) != 0 || a.Inflight(1) != 0 {
		t.Fatalf("after every Done: queued %d, held %d+%d", a.Queued(), a.Inflight(0), a.Inflight(1))
	}
}

// A slot freed where a waiter may not go still opens the pool for it: the
// waiter takes the free slot it was kept from on another backend.
func TestHighPoolOpensElsewhere(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 2, QueueSize: 8, HighPool: 1})
	a := r.a
	r.hold(t, r.ticket(Normal, "", 0, 1), 0)
	b1, b2 := r.ticket(Normal, "", 0, 1), r.ticket(Normal, "", 0, 1)
	r.hold(t, b1, 1)
	r.hold(t, b2, 1)
	w := r.ticket(Normal, "", 0) // may use backend 0 only
	if a.Admit(w) != Queued {
		t.Fatal("not queued with only the pool's slot free")
	}
	a.Done(b1)
	if got := r.w.take(); len(got) != 1 || got[0] != w || w.Backend() != 0 {
		t.Fatalf("wakes %v, want the waiter granted backend 0", got)
	}
	if a.Inflight(0) != 2 || a.Inflight(1) != 1 || a.Queued() != 0 {
		t.Fatalf("held %d+%d, queued %d", a.Inflight(0), a.Inflight(1), a.Queued())
	}
}

// With engines that preempt for high priority, a high request takes a
// slot past the limit while the backend holds fewer high requests than
// its limit; the slots past the limit are never passed on, so the engine
// is back at its limit once they end, and every count returns to zero.
func TestHighPreemptsPastTheLimit(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 2, QueueSize: 8, HighPreempts: true})
	a := r.a
	n0, n1 := r.ticket(Normal, "", 0), r.ticket(Normal, "", 0)
	r.hold(t, n0, 0)
	r.hold(t, n1, 0)
	if tk := r.ticket(Normal, "", 0); a.Admit(tk) != Queued {
		t.Fatal("a normal request went past the limit")
	} else {
		a.Done(tk)
	}
	h0, h1 := r.ticket(High, "", 0), r.ticket(High, "", 0)
	r.hold(t, h0, 0)
	r.hold(t, h1, 0)
	if a.Inflight(0) != 4 {
		t.Fatalf("inflight %d, want 4: two normal, two high past the limit", a.Inflight(0))
	}
	// As many high as the limit: the engine has nothing left to preempt.
	h2 := r.ticket(High, "", 0, 1)
	if a.Admit(h2) != Go || *h2.Room() != setOf(1) {
		t.Fatalf("room %v, want only the backend with room", *h2.Room())
	}
	a.Done(h2)
	h3 := r.ticket(High, "", 0)
	if a.Admit(h3) != Queued {
		t.Fatal("high went past a backend full of high")
	}
	// The engine runs the high ones; a normal that ends frees a slot past
	// the limit, which nobody gets.
	a.Done(n0)
	if got := r.w.take(); len(got) != 0 || a.Inflight(0) != 3 {
		t.Fatalf("a slot past the limit was passed on: %d wakes, inflight %d", len(got), a.Inflight(0))
	}
	a.Done(n1)
	if got := r.w.take(); len(got) != 0 || a.Inflight(0) != 2 {
		t.Fatalf("%d wakes, inflight %d", len(got), a.Inflight(0))
	}
	// Back at the limit, a high that ends passes its slot to the waiter.
	a.Done(h0)
	if got := r.w.take(); len(got) != 1 || got[0] != h3 || h3.Backend() != 0 {
		t.Fatalf("wakes %v, want the high waiter on 0", got)
	}
	if a.Admit(h3) != Go || !a.Take(h3, 0) {
		t.Fatal("granted high could not take its slot")
	}
	for _, tk := range []*Ticket{h1, h3} {
		a.Done(tk)
	}
	if st := a.Snapshot(); a.Inflight(0) != 0 || st.Backends[0].High != 0 {
		t.Fatalf("inflight %d high %d after all done", a.Inflight(0), st.Backends[0].High)
	}
	// Without HighPreempts, high stops at the limit.
	r2 := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 8})
	r2.hold(t, r2.ticket(Normal, "", 0), 0)
	if r2.a.Admit(r2.ticket(High, "", 0)) != Queued {
		t.Fatal("high went past the limit without HighPreempts")
	}
}

func TestConfigRejected(t *testing.T) {
	swapped := fleet(2)
	swapped[0], swapped[1] = swapped[1], swapped[0]
	for _, c := range []Config{{}, {Backends: fleet(chain.MaxBackends + 1)}, {Backends: swapped},
		{Backends: fleet(1), MaxInflight: -1}, {Backends: fleet(1), QueueTimeout: -1},
		{Backends: fleet(1), MaxInflight: 2, HighReserve: 2}, {Backends: fleet(1), MaxInflight: 2, HighReserve: -1}, {Backends: fleet(1), MaxInflight: 2, HighPool: -1}, {Backends: fleet(2), MaxInflight: 2, HighPool: 4}} {
		if _, err := New(c); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

// The internal timer sheds an expired waiter on its own.
func TestTimerExpires(t *testing.T) {
	done := make(chan struct{})
	a, err := New(Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 1, QueueTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	h := &Ticket{Eligible: setOf(0)}
	a.Admit(h)
	a.Take(h, 0)
	w := &Ticket{Eligible: setOf(0), Wake: func(*Ticket, uint64) { close(done) }}
	if a.Admit(w) != Queued {
		t.Fatal("not queued")
	}
	<-done
	if w.State() != Dropped || w.Reason() != ReasonTimeout {
		t.Fatalf("state %d reason %v", w.State(), w.Reason())
	}
}

func TestRefillOnRecovery(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 4})
	r.hold(t, r.ticket(Normal, "", 0), 0)
	// Backend 1 is unhealthy: it has room, but none to give.
	r.a.cfg.Backends[1].SetHealthy(false)
	w := r.ticket(Normal, "", 0, 1)
	if r.a.Admit(w) != Queued {
		t.Fatal("not queued")
	}
	// 1 recovers: its free slot goes to the waiter.
	r.a.cfg.Backends[1].SetHealthy(true)
	r.a.Refill(1)
	if got := r.w.take(); len(got) != 1 || w.Backend() != 1 {
		t.Fatalf("after refill: backend %d", w.Backend())
	}
}

func TestCandidates(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(3), MaxInflight: 1})
	r.a.cfg.Backends[2].SetHealthy(false)
	req := &sched.Request{}
	req.Exclude.Add(0)
	if got := r.a.Candidates(req); got != setOf(1, 2) {
		t.Fatalf("candidates %v", got)
	}
	allowed := setOf(0, 2)
	req.Allowed = &allowed
	if got := r.a.Candidates(req); got != setOf(2) {
		t.Fatalf("candidates %v", got)
	}
}

func TestWaitHistogram(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 4})
	h := r.ticket(Normal, "", 0)
	r.hold(t, h, 0)
	w := r.ticket(Low, "", 0)
	r.a.Admit(w)
	r.clk.advance(300 * time.Millisecond)
	r.a.Done(h)
	if w.Waited() != 300*time.Millisecond {
		t.Fatalf("waited %v", w.Waited())
	}
	for name, want := range map[string]string{
		`kvca_admission_wait_seconds_bucket{class="low",le="0.25"}`: "0",
		`kvca_admission_wait_seconds_bucket{class="low",le="0.5"}`:  "1",
		`kvca_admission_wait_seconds_count{class="low"}`:            "1",
		`kvca_admission_queue_length{class="low"}`:                  "0",
		`kvca_admission_inflight{backend="b0:80"}`:                  "1",
		`kvca_admission_limit{backend="b0:80"}`:                     "1",
	} {
		if got := r.metric(name); got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	st := r.a.Snapshot()
	if st.Queued != 0 || len(st.Classes) != 3 || st.Backends[0].Inflight != 1 || st.Backends[0].Limit != 1 {
		t.Fatalf("snapshot %+v", st)
	}
}

func TestFullQueueTakesFromTheFlood(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 4})
	r.hold(t, r.ticket(Normal, "", 0), 0)
	var flood []*Ticket
	for i := 0; i < 4; i++ {
		tk := r.ticket(Normal, "flood", 0)
		flood = append(flood, tk)
		r.a.Admit(tk)
	}
	if x := r.ticket(Normal, "flood", 0); r.a.Admit(x) != Shed || x.Reason() != ReasonQueueFull {
		t.Fatal("the flood grew past the full queue")
	}
	a1, a2, a3 := r.ticket(Normal, "a", 0), r.ticket(Normal, "a", 0), r.ticket(Normal, "a", 0)
	if r.a.Admit(a1) != Queued || r.a.Admit(a2) != Queued {
		t.Fatal("another tenant found no place")
	}
	// The flood's youngest made way, twice; now both have 2 and a third
	// of a's would only swap who has more.
	got := r.w.take()
	if len(got) != 2 || got[0] != flood[3] || got[1] != flood[2] || flood[3].Reason() != ReasonPreempted {
		t.Fatalf("preempted %v", got)
	}
	if r.a.Admit(a3) != Shed || a3.Reason() != ReasonQueueFull {
		t.Fatal("a took more than its share of the queue")
	}
	// A higher class takes a place in any case, from the biggest tenant
	// of the lower class (the first in turn of equals).
	hi := r.ticket(High, "flood", 0)
	if r.a.Admit(hi) != Queued {
		t.Fatal("high not queued")
	}
	if got := r.w.take(); len(got) != 1 || got[0] != flood[1] {
		t.Fatalf("preempted %v", got)
	}
}

func TestNoWaitForAnUnhealthyHolder(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(2), MaxInflight: 1, QueueSize: 4, HolderWait: time.Second})
	r.hold(t, r.ticket(Normal, "", 1), 1)
	r.a.cfg.Backends[0].SetHealthy(false)
	f := r.ticket(Normal, "", 0, 1)
	f.Preferred = setOf(0)
	// Its holder is down and the other backend is full: it waits for
	// any backend, not for the holder.
	if r.a.Admit(f) != Queued || f.bound {
		t.Fatalf("bound %v", f.bound)
	}
}

func TestAdmitWait(t *testing.T) {
	r := newRig(t, Config{Backends: fleet(1), MaxInflight: 1, QueueSize: 4})
	h := r.ticket(Normal, "", 0)
	r.hold(t, h, 0)
	w := &Ticket{Eligible: setOf(0)}
	got := make(chan Verdict)
	go func() { got <- r.a.AdmitWait(w, nil) }()
	for r.a.Queued() == 0 { // it has queued (the loop is bounded by the goroutine's progress)
		runtime.Gosched()
	}
	r.a.Done(h)
	if v := <-got; v != Go || !w.Room().Has(0) || !r.a.Take(w, 0) {
		t.Fatalf("verdict %d", v)
	}
	// Gone while waiting: ended, nothing held, the queue empty.
	x := &Ticket{Eligible: setOf(0)}
	done := make(chan struct{})
	go func() { got <- r.a.AdmitWait(x, done) }()
	for r.a.Queued() == 0 {
		runtime.Gosched()
	}
	close(done)
	if v := <-got; v != Left || r.a.Queued() != 0 || x.Backend() != -1 {
		t.Fatalf("verdict %d queued %d", v, r.a.Queued())
	}
	// Shed while waiting.
	y := &Ticket{Eligible: setOf(0)}
	go func() { got <- r.a.AdmitWait(y, nil) }()
	for r.a.Queued() == 0 {
		runtime.Gosched()
	}
	r.clk.advance(DefaultQueueTimeout)
	r.a.Sweep()
	if v := <-got; v != Shed || y.Reason() != ReasonTimeout {
		t.Fatalf("verdict %d reason %v", v, y.Reason())
	}
	r.a.Done(y)
	r.a.Done(w)
	if r.a.Inflight(0) != 0 {
		t.Fatal("slot kept")
	}
}

// Once a tenant is stale, a slot no holder waits for goes to the waiter
// that would see its first token soonest there: its wait so far plus the
// backend's prefill of what it lacks. A newer request that would
// recompute a long prompt loses to an older one whose prompt is mostly
// cached there; with nothing known of their prompts, the newest goes.
func TestStaleTenantServesTheSoonestFirstToken(t *testing.T) {
	t.Parallel()
	bs := ratedFleet(t, 1)
	if got := bs[0].PrefillTime(10); got != 11*time.Millisecond {
		t.Fatalf("prefill of 10 blocks %v, want 11ms", got)
	}
	for _, tc := range []struct {
		name                 string
		cheapBlocks, cheapAt int32
		want                 string
	}{
		// old: waited 60ms, then 1ms + 2 blocks' prefill (40 blocks, 38
		// cached there): 63ms. new: nothing waited, 1ms + 40 blocks: 41ms,
		// it wins; with 80 blocks (81ms) it loses.
		{"cheap old against short new", 40, 38, "new"},
		{"cheap old against long new", 40, 38, "old"},
		{"nothing known", 0, 0, "new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{Backends: bs, MaxInflight: 1, QueueSize: 8, QueueTimeout: 100 * time.Millisecond})
			cur := r.ticket(Normal, "", 0)
			r.hold(t, cur, 0)
			old, nw := r.ticket(Normal, "a", 0), r.ticket(Normal, "a", 0)
			old.Blocks, old.Shared, old.Sharing = tc.cheapBlocks, tc.cheapAt, setOf(0)
			nw.Blocks = 40
			if tc.name == "cheap old against long new" {
				nw.Blocks = 80
			}
			if tc.cheapBlocks == 0 {
				nw.Blocks = 0
			}
			if r.a.Admit(old) != Queued {
				t.Fatal("not queued")
			}
			r.clk.advance(60 * time.Millisecond) // the tenant is stale
			if r.a.Admit(nw) != Queued {
				t.Fatal("not queued")
			}
			r.a.Done(cur)
			want, other := nw, old
			if tc.want == "old" {
				want, other = old, nw
			}
			if want.State() != Granted || other.State() != Waiting {
				t.Fatalf("%s not granted first (states: want %d, other %d)", tc.want, want.State(), other.State())
			}
		})
	}
}

// TestHolderWaitWorthTheTimeout: a follow-up whose holders hold more than
// half the queue timeout's worth of its prefill waits for them until just
// before its timeout, then takes a free slot elsewhere rather than be
// shed; one that would lose less, or of high priority, gives up at half
// the timeout.
func TestHolderWaitWorthTheTimeout(t *testing.T) {
	t.Parallel()
	bs := ratedFleet(t, 2)
	// Both backends busy; f, of class c, wants 60 blocks, held of which
	// backend 0 holds (1ms each), and may use either. lost, when asked
	// for, times out first, so that the queue has just shed.
	setup := func(t *testing.T, c Class, held int32, shed bool) (r *rig, h0, h1, f *Ticket) {
		r = newRig(t, Config{Backends: bs, MaxInflight: 1, QueueSize: 4, QueueTimeout: 50 * time.Millisecond, HolderWait: time.Second})
		h0, h1 = r.ticket(Normal, "", 0), r.ticket(Normal, "", 1)
		r.hold(t, h0, 0)
		r.hold(t, h1, 1)
		if shed {
			r.shedOne(t, 1, 50*time.Millisecond)
		}
		f = r.ticket(c, "", 0, 1)
		f.Preferred, f.Blocks, f.Held = setOf(0), 60, held
		if r.a.Admit(f) != Queued {
			t.Fatal("not queued")
		}
		return r, h0, h1, f
	}
	for _, tc := range []struct {
		name string
		held int32
		wait time.Duration
	}{
		{"25ms held, half of 50ms: gives up at the half", 25, 25 * time.Millisecond},
		{"40ms held: waits to the end", 40, 50*time.Millisecond - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, h0, h1, f := setup(t, Normal, tc.held, false)
			r.a.Done(h1) // room on 1, not on its holder
			r.clk.advance(tc.wait - 1)
			r.a.Sweep()
			if f.State() != Waiting {
				t.Fatalf("gave up on its holder after %v", tc.wait-1)
			}
			// The timer fires a little late, past the timeout: the holder
			// wait ends first, and the free slot on 1 serves it.
			r.clk.advance(time.Millisecond + 1)
			r.a.Sweep()
			if f.State() != Granted || f.Backend() != 1 {
				t.Fatalf("state %d backend %d, want granted on 1", f.State(), f.Backend())
			}
			r.a.Done(f)
			r.a.Done(h0)
		})
	}
	t.Run("while the queue sheds, shed rather than recompute past the timeout", func(t *testing.T) {
		r, h0, h1, f := setup(t, Normal, 40, true)
		r.a.Done(h1)
		r.clk.advance(51 * time.Millisecond)
		r.a.Sweep()
		if f.State() != Dropped || f.Reason() != ReasonTimeout || r.a.Inflight(1) != 0 {
			t.Fatalf("state %d reason %v inflight on 1: %d", f.State(), f.Reason(), r.a.Inflight(1))
		}
		r.a.Done(f)
		r.a.Done(h0)
	})
	t.Run("while the queue sheds, the end of its holder wait is its timeout", func(t *testing.T) {
		// The timer fires at the end of the holder wait, just before the
		// timeout: the waiter is shed there, not left for a slot that
		// frees elsewhere before the next firing.
		r, h0, h1, f := setup(t, Normal, 40, true)
		r.clk.advance(50*time.Millisecond - 1)
		r.a.Sweep()
		if f.State() != Dropped || f.Reason() != ReasonTimeout {
			t.Fatalf("state %d reason %v, want shed at the end of its holder wait", f.State(), f.Reason())
		}
		r.a.Done(h1)
		if r.a.Inflight(1) != 0 {
			t.Fatal("the slot freed on 1 went to the shed waiter")
		}
		r.a.Done(f)
		r.a.Done(h0)
	})
	t.Run("high priority gives up at the half, whatever its holders hold", func(t *testing.T) {
		r, h0, h1, f := setup(t, High, 40, false)
		r.clk.advance(25 * time.Millisecond)
		r.a.Sweep()
		r.a.Done(h1)
		if f.State() != Granted || f.Backend() != 1 {
			t.Fatalf("high: state %d backend %d, want granted on 1", f.State(), f.Backend())
		}
		r.a.Done(f)
		r.a.Done(h0)
	})
}

// TestLateGrantsWhileShedding: while the queue sheds, a tenant's turn on
// a freed slot does not go to one of its waiters whose wait plus its
// prefill there would pass the timeout, but to one that still fits: here
// the older x, waiting for backend 0 as the holder of most of its prefix
// (60 of 80 blocks, 20ms to compute there), against the younger y with 2
// blocks. Without shedding, or in time, x is served as before; with every
// waiter late, the tenant's first; a late x is shed at its timeout. Class
// High is never late: of its stale waiters the soonest first token goes.
// TestLateWaitersLeaveTheSlotFree: while the queue sheds, a slot whose
// every usable waiter would be late, all of one tenant, stays free for
// the next arrival, and the late waiters are shed at their timeout; with
// another tenant waiting, the tenant's turn is its first waiter's; a
// waiter of another class that is in time takes the class's turn (below
// it in order, or above it when the late class's turn was for starving).
func TestLateWaitersLeaveTheSlotFree(t *testing.T) {
	t.Parallel()
	bs := ratedFleet(t, 1) // 1ms + 1ms per novel block
	for _, other := range []bool{false, true} {
		t.Run(fmt.Sprintf("other tenant %v", other), func(t *testing.T) {
			r := newRig(t, Config{Backends: bs, MaxInflight: 1, QueueSize: 8, QueueTimeout: 100 * time.Millisecond, HolderWait: time.Second})
			cur := r.ticket(Normal, "", 0)
			r.hold(t, cur, 0)
			r.shedOne(t, 0, 100*time.Millisecond)
			// x past its holder wait (it holds 50ms of prefill, not more
			// than half the timeout): 85ms + 31ms; y: 80ms + 26ms.
			x, y := r.ticket(Normal, "a", 0), r.ticket(Normal, "a", 0)
			x.Preferred, x.Blocks, x.Held = setOf(0), 80, 50
			y.Blocks = 25
			if r.a.Admit(x) != Queued {
				t.Fatal("x not queued")
			}
			r.clk.advance(5 * time.Millisecond)
			if r.a.Admit(y) != Queued {
				t.Fatal("y not queued")
			}
			var z *Ticket
			if other {
				z = r.ticket(Normal, "b", 0)
				if r.a.Admit(z) != Queued {
					t.Fatal("z not queued")
				}
			}
			r.clk.advance(80 * time.Millisecond)
			r.a.Done(cur)
			if other {
				if x.State() != Granted || y.State() != Waiting || z.State() != Waiting {
					t.Fatalf("states x %d, y %d, z %d", x.State(), y.State(), z.State())
				}
				r.w.take()
				r.a.Done(x) // z's turn: tenant b's first
				if z.State() != Granted || y.State() != Waiting {
					t.Fatalf("after x: states y %d, z %d", y.State(), z.State())
				}
				r.w.take()
				r.a.Done(z) // y alone and late: the slot stays free
			} else if x.State() != Waiting || y.State() != Waiting {
				t.Fatalf("states x %d, y %d", x.State(), y.State())
			}
			if r.a.Inflight(0) != 0 {
				t.Fatalf("in flight %d with every waiter late", r.a.Inflight(0))
			}
			n := r.ticket(Normal, "a", 0)
			r.hold(t, n, 0)                      // the next arrival has the slot at once
			r.clk.advance(20 * time.Millisecond) // past both timeouts
			r.a.Sweep()
			for _, w := range []*Ticket{x, y} {
				if w == x && other {
					continue
				}
				if w.State() != Dropped || w.Reason() != ReasonTimeout {
					t.Fatalf("late waiter: state %d reason %v", w.State(), w.Reason())
				}
			}
			r.a.Done(n)
			if r.a.Inflight(0) != 0 || r.a.Queued() != 0 {
				t.Fatalf("in flight %d, queued %d", r.a.Inflight(0), r.a.Queued())
			}
		})
	}
	t.Run("lower class in time", func(t *testing.T) {
		r := newRig(t, Config{Backends: bs, MaxInflight: 1, QueueSize: 8, QueueTimeout: 100 * time.Millisecond, HolderWait: time.Second})
		cur := r.ticket(Normal, "", 0)
		r.hold(t, cur, 0)
		r.shedOne(t, 0, 100*time.Millisecond)
		x := r.ticket(Normal, "a", 0)
		x.Blocks = 25 // 85ms + 26ms
		if r.a.Admit(x) != Queued {
			t.Fatal("x not queued")
		}
		r.clk.advance(80 * time.Millisecond)
		z := r.ticket(Low, "a", 0)
		if r.a.Admit(z) != Queued {
			t.Fatal("z not queued")
		}
		r.clk.advance(5 * time.Millisecond)
		r.a.Done(cur)
		if x.State() != Waiting || z.State() != Granted {
			t.Fatalf("states x %d, z %d", x.State(), z.State())
		}
		r.w.take()
		r.clk.advance(20 * time.Millisecond)
		r.a.Sweep()
		if x.State() != Dropped || x.Reason() != ReasonTimeout {
			t.Fatalf("x: state %d reason %v", x.State(), x.Reason())
		}
		r.a.Done(z)
		if r.a.Inflight(0) != 0 || r.a.Queued() != 0 {
			t.Fatalf("in flight %d, queued %d", r.a.Inflight(0), r.a.Queued())
		}
	})
	t.Run("starving class late", func(t *testing.T) {
		r := newRig(t, Config{Backends: bs, MaxInflight: 1, QueueSize: 8, QueueTimeout: 100 * time.Millisecond, HolderWait: time.Second, StarvationLimit: 1})
		cur := r.ticket(Normal, "", 0)
		r.hold(t, cur, 0)
		r.shedOne(t, 0, 100*time.Millisecond)
		z := r.ticket(Low, "a", 0)
		z.Blocks = 25 // 85ms + 26ms when its turn comes
		n1 := r.ticket(Normal, "b", 0)
		for _, w := range []*Ticket{z, n1} {
			if r.a.Admit(w) != Queued {
				t.Fatal("not queued")
			}
		}
		r.a.Done(cur) // n1 first: z passed over once, so starving
		if n1.State() != Granted {
			t.Fatalf("n1: state %d", n1.State())
		}
		r.w.take()
		r.clk.advance(85 * time.Millisecond)
		n2 := r.ticket(Normal, "b", 0)
		if r.a.Admit(n2) != Queued {
			t.Fatal("n2 not queued")
		}
		r.a.Done(n1) // z's turn, but z is late: n2's, in strict order
		if z.State() != Waiting || n2.State() != Granted {
			t.Fatalf("states z %d, n2 %d", z.State(), n2.State())
		}
		r.w.take()
		r.clk.advance(20 * time.Millisecond)
		r.a.Sweep()
		if z.State() != Dropped || z.Reason() != ReasonTimeout {
			t.Fatalf("z: state %d reason %v", z.State(), z.Reason())
		}
		r.a.Done(n2)
		if r.a.Inflight(0) != 0 || r.a.Queued() != 0 {
			t.Fatalf("in flight %d, queued %d", r.a.Inflight(0), r.a.Queued())
		}
	})
}

func TestLateGrantsWhileShedding(t *testing.T) {
	t.Parallel()
	bs := ratedFleet(t, 1) // 1ms + 1ms per novel block
	for _, tc := range []struct {
		name      string
		shed      bool
		class     Class
		xHeld     int32
		waited    time.Duration // x's wait when the slot frees
		yBlocks   int32
		yWaited   time.Duration
		wantLater bool // x is passed over for y
	}{
		// 85ms + 20ms > 100ms.
		{"late", true, Normal, 60, 85 * time.Millisecond, 2, 5 * time.Millisecond, true},
		{"late, not shedding", false, Normal, 60, 85 * time.Millisecond, 2, 5 * time.Millisecond, false},
		// 75ms + 20ms fits.
		{"in time", true, Normal, 60, 75 * time.Millisecond, 2, 5 * time.Millisecond, false},
		// Waiters that would be late, but high is never late: y, the
		// sooner first token (see TestLateWaitersLeaveTheSlotFree).
		{"every waiter late, class high", true, High, 50, 85 * time.Millisecond, 25, 80 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{Backends: bs, MaxInflight: 1, QueueSize: 8, QueueTimeout: 100 * time.Millisecond, HolderWait: time.Second})
			cur := r.ticket(Normal, "a", 0) // one tenant: none is spared
			r.hold(t, cur, 0)
			if tc.shed {
				r.shedOne(t, 0, 100*time.Millisecond)
			}
			x, y := r.ticket(tc.class, "a", 0), r.ticket(tc.class, "a", 0)
			x.Preferred, x.Blocks, x.Held = setOf(0), 80, tc.xHeld
			y.Blocks = tc.yBlocks
			if r.a.Admit(x) != Queued {
				t.Fatal("x not queued")
			}
			r.clk.advance(tc.waited - tc.yWaited)
			if r.a.Admit(y) != Queued {
				t.Fatal("y not queued")
			}
			r.clk.advance(tc.yWaited)
			r.a.Sweep() // nothing is due yet
			if x.State() != Waiting || y.State() != Waiting {
				t.Fatalf("before the release: states x %d, y %d", x.State(), y.State())
			}
			r.a.Done(cur)
			first, second := x, y
			if tc.wantLater {
				first, second = y, x
			}
			if first.State() != Granted || second.State() != Waiting {
				t.Fatalf("states x %d, y %d", x.State(), y.State())
			}
			r.w.take()
			if tc.wantLater {
				// Shed at its timeout, holding nothing.
				r.clk.advance(100*time.Millisecond - tc.waited)
				r.a.Sweep()
				if x.State() != Dropped || x.Reason() != ReasonTimeout {
					t.Fatalf("x: state %d reason %v", x.State(), x.Reason())
				}
				r.a.Done(first)
			} else if r.a.Done(first); second.State() != Granted {
				t.Fatalf("second: state %d", second.State())
			}
			r.a.Done(second)
			if r.a.Inflight(0) != 0 || r.a.Queued() != 0 {
				t.Fatalf("in flight %d, queued %d", r.a.Inflight(0), r.a.Queued())
			}
		})
	}
}
