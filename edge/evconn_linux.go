//go:build linux

package edge

import (
	"errors"
	"io"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/h1"
	"github.com/kvca/kvca/sniff"
)

// A client connection's states.
const (
	cliIdle   = iota // between requests, no byte of the next one yet
	cliHead          // reading a request head
	cliBody          // reading its body
	cliAsync         // a goroutine works for the request (a large body's plan, model lists)
	cliQueued        // waiting in the admission queue
	cliWait          // the request is with a backend, no answer yet
	cliRelay         // relaying the backend's answer
	cliReply         // writing kvca's own answer
	cliLinger        // answered and closing: draining what the client still sends
	cliClosed
)

// What a request is, decided from its head.
const (
	kindRouted  = iota // routed by prefix
	kindPass           // passed to the least-loaded backend
	kindHealth         // GET /health
	kindReady          // GET /ready
	kindModels         // GET /v1/models
	kindModel          // GET /v1/models/{id}
	kindOptions        // OPTIONS *
	kindReply          // answered by kvca with c.rep once the body is in
)

// cliConn is a client connection served by a loop. Its read buffer holds
// one request (head and body, contiguous, as canon wants the body) and
// whatever the client pipelined after it.
type cliConn struct {
	l     *evLoop
	sock  sock
	ip    []byte
	state int
	buf   []byte // nil while idle
	n     int    // bytes in buf
	h     h1.Request
	kind  int
	api   canon.API
	route int
	rep   reply
	head  bool // a HEAD request: the answer has no body
	// The body: [h.Size, bodyEnd) once complete; the request's bytes end
	// at reqEnd (a chunked upload is decoded in place, so its data ends
	// before its framing did). raw is how far a chunked body was decoded.
	bodyEnd, reqEnd, raw int
	cs                   h1.ChunkScan
	dl                   int64
	closeAfter           bool
	// planning: a goroutine reads buf; buf is neither reused nor pooled
	// until the goroutine's result is back, even if the connection closes.
	planning bool

	// The exchange in progress.
	c        *call
	up       *upConn
	lastBusy bool
	uhead    []byte // the request head as sent upstream
	out      []byte // kvca's bytes for the client (a response head, an answer)
	outOff   int
	data     []byte // body bytes for the client, borrowed from the upstream's buffer
}

func (c *cliConn) deadline() int64 { return c.dl }

func (c *cliConn) pending() bool {
	return c.outOff < len(c.out) || len(c.data) > 0 || c.sock.pendingOut()
}

func (c *cliConn) event(ev uint32) {
	if c.state == cliClosed {
		return
	}
	if ev&(syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
		c.gone()
		return
	}
	if ev&(syscall.EPOLLIN|syscall.EPOLLRDHUP) != 0 {
		c.sock.rd = true
		c.sock.hup = c.sock.hup || ev&syscall.EPOLLRDHUP != 0
	}
	if ev&syscall.EPOLLOUT != 0 && c.pending() {
		if !c.flush() || c.pending() {
			return
		}
		c.drained()
		if c.state == cliClosed {
			return
		}
	}
	if ev&(syscall.EPOLLIN|syscall.EPOLLRDHUP) == 0 {
		return
	}
	switch c.state {
	case cliIdle, cliHead, cliBody:
		c.read()
	case cliLinger:
		c.linger()
	case cliAsync, cliQueued, cliWait, cliRelay:
		// Pipelined bytes wait in the socket until the answer is out; a
		// hang-up means the client left: stop the backend's work for it.
		if ev&syscall.EPOLLRDHUP != 0 {
			c.gone()
		}
	}
}

// idle waits for the next request.
func (c *cliConn) idle() {
	c.state = cliIdle
	c.dl = c.l.now + int64(c.l.s.cfg.ClientIdleTimeout)
	if c.n == 0 && c.buf != nil {
		c.l.putBuf(c.buf)
		c.buf = nil
	}
}

func (c *cliConn) read() {
	for c.state == cliIdle || c.state == cliHead || c.state == cliBody {
		if c.buf == nil {
			c.buf = c.l.getBuf(loopBufSize)
		}
		if c.n == len(c.buf) && !c.grow() {
			return
		}
		n, e := c.sock.read(c.buf[c.n:])
		if e == syscall.EAGAIN {
			if c.n == 0 {
				c.idle()
			}
			return
		}
		if e != 0 || n == 0 {
			c.gone() // a request cut short dies with its connection
			return
		}
		if c.state == cliIdle {
			c.state = cliHead
			c.dl = c.l.now + int64(c.l.s.cfg.HeaderTimeout)
		}
		c.n += n
		c.process()
	}
}

// grow makes room for more of the request: buffers grow with the bytes
// received, never with what a head declares, so a head that announces
// gigabytes holds one 16 KB buffer until the bytes really come.
func (c *cliConn) grow() bool {
	s := c.l.s
	var limit int
	switch {
	case c.state != cliBody:
		c.refuse(h1.ErrTooLarge) // the head alone fills a buffer
		return false
	case c.h.Chunked:
		// Decoded data is bounded by --max-body-bytes (checked as it is
		// decoded); its framing may add at most as much again.
		limit = c.h.Size + 2*s.cfg.MaxBodyBytes + loopBufSize
	default:
		limit = c.reqEnd
	}
	size := min(2*len(c.buf), limit)
	if size <= len(c.buf) {
		c.reply(&replyTooLarge)
		return false
	}
	nb := c.l.getBuf(size)
	copy(nb, c.buf[:c.n])
	c.l.putBuf(c.buf)
	c.buf = nb
	return true
}

// process acts on the bytes in buf: parse the head, read the body,
// dispatch the request.
func (c *cliConn) process() {
	if c.state == cliIdle && c.n > 0 {
		c.state = cliHead
		c.dl = c.l.now + int64(c.l.s.cfg.HeaderTimeout)
	}
	if c.state == cliHead {
		switch st, err := h1.ParseRequest(c.buf[:c.n], &c.h); st {
		case h1.More:
			return
		case h1.Bad:
			c.refuse(err)
			return
		}
		c.start()
		if c.state != cliBody {
			return
		}
	}
	if c.state == cliBody {
		c.body()
	}
}

// refuse answers a request the acceptance policy refused, and closes.
func (c *cliConn) refuse(err *h1.Error) {
	s := c.l.s
	if c.c == nil {
		c.c = s.begin(routeOther, nil, nil, c.ip, &c.l.clock)
	}
	s.m.badRequest(err.Code)
	r := refused(err)
	c.reply(&r)
}

// start decides, from a complete head, what the request is and how its
// body is read.
func (c *cliConn) start() {
	s := c.l.s
	h, b := &c.h, c.buf
	c.kind, c.route = kindReply, routeOther
	c.closeAfter = c.closeAfter || h.Close
	method := h.Method.Of(b)
	c.head = string(method) == "HEAD"
	path := h.Path.Of(b)
	c.classify(method, path)
	rid := h.RequestID.Of(b)
	if h.RequestIDs != 1 {
		rid = nil // none, or ambiguous: one is generated
	}
	c.c = s.begin(c.route, rid, path, c.ip, &c.l.clock)
	if !h.CheckHost(b) {
		c.refuse(h1.ErrHost)
		return
	}
	if h.ContentLength > int64(s.cfg.MaxBodyBytes) {
		s.m.badRequest("too_large")
		r := tooLarge(s.cfg.MaxBodyBytes)
		c.reply(&r)
		return
	}
	c.state = cliBody
	c.dl = c.l.now + int64(s.cfg.ClientReadTimeout)
	c.bodyEnd, c.raw, c.cs = h.Size, h.Size, h1.ChunkScan{}
	c.reqEnd = h.Size + int(max(h.ContentLength, 0))
	if !h.Chunked {
		c.bodyEnd = c.reqEnd
	}
	if h.ExpectContinue && h.HasBody() && (h.Chunked || c.n < c.reqEnd) {
		// The client waits for this before it sends the body.
		c.out = append(c.out, "HTTP/1.1 100 Continue\r\n\r\n"...)
		c.flush()
	}
}

// methods kvca knows; any other is answered 501 (RFC 9110 §9.1).
func knownMethod(m []byte) bool {
	switch string(m) {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE":
		return true
	}
	return false
}

// classify sets the request's kind and route from its method and path.
func (c *cliConn) classify(method, path []byte) {
	if !knownMethod(method) {
		c.rep = replyMethod
		return
	}
	if string(method) == "CONNECT" && c.h.URI.Len() == 0 && !c.h.Asterisk {
		// authority-form: kvca is no forward proxy.
		c.rep = methodNotAllowed("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
		return
	}
	get := string(method) == "GET" || string(method) == "HEAD"
	post := string(method) == "POST"
	if c.h.Asterisk {
		if string(method) == "OPTIONS" {
			c.kind = kindOptions
		} else {
			c.rep = refused(h1.ErrTarget)
		}
		return
	}
	switch string(path) {
	case "/v1/chat/completions":
		c.api, c.route = canon.Chat, routeChat
	case "/v1/completions":
		c.api, c.route = canon.Completions, routeCompletions
	case "/v1/responses":
		c.api, c.route = canon.Responses, routeResponses
	case "/v1/messages":
		c.api, c.route = canon.Messages, routeMessages
	case "/v1/models":
		c.route = routeModels
		if c.kind = kindModels; !get {
			c.kind, c.rep = kindReply, methodNotAllowed("GET, HEAD")
		}
		return
	case "/health", "/ready":
		c.route = routeHealth
		if c.kind = kindHealth; path[1] == 'r' {
			c.kind = kindReady
		}
		if !get {
			c.kind, c.rep = kindReply, methodNotAllowed("GET, HEAD")
		}
		return
	default:
		switch {
		case len(path) > len("/v1/models/") && string(path[:len("/v1/models/")]) == "/v1/models/":
			c.route = routeModels
			if c.kind = kindModel; !get {
				c.kind, c.rep = kindReply, methodNotAllowed("GET, HEAD")
			}
		case len(path) >= 4 && string(path[:4]) == "/v1/":
			c.route = routePassthrough
			if c.kind = kindPass; string(method) == "CONNECT" || string(method) == "TRACE" {
				c.kind, c.rep = kindReply, methodNotAllowed("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
			}
		default:
			c.rep = replyNotFound
			c.rep.msg = "unknown path " + string(path)
		}
		return
	}
	// A routed route.
	if c.kind = kindRouted; !post {
		c.kind, c.rep = kindReply, methodNotAllowed("POST")
	}
}

// body reads the request body: a Content-Length's worth, or a chunked
// upload decoded in place.
func (c *cliConn) body() {
	h := &c.h
	if !h.Chunked {
		if c.n >= c.reqEnd {
			c.dispatch()
		}
		return
	}
	max := h.Size + c.l.s.cfg.MaxBodyBytes
	for c.raw < c.n {
		k, data, done, err := c.cs.Step(c.buf[c.raw:c.n])
		if err != nil {
			c.refuse(errChunkedUpload)
			return
		}
		if data {
			if c.bodyEnd+k > max {
				c.l.s.m.badRequest("too_large")
				r := tooLarge(c.l.s.cfg.MaxBodyBytes)
				c.reply(&r)
				return
			}
			copy(c.buf[c.bodyEnd:], c.buf[c.raw:c.raw+k])
			c.bodyEnd += k
		}
		c.raw += k
		if done {
			c.reqEnd = c.raw
			c.dispatch()
			return
		}
	}
}

var errChunkedUpload = &h1.Error{Status: 400, Code: "bad_http", Msg: "malformed HTTP request: invalid chunked body"}

// dispatch serves a complete request.
func (c *cliConn) dispatch() {
	s := c.l.s
	call := c.c
	c.state, c.dl = cliWait, 0
	call.inBytes = c.reqEnd
	body := c.buf[c.h.Size:c.bodyEnd]
	if s.tracer != nil {
		call.tr.Begin(s.tracer, call.start, routeNames[c.route], c.h.Get(c.buf, "traceparent"), c.h.Get(c.buf, "tracestate"), call.rid)
	}
	if s.keys != nil && c.kind != kindHealth && c.kind != kindReady && c.kind != kindReply && c.kind != kindOptions {
		if r, ok := s.authenticate(call, c.buf, &c.h); !ok {
			c.reply(&r)
			return
		}
	}
	switch c.kind {
	case kindRouted:
		c.dispatchRouted(body)
	case kindPass:
		if err := s.planPassthrough(call, body); err != nil {
			r := unknownModel(call.model)
			c.reply(&r)
			return
		}
		if r, over := s.overQuota(call, len(body)); over {
			c.reply(&r)
			return
		}
		c.lastBusy = false
		c.admission()
		c.attempts()
	case kindHealth:
		c.answer(200, "application/json", []byte(`{"status":"ok"}`+"\n"), "")
	case kindReady:
		st, b := s.readiness()
		c.answer(st, "application/json", b, "")
	case kindOptions:
		c.answer(200, "application/json", []byte("{}\n"), "Allow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n")
	case kindModels, kindModel:
		c.dispatchModels()
	default:
		c.reply(&c.rep)
	}
}

func (c *cliConn) dispatchRouted(body []byte) {
	s := c.l.s
	call := c.c
	if h := s.cfg.testHook; h != nil {
		h("request", body)
	}
	if len(body) < offloadBody {
		c.afterPlan(s.plan(call, c.api, body))
		return
	}
	// Canonicalising a body this large takes long enough (~1 ms per MB)
	// to hold up every other connection of the loop, streams included: a
	// goroutine does it, and the loop carries on.
	c.state = cliAsync
	c.planning = true
	l, api := c.l, c.api
	go func() {
		var err error
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("event loop: panic planning a large body; closing its connection", "panic", r, "stack", string(debug.Stack()))
				err = errPlanPanic
			}
			l.post(func() { c.planned(err) })
		}()
		if h := s.cfg.testHook; h != nil {
			h("plan", body)
		}
		err = s.plan(call, api, body)
	}()
}

// offloadBody is the body size from which a request is canonicalised off
// the loop: below it, canon takes at most ~0.25 ms and the hand-over to a
// goroutine and back would cost more than it spares the loop.
const offloadBody = 256 << 10

// errPlanPanic: planning a body panicked (a bug).
var errPlanPanic = errors.New("panic while planning the request")

// planned continues a request whose body a goroutine has planned.
func (c *cliConn) planned(err error) {
	c.planning = false
	if err == errPlanPanic && c.state != cliClosed {
		c.close() // as the loops' panic guard does: this connection only
	}
	if c.state == cliClosed {
		// The client left meanwhile (or the plan panicked); nothing was
		// reserved for it yet.
		if call := c.c; call != nil {
			c.c = nil
			if err == errPlanPanic {
				call.status, call.outcome = 500, outRejected
			} else {
				call.status, call.outcome = 499, outClientGone
			}
			c.l.s.done(call)
		}
		c.l.putBuf(c.buf)
		c.buf = nil
		return
	}
	c.state = cliWait
	c.afterPlan(err)
}

// afterPlan answers a request that cannot be routed, or routes it.
func (c *cliConn) afterPlan(err error) {
	s := c.l.s
	call := c.c
	if err != nil {
		s.m.requests[c.route][numPhases].Inc()
		var r reply
		if err == errUnknownModel {
			r = unknownModel(call.info.Model)
		} else {
			s.m.badRequest(canon.Reason(err))
			r = badBody(canon.Reason(err), err.Error())
		}
		c.reply(&r)
		return
	}
	if r, over := s.overQuota(call, call.info.CBRLen); over {
		c.reply(&r)
		return
	}
	s.bindConversation(call, c.buf, &c.h)
	c.lastBusy = false
	c.admission()
	c.attempts()
}

// admission fills the request's admission ticket (priority class,
// tenant) when admission is on.
func (c *cliConn) admission() {
	s := c.l.s
	if !s.adm.Limited() {
		return
	}
	tk, b := &c.c.tk, c.buf
	tk.Class = admit.ClassOf(c.h.Get(b, "x-kvca-priority"), c.c.info.Priority)
	if t := c.c.tenant; t != nil {
		tk.Tenant = s.adm.TenantKey([]byte(t.Name)) // the API key's tenant
	} else if h := c.h.Get(b, "x-kvca-tenant"); len(h) > 0 {
		tk.Tenant = s.adm.TenantKey(h)
	} else {
		tk.Tenant = admit.TenantHash(c.c.info.UserKey) // the end user the body names
	}
	tk.Owner, tk.Wake = c, admitWake
}

// admitWake brings a ticket's wake to the loop that owns its connection.
func admitWake(t *admit.Ticket, seq uint64) {
	c := t.Owner.(*cliConn)
	c.l.post(func() { c.admitted(seq) })
}

// admitted continues a request that left the admission queue.
func (c *cliConn) admitted(seq uint64) {
	if c.state != cliQueued || c.c == nil || c.c.tk.Seq() != seq {
		return // stale: the request ended meanwhile
	}
	c.state = cliWait
	c.c.queued += c.c.now().Sub(c.c.qsince)
	if c.c.tk.State() == admit.Dropped {
		r := shed(&c.c.tk)
		c.reply(&r)
		return
	}
	c.c.req.Now = c.l.s.table.Now() // the cache picture may have changed
	c.attempts()
}

// admit asks admission for room before routing: false when the request
// now waits in the queue or was turned away (answered).
func (c *cliConn) admit() bool {
	s := c.l.s
	call := c.c
	tk := &call.tk
	tk.Eligible = s.adm.Candidates(&call.req)
	admit.Estimate(s.table, &call.req, tk)
	switch s.adm.Admit(tk) {
	case admit.Queued:
		c.state = cliQueued
		call.qsince = call.now()
		return false
	case admit.Shed:
		r := shed(tk)
		c.reply(&r)
		return false
	}
	return true
}

// attempts routes the request and sends it to the chosen backend, trying
// others (up to --retries) while nothing has reached the client.
func (c *cliConn) attempts() {
	s := c.l.s
	call := c.c
	for {
		limited := s.adm.Limited()
		if limited && !c.admit() {
			return
		}
		allowed := call.req.Allowed
		if limited {
			call.req.Allowed = call.tk.Room() // the backends with room
		}
		u, r := s.pick(call, c.lastBusy)
		call.req.Allowed = allowed
		if r != nil {
			c.reply(r)
			return
		}
		if limited && !s.adm.Take(&call.tk, u.b.Index) {
			call.res.ReleaseActive() // its room went meanwhile: ask again
			continue
		}
		res := c.attemptOn(u, false)
		if res == sent || !c.failedAttempt(u, res) {
			return
		}
	}
}

// attemptOn starts the request on a connection to u: sent, or why not.
// A pooled connection the backend had closed is replaced once by a fresh
// one, which is the one that counts.
func (c *cliConn) attemptOn(u *upstream, fresh bool) int {
	s := c.l.s
	for {
		up, reused, res := c.l.upstreamConn(u, fresh)
		if res != sent {
			return res
		}
		c.c.tr.AttemptBegin(u.b.Name)
		f := fwd{tls: c.sock.tls != nil, preserveHost: s.cfg.PreserveHost, dropCreds: s.keys != nil || s.cfg.BackendAPIKey != "",
			backendKey: s.cfg.BackendAPIKey, tr: &c.c.tr}
		c.uhead = appendUpstreamHead(c.uhead[:0], c.buf, &c.h, u, c.bodyEnd-c.h.Size, c.ip, c.c.rid, &f)
		up.begin(c, reused)
		e := up.writeReq()
		if e == 0 {
			return sent
		}
		up.close()
		c.up = nil
		if reused {
			fresh = true
			continue
		}
		return s.connFailure(u, e)
	}
}

// failedAttempt books a failed attempt on u and reports whether to try
// another backend; if not, the client has been answered.
func (c *cliConn) failedAttempt(u *upstream, res int) bool {
	retry, r := c.l.s.failed(c.c, u, res)
	if !retry {
		c.reply(r)
		return false
	}
	c.lastBusy = res == connBusy
	return true
}

// upFailed is failedAttempt for failures that come later, from events.
func (c *cliConn) upFailed(u *upstream, res int) {
	c.up = nil
	if c.failedAttempt(u, res) {
		c.attempts()
	}
}

// onHead handles the upstream's response head and starts relaying.
func (c *cliConn) onHead(up *upConn) {
	s := c.l.s
	if h := s.cfg.testHook; h != nil {
		h("answer", c.buf[c.h.Size:c.bodyEnd])
	}
	call := c.c
	u := up.u
	r := &up.h
	if s.cfg.PrefillAtHeaders || !r.Chunked {
		// Streaming servers (vLLM, SGLang) send headers before they
		// prefill: a streamed answer keeps its prefill load until its
		// first body byte (unless --prefill-release headers).
		if call.res.ReleasePrefill() {
			s.adm.PrefillDone(u.b.Index)
		}
	}
	if s.answered(call, u, r.Status) {
		up.close()
		c.upFailed(u, retryStatus)
		return
	}
	up.mode = r.Framing(c.head)
	up.remaining = r.ContentLength
	up.reusable = !r.Close
	up.cs = h1.ChunkScan{}
	up.dechunk = up.mode == h1.BodyChunked && c.h.Minor == 0
	if up.mode == h1.BodyUntilClose || up.dechunk || s.draining.Load() {
		c.closeAfter = true
	}
	if up.mode == h1.BodyNone {
		up.bodyDone = true
		up.reusable = up.reusable && (c.head || r.ContentLength <= 0 || r.Status == 304 || r.Status == 204)
	}
	var quotaHeaders []byte
	calibrate := false
	if s.calibrate && call.routed && r.Status < 300 {
		c.l.calTick++
		calibrate = c.l.calTick%calSample == 0
	}
	if call.tenant != nil || calibrate || (c.route == routeResponses && r.Status < 300) || (s.cfg.CacheCheck && call.routed && r.Status < 300) {
		// Usage is read in passing to charge the tenant what it used,
		// to check the cached tokens predicted on the backend, and a
		// Responses answer's id to find its backend again.
		call.sniffing = true
		f := sniff.JSON
		if r.SSE {
			f = sniff.SSE
		}
		if up.mode == h1.BodyChunked && !up.dechunk {
			f |= sniff.Chunked
		}
		call.sn.Reset(f)
	}
	if call.tenant != nil {
		quotaHeaders = call.qd.AppendHeaders(c.uhead[:0]) // the upstream head is sent: its buffer is free
	}
	if s.cfg.RouteHeader && call.routed {
		if quotaHeaders == nil {
			quotaHeaders = c.uhead[:0]
		}
		quotaHeaders = call.appendRouteHeader(quotaHeaders)
	}
	c.out = appendClientHead(c.out, up.buf[up.hoff:], r, up.mode, up.dechunk, call.rid, quotaHeaders, c.closeAfter)
	c.state = cliRelay
	up.state = upBody
	up.dl = 0
	up.pump()
}

// calSample: one routed answer in calSample is read for its usage to
// calibrate bytes per token; a ratio needs few samples, and reading costs
// ~2 µs per 4 KB.
const calSample = 16

// send writes data (borrowed) after any of kvca's own pending bytes;
// false if the client is gone.
func (c *cliConn) send(data []byte) bool {
	c.data = data
	if c.c != nil {
		c.c.out += int64(len(data))
	}
	return c.flush()
}

// flush writes what is pending; false if the client is gone (it has been
// dealt with). A client that stops reading is cut after
// --stream-idle-timeout, like a stalled backend.
func (c *cliConn) flush() bool {
	for c.pending() {
		a := c.out[c.outOff:]
		n, e := c.sock.writev(c.l, a, c.data)
		if e == syscall.EAGAIN {
			c.dl = c.l.now + int64(c.l.s.cfg.StreamIdleTimeout)
			return true
		}
		if e != 0 {
			c.gone()
			return false
		}
		if n <= len(a) {
			c.outOff += n
		} else {
			c.outOff = len(c.out)
			c.data = c.data[n-len(a):]
		}
		if n == 0 && c.sock.pendingOut() {
			c.dl = c.l.now + int64(c.l.s.cfg.StreamIdleTimeout)
			return true
		}
	}
	c.out, c.outOff, c.data = c.out[:0], 0, nil
	if c.state == cliRelay || c.state == cliReply {
		c.dl = 0
	}
	return true
}

// drained continues once the client took everything pending.
func (c *cliConn) drained() {
	switch c.state {
	case cliRelay:
		c.up.pump()
	case cliReply:
		c.replied()
	}
}

// reply answers the request with one of kvca's errors.
func (c *cliConn) reply(r *reply) {
	s := c.l.s
	call := c.c
	call.status, call.outcome = r.status, outRejected
	if r.close {
		c.closeAfter = true
	}
	if s.draining.Load() {
		c.closeAfter = true
	}
	c.out = appendErrorAnswer(c.out, r, call.rid, c.closeAfter, c.head, c.route == routeMessages)
	c.writeOwn()
}

// answer is kvca's own successful answer (health, readiness, models).
func (c *cliConn) answer(status int, ctype string, body []byte, header string) {
	call := c.c
	call.status = status
	call.out = int64(len(body))
	if c.l.s.draining.Load() {
		c.closeAfter = true
	}
	c.out = appendAnswer(c.out, status, ctype, body, call.rid, header, c.closeAfter, c.head)
	c.writeOwn()
}

func (c *cliConn) writeOwn() {
	c.state = cliReply
	c.dl = 0
	if c.flush() && !c.pending() {
		c.replied()
	}
}

func (c *cliConn) replied() {
	if call := c.c; call != nil {
		c.c = nil
		c.l.s.done(call)
	}
	c.next()
}

// maybeFinish ends the exchange once the body is complete and the client
// has taken all of it.
func (c *cliConn) maybeFinish() {
	if !c.pending() {
		c.finish(false)
	}
}

// finish ends a relayed exchange: the one place its upstream connection
// is kept or closed and its call completed.
func (c *cliConn) finish(clientGone bool) {
	s := c.l.s
	up, call := c.up, c.c
	u := up.u
	if call.sniffing && up.mode != h1.BodyChunked {
		call.sn.Close()
	}
	call.tr.AttemptEnd(call.status, up.err)
	if upErr := up.err; upErr != nil {
		s.streamFailed(u, upErr)
		call.outcome = outUpstream
		if !clientGone && up.mode == h1.BodyChunked && !up.dechunk && up.h.SSE && up.cs.Between() {
			// Never let a broken stream look like a clean end: an SSE
			// client gets an error event, then the connection closes
			// without the terminating chunk.
			c.writeLast(c.brokenChunk(false))
		}
		c.closeAfter = true
	} else if clientGone && call.outcome == outCompleted {
		call.outcome = outClientGone
	}
	if up.reusable && up.bodyDone && up.err == nil && !clientGone {
		up.toIdle()
	} else {
		// Closing aborts an unfinished upstream request: the backend stops
		// generating for a client that left.
		up.close()
	}
	c.up, c.c = nil, nil
	s.done(call)
	if clientGone {
		c.close()
		return
	}
	c.next()
}

// writeLast makes one attempt to put b on the wire before the
// connection closes.
func (c *cliConn) writeLast(b []byte) {
	c.out = append(c.out[:0], b...)
	c.outOff = 0
	c.data = nil
	c.sock.writev(c.l, c.out, nil)
}

// The SSE error events as chunks: OpenAI's, and Anthropic's for the
// Messages API.
var (
	sseBrokenChunk         = h1.AppendChunk(nil, sseBrokenEvent)
	sseShutdownChunk       = h1.AppendChunk(nil, sseShutdownEvent)
	anthropicBrokenChunk   = h1.AppendChunk(nil, anthropicBrokenEvent)
	anthropicShutdownChunk = h1.AppendChunk(nil, anthropicShutdownEvent)
)

// brokenChunk is the event that ends a stream cut short, by the
// backend's failure or by a shutdown.
func (c *cliConn) brokenChunk(shutdown bool) []byte {
	switch {
	case c.route == routeMessages && shutdown:
		return anthropicShutdownChunk
	case c.route == routeMessages:
		return anthropicBrokenChunk
	case shutdown:
		return sseShutdownChunk
	}
	return sseBrokenChunk
}

// next readies the connection for its next request, which the client may
// have pipelined already.
func (c *cliConn) next() {
	if c.closeAfter || c.l.s.draining.Load() {
		c.closeLingering()
		return
	}
	rest := c.n - c.reqEnd
	if rest > 0 {
		copy(c.buf, c.buf[c.reqEnd:c.n])
	}
	c.n, c.reqEnd, c.bodyEnd, c.raw = rest, 0, 0, 0
	c.h.Reset()
	c.head = false
	if cap(c.buf) != loopBufSize && rest <= loopBufSize {
		// A large body's buffer goes; the next request gets a pooled one.
		nb := c.l.getBuf(loopBufSize)
		copy(nb, c.buf[:rest])
		c.l.putBuf(c.buf)
		c.buf = nb
	}
	c.out, c.outOff, c.data = c.out[:0], 0, nil
	c.idle()
	if rest > 0 {
		c.process()
	}
	c.sock.mayRead()
	c.read()
}

// closeLingering closes a connection kvca chose to end: the write side
// first, then whatever the client still sends is read and dropped for a
// moment, so that the answer is not lost to a reset from unread bytes.
func (c *cliConn) closeLingering() {
	if c.sock.tls != nil {
		c.sock.tls.closeNotify() // a TLS client learns the end is deliberate
	}
	if syscall.Shutdown(c.sock.fd, syscall.SHUT_WR) != nil {
		c.close()
		return
	}
	c.state = cliLinger
	c.dl = c.l.now + int64(lingerTime)
	c.sock.mayRead()
	c.linger()
}

// lingerTime bounds how long a closing connection's input is drained.
const lingerTime = time.Second

func (c *cliConn) linger() {
	if c.buf == nil {
		c.buf = c.l.getBuf(loopBufSize)
	}
	for {
		n, e := c.sock.read(c.buf)
		if e == syscall.EAGAIN {
			return
		}
		if e != 0 || n == 0 {
			c.close()
			return
		}
	}
}

// gone handles a client that left or broke: whatever is in flight for it
// is stopped and released.
func (c *cliConn) gone() {
	s := c.l.s
	switch c.state {
	case cliAsync:
		if c.planning {
			c.close() // planned finishes the request, and frees buf
			return
		}
	case cliRelay:
		c.finish(true)
		return
	case cliWait:
		if c.up != nil {
			c.up.close()
			c.up = nil
		}
	}
	// A request waiting in the admission queue (cliQueued) leaves it in
	// done, and reserved nothing.
	if call := c.c; call != nil {
		c.c = nil
		if call.outcome == outCompleted {
			call.outcome = outClientGone
		}
		if call.status == 0 {
			call.status = 499
		}
		s.done(call)
	}
	c.close()
}

// abort ends the connection at a shutdown that ran out of time: a stream
// in progress ends with an SSE error event where it can.
func (c *cliConn) abort() {
	if call := c.c; call != nil && call.outcome == outCompleted {
		call.outcome = outShutdown
	}
	if c.state == cliRelay && c.up != nil {
		up := c.up
		if up.mode == h1.BodyChunked && !up.dechunk && up.h.SSE && up.cs.Between() && !c.pending() {
			c.writeLast(c.brokenChunk(true))
		}
		up.close()
		c.up = nil
		call := c.c
		c.c = nil
		c.l.s.done(call)
		c.close()
		return
	}
	c.gone()
}

// drain is shutdown: an idle connection closes now, others after their
// answer.
func (c *cliConn) drain() {
	if c.state == cliIdle && c.n == 0 {
		c.close()
		return
	}
	c.closeAfter = true
}

func (c *cliConn) timeout() {
	switch c.state {
	case cliIdle, cliLinger:
		c.close()
	case cliHead, cliBody:
		// --header-timeout or --client-read-timeout: the request did not
		// arrive in time.
		if c.c == nil {
			c.c = c.l.s.begin(routeOther, nil, nil, c.ip, &c.l.clock)
		}
		c.reply(&replyReadTime)
	case cliRelay, cliReply:
		c.gone() // the client stopped reading
	}
}

func (c *cliConn) close() {
	if c.state == cliClosed {
		return
	}
	c.state = cliClosed
	c.l.forget(c.sock.fd)
	syscall.Close(c.sock.fd)
	c.l.nCli--
	c.l.open.Add(-1)
	c.l.s.clientConns.Add(-1)
	if c.buf != nil && !c.planning {
		c.l.putBuf(c.buf)
		c.buf = nil
	}
}

// Upstream connection states.
const (
	upDialing    = iota // https: a goroutine connects and shakes hands (tlssock_linux.go)
	upConnecting        // a non-blocking connect in progress
	upSending
	upHead
	upBody
	upIdle
	upClosed
)

// upConn is a backend connection of one loop.
type upConn struct {
	l      *evLoop
	u      *upstream
	sock   sock
	state  int
	reused bool
	gotAny bool
	cli    *cliConn
	buf    []byte
	off, n int
	hoff   int // where the response head starts in buf
	h      h1.Response
	wa, wb []byte // request bytes still to write
	dl     int64

	mode      int
	remaining int64
	cs        h1.ChunkScan
	dechunk   bool // relay a chunked body's data only (HTTP/1.0 client)
	reusable  bool
	bodyDone  bool
	err       error
}

func (up *upConn) deadline() int64 { return up.dl }

// idleConnTimeout closes keep-alive backend connections unused this long.
const idleConnTimeout = 90 * time.Second

// upstreamConn returns a keep-alive connection to u (unless fresh), or a
// new one (possibly still connecting); res is connBusy at
// --max-conns-per-backend and connFailed when a connection cannot even be
// started.
func (l *evLoop) upstreamConn(u *upstream, fresh bool) (up *upConn, reused bool, res int) {
	list := l.idle[u.b.Index]
	if n := len(list); n > 0 && !fresh {
		if up = list[n-1]; up.u == u {
			l.idle[u.b.Index] = list[:n-1]
			return up, true, sent
		}
		// The slot's backend was removed and the slot reused: what is
		// pooled there leads to the old one.
		for len(l.idle[u.b.Index]) > 0 {
			l.idle[u.b.Index][0].close()
		}
	}
	if int(u.loopConns.Add(1)) > l.s.cfg.MaxConnsPerBackend {
		u.loopConns.Add(-1)
		u.m.errors[errBusy].Inc()
		return nil, false, connBusy
	}
	if u.tls != nil {
		up = &upConn{l: l, u: u, sock: sock{fd: -1}, state: upDialing, buf: make([]byte, loopBufSize)}
		up.dialTLS()
		return up, false, sent
	}
	sa := u.sockaddr()
	if sa == nil {
		u.loopConns.Add(-1)
		return nil, false, l.s.connFailure(u, errNoAddress)
	}
	family := syscall.AF_INET
	if _, ok := sa.(*syscall.SockaddrInet6); ok {
		family = syscall.AF_INET6
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		u.loopConns.Add(-1)
		return nil, false, l.s.connFailure(u, err)
	}
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	state := upSending
	if err := syscall.Connect(fd, sa); err == syscall.EINPROGRESS {
		state = upConnecting
	} else if err != nil {
		syscall.Close(fd)
		u.loopConns.Add(-1)
		return nil, false, l.s.connFailure(u, err)
	}
	up = &upConn{l: l, u: u, sock: sock{fd: fd}, state: state, buf: make([]byte, loopBufSize)}
	if err := l.add(fd, up); err != nil {
		syscall.Close(fd)
		u.loopConns.Add(-1)
		return nil, false, l.s.connFailure(u, err)
	}
	if state == upConnecting {
		up.dl = l.now + int64(dialTimeout)
	}
	return up, false, sent
}

var errNoAddress = errors.New("backend address not resolved")

// begin takes the connection for c's request.
func (up *upConn) begin(c *cliConn, reused bool) {
	up.cli, up.reused, up.gotAny, up.err = c, reused, false, nil
	up.sock.rd = up.sock.rd && !reused
	up.off, up.n, up.hoff = 0, 0, 0
	up.bodyDone, up.reusable, up.dechunk = false, false, false
	up.wa, up.wb = c.uhead, c.buf[c.h.Size:c.bodyEnd]
	c.up = up
	if up.state != upConnecting && up.state != upDialing {
		up.state = upSending
		up.dl = up.l.now + int64(up.l.s.cfg.UpstreamHeaderTimeout)
	}
}

// writeReq writes what is left of the request; 0 when it is all out or
// the socket is full (the rest goes on EPOLLOUT).
func (up *upConn) writeReq() syscall.Errno {
	if up.state == upConnecting || up.state == upDialing {
		return 0
	}
	for len(up.wa)+len(up.wb) > 0 {
		n, e := up.sock.writev(up.l, up.wa, up.wb)
		if e == syscall.EAGAIN {
			return 0
		}
		if e != 0 {
			return e
		}
		if n <= len(up.wa) {
			up.wa = up.wa[n:]
		} else {
			up.wb = up.wb[n-len(up.wa):]
			up.wa = nil
		}
	}
	up.wa, up.wb = nil, nil
	up.state = upHead
	return 0
}

func (up *upConn) event(ev uint32) {
	if ev&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
		up.sock.rd = true
		up.sock.hup = up.sock.hup || ev&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0
	}
	if ev&syscall.EPOLLOUT != 0 && up.sock.pendingOut() {
		if e := up.sock.tls.w.flush(); e != 0 {
			up.failBefore(e)
			return
		}
	}
	switch up.state {
	case upConnecting:
		if ev&(syscall.EPOLLOUT|syscall.EPOLLERR|syscall.EPOLLHUP) == 0 {
			return
		}
		if v, err := syscall.GetsockoptInt(up.sock.fd, syscall.SOL_SOCKET, syscall.SO_ERROR); err != nil || v != 0 {
			if err == nil {
				err = syscall.Errno(v)
			}
			up.failBefore(err)
			return
		}
		up.state = upSending
		up.dl = up.l.now + int64(up.l.s.cfg.UpstreamHeaderTimeout)
		fallthrough
	case upSending:
		if e := up.writeReq(); e != 0 {
			up.failBefore(e)
			return
		}
		if up.state == upHead {
			up.readHead()
		}
	case upHead:
		up.readHead()
	case upBody:
		if !up.bodyDone && !up.cli.pending() {
			up.pump()
		}
	case upIdle:
		// An edge can arrive for bytes already read with the last answer;
		// that one is stale. An idle connection that really speaks or
		// hangs up is done for.
		if ev&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) == 0 {
			var b [1]byte
			if _, e := up.sock.read(b[:]); e == syscall.EAGAIN {
				return
			}
		}
		up.close()
	}
}

func (up *upConn) readHead() {
	for up.state == upHead {
		if up.n == len(up.buf) {
			if len(up.buf) >= h1.MaxResponseHead {
				up.failBefore(errBadResponse)
				return
			}
			nb := make([]byte, 2*len(up.buf))
			copy(nb, up.buf[:up.n])
			up.buf = nb
		}
		n, e := up.sock.read(up.buf[up.n:])
		if e == syscall.EAGAIN {
			return
		}
		if e != 0 {
			up.failBefore(e)
			return
		}
		if n == 0 {
			up.failBefore(io.EOF)
			return
		}
		up.gotAny = true
		up.n += n
		for {
			st, _ := h1.ParseResponse(up.buf[up.off:up.n], &up.h)
			if st == h1.More {
				break
			}
			if st == h1.Bad || up.h.Status == 101 {
				up.badAnswer() // nothing asked to switch protocols
				return
			}
			if up.h.Status < 200 {
				up.off += up.h.Size // an interim answer: the real one follows
				continue
			}
			up.hoff = up.off
			up.off += up.h.Size
			up.cli.onHead(up)
			return
		}
	}
}

// errBadResponse is an upstream answer kvca cannot frame.
var errBadResponse = errors.New("malformed response head from upstream")

// badAnswer: the backend answered something kvca will not relay. It is
// a protocol error, not a dead backend: 502 at once, no retry (the
// request has been processed there).
func (up *upConn) badAnswer() {
	c, u := up.cli, up.u
	u.m.errors[errStatus].Inc()
	up.close()
	c.up = nil
	c.c.res.ReleaseActive()
	c.reply(&replyBadAnswer)
}

// failBefore handles a connection that failed before a response began:
// a stale keep-alive connection is replaced by a fresh one; otherwise the
// attempt failed.
func (up *upConn) failBefore(err error) {
	c, u := up.cli, up.u
	stale := up.reused && !up.gotAny && noResponseYet(err)
	up.close()
	c.up = nil
	if stale {
		if res := c.attemptOn(u, true); res != sent {
			c.upFailed(u, res)
		}
		return
	}
	c.upFailed(u, c.l.s.connFailure(u, err))
}

// pump relays the response body to the client as it arrives, never
// reading more from the backend than the client has taken.
func (up *upConn) pump() {
	c := up.cli
	for {
		if len(c.data) > 0 || c.sock.pendingOut() {
			return // the client has not taken the last piece yet
		}
		if up.off < up.n && !up.bodyDone {
			data := up.buf[up.off:up.n]
			var err error
			switch up.mode {
			case h1.BodyFixed:
				if int64(len(data)) >= up.remaining {
					if int64(len(data)) > up.remaining {
						up.reusable = false // bytes past the body
					}
					data = data[:up.remaining]
					up.bodyDone = true
				}
				up.remaining -= int64(len(data))
			case h1.BodyChunked:
				if up.dechunk {
					k, isData, done, e := up.cs.Step(data)
					up.bodyDone, err = done, e
					if !isData {
						up.off += k
						if err != nil {
							up.err, up.bodyDone = err, true
						}
						if done && up.off < up.n {
							up.reusable = false
						}
						continue
					}
					data = data[:k]
				} else {
					var k int
					var done bool
					k, done, err = up.cs.Scan(data)
					if done && k < len(data) {
						up.reusable = false
					}
					data = data[:k]
					up.bodyDone = done
				}
			}
			up.off += len(data)
			if err != nil {
				up.err, up.bodyDone = err, true
			}
			if len(data) > 0 {
				if c.c.firstByte(up.mode == h1.BodyChunked) {
					c.l.s.adm.PrefillDone(up.u.b.Index)
				}
				if call := c.c; call.sniffing {
					call.sn.Feed(data)
					if c.route == routeResponses && !call.idBound {
						c.l.s.learnID(call)
					}
				}
			}
			// The head, if still pending, goes out in the same write.
			if !c.send(data) {
				return
			}
			continue
		}
		if up.bodyDone {
			if c.pending() && (!c.flush() || c.pending()) {
				return
			}
			c.finish(false)
			return
		}
		up.off, up.n = 0, 0
		n, e := up.sock.read(up.buf)
		if e == syscall.EAGAIN {
			if c.pending() && !c.flush() {
				return // the head goes out before any body byte has come
			}
			up.dl = up.l.now + int64(up.l.s.cfg.StreamIdleTimeout)
			return
		}
		up.dl = 0
		switch {
		case e != 0:
			up.err, up.bodyDone = e, true
		case n == 0 && up.mode == h1.BodyUntilClose:
			up.bodyDone, up.reusable = true, false
		case n == 0:
			up.err, up.bodyDone = io.ErrUnexpectedEOF, true
		}
		up.n = n
	}
}

func (up *upConn) timeout() {
	switch up.state {
	case upConnecting:
		up.failBefore(errDialTimeout)
	case upSending, upHead:
		c, u := up.cli, up.u
		u.m.errors[errTimeout].Inc()
		up.close()
		c.upFailed(u, timedOut)
	case upBody:
		// --stream-idle-timeout: the backend stalled mid-answer.
		up.err, up.bodyDone, up.dl = errStreamIdle, true, 0
		up.cli.maybeFinish()
	case upIdle:
		up.close()
	}
}

var (
	errDialTimeout = timeoutError("dial timeout")
	errStreamIdle  = timeoutError("no data from the backend within --stream-idle-timeout")
)

// toIdle returns the connection to the loop's keep-alive pool.
func (up *upConn) toIdle() {
	up.state = upIdle
	up.cli = nil
	up.wa, up.wb = nil, nil
	up.off, up.n = 0, 0
	up.dl = up.l.now + int64(idleConnTimeout)
	up.l.idle[up.u.b.Index] = append(up.l.idle[up.u.b.Index], up)
}

func (up *upConn) close() {
	if up.state == upClosed {
		return
	}
	if up.state == upIdle {
		list := up.l.idle[up.u.b.Index]
		for i, x := range list {
			if x == up {
				up.l.idle[up.u.b.Index] = append(list[:i], list[i+1:]...)
				break
			}
		}
	}
	up.state = upClosed
	if up.sock.fd >= 0 {
		up.l.forget(up.sock.fd)
		syscall.Close(up.sock.fd)
	}
	up.u.loopConns.Add(-1)
	up.cli = nil
}

// dispatchModels answers GET /v1/models and /v1/models/{id}: at once from
// what discovery knows, or, when a backend's list is unknown, after a
// goroutine has asked it (with the client's credentials).
func (c *cliConn) dispatchModels() {
	s := c.l.s
	id := ""
	if c.kind == kindModel {
		id = string(c.h.Path.Of(c.buf)[len("/v1/models/"):])
	}
	if s.modelsKnown() {
		st, b := s.modelsAnswer(nil, id)
		c.answer(st, "application/json", b, "")
		return
	}
	var creds [][2]string
	for i := 0; i < c.h.NF; i++ {
		n := c.h.Names[i].Of(c.buf)
		if h1.EqualFold(n, "authorization") || h1.EqualFold(n, "api-key") || h1.EqualFold(n, "x-api-key") {
			creds = append(creds, [2]string{string(n), string(c.h.Vals[i].Of(c.buf))})
		}
	}
	c.state = cliAsync
	l := c.l
	go func() {
		st, b := s.modelsAnswer(creds, id)
		l.post(func() {
			if c.state == cliAsync {
				c.answer(st, "application/json", b, "")
			}
		})
	}()
}
