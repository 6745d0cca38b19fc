package edge

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/internal/testkit"
	"github.com/kvca/kvca/sched"
)

// TestGenResetOncePerRestart: restarted bumps a backend's generation for a
// restart that started after its last reset, and not for one that started
// at or before it (the same restart, seen by the other detector); every
// reset counts, whoever made it, and the reset hooks run once per bump.
func TestGenResetOncePerRestart(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 2, nil)
	var mu sync.Mutex
	var hooked []uint32
	s.OnBackendReset(func(b int, gen uint32) {
		mu.Lock()
		hooked = append(hooked, gen)
		mu.Unlock()
	})
	g0 := s.table.Generation(0)
	check := func(what string, since time.Time, want uint32, wantBump bool) {
		t.Helper()
		if gen, bumped := s.restarted(0, since); gen != want || bumped != wantBump || s.table.Generation(0) != want {
			t.Fatalf("%s: generation %d (table %d), bumped %t; want %d, %t", what, gen, s.table.Generation(0), bumped, want, wantBump)
		}
	}
	first := time.Now()
	check("a first restart", first, g0+1, true)
	check("the same restart seen again (it started before the reset)", first, g0+1, false)
	check("a start time long before the reset", first.Add(-time.Hour), g0+1, false)
	s.resetMu.Lock()
	last := s.resetAt[0]
	s.resetMu.Unlock()
	second := time.Now() // a process started after the reset
	for !second.After(last) {
		second = time.Now()
	}
	check("a second restart", second, g0+2, true)
	check("the second restart seen again", second, g0+2, false)
	check("no instant: always a reset", time.Time{}, g0+3, true)
	before := time.Now()
	if gen := s.forgetSlot(0); gen != g0+4 {
		t.Fatalf("forgetSlot: generation %d", gen)
	}
	check("a restart before the slot was forgotten", before, g0+4, false)
	if g := s.table.Generation(1); g != g0 {
		t.Fatalf("backend 1 moved to generation %d", g)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hooked) != 4 || hooked[0] != g0+1 || hooked[3] != g0+4 {
		t.Fatalf("reset hooks saw %v", hooked)
	}
}

// TestGenEachOutageBumps: without engine telemetry, every time the health
// check re-admits a backend its generation moves, even when the backend
// goes down again before a probe passes after the re-admission: the reset
// health made then does not count for the next outage.
func TestGenEachOutageBumps(t *testing.T) {
	t.Parallel()
	s, gate, b := gatedBackend(t, nil)
	g0 := s.State().Backends[0].Generation
	gate.Refuse("/health")
	testkit.WaitUntil(t, "the backend ejected", func() bool { return !b.Healthy() })
	for n := 1; n <= 3; n++ {
		// One probe passes (the backend is re-admitted), the two after it
		// fail (ejected again), so the re-admission was handled by then.
		seen := gate.Seen("/health")
		gate.AllowOnce("/health")
		testkit.WaitUntil(t, "the backend re-admitted and ejected again", func() bool {
			return gate.Seen("/health") >= seen+3 && !b.Healthy()
		})
		if g := s.State().Backends[0].Generation; g != g0+uint32(n) {
			t.Fatalf("after %d outages: generation %d, want %d", n, g, g0+uint32(n))
		}
	}
}

// TestGenResetBeforeReadmission: a backend the health check re-admits has
// its locations dropped and its generation bumped before it is eligible
// again, so that no request is routed to it by what its restart lost (the
// reset hook sees it still out), and whoever sees it healthy sees the new
// generation.
func TestGenResetBeforeReadmission(t *testing.T) {
	t.Parallel()
	s, gate, b := gatedBackend(t, func(c *Config) { c.Telemetry.EngineMetrics = false })
	var sawHealthy atomic.Int32
	var resets atomic.Int32
	s.OnBackendReset(func(i int, gen uint32) {
		resets.Add(1)
		if s.fleet().sched.Backends[i].Healthy() {
			sawHealthy.Add(1)
		}
	})
	for n := 1; n <= 3; n++ {
		gate.Refuse("/health")
		testkit.WaitUntil(t, "the backend ejected", func() bool { return !b.Healthy() })
		g := s.table.Generation(0)
		gate.Allow("/health")
		testkit.WaitUntil(t, "the backend re-admitted", b.Healthy)
		if now := s.table.Generation(0); now <= g {
			t.Fatalf("outage %d: healthy again at generation %d, was %d before", n, now, g)
		}
	}
	if r := resets.Load(); r != 3 {
		t.Fatalf("%d resets, want 3", r)
	}
	if n := sawHealthy.Load(); n != 0 {
		t.Fatalf("%d of 3 resets ran with the backend already eligible", n)
	}
}

// gatedBackend starts a proxy, with mod, in front of one mock engine
// behind a gate, health-checked every 20 ms, and waits for its first
// probe.
func gatedBackend(t *testing.T, mod func(*Config)) (*Server, *testkit.Gate, *sched.Backend) {
	t.Helper()
	e := startEngine(t, mock.Config{Name: "e0"})
	gate := testkit.StartGate(t, e.URL())
	s := startProxy(t, func(c *Config) {
		c.Backends = []string{gate.URL()}
		c.HealthInterval = 20 * time.Millisecond
		if mod != nil {
			mod(c)
		}
	})
	testkit.WaitUntil(t, "a first probe", func() bool { return gate.Seen("/health") > 0 })
	return s, gate, s.fleet().sched.Backends[0]
}
