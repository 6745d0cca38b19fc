package edge

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// call is one proxied request's state, pooled so the hot path allocates
// nothing. It lives until the response body has been relayed, which is
// after the handler returns, so the relay returns it to the pool.
type call struct {
	s       *Server
	h       *chain.Hasher
	info    canon.Info
	req     sched.Request
	dec     sched.Decision
	res     sched.Reservation
	route   int
	routed  bool // the request carries a chain to learn
	start   time.Time
	hdr     fasthttp.ResponseHeader
	xff     []byte
	model   []byte
	rid     []byte // request id: the client's X-Request-Id or generated
	status  int
	ttfb    time.Duration // to the upstream's response headers
	allowed chain.Set
	rel     relay
}

func (s *Server) getCall() *call {
	c, _ := s.calls.Get().(*call)
	if c == nil {
		c = &call{s: s, h: chain.NewHasher(s.key, s.cfg.BlockSize)}
		c.h.UseMemo(s.memo)
		c.rel.c = c
	}
	return c
}

func (s *Server) putCall(c *call) {
	c.h.Reset()
	c.status, c.ttfb = 0, 0
	c.model = c.model[:0]
	c.req = sched.Request{}
	c.dec = sched.Decision{}
	c.res = sched.Reservation{}
	c.hdr.Reset()
	s.calls.Put(c)
}

// proxyRouted handles chat and completions: canonicalise, chain, route.
func (s *Server) proxyRouted(ctx *fasthttp.RequestCtx, api canon.API, route int) {
	c := s.getCall()
	c.start = time.Now()
	c.route = route
	c.routed = true
	if err := s.plan(c, api, ctx.PostBody()); err != nil {
		s.m.requests[route][numPhases].Inc()
		if err == errUnknownModel {
			unknownModel(ctx, c.info.Model)
		} else {
			s.m.badRequest(canon.Reason(err))
			badRequest(ctx, canon.Reason(err), err.Error())
		}
		s.done(c, ctx.Response.StatusCode())
		return
	}
	s.forward(ctx, c)
}

// plan is body → canon → chain: it fills the scheduler's request.
func (s *Server) plan(c *call, api canon.API, body []byte) error {
	if err := s.canon.Canonicalize(api, body, c.h, &c.info); err != nil {
		return err
	}
	c.req.Chain = c.h.Sum()
	c.req.Followup = c.info.Followup
	c.req.Session = c.info.Session
	c.req.Now = s.table.Now()
	allowed, err := s.allowedFor(c.info.Model, &c.allowed)
	c.req.Allowed = allowed
	return err
}

// proxyPassthrough sends any other /v1/* request to the least-loaded
// healthy backend, learning nothing.
func (s *Server) proxyPassthrough(ctx *fasthttp.RequestCtx) {
	c := s.getCall()
	c.start = time.Now()
	c.route = routePassthrough
	c.routed = false
	c.req.Now = s.table.Now()
	if ctx.IsPost() {
		c.model = s.canon.Model(ctx.PostBody(), c.model[:0])
		allowed, err := s.allowedFor(c.model, &c.allowed)
		if err != nil {
			unknownModel(ctx, c.model)
			s.done(c, fasthttp.StatusNotFound)
			return
		}
		c.req.Allowed = allowed
	}
	s.forward(ctx, c)
}

// attempt outcomes.
const (
	sent        = iota // a response began; the relay owns the call now
	connFailed         // nothing reached us: another backend may serve it
	connBusy           // every connection to the backend is in use: busy, not dead
	timedOut           // the backend took the request but did not answer in time
	retryStatus        // 429/503 before any byte reached the client
)

func (s *Server) forward(ctx *fasthttp.RequestCtx, c *call) {
	s.prepareRequest(ctx, c)
	lastBusy := false
	for attempt := 0; ; attempt++ {
		if !s.sched.Route(&c.req, &c.dec, &c.res) {
			s.log.Debug("no eligible backend", "attempt", attempt)
			switch {
			case attempt == 0:
				s.m.requests[c.route][numPhases].Inc()
				noBackend(ctx)
			case lastBusy:
				backendsBusy(ctx)
			default:
				badGateway(ctx)
			}
			s.done(c, ctx.Response.StatusCode())
			return
		}
		if c.routed && s.cfg.PredictTTL > 0 && len(c.req.Chain) > 0 {
			// Dated so that it expires PredictTTL from now; a 2xx answer
			// refreshes it to a full TTL, and it never ages a real location.
			at := c.req.Now - s.table.TTL().Milliseconds() + s.cfg.PredictTTL.Milliseconds()
			s.table.TouchAt(c.req.Chain, c.dec.Backend.Index, max(at, 0))
		}
		if attempt == 0 {
			s.m.requests[c.route][c.dec.Phase].Inc()
			if c.routed {
				s.m.cached.Add(c.dec.Cached)
				s.m.novel.Add(c.dec.Novel)
			}
		}
		u := s.ups[c.dec.Backend.Index]
		outcome := s.try(ctx, c, u, attempt < s.cfg.Retries)
		switch outcome {
		case sent:
			return
		case timedOut:
			c.res.ReleaseActive()
			gatewayTimeout(ctx)
			s.done(c, fasthttp.StatusGatewayTimeout)
			return
		case connFailed, retryStatus, connBusy:
			s.log.Debug("attempt failed", "attempt", attempt, "backend", u.b.Name)
			c.res.ReleaseActive()
			c.req.Exclude.Add(u.b.Index)
			if attempt >= s.cfg.Retries {
				if outcome == connBusy {
					backendsBusy(ctx)
				} else {
					badGateway(ctx)
				}
				s.done(c, ctx.Response.StatusCode())
				return
			}
			lastBusy = outcome == connBusy
		}
	}
}

// done ends a call: the response is complete or was written by kvca.
func (s *Server) done(c *call, status int) {
	s.m.duration[c.route].UpdateDuration(c.start)
	if s.access != nil {
		s.accessLog(c, status)
	}
	s.putCall(c)
}

// hopHeaders are connection-scoped and must not cross the proxy (RFC 9110
// §7.6.1); fasthttp manages Content-Length and Transfer-Encoding itself.
//
// Expect goes too: fasthttp has answered a client's 100-continue and read
// the whole body, so a backend must not be asked again; its interim 100
// would be taken for the answer.
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Upgrade", "Expect",
}

// isHop reports whether key names a hop-by-hop header (any case).
func isHop(key []byte) bool {
	switch len(key) {
	case 2, 6, 7, 10, 16, 18, 19:
	default:
		return false
	}
	for _, h := range hopHeaders {
		if len(h) == len(key) && equalFoldASCII(h, key) {
			return true
		}
	}
	return false
}

func equalFoldASCII(s string, b []byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i]|0x20 != b[i]|0x20 {
			return false
		}
	}
	return true
}

// delRawHop deletes the hop-by-hop headers of the received block as they
// were spelled (header names are kept as sent, so Del("Keep-Alive") leaves
// a "keep-alive" line in place) and reports whether there were any.
func delRawHop(h *fasthttp.RequestHeader) bool {
	found := false
	raw := h.RawHeaders()
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if i := bytes.IndexByte(line, ':'); i > 0 {
			if k := bytes.TrimSpace(line[:i]); isHop(k) {
				h.DelBytes(k)
				found = true
			}
		}
	}
	return found
}

// hasHop reports whether an upstream response header holds a hop-by-hop
// header (Connection: close and announced trailers included).
func hasHop(h *fasthttp.ResponseHeader) bool {
	if h.ConnectionClose() {
		return true
	}
	for k := range h.All() {
		if isHop(k) {
			return true
		}
	}
	return false
}

// prepareRequest turns the client's request into the upstream request in
// place: the body stays exactly the bytes the client sent.
func (s *Server) prepareRequest(ctx *fasthttp.RequestCtx, c *call) {
	h := &ctx.Request.Header
	// Deleting the hop-by-hop headers one by one costs eight scans of the
	// header list; they are almost never there, so one pass over the
	// received block comes first. A chunked body may bring trailers the
	// received block does not show.
	if delRawHop(h) || h.ConnectionClose() || h.ContentLength() < 0 {
		for _, k := range hopHeaders {
			h.Del(k)
		}
	}
	// X-Forwarded-For: append the client's address to any earlier hops.
	c.xff = c.xff[:0]
	if prev := h.Peek("X-Forwarded-For"); len(prev) > 0 {
		c.xff = append(c.xff, prev...)
		c.xff = append(c.xff, ", "...)
	}
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		c.xff, _ = a.IP.AppendText(c.xff)
	}
	h.SetBytesV("X-Forwarded-For", c.xff)
	// One id follows the request through kvca, the backend and the logs.
	c.rid = append(c.rid[:0], h.Peek("X-Request-Id")...)
	if len(c.rid) == 0 || len(c.rid) > 128 {
		c.rid = appendRequestID(c.rid[:0])
		h.SetBytesV("X-Request-Id", c.rid)
	}
}

// try sends the request to u and, if a response begins, hands its body to
// the relay. mayRetry says whether a 429/503 may still go elsewhere.
func (s *Server) try(ctx *fasthttp.RequestCtx, c *call, u *upstream, mayRetry bool) int {
	req := &ctx.Request
	req.Header.SetHostBytes(u.host)
	if u.addr.prefix != "" {
		// Backends mounted under a path prefix.
		uri := req.Header.RequestURI()
		if len(uri) < len(u.addr.prefix) || string(uri[:len(u.addr.prefix)]) != u.addr.prefix {
			req.Header.SetRequestURI(u.addr.prefix + string(uri))
		}
	}
	// The client's Connection: close concerns its own connection only.
	clientClose := req.Header.ConnectionClose()
	req.Header.ResetConnectionClose()
	defer func() {
		if clientClose {
			req.Header.SetConnectionClose()
		}
	}()

	for {
		cc, conn, reused, err := u.ops.acquire()
		if err == fasthttp.ErrNoFreeConns {
			// --max-conns-per-backend requests are in flight there: the
			// backend is busy, which must not count towards ejecting it.
			u.m.errors[errBusy].Inc()
			return connBusy
		}
		if err != nil {
			return s.connFailure(u, err)
		}
		deadline := time.Now().Add(s.cfg.UpstreamHeaderTimeout)
		// One deadline for writing the request and reading the headers.
		// It is left on the connection afterwards: every use of a pooled
		// connection (here, or fasthttp's DoTimeout) sets its own first.
		_ = conn.SetDeadline(deadline)
		bw := u.hc.AcquireWriter(conn)
		err = req.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		u.hc.ReleaseWriter(bw)
		if err != nil {
			u.ops.close(cc)
			if reused && !isTimeout(err) {
				continue // a keep-alive connection the backend had closed
			}
			return s.connFailure(u, err)
		}
		br := u.hc.AcquireReader(conn)
		err = c.hdr.Read(br)
		if err != nil {
			u.hc.ReleaseReader(br)
			u.ops.close(cc)
			if isTimeout(err) {
				u.m.errors[errTimeout].Inc()
				return timedOut
			}
			if reused && noResponseYet(err) {
				continue
			}
			return s.connFailure(u, err)
		}
		return s.respond(ctx, c, u, cc, br, mayRetry)
	}
}

// hasAlternative reports whether another eligible backend could take the
// request if u's answer is refused; otherwise u's answer is the one to give.
func (s *Server) hasAlternative(c *call, u *upstream) bool {
	r := c.req
	r.Exclude.Add(u.b.Index)
	return !s.sched.Eligible(&r).Empty()
}

func (s *Server) connFailure(u *upstream, err error) int {
	s.log.Debug("upstream connection failed", "backend", u.b.Name, "err", err)
	u.m.errors[errConnect].Inc()
	u.failed(s.cfg.FailThreshold, s)
	return connFailed
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) || err == fasthttp.ErrTimeout
}

// noResponseYet is an error that means the backend closed the connection
// before sending anything, the signature of a stale keep-alive connection.
func noResponseYet(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, fasthttp.ErrConnectionClosed) || isConnReset(err)
}

// respond handles the upstream's response headers: release the prefill
// load, learn the chain on success, copy the headers, and set the relay as
// the response body.
func (s *Server) respond(ctx *fasthttp.RequestCtx, c *call, u *upstream, cc any, br *bufio.Reader, mayRetry bool) int {
	// Streaming servers (vLLM, SGLang) send headers before they prefill, so
	// a streamed response keeps its prefill load until the first body byte,
	// when the prefill really is done (unless --prefill-release headers).
	if s.cfg.PrefillAtHeaders || c.hdr.ContentLength() != -1 {
		c.res.ReleasePrefill()
	}
	c.ttfb = time.Since(c.start)
	u.m.firstByte.Update(c.ttfb.Seconds())
	u.succeeded()
	status := c.hdr.StatusCode()
	c.status = status
	if status >= 500 || status == fasthttp.StatusTooManyRequests {
		u.m.errors[errStatus].Inc()
		if mayRetry && (status == fasthttp.StatusTooManyRequests || status == fasthttp.StatusServiceUnavailable) && s.hasAlternative(c, u) {
			// Nothing has reached the client yet: another backend may take it.
			u.hc.ReleaseReader(br)
			u.ops.close(cc)
			return retryStatus
		}
	}
	if status >= 200 && status < 300 && c.routed && len(c.req.Chain) > 0 {
		s.learned(c.req.Chain, u.b.Index, c.req.Now)
	}

	resp := &ctx.Response
	c.hdr.CopyTo(&resp.Header)
	if hasHop(&c.hdr) {
		for _, k := range hopHeaders {
			resp.Header.Del(k)
		}
	}
	resp.Header.ResetConnectionClose()
	if len(resp.Header.Peek("X-Request-Id")) == 0 {
		resp.Header.SetBytesV("X-Request-Id", c.rid)
	}
	c.rel.start(u, cc, br, &c.hdr, ctx.IsHead(), ctx.Conn())
	if c.rel.mode == bodyNone {
		c.rel.finish(nil)
		resp.SkipBody = ctx.IsHead()
		return sent
	}
	size := -1
	if c.rel.mode == bodyFixed {
		size = int(c.rel.remaining)
	}
	resp.SetBodyStream(&c.rel, size)
	return sent
}
