package pickercost

import (
	"context"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/epp"
	"github.com/kvca/kvca/epp/epptest"
)

// fakeKvca stands in for kvca: a reverse proxy to the first engine as
// its listener and kvca's ext_proc server on a round-robin fake
// lifecycle as its picker, in this process, whose CPU is then read.
func fakeKvca(t *testing.T, engines []*mock.Engine) Target {
	t.Helper()
	u, err := url.Parse(engines[0].URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(u))
	t.Cleanup(proxy.Close)
	fake := &epptest.Proxy{}
	var eps []string
	for _, e := range engines {
		eps = append(eps, e.Addr())
	}
	if err := fake.SetEndpoints(eps); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := epp.New(fake, epp.Config{})
	done := make(chan error, 1)
	go func() { done <- ps.Serve(ln) }()
	t.Cleanup(func() {
		ps.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return Target{ProxyURL: proxy.URL, ExtProcAddr: ln.Addr().String(), PID: os.Getpid()}
}

func startEngines(t *testing.T, n int) []*mock.Engine {
	t.Helper()
	engines, err := Engines(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, e := range engines {
			e.Close()
		}
	})
	return engines
}

// TestRunMeasuresEveryMode: a run gives one row per size and mode with
// every request counted, picker mode its time to the pick, and the
// added latency against direct.
func TestRunMeasuresEveryMode(t *testing.T) {
	engines := startEngines(t, 2)
	target := fakeKvca(t, engines)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := Run(ctx, Config{Sizes: []int{1 << 10, 100 << 10}, Requests: 10, Concurrency: 3}, target, engines)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rows))
	}
	for i, r := range rows {
		if r.Mode != allModes[i%3] || r.Requests != 10 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("row %d: %+v", i, r)
		}
		if r.Added != r.P50-rows[i/3*3].P50 {
			t.Errorf("row %d: added %v is not p50 less direct's", i, r.Added)
		}
		if (r.Mode == Picker) != (r.PickP50 > 0) || r.PickP50 > r.P99 {
			t.Errorf("row %d (%s): pick p50 %v", i, r.Mode, r.PickP50)
		}
	}
	var b strings.Builder
	if err := Table(&b, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 8 || !strings.HasPrefix(lines[0], "| size | mode | requests | kvca CPU µs/req |") || !strings.HasPrefix(lines[7], "| 100KB | picker | 10 |") {
		t.Errorf("table:\n%s", b.String())
	}
}

// TestRunSomeModes: the modes asked for run in their order, alone, with
// no added latency where direct did not run; an unknown mode is refused.
func TestRunSomeModes(t *testing.T) {
	engines := startEngines(t, 2)
	target := fakeKvca(t, engines)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := Run(ctx, Config{Sizes: []int{1 << 10}, Requests: 6, Concurrency: 2, Modes: []string{Picker, Proxy}}, target, engines)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Mode != Proxy || rows[1].Mode != Picker || rows[1].Added != 0 {
		t.Fatalf("rows %+v, want proxy then picker, nothing added", rows)
	}
	var b strings.Builder
	if err := Table(&b, rows); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n")[2:] {
		if cols := strings.Split(line, "|"); len(cols) != 10 || strings.TrimSpace(cols[7]) != "–" {
			t.Errorf("table without direct shows an added latency: %s", line)
		}
	}
	if _, err := Run(ctx, Config{Sizes: []int{1 << 10}, Modes: []string{"envoy"}}, target, engines); err == nil || !strings.Contains(err.Error(), `"envoy"`) {
		t.Errorf("an unknown mode: %v", err)
	}
}

// TestRunFailsOnAFailedRequest: one failed request fails the run, in
// every mode.
func TestRunFailsOnAFailedRequest(t *testing.T) {
	engines := startEngines(t, 2)
	target := fakeKvca(t, engines)
	for _, e := range engines {
		e.SetFaults(mock.Faults{ErrorRate: 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Run(ctx, Config{Sizes: []int{1 << 10}, Requests: 4, Concurrency: 2}, target, engines); err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("Run with failing engines: %v, want a 500", err)
	}
	// The picker alone failing: an endpoint outside the engines.
	other := startEngines(t, 1)
	bad := fakeKvca(t, other)
	for _, e := range engines {
		e.SetFaults(mock.Faults{})
	}
	bad.ProxyURL = target.ProxyURL
	_, err := Run(ctx, Config{Sizes: []int{1 << 10}, Requests: 4, Concurrency: 2}, bad, engines)
	if err == nil || !strings.Contains(err.Error(), "picker") || !strings.Contains(err.Error(), "not one of the mock engines") {
		t.Fatalf("Run with a picker naming a stranger: %v", err)
	}
}

// TestStartKvcaReportsAnEarlyExit: a binary that is not kvca fails the
// start at once rather than after the readiness wait.
func TestStartKvcaReportsAnEarlyExit(t *testing.T) {
	start := time.Now()
	_, err := StartKvca(context.Background(), "/bin/false", []string{"http://127.0.0.1:9"}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") {
		t.Fatalf("StartKvca(/bin/false) = %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}
