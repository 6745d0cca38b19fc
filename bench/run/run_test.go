package run

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/bench/workload"
)

// testProxy is a minimal reverse proxy: "round-robin" rotates backends,
// "sticky" hashes the start of the first user message, so that a
// conversation stays on one engine.
type testProxy struct {
	srv *http.Server
	url string
}

func (p *testProxy) URL() string  { return p.url }
func (p *testProxy) Close() error { return p.srv.Close() }

type targetKey struct{}

func newTestProxy(listen, policy string, backends []string) (*testProxy, error) {
	return newTestProxySeeing(listen, policy, backends, nil)
}

// newTestProxySeeing is newTestProxy calling see (if not nil) with every
// request it receives.
func newTestProxySeeing(listen, policy string, backends []string, see func(*http.Request)) (*testProxy, error) {
	targets := make([]*url.URL, len(backends))
	for i, b := range backends {
		u, err := url.Parse(b)
		if err != nil {
			return nil, err
		}
		targets[i] = u
	}
	var next atomic.Uint64
	rp := &httputil.ReverseProxy{
		FlushInterval: -1,
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(targets[r.In.Context().Value(targetKey{}).(int)])
		},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if see != nil {
			see(r)
		}
		body, _ := io.ReadAll(r.Body)
		i := int(next.Add(1)) % len(targets)
		if policy == "sticky" {
			b := body
			if k := bytes.Index(b, []byte(`"user"`)); k >= 0 {
				b = b[k:min(len(b), k+64)]
			}
			h := fnv.New32a()
			h.Write(b)
			i = int(h.Sum32()) % len(targets)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, i)))
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &testProxy{srv: &http.Server{Handler: h}, url: "http://" + ln.Addr().String()}
	go p.srv.Serve(ln)
	return p, nil
}

func inProcess(policy string, backends []string) (Proxy, error) {
	return newTestProxy("127.0.0.1:0", policy, backends)
}

// TestMain doubles as the proxy binary for ExecFactory's test.
func TestMain(m *testing.M) {
	if listen := os.Getenv("KVCA_TEST_PROXY_LISTEN"); listen != "" {
		p, err := newTestProxy(listen, "round-robin", strings.Split(os.Getenv("KVCA_TEST_PROXY_BACKENDS"), ","))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer p.Close()
		select {} // until SIGTERM
	}
	// ... and as an external engine for EngineCommand's.
	if port := os.Getenv("KVCA_TEST_ENGINE_PORT"); port != "" {
		e := mock.New(mock.Config{Name: os.Getenv("KVCA_TEST_ENGINE_NAME"), TimeScale: 0.0001, BlockTokens: 16})
		if err := e.Start("127.0.0.1:" + port); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		select {} // until SIGTERM
	}
	os.Exit(m.Run())
}

func smallWorkload() *workload.Workload {
	w := workload.Synthetic{Seed: 7, Sessions: 12, MinTurns: 2, MaxTurns: 4, SystemPrompts: 2,
		SystemPromptTokens: 256, UserTokens: 48, OutputTokens: 4, ToolRate: 0.3}.Generate()
	for i := range w.Requests {
		w.Requests[i].At /= 1000 // arrivals within milliseconds
	}
	return w
}

func fastEngines(n int) Options {
	return Options{Engines: n, Engine: mock.Config{TimeScale: 0.0001, BlockTokens: 16}}
}

func TestSerialReplayMatchesIdeal(t *testing.T) {
	w := smallWorkload()
	opt := fastEngines(1)
	opt.Policies = []string{"round-robin"}
	opt.MaxInFlight = 1 // one at a time: the engine sees the workload's order
	rep, err := Run(context.Background(), w, opt, inProcess)
	if err != nil {
		t.Fatal(err)
	}
	res := rep.Results[0]
	if res.Errors != 0 || len(res.TTFT) != len(w.Requests) {
		t.Fatalf("errors %d %v, %d TTFTs", res.Errors, res.ErrorSamples, len(res.TTFT))
	}
	ideal, _ := workload.Ideal(w.Requests, 16)
	st := res.EngineStats[0]
	if st.QueryTokens != uint64(ideal.QueryTokens) || st.HitTokens != uint64(ideal.HitTokens) {
		t.Fatalf("engine counted %d/%d tokens, ideal %d/%d", st.HitTokens, st.QueryTokens, ideal.HitTokens, ideal.QueryTokens)
	}
	if rep.Workload.IdealHitRate != ideal.Rate() || res.HitRate != ideal.Rate() || res.Imbalance != 1 {
		t.Fatalf("report %+v result hit %v imbalance %v", rep.Workload, res.HitRate, res.Imbalance)
	}
	if res.TTFTp50 > res.TTFTp99 || res.TTFTp99 > res.E2Ep99 || res.Throughput <= 0 {
		t.Fatalf("inconsistent latencies %+v", res)
	}
	// Served one at a time with the ideal hits, every request waits at
	// least its own bare prefill, so each percentile is at least the floor's.
	f := rep.Workload.TTFTFloor
	if f[0] <= 0 || f[0] > f[1] || f[1] > f[2] || res.TTFTp50 < f[0] || res.TTFTp90 < f[1] || res.TTFTp99 < f[2] {
		t.Fatalf("TTFT floor %v against measured %v %v %v", f, res.TTFTp50, res.TTFTp90, res.TTFTp99)
	}
	var out strings.Builder
	rep.WriteTable(&out)
	if !strings.Contains(out.String(), "TTFT floor (ideal cache, nothing queued, prefill only): p50 ") {
		t.Fatalf("no floor line in\n%s", out.String())
	}
}

func TestPoliciesCompared(t *testing.T) {
	w := smallWorkload()
	opt := fastEngines(4)
	opt.Policies = []string{"round-robin", "sticky"}
	opt.MaxInFlight = 1
	var progress bytes.Buffer
	opt.Progress = &progress
	rep, err := Run(context.Background(), w, opt, inProcess)
	if err != nil {
		t.Fatal(err)
	}
	rr, sticky := rep.Results[0], rep.Results[1]
	if rr.Policy != "round-robin" || sticky.Policy != "sticky" || rr.Errors+sticky.Errors != 0 {
		t.Fatalf("results %+v", rep.Results)
	}
	// Keeping conversations on one engine must beat spreading their turns.
	if sticky.HitRate <= rr.HitRate {
		t.Fatalf("sticky hit %.3f <= round-robin %.3f", sticky.HitRate, rr.HitRate)
	}
	for _, res := range rep.Results {
		if len(res.Load) != 4 {
			t.Fatalf("%d load series", len(res.Load))
		}
	}
	if !strings.Contains(progress.String(), "bench round-robin") {
		t.Fatalf("no progress line: %q", progress.String())
	}

	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	wantKeys := func(m any, keys ...string) {
		t.Helper()
		var got []string
		for k := range m.(map[string]any) {
			got = append(got, k)
		}
		sort.Strings(got)
		sort.Strings(keys)
		if !reflect.DeepEqual(got, keys) {
			t.Fatalf("keys %v, want %v", got, keys)
		}
	}
	wantKeys(doc, "workload", "results")
	wantKeys(doc["workload"], "name", "requests", "ideal_hit_rate")
	results := doc["results"].([]any)
	if len(results) != 2 {
		t.Fatal("results length")
	}
	// The workload streams, so inter-token latency is there; a
	// disaggregated fleet's keys (prefill_hit_rate, disaggregated,
	// aggregated) are not, as the prediction's when unknown.
	wantKeys(results[1], "policy", "hit_rate", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "itl_p50_ms", "itl_p99_ms", "throughput_rps", "imbalance", "errors")
	if results[1].(map[string]any)["hit_rate"].(float64) > 1 {
		t.Fatal("hit_rate must be a fraction")
	}

	var table bytes.Buffer
	rep.WriteTable(&table)
	if !strings.Contains(table.String(), "sticky") || !strings.Contains(table.String(), "ideal hit rate") {
		t.Fatalf("table:\n%s", table.String())
	}
	dir := t.TempDir()
	if err := rep.WriteCharts(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"hit_rate.png", "ttft.png", "load.png"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

func TestErrorsCounted(t *testing.T) {
	w := smallWorkload()
	w.Requests = w.Requests[:10]
	opt := fastEngines(2)
	opt.Policies = []string{"round-robin"}
	opt.Engine.Faults = mock.Faults{ErrorRate: 1}
	rep, err := Run(context.Background(), w, opt, inProcess)
	if err != nil {
		t.Fatal(err)
	}
	if res := rep.Results[0]; res.Errors != 10 || !strings.Contains(res.ErrorSamples[0], "HTTP 500") {
		t.Fatalf("errors %d %v", res.Errors, res.ErrorSamples)
	}
	opt.Engine.Faults = mock.Faults{KillAfterChunks: 2}
	rep, err = Run(context.Background(), w, opt, inProcess)
	if err != nil {
		t.Fatal(err)
	}
	if res := rep.Results[0]; res.Errors != 10 {
		t.Fatalf("broken streams: errors %d %v", res.Errors, res.ErrorSamples)
	}
}

func TestExecFactoryMeasuresProxyCPU(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	factory := ExecFactory(func(policy string, backends []string, listen string) []string {
		return []string{"/usr/bin/env", "KVCA_TEST_PROXY_LISTEN=" + listen, "KVCA_TEST_PROXY_BACKENDS=" + strings.Join(backends, ","), exe}
	}, "/health")
	w := smallWorkload()
	opt := fastEngines(2)
	opt.Policies = []string{"round-robin"}
	rep, err := Run(context.Background(), w, opt, factory)
	if err != nil {
		t.Fatal(err)
	}
	res := rep.Results[0]
	// /health is proxied to an engine, which answers 200: readiness worked.
	if res.Errors != 0 || !strings.Contains(res.CPUMeasure, "/proc") {
		t.Fatalf("errors %d %v, cpu %q", res.Errors, res.ErrorSamples, res.CPUMeasure)
	}
}

func TestProcCPUTime(t *testing.T) {
	end := time.Now().Add(30 * time.Millisecond)
	for time.Now().Before(end) {
	}
	d, err := ProcCPUTime(os.Getpid())
	if err != nil || d <= 0 {
		t.Fatalf("%v %v", d, err)
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if pct(d, 0.5) != 5 || pct(d, 0.9) != 9 || pct(d, 0.99) != 10 || pct(nil, 0.5) != 0 {
		t.Fatal("nearest-rank percentiles")
	}
	if imbalance([]time.Duration{2, 2, 2, 6}) != 2 {
		t.Fatal("imbalance")
	}
}

func TestExternalEnginesReadFromTheirMetrics(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	w := smallWorkload()
	opt := fastEngines(2)
	opt.EngineCommand = []string{"/usr/bin/env", "KVCA_TEST_ENGINE_PORT=" + PortPlaceholder, "KVCA_TEST_ENGINE_NAME=" + NamePlaceholder, exe}
	opt.Policies = []string{OraclePolicy, PrecisePolicy}
	opt.MaxInFlight = 1 // one at a time: each engine sees its conversations in order
	opt.Precise = func([]*mock.Engine, *workload.Workload, []string) (Proxy, error) { return oracle{}, nil }
	rep, err := Run(context.Background(), w, opt, inProcess)
	if err == nil || !strings.Contains(err.Error(), "external engines") {
		t.Fatalf("precise on external engines: %v", err)
	}
	if len(rep.Results) != 1 {
		t.Fatalf("%d results", len(rep.Results))
	}
	res := rep.Results[0]
	if res.Errors != 0 {
		t.Fatalf("errors %d %v", res.Errors, res.ErrorSamples)
	}
	// Each conversation pinned to one engine, in order: what each engine
	// counts is the ideal of its own conversations, read off its /metrics.
	var hit, query int64
	for i := range 2 {
		var mine []workload.Request
		for _, r := range w.Requests {
			if r.Session%2 == i {
				mine = append(mine, r)
			}
		}
		ideal, _ := workload.Ideal(mine, 16)
		hit, query = hit+ideal.HitTokens, query+ideal.QueryTokens
		if st := res.EngineStats[i]; st.QueryTokens != uint64(ideal.QueryTokens) || st.HitTokens != uint64(ideal.HitTokens) {
			t.Fatalf("engine %d: /metrics said %d/%d tokens, ideal %d/%d", i, st.HitTokens, st.QueryTokens, ideal.HitTokens, ideal.QueryTokens)
		}
	}
	if res.HitRate != float64(hit)/float64(query) || rep.Workload.CacheTokens <= 0 || rep.Workload.TTFTFloor != [3]time.Duration{} {
		t.Fatalf("hit rate %v, want %d/%d; workload %+v", res.HitRate, hit, query, rep.Workload)
	}
	if len(res.Load) != 2 || res.Load[0].Engine != "e0" || res.Load[1].Engine != "e1" {
		t.Fatalf("load series %+v", res.Load)
	}
}
