package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// engine is an HTTP server on 127.0.0.1 serving whatever exposition text
// (or status) the test sets, counting scrapes.
type engine struct {
	srv     *httptest.Server
	mu      sync.Mutex
	body    string
	status  int
	scrapes atomic.Int32
	seen    chan struct{} // a token per scrape, dropped when full
}

func newEngine(t *testing.T, body string) *engine {
	e := &engine{body: body, status: http.StatusOK, seen: make(chan struct{}, 1)}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		e.scrapes.Add(1)
		select {
		case e.seen <- struct{}{}:
		default:
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.status != http.StatusOK {
			w.WriteHeader(e.status)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write([]byte(e.body))
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *engine) set(body string, status int) {
	e.mu.Lock()
	e.body, e.status = body, status
	e.mu.Unlock()
}

// fakeClock is moved by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// logBuf collects log lines safely.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

type fixture struct {
	s        *Scraper
	backends []*sched.Backend
	table    *chain.Table
	clock    *fakeClock
	log      *logBuf
	restarts []int
	started  []time.Time // OnRestart's instants, as restarts
	mu       sync.Mutex
}

func newFixture(t *testing.T, urls []string, cacheTokens []int64) *fixture {
	f := &fixture{clock: &fakeClock{t: time.Unix(1_700_000_000, 0)}, log: &logBuf{}}
	for i, u := range urls {
		f.backends = append(f.backends, sched.NewBackend(i, u, strings.TrimPrefix(u, "http://")))
	}
	f.table = chain.NewTable(chain.Config{TTL: time.Hour, MaxBlocks: 1 << 16, Now: f.clock.now})
	f.s = New(f.backends, Config{
		Interval: time.Second,
		Logger:   slog.New(slog.NewTextHandler(f.log, nil)),
		OnRestart: func(i int, started time.Time) {
			f.mu.Lock()
			f.restarts = append(f.restarts, i)
			f.started = append(f.started, started)
			f.mu.Unlock()
		},
		Table: f.table, BlockSize: 64, CacheTokens: cacheTokens,
		Now: f.clock.now,
	})
	return f
}

func (f *fixture) scrape(t *testing.T, i int) error {
	t.Helper()
	return f.s.ScrapeOnce(context.Background(), i)
}

func (f *fixture) signals(t *testing.T, i int) sched.EngineSignals {
	t.Helper()
	sig, ok := f.backends[i].Engine(f.clock.now().UnixMilli(), f.s.MaxAge().Milliseconds())
	if !ok {
		t.Fatalf("backend %d: no fresh signals", i)
	}
	return sig
}

const vllmText = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 5.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.42
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="2048"} 1.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="llama"} 1000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="llama"} 250.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="llama"} 1000.0
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.7e+09
`

func TestScrapeVLLM(t *testing.T) {
	e := newEngine(t, vllmText)
	f := newFixture(t, []string{e.srv.URL}, nil)
	// kvca has one request in flight there itself: 3+5-1 are foreign.
	var res sched.Reservation
	sc, _ := sched.New(f.backends, f.table, 4, "least-loaded")
	if !sc.ReserveOn(f.backends[0], 0, &res) {
		t.Fatal("reserve")
	}
	defer res.ReleaseActive()
	if err := f.scrape(t, 0); err != nil {
		t.Fatal(err)
	}
	sig := f.signals(t, 0)
	if sig.Running != 3 || sig.Waiting != 5 || sig.Foreign != 7 || sig.ForeignWaiting != 5 || !sig.Queue {
		t.Fatalf("queue %+v", sig)
	}
	if sig.KVUsage != 0.42 || sig.CapacityTokens != 2048*16 || sig.Source != "vllm" || sig.Model != "llama" {
		t.Fatalf("cache %+v", sig)
	}
	if sig.PrefixQueries != 1000 || sig.PrefixHits != 250 || sig.StartTime != 1.7e9 || sig.Status != StatusOn {
		t.Fatalf("counters %+v", sig)
	}
	// Capacity in CBR blocks: 32768 tokens × 4 bytes (default ratio) / 64.
	if got := f.table.BackendCapacity(0); got != 2048*16*4/64 {
		t.Fatalf("capacity %d blocks", got)
	}
	// The hit-rate window starts at the first reading: nothing in it yet.
	if sig.EngineHitRate != -1 {
		t.Fatalf("engine hit rate %v before any delta", sig.EngineHitRate)
	}
	f.clock.add(time.Second)
	e.set(strings.NewReplacer("1000.0", "2000.0", "250.0", "1000.0").Replace(vllmText), http.StatusOK)
	if err := f.scrape(t, 0); err != nil {
		t.Fatal(err)
	}
	if sig := f.signals(t, 0); sig.EngineHitRate != 0.75 {
		t.Fatalf("engine hit rate %v, want (1000-250)/(2000-1000)", sig.EngineHitRate)
	}
	st := StateOf(f.backends[0], f.table, f.clock.now(), f.s.MaxAge())
	if st.Status != StatusOn || !st.Fresh || st.EngineHitRate == nil || *st.EngineHitRate != 0.75 || st.CapacityBlocks != 2048 {
		t.Fatalf("state %+v", st)
	}
	var out bytes.Buffer
	WriteMetrics(&out, f.backends, f.table, f.s.Calibrator(), f.clock.now(), f.s.MaxAge())
	for _, want := range []string{
		`kvca_engine_requests_waiting{backend="` + f.backends[0].Name + `"} 5`,
		`kvca_backend_hit_rate{backend="` + f.backends[0].Name + `",source="engine"} 0.75`,
		`kvca_backend_capacity_blocks{backend="` + f.backends[0].Name + `"} 2048`,
		`kvca_table_evictions_total{reason="backend_capacity"} 0`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, out.String())
		}
	}
}

const sglangText = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen"} 2.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen"} 1.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen"} 0.97
# HELP sglang:max_total_num_tokens Maximum total number of tokens.
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="qwen"} 500000.0
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="qwen"} 400.0
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="qwen"} 100.0
`

func TestScrapeSGLang(t *testing.T) {
	e := newEngine(t, sglangText)
	f := newFixture(t, []string{e.srv.URL}, nil)
	if err := f.scrape(t, 0); err != nil {
		t.Fatal(err)
	}
	sig := f.signals(t, 0)
	if sig.Source != "sglang" || sig.Model != "qwen" || sig.Running != 2 || sig.Waiting != 1 || sig.Foreign != 3 || !sig.Queue {
		t.Fatalf("queue %+v", sig)
	}
	if sig.KVUsage != 0.97 || sig.CapacityTokens != 500000 || sig.PrefixQueries != 400 || sig.PrefixHits != 100 {
		t.Fatalf("cache %+v", sig)
	}
	if got := f.table.BackendCapacity(0); got != 500000*4/64 {
		t.Fatalf("capacity %d", got)
	}
}

// TGI and llama.cpp's server: their batch and queue are read (so routing
// judges their batch by their queue), nothing else of theirs; llama.cpp's
// KV usage, near full on an idle server that keeps its slots' contexts,
// is not taken for a full cache.
func TestScrapeTGIAndLlamaCpp(t *testing.T) {
	for _, tc := range []struct {
		source, text     string
		running, waiting int32
	}{
		{"tgi", `# HELP tgi_batch_current_size Current batch size
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 4
# HELP tgi_queue_size Current queue size
# TYPE tgi_queue_size gauge
tgi_queue_size 2
# TYPE tgi_request_count counter
tgi_request_count 130
`, 4, 2},
		{"llamacpp", `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.98
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
`, 3, 0},
	} {
		e := newEngine(t, tc.text)
		f := newFixture(t, []string{e.srv.URL}, nil)
		if err := f.scrape(t, 0); err != nil {
			t.Fatalf("%s: %v", tc.source, err)
		}
		sig := f.signals(t, 0)
		if sig.Source != tc.source || sig.Running != tc.running || sig.Waiting != tc.waiting || !sig.Queue || sig.Status != StatusOn {
			t.Fatalf("%s: queue %+v", tc.source, sig)
		}
		if sig.KVUsage != 0 || sig.CapacityTokens != 0 || sig.PromptTokens != 0 || sig.EngineHitRate != -1 {
			t.Fatalf("%s: signals it does not export as vLLM's %+v", tc.source, sig)
		}
	}
}

func TestMissingMetricsTurnsBackendOff(t *testing.T) {
	e := newEngine(t, "")
	e.set("", http.StatusNotFound)
	f := newFixture(t, []string{e.srv.URL}, []int64{6400})
	for range 3 {
		f.scrape(t, 0)
		f.clock.add(time.Second)
	}
	if n := e.scrapes.Load(); n != 1 {
		t.Fatalf("%d scrapes of an absent /metrics within the re-probe delay, want 1", n)
	}
	if _, ok := f.backends[0].Engine(f.clock.now().UnixMilli(), f.s.MaxAge().Milliseconds()); ok {
		t.Fatal("an off backend has signals")
	}
	if st := StateOf(f.backends[0], f.table, f.clock.now(), f.s.MaxAge()); st.Status != StatusOff || st.Fresh {
		t.Fatalf("state %+v", st)
	}
	if c := strings.Count(f.log.String(), "engine metrics off"); c != 1 {
		t.Fatalf("want one log line saying metrics are off, got %d:\n%s", c, f.log.String())
	}
	// --backend-cache-tokens still bounds it: 6400 tokens × 4 / 64.
	if got := f.table.BackendCapacity(0); got != 400 {
		t.Fatalf("capacity %d", got)
	}
	// Once /metrics appears it is found at the next probe.
	e.set(vllmText, http.StatusOK)
	f.clock.add(reprobeIntervals * time.Second)
	if err := f.scrape(t, 0); err != nil {
		t.Fatal(err)
	}
	if sig := f.signals(t, 0); sig.Waiting != 5 {
		t.Fatalf("after re-probe %+v", sig)
	}
	if !strings.Contains(f.log.String(), "engine metrics read again") {
		t.Fatalf("no recovery line:\n%s", f.log.String())
	}
}

func TestMalformedExpositionIgnored(t *testing.T) {
	e := newEngine(t, vllmText)
	f := newFixture(t, []string{e.srv.URL}, nil)
	if err := f.scrape(t, 0); err != nil {
		t.Fatal(err)
	}
	at := f.signals(t, 0).At
	f.clock.add(time.Second)
	e.set("vllm:num_requests_waiting{model_name=\"llama\" 7\n garbage {{{\n", http.StatusOK)
	if err := f.scrape(t, 0); err == nil || !strings.Contains(err.Error(), "unparsable") {
		t.Fatalf("err %v", err)
	}
	// The earlier reading stands, with its own time, until it is stale;
	// the queue is no longer being read, so routing stops judging the
	// batch by it (Queue).
	if sig := f.signals(t, 0); sig.At != at || sig.Waiting != 5 || sig.Status != StatusError || sig.Queue {
		t.Fatalf("after a malformed scrape %+v", sig)
	}
	f.clock.add(StaleIntervals * time.Second)
	if _, ok := f.backends[0].Engine(f.clock.now().UnixMilli(), f.s.MaxAge().Milliseconds()); ok {
		t.Fatal("signals older than three intervals are still used")
	}
	if !strings.Contains(f.log.String(), "scrape failed") {
		t.Fatalf("no log line:\n%s", f.log.String())
	}
}

func TestMalformedSignalsDroppedOthersKept(t *testing.T) {
	text := strings.NewReplacer(
		`vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.42`, `vllm:kv_cache_usage_perc{engine="0",model_name="llama"} NaN`,
		`num_gpu_blocks="2048"`, `num_gpu_blocks="None"`,
	).Replace(vllmText)
	e := newEngine(t, text)
	f := newFixture(t, []string{e.srv.URL}, []int64{640})
	if err := f.scrape(t, 0); err != nil {
		t.Fatal(err)
	}
	sig := f.signals(t, 0)
	if sig.KVUsage != 0 || sig.CapacityTokens != 0 || sig.Waiting != 5 || sig.Running != 3 {
		t.Fatalf("%+v", sig)
	}
	if !strings.Contains(sig.Err, "vllm:kv_cache_usage_perc") || !strings.Contains(sig.Err, "vllm:cache_config_info") {
		t.Fatalf("err %q", sig.Err)
	}
	// The configured capacity stands in for the unusable one.
	if got := f.table.BackendCapacity(0); got != 640*4/64 {
		t.Fatalf("capacity %d", got)
	}
	if !strings.Contains(f.log.String(), "malformed") {
		t.Fatalf("no log line:\n%s", f.log.String())
	}
}

// An engine that exports no waiting queue leaves Queue unset: routing
// then judges its batch without the engine's word (sched's cap).
func TestNoQueueSeriesNoQueue(t *testing.T) {
	var kept []string
	for _, line := range strings.Split(vllmText, "\n") {
		if !strings.Contains(line, "num_requests_waiting") {
			kept = append(kept, line)
		}
	}
	e := newEngine(t, strings.Join(kept, "\n"))
	f := newFixture(t, []string{e.srv.URL}, nil)
	if err := f.scrape(t, 0); err != nil {
		t.Fatal(err)
	}
	if sig := f.signals(t, 0); sig.Queue || sig.Running != 3 || sig.Waiting != 0 || sig.Status != StatusOn {
		t.Fatalf("%+v", sig)
	}
}

func TestNoEngineMetricsIsOff(t *testing.T) {
	e := newEngine(t, "# TYPE go_goroutines gauge\ngo_goroutines 12\n")
	f := newFixture(t, []string{e.srv.URL}, nil)
	if err := f.scrape(t, 0); err == nil || !strings.Contains(err.Error(), "no vLLM, SGLang, TGI or llama.cpp") {
		t.Fatalf("err %v", err)
	}
	if st := StateOf(f.backends[0], f.table, f.clock.now(), f.s.MaxAge()); st.Status != StatusOff {
		t.Fatalf("state %+v", st)
	}
}

func TestRestartDetected(t *testing.T) {
	e0, e1 := newEngine(t, vllmText), newEngine(t, vllmText)
	f := newFixture(t, []string{e0.srv.URL, e1.srv.URL}, nil)
	for i := range 2 {
		if err := f.scrape(t, i); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.add(time.Second)
	// Engine 0 comes back with a later start time; engine 1's counters
	// go backwards (an exporter without a start time).
	e0.set(strings.Replace(vllmText, "process_start_time_seconds 1.7e+09", "process_start_time_seconds 1.7000001e+09", 1), http.StatusOK)
	e1.set(strings.NewReplacer("1000.0", "10.0", "250.0", "0.0", "process_start_time_seconds 1.7e+09\n", "").Replace(vllmText), http.StatusOK)
	f.scrape(t, 0)
	f.mu.Lock()
	got := append([]int(nil), f.restarts...)
	f.mu.Unlock()
	if len(got) != 1 || got[0] != 0 {
		t.Fatalf("restarts %v after engine 0's", got)
	}
	f.scrape(t, 1)
	f.mu.Lock()
	got = append([]int(nil), f.restarts...)
	f.mu.Unlock()
	if len(got) != 2 || got[1] != 1 {
		t.Fatalf("restarts %v after engine 1's", got)
	}
	if sig := f.signals(t, 1); sig.Restarts != 1 || sig.EngineHitRate != -1 {
		t.Fatalf("after restart %+v (the hit-rate window restarts too)", sig)
	}
	// The same readings again are no restart.
	f.clock.add(time.Second)
	f.scrape(t, 0)
	f.scrape(t, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.restarts) != 2 {
		t.Fatalf("restarts %v", f.restarts)
	}
}

func TestOnSignalsAfterEachScrape(t *testing.T) {
	e := newEngine(t, vllmText)
	f := newFixture(t, []string{e.srv.URL}, nil)
	var got []bool
	var waiting []int32
	f.s.cfg.OnSignals = func(i int, sig sched.EngineSignals, fresh bool) {
		got = append(got, fresh)
		waiting = append(waiting, sig.Waiting)
	}
	f.scrape(t, 0)
	e.set("", http.StatusInternalServerError)
	f.scrape(t, 0)
	if len(got) != 2 || !got[0] || got[1] || waiting[0] != 5 || waiting[1] != 5 {
		t.Fatalf("fresh %v waiting %v", got, waiting)
	}
}

func TestUnreachableBackendNeverCrashes(t *testing.T) {
	e := newEngine(t, vllmText)
	url := e.srv.URL
	e.srv.Close()
	f := newFixture(t, []string{url}, nil)
	if err := f.scrape(t, 0); err == nil {
		t.Fatal("no error from a closed server")
	}
	if st := StateOf(f.backends[0], f.table, f.clock.now(), f.s.MaxAge()); st.Status != StatusError {
		t.Fatalf("state %+v", st)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	e := newEngine(t, vllmText)
	f := newFixture(t, []string{e.srv.URL}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.s.Run(ctx); close(done) }()
	// Run scrapes at once; stop once the engine has seen it.
	<-e.seen
	cancel()
	<-done
}

// simText is what llm-d's vLLM simulator exports once it has served a
// request: no process_start_time_seconds, a cache_config_info without
// model_name, and its counters only after their first increment.
const simText = `# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig.
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="1536"} 1
# HELP vllm:kv_cache_usage_perc Prometheus metric for the fraction of KV-cache blocks currently in use (from 0 to 1).
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="mock"} 0
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="mock"} 0
# HELP vllm:num_requests_waiting Prometheus metric for the number of queued requests.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="mock"} 0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="mock"} 32
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="mock"} 90
# HELP vllm:prompt_tokens_total Total number of prompt tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="mock"} 90
`

// simFresh is the simulator's exposition before its first request.
var simFresh = simText[:strings.Index(simText, "# HELP vllm:prefix_cache_hits_total")]

func TestRestartDetectedWhenCountersVanish(t *testing.T) {
	t.Parallel()
	e := newEngine(t, simFresh)
	f := newFixture(t, []string{e.srv.URL}, nil)
	restarts := func() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.restarts) }
	// Before its first request: the gauges only, no restart, no hit rate.
	if err := f.scrape(t, 0); err != nil {
		t.Fatal(err)
	}
	if sig := f.signals(t, 0); sig.CapacityTokens != 1536*16 || sig.Model != "mock" || sig.EngineHitRate != -1 || restarts() != 0 {
		t.Fatalf("fresh simulator: %+v, %d restarts", sig, restarts())
	}
	// Its counters appear: the window counted from zero, no restart.
	f.clock.add(time.Second)
	e.set(simText, http.StatusOK)
	f.scrape(t, 0)
	if sig := f.signals(t, 0); sig.EngineHitRate != 32.0/90 || restarts() != 0 {
		t.Fatalf("after its first requests: %+v, %d restarts", sig, restarts())
	}
	// Restarted and scraped before its first request again: the counters
	// are gone, which no live process does.
	f.clock.add(time.Second)
	e.set(simFresh, http.StatusOK)
	f.scrape(t, 0)
	if sig := f.signals(t, 0); restarts() != 1 || sig.Restarts != 1 || sig.EngineHitRate != -1 {
		t.Fatalf("after the restart: %+v, %d restarts", sig, restarts())
	}
	// The new process's counters appearing is no second restart, and its
	// hit rate counts from its own zero.
	f.clock.add(time.Second)
	e.set(strings.NewReplacer("} 32\n", "} 16\n", "} 90\n", "} 64\n").Replace(simText), http.StatusOK)
	f.scrape(t, 0)
	if sig := f.signals(t, 0); restarts() != 1 || sig.EngineHitRate != 0.25 {
		t.Fatalf("the new process's first counters: %+v, %d restarts", sig, restarts())
	}
}

func TestMalformedCounterIsNoRestart(t *testing.T) {
	t.Parallel()
	e := newEngine(t, simText)
	f := newFixture(t, []string{e.srv.URL}, nil)
	f.scrape(t, 0)
	f.clock.add(time.Second)
	e.set(strings.Replace(simText, `vllm:prefix_cache_hits_total{model_name="mock"} 32`, `vllm:prefix_cache_hits_total{model_name="mock"} NaN`, 1), http.StatusOK)
	f.scrape(t, 0)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.restarts) != 0 {
		t.Fatalf("restarts %v after a NaN counter", f.restarts)
	}
}

// TestRestartPlacedInItsWindow: the instant given to OnRestart is the new
// process's start time when it falls between the reading that showed the
// old process and the one that showed the new, that window's bound when
// the engine's clock puts it outside, and the window's start without a
// start time.
func TestRestartPlacedInItsWindow(t *testing.T) {
	t.Parallel()
	e := newEngine(t, vllmText) // started at 1.7e9 s, the fixture's clock
	f := newFixture(t, []string{e.srv.URL}, nil)
	startAt := func(sec string) string {
		return strings.Replace(vllmText, "process_start_time_seconds 1.7e+09", "process_start_time_seconds "+sec, 1)
	}
	last := func() time.Time {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.started) == 0 {
			t.Fatal("no restart seen")
		}
		return f.started[len(f.started)-1]
	}
	base := f.clock.now()
	if err := f.scrape(t, 0); err != nil { // the old process, read at base
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, start string
		want        time.Duration // after the previous reading
	}{
		{"within the window", "1700000005.5", 5500 * time.Millisecond},
		{"engine clock behind: the previous reading", "1700000007", 0},
		{"engine clock ahead: the reading that showed it", "1700000100", 10 * time.Second},
	} {
		f.clock.add(10 * time.Second)
		e.set(startAt(c.start), http.StatusOK)
		f.scrape(t, 0)
		if got := last().Sub(base); got != c.want {
			t.Errorf("%s: placed %v after the previous reading, want %v", c.name, got, c.want)
		}
		base = f.clock.now()
	}
	// Counters back at zero and no start time moving forward: the
	// window's start.
	for _, c := range []struct{ name, text string }{
		{"the same start time", startAt("1700000100")},
		{"no start time", strings.Replace(vllmText, "process_start_time_seconds 1.7e+09\n", "", 1)},
	} {
		f.clock.add(10 * time.Second)
		e.set(c.text, http.StatusOK)
		f.scrape(t, 0) // counters up again: no restart
		base = f.clock.now()
		f.clock.add(10 * time.Second)
		e.set(strings.NewReplacer("1000.0", "10.0", "250.0", "0.0").Replace(c.text), http.StatusOK)
		f.scrape(t, 0)
		if got := last(); !got.Equal(base) {
			t.Errorf("counters back at zero, %s: placed at %v, want %v", c.name, got, base)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.restarts) != 5 {
		t.Fatalf("restarts %v, want 5", f.restarts)
	}
}
