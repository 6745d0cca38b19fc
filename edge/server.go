package edge

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/affinity"
	"github.com/kvca/kvca/apikeys"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/quota"
	"github.com/kvca/kvca/sched"
	"github.com/kvca/kvca/tracing"
)

// Server is one kvca proxy: the public listener, the admin listener, and
// the background loops (vacuum, health) they need.
type Server struct {
	cfg   Config
	key   chain.Key
	canon *canon.Canonicalizer
	memo  *chain.Memo // nil when --cbr-memo-bytes is 0
	table *chain.Table
	// fl is the backends in force (reload.go); a request routes on the
	// fleet it loaded.
	fl    atomic.Pointer[fleet]
	m     *serverMetrics
	log   *slog.Logger
	calls sync.Pool
	pds   sync.Pool // the prefill sides of disaggregated requests (pd.go)

	admin *fasthttp.Server
	ln    net.Listener
	adln  net.Listener
	// clientConns counts open client connections across loops
	// (--max-client-conns).
	clientConns atomic.Int32

	bg       context.Context
	stopBg   context.CancelFunc
	loops    sync.WaitGroup
	serving  sync.WaitGroup
	draining atomic.Bool
	notReady atomic.Bool // /ready fails: shutting down (during --drain-delay too)
	// adminRoutes lets other packages (the KDN API) mount admin handlers.
	adminRoutes map[string]fasthttp.RequestHandler
	peer        Peer
	models      atomic.Pointer[modelIndex]
	access      *slog.Logger // nil unless --access-log
	onShutdown  []func()
	resetHooks  []func(backend int, gen uint32)
	modelsWake  chan struct{} // a backend came back: ask for its models
	tlsPub      *certSource   // nil unless --tls-cert
	tlsAdmin    *certSource   // nil unless --admin-tls-cert
	evl         *evLoops
	nloops      int             // event loops serving, once started
	adm         *admit.Admitter // admission; bypassed without --max-inflight-per-backend
	keys        *apikeys.Store  // nil without --api-keys
	quota       *quota.Limiter  // nil without --api-keys
	tracer      *tracing.Tracer // nil: tracing off
	// threads binds a Responses answer's id to the backend that produced
	// it (which alone may store it); sessions binds a named conversation
	// (prompt_cache_key, a session header, user) to its backend.
	threads, sessions *affinity.Map
	// cal learns CBR bytes per token (model by model) from the answers'
	// usage, to turn engines' cache capacities into blocks; calibrate is
	// set when capacities are in use.
	cal       *chain.Calibrator
	calibrate bool
	stopKeys  func()

	// upTLS is the client TLS configuration for https backends.
	upTLS    *tls.Config
	shutOnce sync.Once
	shutErr  error
	// reloadMu serialises changes to the fleet; started: Start ran.
	reloadMu     sync.Mutex
	started      bool
	onBackends   []func()
	spec         []string     // the backend list in force, as configured
	cacheTokens  []int64      // --backend-cache-tokens of the configuration in force
	disc         *discovery   // --discovery-interval
	scraping     bool         // engine telemetry runs (--engine-metrics)
	scrapeClient *http.Client // the scrapers' client

	// resetMu makes deciding on a backend reset and making it one step;
	// resetAt holds, by slot, when its generation was last bumped (zero:
	// never). See restarted.
	resetMu sync.Mutex
	resetAt []time.Time
}

// Peer shares what this replica learns with other replicas. Its methods
// are called on the request path after a response began: they must not
// block, and must copy chain if they keep it.
type Peer interface {
	// Learned: backend holds chain as of at (table time; see Table.TimeOf).
	Learned(chain []uint64, backend int, at int64)
	// Reset: backend lost its cache; its generation is now gen.
	Reset(backend int, gen uint32)
}

// OnShutdown registers f to run when Shutdown has drained the listeners
// (for example to cancel KDN operations); call before Start.
func (s *Server) OnShutdown(f func()) { s.onShutdown = append(s.onShutdown, f) }

// AddMetrics appends another component's series (clustering, the
// endpoint picker) to /metrics, at any time.
func (s *Server) AddMetrics(write func(io.Writer)) { s.m.set.RegisterMetricsWriter(write) }

// SetPeer installs clustering; call before Start.
func (s *Server) SetPeer(p Peer) { s.peer = p }

// New validates cfg and builds a server; nothing listens until Start.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	key := chain.RandomKey()
	if cfg.Table.HashKey != "" {
		key, _ = chain.ParseKey(cfg.Table.HashKey)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// A location refreshed within TTL/4096 of its last refresh keeps that
	// time: expiry comes at most 1/4096 of the TTL early (146 ms of the
	// default 10 minutes), and a chain resent that often is not rewritten
	// block by block on every answer.
	slack := cfg.Table.TTL / 4096
	table := chain.NewTable(chain.Config{TTL: cfg.Table.TTL, MaxBlocks: cfg.Table.MaxBlocks, Now: cfg.Now, TouchSlack: slack})
	var addrs []backendAddr
	for _, raw := range cfg.Backends {
		a, _ := parseBackend(raw)
		addrs = append(addrs, a)
	}
	disc := &discovery{}
	if cfg.DiscoveryInterval > 0 {
		addrs = disc.expand(context.Background(), addrs, log)
		if len(addrs) > chain.MaxBackends {
			return nil, fmt.Errorf("--discovery-interval: the backends resolve to %d addresses, more than the %d supported", len(addrs), chain.MaxBackends)
		}
	}
	backends := make([]*sched.Backend, len(addrs))
	for i, a := range addrs {
		backends[i] = sched.NewBackend(i, a.url, a.name())
	}
	sc, err := sched.New(backends, table, cfg.Routing.ActiveWeight, cfg.Routing.Policy)
	if err != nil {
		return nil, err
	}
	if cfg.CustomPolicy != nil {
		sc.Policy = cfg.CustomPolicy
	}
	if err := sc.SetTTFT(cfg.Routing.TTFT); err != nil {
		return nil, err
	}
	sc.SetAffinityEpsilon(cfg.Routing.AffinityEpsilon)
	table.SetPredictTTL(cfg.Table.PredictTTL)
	s := &Server{
		cfg:         cfg,
		key:         key,
		canon:       canon.NewWithOptions(cfg.Table.CBRExclude, canon.Options{NoSession: !usesSession(cfg.Routing.Policy), HashKey: [2]uint64{key.K0, key.K1}, ResumeMemoBytes: cfg.Table.ResumeMemoBytes}),
		memo:        chain.NewMemo(cfg.Table.CBRMemoBytes),
		table:       table,
		log:         log,
		adminRoutes: map[string]fasthttp.RequestHandler{},
		disc:        disc,
		modelsWake:  make(chan struct{}, 1),
	}
	if cfg.AccessLog {
		s.access = log
	}
	s.m = newServerMetrics(table, s.memo, s.canon, &s.clientConns)
	s.m.set.RegisterMetricsWriter(sc.WriteTTFTMetrics)
	s.m.set.RegisterMetricsWriter(s.writeRoutingMetrics)
	s.m.set.RegisterMetricsWriter(s.writePoolMetrics)
	s.cal = chain.NewCalibrator(0)
	s.threads = affinity.New(affinity.Responses, affinity.Config{TTL: max(cfg.Table.TTL, time.Hour)})
	s.sessions = affinity.New(affinity.Sessions, affinity.Config{TTL: cfg.Table.TTL})
	s.m.set.RegisterMetricsWriter(s.threads.WritePrometheus)
	s.m.set.RegisterMetricsWriter(s.sessions.WritePrometheus)
	s.m.set.NewGauge(fmt.Sprintf(`kvca_build_info{version=%q,goversion=%q}`, cmp.Or(cfg.Version, "dev"), runtime.Version()), func() float64 { return 1 })
	s.adm, err = admit.New(cfg.Admission.Config(backends, s.m.set))
	if err != nil {
		return nil, err
	}
	if s.upTLS, err = upstreamTLS(&cfg); err != nil {
		return nil, err
	}
	if cfg.UpstreamInsecure {
		log.Warn("--upstream-insecure: backend certificates are NOT verified; anyone on the path can impersonate a backend")
	}
	fl := &fleet{sched: sc}
	for i, b := range backends {
		fl.ups = append(fl.ups, s.newUpstream(b, addrs[i]))
	}
	fl.pools = poolsOf(fl.ups)
	s.fl.Store(fl)
	s.spec, s.cacheTokens = cfg.Backends, cfg.Telemetry.BackendCacheTokens
	if cfg.APIKeys != "" {
		if s.keys, err = apikeys.Open(cfg.APIKeys, log); err != nil {
			return nil, fmt.Errorf("--api-keys: %w", err)
		}
		s.quota = quota.New(quota.Options{})
		s.quota.Attach(s.keys)
		s.m.set.RegisterMetricsWriter(func(w io.Writer) { s.keys.WritePrometheus(w) })
		s.m.set.RegisterMetricsWriter(func(w io.Writer) { s.quota.WritePrometheus(w) })
	}
	if s.tracer, err = tracing.New(cfg.Tracing); err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	if cfg.TLSCert != "" {
		if s.tlsPub, err = newCertSource("public", cfg.TLSCert, cfg.TLSKey, log); err != nil {
			return nil, err
		}
		s.m.tlsMetrics(s.tlsPub)
	}
	if cfg.AdminTLSCert != "" {
		if s.tlsAdmin, err = newCertSource("admin", cfg.AdminTLSCert, cfg.AdminTLSKey, log); err != nil {
			return nil, err
		}
		s.m.tlsMetrics(s.tlsAdmin)
	}
	s.admin = &fasthttp.Server{
		Handler:     s.handleAdmin,
		Name:        "kvca-admin",
		ReadTimeout: 30 * time.Second,
		Logger:      quietLogger{log},
	}
	s.rebuildModels()
	s.bg, s.stopBg = context.WithCancel(context.Background())
	return s, nil
}

// Table is the block table (for the admin and KDN APIs and tests).
func (s *Server) Table() *chain.Table { return s.table }

// Scheduler is the scheduler (for the admin and KDN APIs and tests).
func (s *Server) Scheduler() *sched.Scheduler { return s.fl.Load().sched }

// Key is the hash key in use.
func (s *Server) Key() chain.Key { return s.key }

// Config returns the validated configuration.
func (s *Server) Config() Config { return s.cfg }

// BlockSize is the CBR block size in bytes (--block-size; a reload cannot
// change it).
func (s *Server) BlockSize() int { return s.cfg.Table.BlockSize }

// HandleAdmin mounts h on the admin listener at path (exact match, or a
// prefix when path ends in "/"). Call before Start.
func (s *Server) HandleAdmin(path string, h fasthttp.RequestHandler) { s.adminRoutes[path] = h }

// ResetBackend drops backend i's locations and bumps its generation, as
// when it recovers; it returns the new generation.
func (s *Server) ResetBackend(i int) uint32 { return s.resetBackend(i) }

// Start listens on cfg.Listen and cfg.AdminListen (empty: no admin
// listener) and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Listen, err)
	}
	var adln net.Listener
	if s.cfg.AdminListen != "" {
		adln, err = net.Listen("tcp", s.cfg.AdminListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("admin listen %s: %w", s.cfg.AdminListen, err)
		}
	}
	if err := s.StartOn(ln, adln); err != nil {
		ln.Close()
		if adln != nil {
			adln.Close()
		}
		return err
	}
	return nil
}

// StartOn serves on listeners the caller opened; adln may be nil.
func (s *Server) StartOn(ln, adln net.Listener) error {
	s.ln, s.adln = ln, adln
	for _, cs := range []*certSource{s.tlsPub, s.tlsAdmin} {
		if cs != nil {
			s.loops.Add(1)
			go func() { defer s.loops.Done(); cs.watch(s.bg, s.cfg.TLSReloadInterval) }()
		}
	}
	if adln != nil && s.tlsAdmin != nil {
		adln = tls.NewListener(adln, serverTLS(s.tlsAdmin))
	}
	if s.keys != nil {
		s.stopKeys = s.keys.Watch(0)
	}
	s.loops.Add(1)
	go func() { defer s.loops.Done(); s.table.Vacuum(s.bg) }()
	s.loops.Add(1)
	go func() { defer s.loops.Done(); s.discoverModels(s.bg) }()
	s.startTelemetry()
	s.reloadMu.Lock()
	for _, u := range s.fl.Load().ups {
		s.startUpstream(u)
	}
	s.started = true
	s.reloadMu.Unlock()
	if s.cfg.DiscoveryInterval > 0 {
		s.loops.Add(1)
		go func() { defer s.loops.Done(); s.discoverLoop(s.bg) }()
	}
	if err := s.startLoops(ln); err != nil {
		return err
	}
	if adln != nil {
		s.serving.Add(1)
		go func() { defer s.serving.Done(); _ = s.admin.Serve(adln) }()
	}
	s.log.Info("kvca serving", "listen", ln.Addr().String(), "admin", addrOf(adln),
		"backends", len(s.fl.Load().ups), "policy", s.cfg.Routing.Policy, "block_size", s.cfg.Table.BlockSize,
		"ttl", s.cfg.Table.TTL, "max_blocks", s.cfg.Table.MaxBlocks, "hash_key_from_flag", s.cfg.Table.HashKey != "", "tls", s.tlsPub != nil,
		"loops", len(s.evl.loops))
	return nil
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// ReloadTLS re-reads the certificate files now (SIGHUP); a bad pair keeps
// the one in service and is reported in the error.
func (s *Server) ReloadTLS() error {
	var errs []error
	for _, cs := range []*certSource{s.tlsPub, s.tlsAdmin} {
		if cs != nil {
			if _, err := cs.reload(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Addr is the public listener's address.
func (s *Server) Addr() string { return addrOf(s.ln) }

// AdminAddr is the admin listener's address ("" if none).
func (s *Server) AdminAddr() string { return addrOf(s.adln) }

// Shutdown stops accepting, lets in-flight requests and streams finish
// until ctx ends, then cuts what is left (streams end with an SSE error
// event where they can) and stops the background loops. The error says
// whether anything had to be cut.
//
// Only the first call shuts down; later ones wait for it and return its
// result. (A second run would close the listening descriptor again, by
// then perhaps another listener's.)
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutOnce.Do(func() { s.shutErr = s.shutdown(ctx) })
	return s.shutErr
}

func (s *Server) shutdown(ctx context.Context) error {
	s.notReady.Store(true)
	if d := s.cfg.DrainDelay; d > 0 {
		s.log.Info("draining: /ready fails; serving on until the drain delay ends", "drain_delay", d)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	s.draining.Store(true)
	var err error
	if s.evl != nil {
		err = s.evl.stop(ctx.Done())
		s.ln.Close()
	}
	if err != nil {
		s.log.Warn("shutdown timeout: in-flight requests were cut")
	}
	if s.adln != nil {
		_ = s.admin.ShutdownWithContext(ctx)
	}
	for _, f := range s.onShutdown {
		f()
	}
	s.adm.Close()
	if s.stopKeys != nil {
		s.stopKeys()
	}
	if s.tracer != nil {
		_ = s.tracer.Shutdown(ctx)
	}
	s.stopBg()
	s.loops.Wait()
	for _, u := range s.fl.Load().ups {
		u.hc.CloseIdleConnections()
	}
	return err
}

// readiness is GET /ready: 200 while some backend that can answer a
// request (not a prefill worker, which only takes prefill legs) is healthy
// and kvca is not draining.
func (s *Server) readiness() (int, []byte) {
	n, answering := 0, 0
	for _, u := range s.fl.Load().ups {
		if u.b.Healthy() {
			n++
			if u.addr.role.Decodes() {
				answering++
			}
		}
	}
	if answering == 0 || s.notReady.Load() {
		return 503, fmt.Appendf(nil, `{"status":"not_ready","healthy_backends":%d,"draining":%v}`+"\n", n, s.notReady.Load())
	}
	return 200, fmt.Appendf(nil, `{"status":"ready","healthy_backends":%d}`+"\n", n)
}

// quietLogger routes fasthttp's own messages to slog at debug level.
type quietLogger struct{ l *slog.Logger }

func (q quietLogger) Printf(format string, args ...any) {
	q.l.Debug(fmt.Sprintf(format, args...))
}

// Quota is the per-tenant limiter (nil without --api-keys), for sharing
// through the cluster.
func (s *Server) Quota() *quota.Limiter { return s.quota }

// Affinity returns the response-id and session binding maps, for sharing
// through the cluster.
func (s *Server) Affinity() (threads, sessions *affinity.Map) { return s.threads, s.sessions }
