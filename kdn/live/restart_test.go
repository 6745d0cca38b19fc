package live_test

import (
	"bufio"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/internal/testkit"
)

// genRig is kvca with engine telemetry and the KDN gateway in front of one
// mock engine, reached through a gate that can refuse its health path or
// its /metrics: each of kvca's two restart detectors (the health check,
// engine telemetry) can be kept from seeing the engine while the other
// one sees it.
type genRig struct {
	*harness
	e    *mock.Engine
	gate *testkit.Gate
}

const healthPath = "/health"

func newGenRig(t *testing.T) *genRig {
	t.Helper()
	return startGenRig(t, nil)
}

// startGenRig is newGenRig whose gate first (when set) sets up before kvca
// starts.
func startGenRig(t *testing.T, first func(*testkit.Gate)) *genRig {
	t.Helper()
	e := startEngines(t, 1, mock.Faults{})[0]
	gate := testkit.StartGate(t, e.URL())
	if first != nil {
		first(gate)
	}
	h := newHarness(t, setup{reuse: []*mock.Engine{e}, ttl: time.Minute, configure: func(c *edge.Config) {
		c.Backends = []string{gate.URL()}
		c.HealthPath = healthPath
		c.HealthInterval = 20 * time.Millisecond
		c.Telemetry.EngineMetrics = true
		c.Telemetry.EngineMetricsInterval = 50 * time.Millisecond
	}})
	r := &genRig{harness: h, e: e, gate: gate}
	waitFor(t, "the engine's telemetry", func() bool {
		st := r.state()
		return st.Healthy && st.Engine != nil && st.Engine.Status == "on"
	})
	return r
}

// adminBackend is the backend in /admin/state.
type adminBackend struct {
	Generation int64 `json:"generation"`
	Healthy    bool  `json:"healthy"`
	Engine     *struct {
		Status   string `json:"status"`
		Restarts int    `json:"restarts"`
	} `json:"engine"`
}

func (r *genRig) state() adminBackend {
	r.t.Helper()
	status, out := r.do("GET", "/admin/state", nil)
	var st struct {
		Backends []adminBackend `json:"backends"`
	}
	if status != 200 || json.Unmarshal(out, &st) != nil || len(st.Backends) != 1 {
		r.t.Fatalf("/admin/state: HTTP %d %s", status, out)
	}
	return st.Backends[0]
}

// generation is the endpoint's generation, which /admin/state and KDN's
// get_lmcache_endpoints must agree on.
func (r *genRig) generation() int64 {
	r.t.Helper()
	admin, kdn := r.state().Generation, r.targets()[0].gen
	if admin != kdn {
		r.t.Fatalf("/admin/state says generation %d, get_lmcache_endpoints %d", admin, kdn)
	}
	return admin
}

// askedAgain waits until kvca asks path once more: the health loop and
// the scraper ask one request at a time, so by then they are done with
// every answer they had before.
func (r *genRig) askedAgain(path string) {
	r.t.Helper()
	n := r.gate.Seen(path)
	waitFor(r.t, "kvca to ask "+path+" again", func() bool { return r.gate.Seen(path) > n })
}

// healthDown makes the health check fail until kvca ejects the backend.
func (r *genRig) healthDown() {
	r.t.Helper()
	r.gate.Refuse(healthPath)
	waitFor(r.t, "the backend ejected", func() bool { return !r.state().Healthy })
}

// healthUp lets the health check pass and waits until kvca re-admitted the
// backend and is done with it.
func (r *genRig) healthUp() {
	r.t.Helper()
	r.gate.Allow(healthPath)
	waitFor(r.t, "the backend re-admitted", func() bool { return r.state().Healthy })
	r.askedAgain(healthPath)
}

// telemetryBlind keeps engine telemetry from reading the engine, and
// waits until no scrape that could still read it is under way.
func (r *genRig) telemetryBlind() {
	r.t.Helper()
	r.gate.Refuse("/metrics")
	r.askedAgain("/metrics")
}

// telemetrySees lets engine telemetry read the engine and waits until it
// has counted restarts restarts of it and is done with that reading.
func (r *genRig) telemetrySees(restarts int) {
	r.t.Helper()
	r.gate.Allow("/metrics")
	waitFor(r.t, "telemetry to see the restart", func() bool {
		st := r.state()
		return st.Engine != nil && st.Engine.Restarts == restarts
	})
	r.askedAgain("/metrics")
}

// restart restarts the engine (a new process start time, its cache gone)
// and waits until that start time is past: a real engine answers nothing
// before its process started, and the mock's restarted start time can
// run up to a second ahead.
func (r *genRig) restart() {
	r.t.Helper()
	r.e.Restart()
	resp, err := http.Get(r.e.URL() + "/metrics")
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	started := 0.0
	for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "process_start_time_seconds "); ok {
			started, _ = strconv.ParseFloat(v, 64)
		}
	}
	if started == 0 {
		r.t.Fatal("the engine exports no process_start_time_seconds")
	}
	sec, frac := math.Modf(started)
	at := time.Unix(int64(sec), int64(frac*1e9))
	waitFor(r.t, "the engine's process to have started", func() bool { return time.Now().After(at) })
}

// The three ways one restart of one engine is seen: both detectors, in
// either order, or telemetry alone (the health check never noticed).
var genOrders = []struct {
	name string
	see  func(r *genRig, restarts int, check func(string))
}{
	{"health then telemetry", func(r *genRig, restarts int, check func(string)) {
		r.telemetryBlind()
		r.healthDown()
		r.restart()
		r.healthUp()
		check("re-admitted by the health check")
		r.telemetrySees(restarts)
		check("then seen by telemetry")
	}},
	{"telemetry then health", func(r *genRig, restarts int, check func(string)) {
		r.healthDown()
		r.restart()
		r.telemetrySees(restarts)
		check("seen by telemetry")
		r.healthUp()
		check("then re-admitted by the health check")
	}},
	{"telemetry alone", func(r *genRig, restarts int, check func(string)) {
		r.restart()
		r.telemetrySees(restarts)
		check("seen by telemetry")
		r.askedAgain(healthPath)
		if !r.state().Healthy {
			r.t.Fatal("the health check ejected the backend")
		}
		check("with the health check passing")
	}},
}

// TestGenOneRestartOneBump: one restart of one engine, seen by both of
// kvca's detectors in either order or by telemetry alone, moves the
// endpoint's generation by exactly one, in /admin/state and in KDN's
// get_lmcache_endpoints alike.
func TestGenOneRestartOneBump(t *testing.T) {
	for _, o := range genOrders {
		t.Run(o.name, func(t *testing.T) {
			r := newGenRig(t)
			g0 := r.generation()
			o.see(r, 1, func(when string) {
				t.Helper()
				if g := r.generation(); g != g0+1 {
					t.Fatalf("%s: generation %d, want %d (one restart, from %d)", when, g, g0+1, g0)
				}
			})
		})
	}
}

// TestGenHealthNeverUp: a backend the health check never had up before
// it ejected it, whose engine telemetry had read, restarts; telemetry sees
// the restart, then the health check re-admits the backend. That is one
// restart: the generation moves once. (The health check's first probe is
// held until the engine is ejected, as a first probe slower than
// telemetry's first scrape can be under load.)
func TestGenHealthNeverUp(t *testing.T) {
	r := startGenRig(t, func(g *testkit.Gate) { g.Hold(healthPath) })
	g0 := r.generation()
	r.gate.Refuse(healthPath)
	r.gate.Release(healthPath)
	waitFor(t, "the backend ejected", func() bool { return !r.state().Healthy })
	r.restart()
	r.telemetrySees(1)
	if g := r.generation(); g != g0+1 {
		t.Fatalf("seen by telemetry: generation %d, want %d", g, g0+1)
	}
	r.healthUp()
	if g := r.generation(); g != g0+1 {
		t.Fatalf("then re-admitted by the health check: generation %d, want %d (one restart, from %d)", g, g0+1, g0)
	}
}

// TestGenTwoRestartsTwoBumps: restarts that follow one another each move
// the generation once, whichever detectors see them: what accounted for
// one restart does not swallow the next.
func TestGenTwoRestartsTwoBumps(t *testing.T) {
	r := newGenRig(t)
	g0 := r.generation()
	var orders []int // each order twice: every detector follows every other
	for range 2 {
		for i := range genOrders {
			orders = append(orders, i)
		}
	}
	for n, i := range orders {
		o := genOrders[i]
		o.see(r, n+1, func(when string) {
			t.Helper()
			if g := r.generation(); g != g0+int64(n)+1 {
				t.Fatalf("restart %d (%s), %s: generation %d, want %d", n+1, o.name, when, g, g0+int64(n)+1)
			}
		})
	}
}
