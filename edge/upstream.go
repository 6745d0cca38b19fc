package edge

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvca/kvca/sched"
)

// upstream is one backend's connection pool and health state. Health is
// decided here and in health.go; proxying only reports outcomes.
type upstream struct {
	b    *sched.Backend
	addr backendAddr
	hc   *fasthttp.HostClient
	m    *backendMetrics
	host []byte
	ops  connOps

	// Passive health: consecutive connection failures, and how many times
	// the backend was ejected in a row (the cool-down doubles each time).
	fails        atomic.Int32
	ejections    atomic.Int32
	ejectedUntil atomic.Int64 // unix ns
	// wake nudges the health loop when passive health ejects the backend.
	wake chan struct{}
	// models the backend serves; nil until known.
	models atomic.Pointer[modelList]
	// --io epoll: the resolved address, and connections open across loops.
	la        atomic.Pointer[loopAddr]
	loopConns atomic.Int32
}

// loopAddr is a backend's resolved address for the event loops. It is
// kept as values: a syscall.Sockaddr is written to by every Connect, so
// loops cannot share one.
type loopAddr struct {
	ip   [16]byte
	port int
	v6   bool
}

func newUpstream(b *sched.Backend, a backendAddr, maxConns int, m *backendMetrics, tc *tls.Config) *upstream {
	hc := &fasthttp.HostClient{
		Addr:                          a.host,
		IsTLS:                         a.tls,
		MaxConns:                      maxConns,
		MaxIdleConnDuration:           90 * time.Second,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		// Retries are kvca's decision (another backend), not the client's.
		MaxIdemponentCallAttempts: 1,
		ReadBufferSize:            16 << 10,
		WriteBufferSize:           16 << 10,
		DialTimeout:               dialUpstream(a.tls),
	}
	if a.tls {
		hc.TLSConfig = tc.Clone()
		hc.TLSConfig.ServerName = hostOnly(a.host) // SNI and verification name
	}
	u := &upstream{b: b, addr: a, hc: hc, m: m, host: []byte(a.host), wake: make(chan struct{}, 1)}
	u.ops = makeConnOps(hc.AcquireConn, hc.ReleaseConn, hc.CloseConn)
	if a.models != nil {
		u.models.Store(staticModels(a.models))
	}
	return u
}

// dialUpstream dials as fasthttp does by default, and gives the connection
// raw-syscall reads and writes (rawconn_linux.go); TLS goes on top of it.
func dialUpstream(isTLS bool) fasthttp.DialFuncWithTimeout {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		addr = fasthttp.AddMissingPort(addr, isTLS)
		var c net.Conn
		var err error
		if timeout > 0 {
			c, err = fasthttp.DialTimeout(addr, timeout)
		} else {
			c, err = fasthttp.Dial(addr)
		}
		if err != nil {
			return nil, err
		}
		return wrapConn(c), nil
	}
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
	if !s.setHealth(u, false, "passive: consecutive connection failures") {
		u.ejections.Add(-1) // another request ejected it first
		return
	}
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// probe asks the backend's health path once.
func (u *upstream) probe(path string, timeout time.Duration) bool {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(u.addr.url + path)
	req.Header.SetMethod(fasthttp.MethodGet)
	// A fresh connection each time: a probe must not fail on a pooled
	// connection the backend closed when it restarted, nor leave one behind.
	req.SetConnectionClose()
	if err := u.hc.DoTimeout(req, resp, timeout); err != nil {
		return false
	}
	return resp.StatusCode() == fasthttp.StatusOK
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
			if u.probe(s.cfg.HealthPath, timeout) {
				probeFails = 0
				s.setHealth(u, true, "active: "+s.cfg.HealthPath+" passed")
			} else if probeFails++; probeFails >= 2 || !u.b.Healthy() {
				s.setHealth(u, false, "active: "+s.cfg.HealthPath+" failed")
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
// generation bumped (seed: Staleness).
func (s *Server) setHealth(u *upstream, healthy bool, why string) bool {
	if !u.b.SetHealthy(healthy) {
		return false
	}
	if healthy {
		gen := s.resetBackend(u.b.Index)
		s.log.Info("backend healthy", "backend", u.b.Name, "reason", why, "generation", gen)
		select {
		case s.modelsWake <- struct{}{}:
		default:
		}
		return true
	}
	s.log.Warn("backend unhealthy", "backend", u.b.Name, "reason", why)
	// Its pooled connections are likely dead (a restart closes them all).
	u.hc.CloseIdleConnections()
	return true
}

// pooledConn is what fasthttp's HostClient hands out from its pool. Its
// concrete type is unexported, so connOps carries it as an interface value
// (a pointer: no allocation) and converts it back inside a generic closure.
type pooledConn interface {
	Conn() net.Conn
	CreatedTime() time.Time
	LastUseTime() time.Time
}

type connOps struct {
	acquire func() (any, net.Conn, bool, error) // conn, net.Conn, reused, err
	release func(any)
	close   func(any)
}

func makeConnOps[T pooledConn](acq func(time.Duration, bool) (T, error), rel, cls func(T)) connOps {
	return connOps{
		acquire: func() (any, net.Conn, bool, error) {
			cc, err := acq(0, false)
			if err != nil {
				return nil, nil, false, err
			}
			// A pooled struct keeps its old last-use time until released
			// again, so only a connection used since it was dialled has a
			// later last use than creation.
			return cc, cc.Conn(), cc.LastUseTime().After(cc.CreatedTime()), nil
		},
		release: func(x any) { rel(x.(T)) },
		close:   func(x any) { cls(x.(T)) },
	}
}
