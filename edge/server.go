package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// Server is one kvca proxy: the public listener, the admin listener, and
// the background loops (vacuum, health) they need.
type Server struct {
	cfg   Config
	key   chain.Key
	canon *canon.Canonicalizer
	memo  *chain.Memo // nil when --cbr-memo-bytes is 0
	table *chain.Table
	sched *sched.Scheduler
	ups   []*upstream
	m     *serverMetrics
	log   *slog.Logger
	calls sync.Pool

	srv   *fasthttp.Server
	admin *fasthttp.Server
	ln    net.Listener
	adln  net.Listener

	bg       context.Context
	stopBg   context.CancelFunc
	loops    sync.WaitGroup
	serving  sync.WaitGroup
	draining atomic.Bool
	// adminRoutes lets other packages (the KDN API) mount admin handlers.
	adminRoutes map[string]fasthttp.RequestHandler
	peer        Peer
	models      atomic.Pointer[modelIndex]
	access      *slog.Logger // nil unless --access-log
	onShutdown  []func()
	modelsWake  chan struct{} // a backend came back: ask for its models
	tlsPub      *certSource   // nil unless --tls-cert
	tlsAdmin    *certSource   // nil unless --admin-tls-cert
	evl         *evLoops      // nil unless --io epoll
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

// AddMetrics appends another component's series (clustering) to /metrics.
// Call before Start.
func (s *Server) AddMetrics(write func(io.Writer)) { s.m.set.RegisterMetricsWriter(write) }

// SetPeer installs clustering; call before Start.
func (s *Server) SetPeer(p Peer) { s.peer = p }

// learned records a successful answer: in the table, and with the peers.
func (s *Server) learned(chain []uint64, backend int, at int64) {
	s.table.Touch(chain, backend, at)
	if s.peer != nil {
		s.peer.Learned(chain, backend, at)
	}
}

// resetBackend drops a backend's locations (its cache is gone) and tells
// the peers.
func (s *Server) resetBackend(i int) uint32 {
	gen := s.table.Reset(i)
	if s.peer != nil {
		s.peer.Reset(i, gen)
	}
	return gen
}

// New validates cfg and builds a server; nothing listens until Start.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	key := chain.RandomKey()
	if cfg.HashKey != "" {
		key, _ = chain.ParseKey(cfg.HashKey)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// A location refreshed within TTL/4096 (at most 10 ms) of its last
	// refresh keeps that time: expiry comes at most that much early.
	slack := min(cfg.TTL/4096, 10*time.Millisecond)
	table := chain.NewTable(chain.Config{TTL: cfg.TTL, MaxBlocks: cfg.MaxBlocks, Now: cfg.Now, TouchSlack: slack})
	backends := make([]*sched.Backend, len(cfg.Backends))
	addrs := make([]backendAddr, len(cfg.Backends))
	for i, raw := range cfg.Backends {
		a, _ := parseBackend(raw)
		addrs[i] = a
		backends[i] = sched.NewBackend(i, a.url, a.host)
	}
	sc, err := sched.New(backends, table, cfg.ActiveWeight, cfg.Policy)
	if err != nil {
		return nil, err
	}
	if cfg.CustomPolicy != nil {
		sc.Policy = cfg.CustomPolicy
	}
	s := &Server{
		cfg:         cfg,
		key:         key,
		canon:       canon.NewWithOptions(cfg.CBRExclude, canon.Options{NoSession: !usesSession(cfg.Policy)}),
		memo:        chain.NewMemo(cfg.CBRMemoBytes),
		table:       table,
		sched:       sc,
		log:         log,
		adminRoutes: map[string]fasthttp.RequestHandler{},
		modelsWake:  make(chan struct{}, 1),
	}
	if cfg.AccessLog {
		s.access = log
	}
	s.m = newServerMetrics(sc, table, s.memo)
	upTLS, err := upstreamTLS(&cfg)
	if err != nil {
		return nil, err
	}
	if cfg.UpstreamInsecure {
		log.Warn("--upstream-insecure: backend certificates are NOT verified; anyone on the path can impersonate a backend")
	}
	for i, b := range backends {
		s.ups = append(s.ups, newUpstream(b, addrs[i], cfg.MaxConnsPerBackend, s.m.newBackend(s.m.set, b.Name), upTLS))
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
	s.srv = &fasthttp.Server{
		Handler:                       s.handle,
		Name:                          "kvca",
		MaxRequestBodySize:            cfg.MaxBodyBytes,
		ReadTimeout:                   cfg.ClientReadTimeout,
		IdleTimeout:                   cfg.ClientIdleTimeout,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		NoDefaultDate:                 true,
		DisableHeaderNamesNormalizing: true,
		DisablePreParseMultipartForm:  true,
		CloseOnShutdown:               true,
		ErrorHandler:                  s.handleServerError,
		ReadBufferSize:                16 << 10,
		WriteBufferSize:               16 << 10,
		Logger:                        quietLogger{log},
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

// usesSession says whether a routing policy reads sched.Request.Session;
// the others are spared its hash (a quarter of canon+chain at 1–4 KB).
func usesSession(policy string) bool { return policy == "session-hash" }

// Table is the block table (for the admin and KDN APIs and tests).
func (s *Server) Table() *chain.Table { return s.table }

// Scheduler is the scheduler (for the admin and KDN APIs and tests).
func (s *Server) Scheduler() *sched.Scheduler { return s.sched }

// Key is the hash key in use.
func (s *Server) Key() chain.Key { return s.key }

// Config returns the validated configuration.
func (s *Server) Config() Config { return s.cfg }

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
	s.StartOn(ln, adln)
	return nil
}

// StartOn serves on listeners the caller opened; adln may be nil.
func (s *Server) StartOn(ln, adln net.Listener) {
	s.ln, s.adln = ln, adln
	for _, cs := range []*certSource{s.tlsPub, s.tlsAdmin} {
		if cs != nil {
			s.loops.Add(1)
			go func() { defer s.loops.Done(); cs.watch(s.bg, s.cfg.TLSReloadInterval) }()
		}
	}
	ln = rawListener{ln}
	if s.tlsPub != nil {
		ln = tls.NewListener(ln, serverTLS(s.tlsPub))
	}
	if adln != nil && s.tlsAdmin != nil {
		adln = tls.NewListener(adln, serverTLS(s.tlsAdmin))
	}
	s.loops.Add(1)
	go func() { defer s.loops.Done(); s.table.Vacuum(s.bg) }()
	s.loops.Add(1)
	go func() { defer s.loops.Done(); s.discoverModels(s.bg) }()
	s.startTelemetry()
	for _, u := range s.ups {
		s.loops.Add(1)
		go func() { defer s.loops.Done(); s.healthLoop(s.bg, u) }()
	}
	if s.cfg.IO == IOEpoll {
		// The loops serve the routed endpoints; fasthttp serves the
		// connections they hand over.
		hand, err := s.startLoops(s.ln)
		if err != nil {
			s.log.Error("--io epoll: cannot start the event loops; serving with fasthttp", "err", err)
			s.cfg.IO = IOFasthttp
		} else {
			ln = hand
		}
	}
	s.serving.Add(1)
	go func() { defer s.serving.Done(); _ = s.srv.Serve(ln) }()
	if adln != nil {
		s.serving.Add(1)
		go func() { defer s.serving.Done(); _ = s.admin.Serve(adln) }()
	}
	s.log.Info("kvca serving", "listen", ln.Addr().String(), "admin", addrOf(adln),
		"backends", len(s.ups), "policy", s.cfg.Policy, "block_size", s.cfg.BlockSize,
		"ttl", s.cfg.TTL, "max_blocks", s.cfg.MaxBlocks, "hash_key_from_flag", s.cfg.HashKey != "", "io", s.cfg.IO)
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
// until ctx ends, then closes what is left and stops the loops.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	var loopErr chan error
	if s.evl != nil {
		loopErr = make(chan error, 1)
		go func() { loopErr <- s.evl.stop(ctx.Done()) }()
	}
	err := s.srv.ShutdownWithContext(ctx)
	if loopErr != nil {
		if lerr := <-loopErr; err == nil {
			err = lerr
		}
		s.ln.Close()
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		s.log.Warn("shutdown timeout: closing remaining connections")
	}
	_ = s.admin.ShutdownWithContext(ctx)
	for _, f := range s.onShutdown {
		f()
	}
	s.stopBg()
	s.loops.Wait()
	for _, u := range s.ups {
		u.hc.CloseIdleConnections()
	}
	return err
}

// handle is the public listener's router.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	post := ctx.IsPost()
	switch string(path) {
	case "/v1/chat/completions":
		if !post {
			methodNotAllowed(ctx)
			return
		}
		s.proxyRouted(ctx, canon.Chat, routeChat)
	case "/v1/completions":
		if !post {
			methodNotAllowed(ctx)
			return
		}
		s.proxyRouted(ctx, canon.Completions, routeCompletions)
	case "/v1/responses":
		if !post {
			methodNotAllowed(ctx)
			return
		}
		s.proxyRouted(ctx, canon.Responses, routeResponses)
	case "/v1/models":
		start := time.Now()
		s.listModels(ctx)
		s.m.requests[routeModels][numPhases].Inc()
		s.m.duration[routeModels].UpdateDuration(start)
	case "/health":
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ok"}`)
	case "/ready":
		s.ready(ctx)
	default:
		if len(path) >= 4 && string(path[:4]) == "/v1/" {
			s.m.requests[routePassthrough][numPhases].Inc()
			s.proxyPassthrough(ctx)
			return
		}
		writeError(ctx, fasthttp.StatusNotFound, "invalid_request_error", "not_found", "unknown path "+string(path))
	}
}

func methodNotAllowed(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "use POST")
}

func (s *Server) ready(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	n := 0
	for _, u := range s.ups {
		if u.b.Healthy() {
			n++
		}
	}
	if n == 0 || s.draining.Load() {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		fmt.Fprintf(ctx, `{"status":"not_ready","healthy_backends":%d,"draining":%v}`, n, s.draining.Load())
		return
	}
	fmt.Fprintf(ctx, `{"status":"ready","healthy_backends":%d}`, n)
}

// handleServerError answers errors fasthttp meets before the handler runs
// (body too large, malformed HTTP, read timeouts) in OpenAI's shape.
func (s *Server) handleServerError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		s.m.badRequest("too_large")
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
			fmt.Sprintf("request body exceeds %d bytes", s.cfg.MaxBodyBytes))
		ctx.SetConnectionClose()
		return
	}
	if isTimeout(err) {
		writeError(ctx, fasthttp.StatusRequestTimeout, "invalid_request_error", "request_timeout", "request was not received in time")
		ctx.SetConnectionClose()
		return
	}
	s.m.badRequest("other")
	writeError(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "bad_http", "malformed HTTP request")
	ctx.SetConnectionClose()
}

// quietLogger routes fasthttp's own messages to slog at debug level.
type quietLogger struct{ l *slog.Logger }

func (q quietLogger) Printf(format string, args ...any) {
	q.l.Debug(fmt.Sprintf(format, args...))
}
