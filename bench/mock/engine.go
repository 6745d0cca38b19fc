// Package mock is a mock OpenAI-compatible inference engine that behaves, for
// routing purposes, like vLLM: a bounded prefix KV cache in token blocks with
// LRU eviction, prefill time proportional to uncached tokens, decode time per
// output token, limited concurrency with FIFO queueing, SSE streaming, vLLM's
// metric names, and fault injection. Several engines run in one process.
package mock

import (
	"errors"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// Config describes one engine. Zero values take the defaults noted.
type Config struct {
	Name   string   // identifies the engine in ids and metrics; default "mock"
	Models []string // served model names; default ["mock"]

	CacheTokens int // KV cache capacity in tokens; default 524288; <0: no caching
	BlockTokens int // tokens per cache block; default 16
	MaxSeqs     int // sequences running at once, the rest queue; default 64
	// Priority serves waiting sequences by the request's `priority`
	// (lower first, vLLM's sign) and lets an arrival preempt a running
	// sequence of lower priority when every slot is taken (SGLang's
	// --enable-priority-scheduling); false: first come first served.
	Priority bool

	PrefillOverhead time.Duration // per request; default 5ms
	PrefillPerToken time.Duration // per uncached prompt token; default 50µs
	DecodePerToken  time.Duration // per output token; default 10ms
	// TransferPerToken is what a decode request of a disaggregated fleet
	// (vLLM's kv_transfer_params with do_remote_prefill) waits per prompt
	// token its cache lacks, in place of their prefill: the KV cache read
	// from the prefill worker. Default 5µs.
	TransferPerToken time.Duration
	TimeScale        float64 // multiplies every simulated duration; default 1

	DefaultMaxTokens int // output tokens when the request sets no limit; default 16

	Faults // initial fault injection, changeable with SetFaults

	Fast         bool // no cache (no cached-token count), no timing: a fixed small response (proxy throughput)
	RecordBodies bool // keep a copy of every request body (see Bodies)
}

// Faults are injected failures.
type Faults struct {
	ErrorRate       float64       // fraction of completion requests answered 500
	SlowStart       time.Duration // delay before response headers (not scaled)
	KillAfterChunks int           // close the connection after this many SSE events; 0: never
}

// Stats are an engine's counters since New.
type Stats struct {
	Requests     uint64 // completion requests accepted for generation
	Errors       uint64 // injected 500s
	BadRequests  uint64 // rejected with 4xx
	Killed       uint64 // streams cut by KillAfterChunks
	QueryTokens  uint64 // prompt tokens looked up in the cache (vLLM's prefix_cache_queries)
	HitTokens    uint64 // of which found cached (vLLM's prefix_cache_hits)
	OutputTokens uint64
	Running      int           // sequences running now
	Waiting      int           // sequences queued now
	BusyTime     time.Duration // wall time with at least one sequence running or waiting
	Preemptions  uint64        // running sequences preempted for a higher priority (Config.Priority)
	CachedBlocks int
	Restarts     uint64
	Stored       int // Responses API responses held for continuations
}

// HitRate is HitTokens/QueryTokens, 0 when nothing was queried.
func (s Stats) HitRate() float64 {
	if s.QueryTokens == 0 {
		return 0
	}
	return float64(s.HitTokens) / float64(s.QueryTokens)
}

// Engine is one mock inference server.
type Engine struct {
	cfg    Config
	faults atomic.Pointer[Faults]
	sched  *scheduler

	cacheMu sync.Mutex
	cache   *prefixCache

	jobs    sync.Pool // *job
	parsers sync.Pool // *fastjson.Parser
	fast    fastResponses

	requests, errors, badRequests, killed atomic.Uint64
	queryTokens, hitTokens, outTokens     atomic.Uint64
	restarts, nextID                      atomic.Uint64
	// kvUsed is the KV blocks the running sequences hold.
	kvUsed atomic.Int64
	// started is the process start time exported, unix ms.
	started atomic.Int64

	bodiesMu sync.Mutex
	bodies   [][]byte

	responses responseStore // Responses API threads (responses.go)

	set            *metrics.Set
	mQueries, mHit *metrics.Counter
	mPrompt, mGen  *metrics.Counter
	mSuccess       *metrics.Counter
	mPreempt       *metrics.Counter
	mTTFT          *metrics.PrometheusHistogram
	modelsJSON     []byte
	idPrefix       string

	quit     chan struct{}
	quitOnce sync.Once

	srvMu  sync.Mutex
	addr   string
	ln     net.Listener
	srv    *fasthttp.Server
	served chan struct{}
	conns  map[net.Conn]struct{}
	closed bool
}

// New returns an engine; serve it with Start or mount Handler yourself.
func New(cfg Config) *Engine {
	if cfg.Name == "" {
		cfg.Name = "mock"
	}
	if len(cfg.Models) == 0 {
		cfg.Models = []string{"mock"}
	}
	if cfg.CacheTokens == 0 {
		cfg.CacheTokens = 524288
	}
	if cfg.BlockTokens <= 0 {
		cfg.BlockTokens = 16
	}
	if cfg.MaxSeqs <= 0 {
		cfg.MaxSeqs = 64
	}
	if cfg.PrefillOverhead == 0 {
		cfg.PrefillOverhead = 5 * time.Millisecond
	}
	if cfg.PrefillPerToken == 0 {
		cfg.PrefillPerToken = 50 * time.Microsecond
	}
	if cfg.TransferPerToken == 0 {
		cfg.TransferPerToken = 5 * time.Microsecond
	}
	if cfg.DecodePerToken == 0 {
		cfg.DecodePerToken = 10 * time.Millisecond
	}
	if cfg.TimeScale <= 0 || math.IsNaN(cfg.TimeScale) {
		cfg.TimeScale = 1
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 16
	}
	e := &Engine{
		cfg:   cfg,
		sched: newScheduler(cfg.MaxSeqs, cfg.Priority),
		cache: newPrefixCache(max(cfg.CacheTokens, 0) / cfg.BlockTokens),
		quit:  make(chan struct{}),
		conns: map[net.Conn]struct{}{},
	}
	f := cfg.Faults
	e.faults.Store(&f)
	e.started.Store(time.Now().UnixMilli())
	e.initMetrics()
	e.modelsJSON = modelsJSON(cfg.Models)
	e.fast = buildFastResponses(cfg.Models[0])
	return e
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// SetFaults changes fault injection for requests that arrive from now on.
func (e *Engine) SetFaults(f Faults) { e.faults.Store(&f) }

// Restart empties the KV cache and forgets the stored Responses API
// threads, as a restarted engine would have them, and restarts the
// exported metrics (counters at zero, a new start time); the Stats
// counters go on, for the bench's totals.
func (e *Engine) Restart() {
	e.cacheMu.Lock()
	e.cache.reset()
	e.cacheMu.Unlock()
	e.responses.reset() // held in memory, as vLLM holds them
	e.restartMetrics()
	e.restarts.Add(1)
}

// CachedPrefix returns how many leading blocks of hashes (a prompt of
// promptTokens tokens, BlockHashes) the engine's cache holds now, as its
// admission would count them: what a router fed the engine's own KV
// events would know.
func (e *Engine) CachedPrefix(hashes []uint64, promptTokens int) int {
	limit := (promptTokens - 1) / e.cfg.BlockTokens
	e.cacheMu.Lock()
	n := e.cache.match(hashes, limit)
	e.cacheMu.Unlock()
	return n
}

// Backlog is the prefill work booked on the engine and not yet done, in
// wall time: what its queue holds.
func (e *Engine) Backlog() time.Duration {
	e.sched.mu.Lock()
	end := e.sched.prefill
	e.sched.mu.Unlock()
	return max(time.Until(end), 0)
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	running, waiting, busy := e.sched.snapshot()
	e.cacheMu.Lock()
	blocks := e.cache.len()
	e.cacheMu.Unlock()
	return Stats{
		Requests:     e.requests.Load(),
		Errors:       e.errors.Load(),
		BadRequests:  e.badRequests.Load(),
		Killed:       e.killed.Load(),
		QueryTokens:  e.queryTokens.Load(),
		HitTokens:    e.hitTokens.Load(),
		OutputTokens: e.outTokens.Load(),
		Running:      running,
		Waiting:      waiting,
		BusyTime:     busy,
		Preemptions:  e.sched.preemptions(),
		CachedBlocks: blocks,
		Restarts:     e.restarts.Load(),
		Stored:       e.responses.Len(),
	}
}

// Bodies returns copies of the request bodies received so far (RecordBodies),
// in arrival order.
func (e *Engine) Bodies() [][]byte {
	e.bodiesMu.Lock()
	defer e.bodiesMu.Unlock()
	return append([][]byte(nil), e.bodies...)
}

// Metrics returns the engine's own metric set (what /metrics serves).
func (e *Engine) Metrics() *metrics.Set { return e.set }

// Start listens on addr (e.g. "127.0.0.1:0") and serves in the background.
func (e *Engine) Start(addr string) error {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	if e.closed {
		return errors.New("mock: engine closed")
	}
	if e.ln != nil {
		return errors.New("mock: already serving")
	}
	return e.listenLocked(addr)
}

// Addr is the host:port actually bound by Start.
func (e *Engine) Addr() string {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	return e.addr
}

// URL is "http://" + Addr().
func (e *Engine) URL() string { return "http://" + e.Addr() }

// Down closes the listener and every open connection, so that a proxy sees
// connection refused and broken streams; the cache is kept. Up reopens.
func (e *Engine) Down() error {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	return e.downLocked()
}

// Up listens again on the address bound by Start.
func (e *Engine) Up() error {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	if e.closed {
		return errors.New("mock: engine closed")
	}
	if e.ln != nil {
		return nil
	}
	if e.addr == "" {
		return errors.New("mock: never started")
	}
	return e.listenLocked(e.addr)
}

// Close stops serving, closes open connections and ends simulated work.
func (e *Engine) Close() error {
	e.quitOnce.Do(func() { close(e.quit) })
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	e.closed = true
	return e.downLocked()
}

func (e *Engine) listenLocked(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &fasthttp.Server{
		Handler:              e.Handler,
		Name:                 "kvca-mock",
		MaxRequestBodySize:   64 << 20,
		NoDefaultDate:        true,
		NoDefaultContentType: true,
		ConnState:            e.connState,
		Logger:               quietLogger{},
	}
	e.ln, e.srv, e.addr = ln, srv, ln.Addr().String()
	served := make(chan struct{})
	e.served = served
	go func() {
		_ = srv.Serve(ln)
		close(served)
	}()
	return nil
}

func (e *Engine) downLocked() error {
	if e.ln == nil {
		return nil
	}
	err := e.ln.Close()
	// Serve returns only after registering every accepted connection, so
	// waiting for it first leaves none behind.
	e.srvMu.Unlock()
	<-e.served
	e.srvMu.Lock()
	for c := range e.conns {
		_ = c.Close()
	}
	e.ln, e.srv = nil, nil
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (e *Engine) connState(c net.Conn, st fasthttp.ConnState) {
	e.srvMu.Lock()
	switch st {
	case fasthttp.StateNew:
		e.conns[c] = struct{}{}
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		delete(e.conns, c)
	}
	e.srvMu.Unlock()
}

// scale turns a simulated duration into wall time.
func (e *Engine) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * e.cfg.TimeScale)
}

// quietLogger drops fasthttp's per-connection errors: broken connections are
// what fault injection and Down produce on purpose.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}
