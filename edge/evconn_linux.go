//go:build linux

package edge

import (
	"errors"
	"io"
	"net"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/kvca/kvca/canon"
)

// A client connection's states.
const (
	cliIdle  = iota // between requests, no byte of the next one yet
	cliHead         // reading a request head
	cliBody         // reading its body
	cliPlan         // a large body is canonicalised off the loop (plan)
	cliWait         // the request is with a backend, no answer yet
	cliRelay        // relaying the backend's answer
	cliReply        // writing kvca's own answer
	cliClosed
)

// cliConn is a client connection served by a loop. Its read buffer holds
// one request (head and body, contiguous, as canon wants the body) and
// whatever the client pipelined after it.
type cliConn struct {
	l          *evLoop
	fd         int
	ip         []byte
	state      int
	buf        []byte // nil while idle
	n          int    // bytes in buf
	need       int    // head+body bytes of the current request
	h          reqHead
	api        canon.API
	route      int
	dl         int64
	closeAfter bool
	// rd: the socket may hold unread bytes. Edge-triggered epoll reports
	// each arrival once; a short read means the socket was drained, so the
	// next arrival raises a new event and no read has to end in EAGAIN.
	// Once the peer has hung up (hup) reads go on to the end of file,
	// which arrived with the last bytes and raises no event of its own.
	rd, hup bool
	// planning: a goroutine reads buf (canonicalising a large body); buf
	// is neither reused nor pooled until planned runs, even if the
	// connection closes first.
	planning bool
	planErr  error

	// The exchange in progress.
	c        *call
	up       *upConn
	attempt  int
	lastBusy bool
	ridNew   bool   // the request id was generated (the client's is replaced)
	uhead    []byte // the request head as sent upstream
	out      []byte // kvca's bytes for the client (a response head, an error)
	outOff   int
	data     []byte // body bytes for the client, borrowed from the upstream's buffer
}

func (c *cliConn) deadline() int64 { return c.dl }

func (c *cliConn) pending() bool { return c.outOff < len(c.out) || len(c.data) > 0 }

func (c *cliConn) event(ev uint32) {
	if ev&evPlanned != 0 {
		c.planned()
		return
	}
	if c.state == cliClosed {
		return
	}
	if ev&(syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
		c.gone()
		return
	}
	if ev&(syscall.EPOLLIN|syscall.EPOLLRDHUP) != 0 {
		c.rd = true
		c.hup = c.hup || ev&syscall.EPOLLRDHUP != 0
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
	case cliPlan, cliWait, cliRelay:
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
		if c.n == len(c.buf) {
			// A head larger than the buffer: fasthttp answers it.
			c.handoff()
			return
		}
		n, e := readSome(c.fd, c.buf[c.n:], &c.rd, c.hup)
		if e == syscall.EAGAIN {
			if c.n == 0 {
				c.idle()
			}
			return
		}
		if e != 0 || n == 0 {
			c.close() // a request cut short dies with its connection
			return
		}
		if c.state == cliIdle {
			c.state = cliHead
			c.dl = c.l.now + int64(c.l.s.cfg.ClientReadTimeout)
		}
		c.n += n
		c.process()
	}
}

// readSome reads into p if bytes may be waiting (*rd), and clears *rd
// once the socket is drained: on EAGAIN, or after a short read unless the
// peer hung up (its end of file comes with the last bytes and raises no
// event of its own). EAGAIN also means "not now, wait for an event".
func readSome(fd int, p []byte, rd *bool, hup bool) (int, syscall.Errno) {
	if !*rd {
		return 0, syscall.EAGAIN
	}
	n, e := rawRead(fd, p)
	if e == syscall.EAGAIN || (e == 0 && n > 0 && n < len(p) && !hup) {
		*rd = false
	}
	return n, e
}

// process acts on the bytes in buf: parse the head, wait for the body,
// dispatch the request.
func (c *cliConn) process() {
	if c.state == cliIdle && c.n > 0 {
		c.state = cliHead
		c.dl = c.l.now + int64(c.l.s.cfg.ClientReadTimeout)
	}
	if c.state == cliHead {
		switch parseRequestHead(c.buf[:c.n], &c.h) {
		case headMore:
			return
		case headOther:
			c.handoff()
			return
		}
		if !c.mine() {
			c.handoff()
			return
		}
		c.need = c.h.size + int(c.h.contentLen)
		if c.need > len(c.buf) {
			nb := c.l.getBuf(c.need)
			copy(nb, c.buf[:c.n])
			c.l.putBuf(c.buf)
			c.buf = nb
		}
		c.state = cliBody
	}
	if c.state == cliBody && c.n >= c.need {
		c.dispatch()
	}
}

// mine reports whether the loop serves the request itself.
func (c *cliConn) mine() bool {
	h := &c.h
	if h.minor != 1 || !h.hasLen || h.hasTE || h.expect || h.upgrade || string(h.method.of(c.buf)) != "POST" ||
		h.contentLen > int64(c.l.s.cfg.MaxBodyBytes) {
		return false
	}
	switch string(h.path.of(c.buf)) {
	case "/v1/chat/completions":
		c.api, c.route = canon.Chat, routeChat
	case "/v1/completions":
		c.api, c.route = canon.Completions, routeCompletions
	case "/v1/responses":
		c.api, c.route = canon.Responses, routeResponses
	default:
		return false
	}
	return true
}

func (c *cliConn) handoff() {
	buf := c.buf[:c.n]
	c.state = cliClosed
	c.l.handoff(c.fd, buf)
	c.l.putBuf(c.buf)
	c.buf = nil
}

// dispatch is body → canon → chain → sched for a complete request.
func (c *cliConn) dispatch() {
	s := c.l.s
	if h := s.cfg.testHook; h != nil {
		h("request", c.buf[c.h.size:c.need])
	}
	call := s.getCall()
	call.start = time.Now()
	call.route = c.route
	call.routed = true
	c.c = call
	c.state = cliWait
	c.dl = 0
	if c.h.close {
		c.closeAfter = true
	}
	body := c.buf[c.h.size:c.need]
	if len(body) >= offloadBody {
		// Canonicalising a body this large takes long enough (~1 ms per
		// MB) to hold up every other connection of the loop, streams
		// included: a goroutine does it, and the loop carries on.
		c.state = cliPlan
		c.planning = true
		l, api := c.l, c.api
		go func() {
			defer func() {
				if r := recover(); r != nil {
					s.log.Error("event loop: panic planning a large body; closing its connection", "panic", r, "stack", string(debug.Stack()))
					l.postPlanned(c, errPlanPanic)
				}
			}()
			if h := s.cfg.testHook; h != nil {
				h("plan", body)
			}
			l.postPlanned(c, s.plan(call, api, body))
		}()
		return
	}
	c.afterPlan(s.plan(call, c.api, body))
}

// offloadBody is the body size from which dispatch canonicalises off the
// loop: below it, canon takes at most ~0.25 ms and the hand-over to a
// goroutine and back would cost more than it spares the loop.
const offloadBody = 256 << 10

// errPlanPanic: planning a body panicked (a bug).
var errPlanPanic = errors.New("panic while planning the request")

// planned continues a request whose body a goroutine has planned.
func (c *cliConn) planned() {
	c.planning = false
	err := c.planErr
	c.planErr = nil
	if err == errPlanPanic && c.state != cliClosed {
		c.close() // as the loops' panic guard does: this connection only
	}
	if c.state == cliClosed {
		// The client left meanwhile (or the plan panicked); nothing was
		// reserved for it yet.
		s := c.l.s
		status := 500
		if err != errPlanPanic {
			s.m.disconnects.Inc()
			status = 499
		}
		call := c.c
		c.c = nil
		s.done(call, status)
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
		if err == errUnknownModel {
			c.reply(404, "invalid_request_error", "model_not_found",
				"The model `"+string(call.info.Model)+"` does not exist or no backend serves it.")
		} else {
			s.m.badRequest(canon.Reason(err))
			c.reply(400, "invalid_request_error", canon.Reason(err), err.Error())
		}
		return
	}
	// One id follows the request through kvca, the backend and the logs.
	call.rid = append(call.rid[:0], c.h.rid.of(c.buf)...)
	c.ridNew = len(call.rid) == 0 || len(call.rid) > 128
	if c.ridNew {
		call.rid = appendRequestID(call.rid[:0])
	}
	c.attempt, c.lastBusy = 0, false
	c.next()
}

// next routes the request and sends it to the chosen backend, trying
// others (up to --retries) while nothing has reached the client.
func (c *cliConn) next() {
	s := c.l.s
	call := c.c
	for {
		if !s.sched.Route(&call.req, &call.dec, &call.res) {
			switch {
			case c.attempt == 0:
				s.m.requests[c.route][numPhases].Inc()
				c.reply(503, "service_unavailable", "no_healthy_backend", "no healthy backend is available; retry later")
			case c.lastBusy:
				c.reply(503, "service_unavailable", "upstream_busy", "every connection to the inference backends is in use; retry later")
			default:
				c.reply(502, "upstream_error", "upstream_unreachable", "the inference backend could not be reached")
			}
			return
		}
		if s.cfg.PredictTTL > 0 && len(call.req.Chain) > 0 {
			at := call.req.Now - s.table.TTL().Milliseconds() + s.cfg.PredictTTL.Milliseconds()
			s.table.TouchAt(call.req.Chain, call.dec.Backend.Index, max(at, 0))
		}
		if c.attempt == 0 {
			s.m.requests[c.route][call.dec.Phase].Inc()
			s.m.cached.Add(call.dec.Cached)
			s.m.novel.Add(call.dec.Novel)
		}
		u := s.ups[call.dec.Backend.Index]
		res := c.attemptOn(u)
		if res == sent || !c.failedAttempt(u, res) {
			return
		}
	}
}

// attemptOn starts the request on a connection to u: sent, or why not.
func (c *cliConn) attemptOn(u *upstream) int {
	for {
		up, reused, res := c.l.upstreamConn(u)
		if res != sent {
			return res
		}
		c.buildHead(u)
		up.begin(c, reused)
		e := up.writeReq()
		if e == 0 {
			return sent
		}
		up.close()
		c.up = nil
		if reused {
			continue // a keep-alive connection the backend had closed
		}
		return c.l.s.connFailure(u, e)
	}
}

// failedAttempt books a failed attempt on u and reports whether to try
// another backend; if not, the client has been answered.
func (c *cliConn) failedAttempt(u *upstream, res int) bool {
	s := c.l.s
	call := c.c
	call.res.ReleaseActive()
	if res == timedOut {
		c.reply(504, "upstream_error", "upstream_timeout", "the inference backend did not answer in time")
		return false
	}
	call.req.Exclude.Add(u.b.Index)
	if c.attempt >= s.cfg.Retries {
		if res == connBusy {
			c.reply(503, "service_unavailable", "upstream_busy", "every connection to the inference backends is in use; retry later")
		} else {
			c.reply(502, "upstream_error", "upstream_unreachable", "the inference backend could not be reached")
		}
		return false
	}
	c.lastBusy = res == connBusy
	c.attempt++
	return true
}

// upFailed is failedAttempt for failures that come later, from events.
func (c *cliConn) upFailed(u *upstream, res int) {
	c.up = nil
	if c.failedAttempt(u, res) {
		c.next()
	}
}

// buildHead writes the upstream request head: the client's, with the
// backend's Host and path prefix, without hop-by-hop headers, with
// X-Forwarded-For extended and a request id. The body follows unchanged.
func (c *cliConn) buildHead(u *upstream) {
	b, h := c.buf, &c.h
	o := append(c.uhead[:0], h.method.of(b)...)
	o = append(o, ' ')
	uri := h.uri.of(b)
	if p := u.addr.prefix; p != "" && (len(uri) < len(p) || string(uri[:len(p)]) != p) {
		o = append(o, p...)
	}
	o = append(o, uri...)
	o = append(o, " HTTP/1.1\r\nHost: "...)
	o = append(o, u.host...)
	o = append(o, "\r\n"...)
	for i := 0; i < h.nh; i++ {
		name := h.names[i].of(b)
		switch len(name) {
		case 4:
			if equalFoldASCII("Host", name) {
				continue
			}
		case 12:
			if c.ridNew && equalFoldASCII("X-Request-Id", name) {
				continue
			}
		case 15:
			if equalFoldASCII("X-Forwarded-For", name) {
				continue
			}
		}
		if isHop(name) {
			continue
		}
		o = append(o, name...)
		o = append(o, ": "...)
		o = append(o, h.vals[i].of(b)...)
		o = append(o, "\r\n"...)
	}
	o = append(o, "X-Forwarded-For: "...)
	for i := 0; i < h.nh && h.xffN > 0; i++ {
		if name := h.names[i].of(b); len(name) == 15 && equalFoldASCII("X-Forwarded-For", name) {
			if v := h.vals[i].of(b); len(v) > 0 {
				o = append(o, v...)
				o = append(o, ", "...)
			}
		}
	}
	o = append(o, c.ip...)
	o = append(o, "\r\n"...)
	if c.ridNew {
		o = append(o, "X-Request-Id: "...)
		o = append(o, c.c.rid...)
		o = append(o, "\r\n"...)
	}
	c.uhead = append(o, "\r\n"...)
}

// onHead handles the upstream's response head: release the prefill load,
// learn the chain on success, and start relaying.
func (c *cliConn) onHead(up *upConn) {
	s := c.l.s
	if h := s.cfg.testHook; h != nil {
		h("answer", c.buf[c.h.size:c.need])
	}
	call := c.c
	u := up.u
	h := &up.h
	if s.cfg.PrefillAtHeaders || !h.chunked {
		call.res.ReleasePrefill()
	}
	call.ttfb = time.Since(call.start)
	u.m.firstByte.Update(call.ttfb.Seconds())
	u.succeeded()
	call.status = h.status
	if h.status >= 500 || h.status == 429 {
		u.m.errors[errStatus].Inc()
		if c.attempt < s.cfg.Retries && (h.status == 429 || h.status == 503) && s.hasAlternative(call, u) {
			up.close()
			c.upFailed(u, retryStatus)
			return
		}
	}
	if h.status >= 200 && h.status < 300 && len(call.req.Chain) > 0 {
		s.learned(call.req.Chain, u.b.Index, call.req.Now)
	}
	up.mode = h.framing(false)
	up.remaining = h.contentLen
	up.reusable = !h.close
	up.cs = chunkScan{}
	if up.mode == bodyUntilClose || s.draining.Load() {
		c.closeAfter = true
	}
	if up.mode == bodyNone {
		up.bodyDone = true
		up.reusable = up.reusable && h.contentLen <= 0
	}
	// The client's head: the status line, the end-to-end headers.
	b := up.buf[up.hoff:]
	o := append(c.out[:0], "HTTP/1.1"...)
	o = append(o, h.statusLine.of(b)[8:]...)
	o = append(o, "\r\n"...)
	for i := 0; i < h.nh; i++ {
		name := h.names[i].of(b)
		if isHop(name) {
			continue
		}
		if len(name) == 17 && up.mode != bodyChunked && equalFoldASCII("Transfer-Encoding", name) {
			continue
		}
		if len(name) == 14 && up.mode == bodyChunked && equalFoldASCII("Content-Length", name) {
			continue
		}
		o = append(o, name...)
		o = append(o, ": "...)
		o = append(o, h.vals[i].of(b)...)
		o = append(o, "\r\n"...)
	}
	if !h.hasRID {
		o = append(o, "X-Request-Id: "...)
		o = append(o, call.rid...)
		o = append(o, "\r\n"...)
	}
	if c.closeAfter {
		o = append(o, "Connection: close\r\n"...)
	}
	c.out = append(o, "\r\n"...)
	c.outOff = 0
	c.state = cliRelay
	up.state = upBody
	up.dl = 0
	up.pump()
}

// send writes data (borrowed) after any of kvca's own pending bytes;
// false if the client is gone.
func (c *cliConn) send(data []byte) bool {
	c.data = data
	return c.flush()
}

// flush writes what is pending; false if the client is gone (it has been
// dealt with). A client that stops reading is cut after
// --stream-idle-timeout, like a stalled backend.
func (c *cliConn) flush() bool {
	for c.pending() {
		a := c.out[c.outOff:]
		n, e := c.l.rawWritev(c.fd, a, c.data)
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

// reply answers the request with kvca's own error.
func (c *cliConn) reply(status int, typ, code, msg string) {
	if c.l.s.draining.Load() {
		c.closeAfter = true
	}
	if c.c != nil {
		c.c.status = status
	}
	c.out = appendErrorResponse(c.out[:0], status, typ, code, msg, "", c.closeAfter)
	c.outOff = 0
	c.state = cliReply
	if c.flush() && !c.pending() {
		c.replied()
	}
}

func (c *cliConn) replied() {
	if call := c.c; call != nil {
		c.c = nil
		c.l.s.done(call, call.status)
	}
	c.next0()
}

// maybeFinish ends the exchange once the body is complete and the client
// has taken all of it.
func (c *cliConn) maybeFinish() {
	if !c.pending() {
		c.finish(false)
	}
}

// finish ends a relayed exchange: the one place its load is released, its
// upstream connection kept or closed, and its call completed.
func (c *cliConn) finish(clientGone bool) {
	s := c.l.s
	up, call := c.up, c.c
	u := up.u
	upErr := up.err
	if upErr != nil {
		u.m.errors[errStream].Inc()
		if !isTimeout(upErr) {
			// A backend that dies mid-stream counts toward ejection like a
			// refused connection.
			u.failed(s.cfg.FailThreshold, s)
		}
		if !clientGone && up.mode == bodyChunked && up.h.sse && up.cs.between() {
			// Never let a broken stream look like a clean end: an SSE
			// client gets an error event, then the connection closes
			// without the terminating chunk.
			c.out = append(c.out[:0], sseBrokenChunk...)
			c.outOff = 0
			c.l.rawWritev(c.fd, c.out, nil)
		}
		c.closeAfter = true
	} else if clientGone {
		s.m.disconnects.Inc()
	}
	if up.reusable && upErr == nil && !clientGone {
		up.toIdle()
	} else {
		// Closing aborts an unfinished upstream request: the backend stops
		// generating for a client that left.
		up.close()
	}
	c.up, c.c = nil, nil
	call.res.ReleaseActive()
	s.done(call, call.status)
	if clientGone {
		c.close()
		return
	}
	c.next0()
}

// next0 readies the connection for its next request, which the client may
// have pipelined already.
func (c *cliConn) next0() {
	if c.closeAfter || c.l.s.draining.Load() {
		c.close()
		return
	}
	rest := c.n - c.need
	if rest > 0 {
		copy(c.buf, c.buf[c.need:c.n])
	}
	c.n, c.need = rest, 0
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
	c.read()
}

// gone handles a client that left or broke: whatever is in flight for it
// is stopped and released.
func (c *cliConn) gone() {
	s := c.l.s
	switch c.state {
	case cliPlan:
		c.close() // planned finishes the request, and frees buf
		return
	case cliWait:
		s.m.disconnects.Inc()
		if c.up != nil {
			c.up.close()
			c.up = nil
		}
		call := c.c
		c.c = nil
		call.res.ReleaseActive()
		s.done(call, 499)
	case cliRelay:
		c.finish(true)
		return
	case cliReply:
		if call := c.c; call != nil {
			c.c = nil
			s.done(call, call.status)
		}
	}
	c.close()
}

// abort ends the connection at a forced shutdown.
func (c *cliConn) abort() { c.gone() }

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
	case cliIdle:
		c.close()
	case cliHead, cliBody:
		// As fasthttp's ReadTimeout: the request did not arrive in time.
		c.closeAfter = true
		c.out = appendErrorResponse(c.out[:0], 408, "invalid_request_error", "request_timeout", "request was not received in time", "", true)
		c.outOff = 0
		c.state = cliReply
		c.dl = c.l.now + int64(time.Second)
		if c.flush() && !c.pending() {
			c.close()
		}
	case cliRelay, cliReply:
		c.gone() // the client stopped reading
	}
}

func (c *cliConn) close() {
	if c.state == cliClosed {
		return
	}
	c.state = cliClosed
	c.l.forget(c.fd)
	syscall.Close(c.fd)
	c.l.nCli--
	c.l.open.Add(-1)
	if c.buf != nil && !c.planning {
		c.l.putBuf(c.buf)
		c.buf = nil
	}
}

// Upstream connection states.
const (
	upConnecting = iota
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
	fd     int
	state  int
	reused bool
	gotAny bool
	cli    *cliConn
	buf    []byte
	off, n int
	hoff   int  // where the response head starts in buf
	rd     bool // as cliConn.rd
	hup    bool
	h      respHead
	wa, wb []byte // request bytes still to write
	dl     int64

	mode      int
	remaining int64
	cs        chunkScan
	reusable  bool
	bodyDone  bool
	err       error
}

func (up *upConn) deadline() int64 { return up.dl }

// dialTimeout is fasthttp's default, which --io fasthttp uses.
const dialTimeout = 3 * time.Second

// idleConnTimeout closes keep-alive backend connections unused this long.
const idleConnTimeout = 90 * time.Second

// upstreamConn returns a keep-alive connection to u, or a new one
// (possibly still connecting); res is connBusy at --max-conns-per-backend
// and connFailed when a connection cannot even be started.
func (l *evLoop) upstreamConn(u *upstream) (up *upConn, reused bool, res int) {
	list := l.idle[u.b.Index]
	if n := len(list); n > 0 {
		up = list[n-1]
		l.idle[u.b.Index] = list[:n-1]
		return up, true, sent
	}
	if int(u.loopConns.Add(1)) > l.s.cfg.MaxConnsPerBackend {
		u.loopConns.Add(-1)
		u.m.errors[errBusy].Inc()
		return nil, false, connBusy
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
	up = &upConn{l: l, u: u, fd: fd, state: state, buf: make([]byte, loopBufSize)}
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
	up.rd = up.rd && !reused
	up.off, up.n, up.hoff = 0, 0, 0
	up.bodyDone, up.reusable = false, false
	up.wa, up.wb = c.uhead, c.buf[c.h.size:c.need]
	c.up = up
	if up.state != upConnecting {
		up.state = upSending
		up.dl = up.l.now + int64(up.l.s.cfg.UpstreamHeaderTimeout)
	}
}

// writeReq writes what is left of the request; 0 when it is all out or
// the socket is full (the rest goes on EPOLLOUT).
func (up *upConn) writeReq() syscall.Errno {
	if up.state == upConnecting {
		return 0
	}
	for len(up.wa)+len(up.wb) > 0 {
		n, e := up.l.rawWritev(up.fd, up.wa, up.wb)
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
		up.rd = true
		up.hup = up.hup || ev&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0
	}
	switch up.state {
	case upConnecting:
		if ev&(syscall.EPOLLOUT|syscall.EPOLLERR|syscall.EPOLLHUP) == 0 {
			return
		}
		if v, err := syscall.GetsockoptInt(up.fd, syscall.SOL_SOCKET, syscall.SO_ERROR); err != nil || v != 0 {
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
			if _, e := rawRead(up.fd, b[:]); e == syscall.EAGAIN {
				up.rd = false
				return
			}
		}
		up.close()
	}
}

func (up *upConn) readHead() {
	for up.state == upHead {
		if up.n == len(up.buf) {
			if len(up.buf) >= 64<<10 {
				up.failBefore(errBadResponse)
				return
			}
			nb := make([]byte, 2*len(up.buf))
			copy(nb, up.buf[:up.n])
			up.buf = nb
		}
		n, e := readSome(up.fd, up.buf[up.n:], &up.rd, up.hup)
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
			switch parseResponseHead(up.buf[up.off:up.n], &up.h) {
			case headMore:
				goto more
			case headOther:
				up.failBefore(errBadResponse)
				return
			}
			if up.h.status >= 100 && up.h.status < 200 && up.h.status != 101 {
				up.off += up.h.size // an interim answer: the real one follows
				continue
			}
			if up.h.status == 101 {
				up.failBefore(errBadResponse) // nothing asked to switch protocols
				return
			}
			up.hoff = up.off
			up.off += up.h.size
			up.cli.onHead(up)
			return
		}
	more:
	}
}

// failBefore handles a connection that failed before a response began:
// a stale keep-alive connection is replaced; otherwise the attempt failed.
func (up *upConn) failBefore(err error) {
	c, u := up.cli, up.u
	stale := up.reused && !up.gotAny && noResponseYet(err)
	up.close()
	c.up = nil
	if stale {
		if res := c.attemptOn(u); res != sent {
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
		if len(c.data) > 0 {
			return // the client has not taken the last piece yet
		}
		if up.off < up.n && !up.bodyDone {
			data := up.buf[up.off:up.n]
			var err error
			switch up.mode {
			case bodyFixed:
				if int64(len(data)) >= up.remaining {
					if int64(len(data)) > up.remaining {
						up.reusable = false // bytes past the body
					}
					data = data[:up.remaining]
					up.bodyDone = true
				}
				up.remaining -= int64(len(data))
			case bodyChunked:
				var k int
				var done bool
				k, done, err = up.cs.scan(data)
				if done && k < len(data) {
					up.reusable = false
				}
				data = data[:k]
				up.bodyDone = done
			}
			up.off += len(data)
			if err != nil {
				up.err, up.bodyDone = err, true
			}
			if len(data) > 0 {
				c.c.res.ReleasePrefill() // first body byte: the backend has prefilled
				if up.mode == bodyChunked && c.c.status == 200 {
					c.c.res.FirstByte() // wiring: ttft observe
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
		n, e := readSome(up.fd, up.buf, &up.rd, up.hup)
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
		case n == 0 && up.mode == bodyUntilClose:
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

// timeoutError is a net.Error that is a timeout, for isTimeout.
type timeoutError string

func (e timeoutError) Error() string   { return string(e) }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }

var _ net.Error = timeoutError("")

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
	up.l.forget(up.fd)
	syscall.Close(up.fd)
	up.u.loopConns.Add(-1)
	up.cli = nil
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

// sockaddr returns a fresh socket address for a connect.
func (u *upstream) sockaddr() syscall.Sockaddr {
	a := u.la.Load()
	switch {
	case a == nil:
		return nil
	case a.v6:
		return &syscall.SockaddrInet6{Port: a.port, Addr: a.ip}
	}
	s4 := &syscall.SockaddrInet4{Port: a.port}
	copy(s4.Addr[:], a.ip[:4])
	return s4
}

// literalHost reports whether the backend's host is an IP address, which
// needs no resolving again.
func (u *upstream) literalHost() bool {
	h := hostOnly(u.addr.host)
	return net.ParseIP(h) != nil
}
