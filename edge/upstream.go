package edge

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/kvca/kvca/internal/tick"
	"github.com/kvca/kvca/sched"
)

// upstream is the record of one backend: its identity (b's slot, name
// and URL; its KDN endpoint id), what scheduling reads of it (b: load,
// health, engine telemetry), its models, its connections (keep-alive
// pools per event loop, an HTTP client for health and models) and its
// health state. A reload builds records for added backends and swaps the
// fleet of records whole (reload.go); sched, admit, chain and cluster are
// given b, or b's slot, from it. Health is decided here and in health.go;
// proxying only reports outcomes.
type upstream struct {
	b        *sched.Backend
	addr     backendAddr
	endpoint string // KDN endpoint id, from the URL (EndpointID)
	// authority is the Host kvca sends: the backend URL's host[:port].
	authority []byte
	tls       *tls.Config // nil for http:// backends
	// hc asks the backend outside client traffic (health, models,
	// warm-ups); probes is hc without keep-alive, so a probe never draws a
	// pooled connection the backend has since closed.
	hc, probes *http.Client
	m          *backendMetrics

	// Passive health: consecutive connection failures, and how many times
	// the backend was ejected in a row (the cool-down doubles each time).
	fails        atomic.Int32
	ejections    atomic.Int32
	ejectedUntil atomic.Int64 // unix ns
	// aliveAt (unix ns; 0: never) is the last instant the health check
	// had the backend up: once a passing probe was handled (after any
	// reset that probe made), or, without active checks, when passive
	// health ejected it (its requests were answered until a few failed
	// connections before). Ejected before it ever had it up, the health
	// check takes engine telemetry's last reading instead (setHealth). An
	// outage the backend is re-admitted from began after it
	// (Server.restarted).
	aliveAt atomic.Int64
	// wake nudges the health loop when passive health ejects the backend.
	wake chan struct{}
	// models the backend serves; nil until known.
	models atomic.Pointer[modelList]
	// The resolved address for the event loops, the connections open
	// across them, and each loop's keep-alive connections here (indexed
	// by the loop; only that loop touches its list).
	la        atomic.Pointer[loopAddr]
	loopConns atomic.Int32
	idle      [][]*upConn
	// stop ends the goroutines that watch the backend (set by
	// startUpstream, called when it is removed).
	stop context.CancelFunc
}

// loopAddr is a backend's resolved address for the event loops. It is
// kept as values: a syscall.Sockaddr is written to by every Connect, so
// loops cannot share one.
type loopAddr struct {
	ip   [16]byte
	port int
	v6   bool
}

// dialTimeout bounds a connection attempt to a backend.
const dialTimeout = 3 * time.Second

func newUpstream(b *sched.Backend, a backendAddr, m *backendMetrics, tc *tls.Config) *upstream {
	u := &upstream{b: b, addr: a, endpoint: EndpointID(a.url), authority: []byte(a.authority), m: m, wake: make(chan struct{}, 1)}
	if a.tls {
		u.tls = tc.Clone()
		u.tls.ServerName = a.sni // SNI and verification name
		u.tls.NextProtos = []string{"http/1.1"}
	}
	transport := func(keepAlive bool) *http.Client {
		return &http.Client{Transport: &http.Transport{
			DialContext:       (&net.Dialer{Timeout: dialTimeout}).DialContext,
			TLSClientConfig:   u.tls,
			DisableKeepAlives: !keepAlive,
			MaxIdleConns:      4,
			IdleConnTimeout:   30 * time.Second,
			ForceAttemptHTTP2: false,
		}}
	}
	u.hc, u.probes = transport(true), transport(false)
	if a.models != nil {
		u.models.Store(staticModels(a.models))
	}
	return u
}

// resolve looks the backend's host up for the loops.
func (u *upstream) resolve() error {
	a, err := net.ResolveTCPAddr("tcp", u.addr.host)
	if err != nil {
		return err
	}
	la := &loopAddr{port: a.Port}
	if ip4 := a.IP.To4(); ip4 != nil {
		copy(la.ip[:], ip4)
	} else {
		copy(la.ip[:], a.IP.To16())
		la.v6 = true
	}
	u.la.Store(la)
	return nil
}

// literalHost reports whether the backend's host is an IP address, which
// needs no resolving again.
func (u *upstream) literalHost() bool {
	return net.ParseIP(hostOnly(u.addr.host)) != nil
}

// resolveInterval is how often a backend's host name is looked up again.
const resolveInterval = 10 * time.Second

// reresolve looks a backend named by host name up again now and then, as
// a dialer would on every new connection.
func (s *Server) reresolve(ctx context.Context, u *upstream) {
	tick.Every(ctx.Done(), resolveInterval, func() {
		if err := u.resolve(); err != nil {
			s.log.Warn("backend address lookup failed; keeping the last one", "backend", u.b.Name, "err", err)
		}
	})
}

func hostOnly(hostport string) string {
	for i := len(hostport) - 1; i >= 0; i-- {
		if hostport[i] == ':' {
			h := hostport[:i]
			if len(h) > 1 && h[0] == '[' {
				h = h[1 : len(h)-1]
			}
			return h
		}
	}
	return hostport
}

// succeeded clears the passive failure count after a response began.
func (u *upstream) succeeded() {
	if u.fails.Load() != 0 {
		u.fails.Store(0)
	}
	if u.ejections.Load() != 0 {
		u.ejections.Store(0)
	}
}

// failed counts a connection failure and ejects the backend after
// threshold in a row, for a cool-down that doubles with each ejection that
// follows a re-admission without an intervening success.
func (u *upstream) failed(threshold int, s *Server) {
	if int(u.fails.Add(1)) < threshold || !u.b.Healthy() {
		return
	}
	u.fails.Store(0)
	// Cool-down first, so the health loop never sees an ejected backend
	// without one.
	n := u.ejections.Add(1)
	cool := time.Second << min(n-1, 6) // 1 s … 64 s
	u.ejectedUntil.Store(time.Now().Add(cool).UnixNano())
	if s.cfg.HealthInterval <= 0 {
		// Its requests were answered until a few failures ago.
		u.aliveAt.Store(time.Now().UnixNano())
	}
	if !s.setHealth(u, false, "passive: consecutive connection failures") {
		u.ejections.Add(-1) // another request ejected it first
		return
	}
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// probe asks the backend's health path once, on a connection of its own;
// the error says why it failed.
func (u *upstream) probe(path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.addr.url+path, nil)
	if err != nil {
		return err
	}
	resp, err := u.probes.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d", path, resp.StatusCode)
	}
	return nil
}

// healthLoop runs the active check every interval; with active checks off
// it only re-admits an ejected backend when its cool-down ends.
func (s *Server) healthLoop(ctx context.Context, u *upstream) {
	interval := s.cfg.HealthInterval
	// A busy backend answers its health path late; a probe that gives up
	// after a fraction of a second would eject healthy backends under load.
	timeout := min(max(interval, time.Second), 5*time.Second)
	probeFails := 0
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-u.wake:
		case <-t.C:
		}
		cooling := time.Until(time.Unix(0, u.ejectedUntil.Load()))
		switch {
		case cooling > 0:
			// Stay out until the cool-down ends, then check again.
		case interval > 0:
			// Two failed probes in a row take a backend out; one passing
			// probe brings it back.
			if err := u.probe(s.cfg.HealthPath, timeout); err == nil {
				probeFails = 0
				s.setHealth(u, true, "active: "+s.cfg.HealthPath+" passed")
				// After setHealth: a reset it made must not count for an
				// outage that follows this probe.
				u.aliveAt.Store(time.Now().UnixNano())
			} else if probeFails++; probeFails >= 2 || !u.b.Healthy() {
				s.setHealth(u, false, "active: "+s.cfg.HealthPath+" failed: "+err.Error())
			}
		default:
			s.setHealth(u, true, "passive: cool-down over")
		}
		next := interval
		if cooling > 0 && (next <= 0 || cooling < next) {
			next = cooling
		}
		if next <= 0 {
			next = time.Second
		}
		t.Reset(next)
	}
}

// setHealth records a health decision. A backend that comes back is
// presumed to have lost its KV cache: its locations are dropped and its
// generation bumped: kvca can no longer vouch for its cache. If engine
// telemetry already reset it for the restart that took it down (a reset
// since the health check last found it up), that restart is not counted
// twice (restarted).
func (s *Server) setHealth(u *upstream, healthy bool, why string) bool {
	if healthy {
		// Reset first, then admit: no request may be routed to it by the
		// locations its restart lost. Only its health loop re-admits it,
		// so nothing else admits it between the two.
		if u.b.Healthy() || u.b.Retired() {
			return false
		}
		var since time.Time
		if ns := u.aliveAt.Load(); ns != 0 {
			since = time.Unix(0, ns)
		}
		gen, bumped := s.restarted(u.b.Index, since)
		if !u.b.SetHealthy(true) {
			return false
		}
		s.log.Info("backend healthy", "backend", u.b.Name, "reason", why, "generation", gen, "reset", bumped)
		s.adm.Refill(u.b.Index) // waiters may go there now
		select {
		case s.modelsWake <- struct{}{}:
		default:
		}
		return true
	}
	if !u.b.SetHealthy(false) {
		return false
	}
	if u.aliveAt.Load() == 0 {
		// The health check never had it up (its first probe failed, or
		// had not come back when this outage began), but engine
		// telemetry may have read it: the outage began after that
		// reading too. Without it, the re-admission would count a
		// restart that telemetry already reset for a second time.
		if sig, ok := u.b.EngineLatest(); ok && sig.At > 0 {
			u.aliveAt.CompareAndSwap(0, sig.At*int64(time.Millisecond))
		}
	}
	s.log.Warn("backend unhealthy", "backend", u.b.Name, "reason", why)
	// Its pooled connections are likely dead (a restart closes them all).
	u.hc.CloseIdleConnections()
	return true
}

// bootstrapPort is the port of u's SGLang bootstrap server under protocol
// (0: none, for the admin state: not an SGLang prefill worker).
func (u *upstream) bootstrapPort(protocol string) int {
	if protocol != ProtocolSGLang || !u.addr.role.Prefills() {
		return 0
	}
	return u.addr.bootstrapPort
}
