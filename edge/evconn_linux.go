//go:build linux

package edge

import (
	"errors"
	"io"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/h1"
	"github.com/kvca/kvca/streamusage"
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
	hv    h1Header // h as the request's lifecycle reads it
	head  bool     // a HEAD request: the answer has no body
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
	c       *call
	up      *upConn
	planErr error  // the plan's verdict, when planned on the loop
	uhead   []byte // the request head as sent upstream
	ubody   []byte // what follows it: the body, or its rest when the head took its edit's start
	out     []byte // kvca's bytes for the client (a response head, an answer)
	outOff  int
	data    []byte // body bytes for the client, borrowed from the upstream's buffer (or sbuf)

	// An answer whose usage event kvca removes (--stream-usage): strip,
	// its filtered bytes framed in sbuf (a pooled buffer, taken for the
	// answer), as chunks for an HTTP/1.1 client (stripChunked; stripEnded
	// once the last chunk is out), for an HTTP/1.0 client as they are.
	strip, stripChunked, stripEnded bool
	sbuf                            []byte
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
			} else if c.state == cliBody && !c.h.Chunked {
				c.l.awaitBody(&c.sock, c.reqEnd-c.n)
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
// received, never with what a head declares alone, so a head that
// announces gigabytes holds one 16 KB buffer until the bytes really come.
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
	// Four times, not twice, and straight to the whole request (its
	// Content-Length known) once it is at most 32 times what is here: a
	// 1 MB body is copied 80 KB on its way up instead of a third of a
	// megabyte (the copies were a tenth of kvca's CPU at 1 MB), and a
	// buffer holds at most 32 times the bytes really received, rounded up
	// to its size class.
	size := min(4*len(c.buf), limit)
	if !c.h.Chunked && limit <= jumpFactor*len(c.buf) {
		size = limit // a chunked body's limit is a bound, not its size
	}
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
		c.c = s.begin(c.ip, &c.l.clock)
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
	c.closeAfter = c.closeAfter || h.Close
	method := h.Method.Of(b)
	c.head = string(method) == "HEAD"
	c.c = s.begin(c.ip, &c.l.clock)
	c.hv = h1Header{h: h, b: &c.buf}
	c.c.receive(method, h.Path.Of(b), h.Asterisk, string(method) == "CONNECT" && h.URI.Len() == 0 && !h.Asterisk, &c.hv)
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

// h1Header is an HTTP/1 head in its connection's buffer, as the request
// lifecycle reads header fields.
type h1Header struct {
	h *h1.Request
	b *[]byte // the buffer may grow while the body is read
}

func (x *h1Header) Len() int { return x.h.NF }

func (x *h1Header) At(i int) (name, value []byte) {
	return x.h.Names[i].Of(*x.b), x.h.Vals[i].Of(*x.b)
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
	c.l.bodyIn(&c.sock)
	c.state, c.dl = cliWait, 0
	c.c.tk.Owner, c.c.tk.Wake = c, admitWake // before the ticket can be queued
	c.c.lo = c                               // told when a prefill leg ends
	c.do(c.c.received(c.buf[c.h.Size:c.bodyEnd], c.reqEnd))
}

// do carries out what the request's lifecycle answered (lifecycle.go),
// until the request waits for an event.
func (c *cliConn) do(a act) {
	for c.c != nil {
		call := c.c
		switch a {
		case actReply:
			c.reply(&call.rep)
			return
		case actAnswer:
			c.answer(call.own.status, call.own.ctype, call.own.body, call.own.header)
			return
		case actModels:
			c.dispatchModels()
			return
		case actPlan:
			if !c.plan() {
				return // planned off the loop: planned continues
			}
			a = call.planned(c.planErr)
		case actTry:
			a = call.try()
		case actQueued:
			c.state = cliQueued
			return
		case actSend, actReplay:
			a = c.sendTo(a == actReplay)
		case actPrefill:
			c.state = cliWait // the prefill leg's end comes as legEnded
			return
		default: // actNone, actRelay: the events go on
			return
		}
	}
}

// plan plans the routed request's body: here, or, for a large body, in a
// goroutine (false: planned continues when it is done).
func (c *cliConn) plan() bool {
	s := c.l.s
	call := c.c
	body := c.buf[c.h.Size:c.bodyEnd]
	if len(body) < offloadBody || call.planBytes(body) < offloadBody {
		c.planErr = call.plan(body)
		return true
	}
	// Canonicalising a body this large takes long enough (~1 ms per MB)
	// to hold up every other connection of the loop, streams included: a
	// goroutine does it, and the loop carries on. A body that mostly
	// resends one the resumer remembers (an agent's next turn) is planned
	// here: from where it resumes, it takes tens of microseconds, less
	// than the hand-over to a goroutine and back.
	c.state = cliAsync
	c.planning = true
	l := c.l
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
		err = call.plan(body)
	}()
	return false
}

// offloadBody is how many bytes to canonicalise send a request's planning
// off the loop: below it, canon takes at most ~0.25 ms and the hand-over
// to a goroutine and back would cost more than it spares the loop.
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
				call.failedPlan()
			} else {
				call.left()
			}
		}
		c.l.putBuf(c.buf)
		c.buf = nil
		return
	}
	c.state = cliWait
	c.do(c.c.planned(err))
}

// admitWake brings a ticket's wake to the loop that owns its connection.
func admitWake(t *admit.Ticket, seq uint64) {
	c := t.Owner.(*cliConn)
	c.l.post(func() { c.admitted(seq) })
}

// admitted continues a request that left the admission queue.
func (c *cliConn) admitted(seq uint64) {
	if c.state != cliQueued || c.c == nil {
		return // stale: the request ended meanwhile
	}
	a := c.c.admitted(seq)
	if a != actNone {
		c.state = cliWait
	}
	c.do(a)
}

// send starts the attempt on a connection to the chosen backend: a
// pooled one unless fresh. A write that fails on a pooled connection goes
// to the retry rule as stale (it is replayed on a new one).
func (c *cliConn) sendTo(fresh bool) act {
	s := c.l.s
	call := c.c
	u := call.u
	up, reused, res := c.l.upstreamConn(u, fresh)
	if res != sent {
		return call.retry(res, false)
	}
	call.tr.AttemptBegin(u.b.Name)
	f := fwd{tls: c.sock.tls != nil, preserveHost: s.cfg.PreserveHost, dropCreds: s.keys != nil || s.cfg.BackendAPIKey != "",
		backendKey: s.cfg.BackendAPIKey, tr: &call.tr}
	body := c.buf[c.h.Size:c.bodyEnd]
	if b := call.sendBody(); b != nil {
		// A decode leg's body (pd.go), written from the client's body as
		// edited to ask for its usage, if it was.
		body = b
		c.uhead = appendUpstreamHead(c.uhead[:0], c.buf, &c.h, u, len(body), c.ip, call.rid, &f)
		if call.ask.Asks() && !call.asked {
			call.asked = true
			s.m.usageAsked.Inc()
		}
	} else {
		c.uhead = appendUpstreamHead(c.uhead[:0], c.buf, &c.h, u, call.ask.Len(len(body)), c.ip, call.rid, &f)
		if e := call.ask; e.Asks() {
			// The body asks for its usage: the edit's start goes out with
			// the head (the opening brace alone, for a body without
			// stream_options), then what it inserts; the rest of the body
			// is sent from where it lies.
			c.uhead = append(c.uhead, body[:e.At]...)
			c.uhead = append(c.uhead, e.Insert...)
			body = body[e.End:]
			if !call.asked {
				call.asked = true
				s.m.usageAsked.Inc()
			}
		}
	}
	c.ubody = body
	up.begin(c, reused)
	e := up.writeReq()
	if e == 0 {
		return actNone // sent: its answer comes as events
	}
	up.close()
	c.up = nil
	if reused {
		return call.retry(connFailed, true)
	}
	return call.retry(s.connFailure(u, e), false)
}

// legEnded brings a prefill leg's end to the loop that owns the
// connection (legOwner).
func (c *cliConn) legEnded(leg *pdLeg) {
	c.l.post(func() { c.legDone(leg) })
}

// legDone hands an ended prefill leg to the request's lifecycle. A pair
// whose prefill leg failed (cut) abandons its decode leg: before its
// answer, the connection is closed and the lifecycle's next act follows;
// during the answer, the answer is cut.
func (c *cliConn) legDone(leg *pdLeg) {
	if c.state == cliClosed || c.c == nil {
		return // the request ended; its lifecycle has let the leg go
	}
	cut, a := c.c.legDone(leg)
	if cut {
		switch c.state {
		case cliWait:
			if c.up != nil {
				c.up.close()
				c.up = nil
			}
		case cliRelay:
			if up := c.up; up != nil && !up.bodyDone {
				up.err, up.bodyDone = errPairBroken, true
				c.maybeFinish()
			}
			return
		}
	}
	if a != actNone {
		c.do(a)
	}
}

// upFailed: the attempt on u failed after it was sent (res), or, stale, on
// a pooled connection before any byte of an answer.
func (c *cliConn) upFailed(res int, stale bool) {
	c.up = nil
	c.do(c.c.retry(res, stale))
}

// onHead handles the upstream's response head and starts relaying.
func (c *cliConn) onHead(up *upConn) {
	s := c.l.s
	if h := s.cfg.testHook; h != nil {
		h("answer", c.buf[c.h.Size:c.bodyEnd])
	}
	r := &up.h
	// The upstream head is sent: its buffer is free for the lines kvca adds.
	a, extra := c.c.head(r.Status, r.Chunked, r.SSE, c.uhead[:0])
	if a != actRelay {
		up.close()
		c.up = nil
		c.do(a)
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
	mode, dechunk := up.mode, up.dechunk
	c.strip, c.stripEnded = false, false
	if c.c.stripping && up.mode != h1.BodyNone && !encoded(r, up.buf[up.hoff:]) {
		// The usage event kvca asked for leaves the body: kvca frames
		// what the client receives, as chunks (its length unknown) or,
		// for an HTTP/1.0 client, until the connection closes.
		c.strip, c.stripChunked = true, c.h.Minor != 0
		up.dechunk = false
		mode, dechunk = h1.BodyChunked, !c.stripChunked
		if !c.stripChunked {
			c.closeAfter = true
		} else if up.mode != h1.BodyChunked {
			extra = append(extra, "Transfer-Encoding: chunked\r\n"...)
		}
		if c.sbuf == nil {
			c.sbuf = c.l.getBuf(loopBufSize)
		}
	} else {
		c.c.stripping = false
	}
	c.out = appendClientHead(c.out, up.buf[up.hoff:], r, mode, dechunk, c.c.rid, extra, c.closeAfter)
	c.state = cliRelay
	up.state = upBody
	up.dl = 0
	up.pump()
}

// encoded reports whether the answer r (parsed from b) has a content
// coding other than identity: kvca cannot read its events.
func encoded(r *h1.Response, b []byte) bool {
	for i := 0; i < r.NF; i++ {
		if n := r.Names[i].Of(b); len(n) == 16 && h1.EqualFold(n, "content-encoding") {
			if v := r.Vals[i].Of(b); len(v) > 0 && !h1.EqualFold(v, "identity") {
				return true
			}
		}
	}
	return false
}

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
	call.answering(r.status, true, 0)
	if r.close {
		c.closeAfter = true
	}
	if s.draining.Load() {
		c.closeAfter = true
	}
	c.out = appendErrorAnswer(c.out, r, call.rid, c.closeAfter, c.head, call.route == routeMessages)
	c.writeOwn()
}

// answer is kvca's own successful answer (health, readiness, models).
func (c *cliConn) answer(status int, ctype string, body []byte, header string) {
	call := c.c
	call.answering(status, false, len(body))
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
	up, call := c.up, c.c
	if up.err != nil {
		if !clientGone && up.h.SSE && c.betweenChunks(up) {
			// Never let a broken stream look like a clean end: an SSE
			// client gets an error event, then the connection closes
			// without the terminating chunk.
			c.writeLast(c.brokenChunk(false))
		}
		c.closeAfter = true
	}
	if up.reusable && up.bodyDone && up.err == nil && !clientGone {
		up.toIdle()
	} else {
		// Closing aborts an unfinished upstream request: the backend stops
		// generating for a client that left.
		up.close()
	}
	c.up, c.c = nil, nil
	call.finish(up.err, clientGone)
	if clientGone {
		c.close()
		return
	}
	c.next()
}

// betweenChunks reports whether what the client has received of a
// chunked answer ends on a chunk boundary, where an SSE error event can
// still be sent as a chunk. kvca's own framing (a stripped answer) always
// does until its last chunk.
func (c *cliConn) betweenChunks(up *upConn) bool {
	if c.strip {
		return c.stripChunked && !c.stripEnded
	}
	return up.mode == h1.BodyChunked && !up.dechunk && up.cs.Between()
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
	case c.c.route == routeMessages && shutdown:
		return anthropicShutdownChunk
	case c.c.route == routeMessages:
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
	c.ubody = nil
	if c.sbuf != nil {
		c.l.putBuf(c.sbuf)
		c.sbuf = nil
	}
	if cap(c.uhead) > maxKeptHead {
		c.uhead = nil // it held the start of a large body (an edit deep in it)
	}
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
	c.l.settle(&c.sock) // a last write (writeLast) goes before the end
	if syscall.Shutdown(c.sock.fd, syscall.SHUT_WR) != nil {
		c.close()
		return
	}
	c.state = cliLinger
	c.dl = c.l.now + int64(lingerTime)
	c.l.bodyIn(&c.sock) // what it sends now is dropped as it comes
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
		call.left()
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
		if up.h.SSE && c.betweenChunks(up) && !c.pending() {
			c.writeLast(c.brokenChunk(true))
		}
		up.close()
		c.up = nil
		call := c.c
		c.c = nil
		call.finish(nil, false)
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
			c.c = c.l.s.begin(c.ip, &c.l.clock)
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
	c.l.settle(&c.sock)
	c.l.dropMark(&c.sock)
	c.l.forget(c.sock.fd)
	syscall.Close(c.sock.fd)
	c.l.nCli--
	c.l.open.Add(-1)
	c.l.s.clientConns.Add(-1)
	if c.buf != nil && !c.planning {
		c.l.putBuf(c.buf)
		c.buf = nil
	}
	if c.sbuf != nil {
		c.l.putBuf(c.sbuf)
		c.sbuf = nil
	}
	c.ubody = nil
}

// maxKeptHead bounds the upstream head buffer a connection keeps between
// requests; one grown past it (it took a large body's start) goes.
const maxKeptHead = 64 << 10

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
	if list := u.idle[l.id]; len(list) > 0 && !fresh {
		up = list[len(list)-1]
		u.idle[l.id] = list[:len(list)-1]
		return up, true, sent
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
	up.wa, up.wb = c.uhead, c.ubody
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
		if e := up.sock.flushOut(up.l); e != 0 {
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
	c := up.cli
	up.close()
	c.up = nil
	c.do(c.c.badAnswer())
}

// failBefore handles a connection that failed before a response began:
// a stale keep-alive connection is replaced by a fresh one; otherwise the
// attempt failed.
func (up *upConn) failBefore(err error) {
	c, u := up.cli, up.u
	stale := up.reused && !up.gotAny && noResponseYet(err)
	up.close()
	if stale {
		c.upFailed(connFailed, true)
		return
	}
	c.upFailed(c.l.s.connFailure(u, err), false)
}

// pump relays the response body to the client as it arrives, never
// reading more from the backend than the client has taken.
func (up *upConn) pump() {
	c := up.cli
	if c.strip {
		up.pumpStripped()
		return
	}
	var sink h1.DataSink
	if c.c.sniffing {
		sink = c.c
	}
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
					// Data only goes to the client: the lifecycle reads it as it is.
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
					// The framing goes to the client as it is; its data
					// alone to the lifecycle, which reads usage in it.
					var k int
					var done bool
					k, done, err = up.cs.ScanTo(data, sink)
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
				c.c.bodyBegun(up.mode == h1.BodyChunked)
				if up.mode != h1.BodyChunked || up.dechunk {
					c.c.Data(data)
				}
			}
			// The head, if still pending, goes out in the same write.
			if !c.send(data) {
				return
			}
			continue
		}
		if !up.next() {
			return
		}
	}
}

// next ends the answer once its body is done (when the client has taken
// everything), else reads the body's next piece into up.buf; false when
// the pump must return: the answer ended, the client has not taken what
// it has, or the socket has nothing yet (the stream's idle deadline set).
func (up *upConn) next() bool {
	c := up.cli
	if up.bodyDone {
		if c.pending() && (!c.flush() || c.pending()) {
			return false
		}
		c.finish(false)
		return false
	}
	up.off, up.n = 0, 0
	n, e := up.sock.read(up.buf)
	if e == syscall.EAGAIN {
		// The head, if still pending, goes out before any body byte
		// has come.
		if !c.pending() || c.flush() {
			up.dl = up.l.now + int64(up.l.s.cfg.StreamIdleTimeout)
		}
		return false
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
	return true
}

// pumpStripped is pump for an answer whose usage event kvca removes
// (--stream-usage): the body's data, its framing taken off, is read in
// passing, goes through the call's filter into sbuf and from there to
// the client, framed by kvca. A stream is a few bytes a token: copying
// it costs little beside the calls that move it.
func (up *upConn) pumpStripped() {
	c := up.cli
	for {
		if len(c.data) > 0 || c.sock.pendingOut() {
			return // the client has not taken the last piece yet
		}
		if (up.off < up.n && !up.bodyDone) || (up.bodyDone && up.err == nil && !c.stripEnded) {
			// The head, if still pending, goes out in the same write.
			if !c.send(up.filtered()) {
				return
			}
			continue
		}
		if !up.next() {
			return
		}
	}
}

// stripRoom is the room sbuf keeps before its data for a chunk's size
// line (a size below 1 MB in hex, CRLF).
const stripRoom = 8

// lastChunk ends a chunked body (no trailer).
const lastChunk = "0\r\n\r\n"

// filtered takes the answer's bytes read so far (as many as sbuf has
// room for) out of their framing, reads them in passing and filters them
// into sbuf; at the body's end it adds what the filter held and, for a
// chunked client, the last chunk. It returns the bytes for the client:
// one chunk, or the data as it is for an HTTP/1.0 client.
func (up *upConn) filtered() []byte {
	c := up.cli
	call := c.c
	out := c.sbuf[:stripRoom]
	for up.off < up.n && !up.bodyDone {
		// Room for what the filter may release besides, the chunk's
		// CRLF and the last chunk.
		room := cap(out) - len(out) - streamusage.MaxHold - 2 - len(lastChunk)
		if room <= 0 {
			break
		}
		raw := up.buf[up.off:min(up.n, up.off+room)]
		var data []byte
		switch up.mode {
		case h1.BodyChunked:
			k, isData, done, err := up.cs.Step(raw)
			if !isData {
				up.off += k
				switch {
				case err != nil:
					up.err, up.bodyDone = err, true
				case done:
					up.bodyDone = true
					up.reusable = up.reusable && up.off == up.n
				}
				continue
			}
			data = raw[:k]
		case h1.BodyFixed:
			data = raw
			if int64(len(data)) >= up.remaining {
				if int64(up.n-up.off) > up.remaining {
					up.reusable = false // bytes past the body
				}
				data = data[:up.remaining]
				up.bodyDone = true
			}
			up.remaining -= int64(len(data))
		default:
			data = raw
		}
		up.off += len(data)
		if len(data) > 0 {
			call.bodyBegun(up.mode == h1.BodyChunked)
			call.Data(data)
			out = call.uf.Append(out, data)
		}
	}
	end := up.bodyDone && up.err == nil
	if end {
		out = call.uf.Close(out)
		c.stripEnded = true
	}
	start := stripRoom
	if c.stripChunked {
		if m := len(out) - stripRoom; m > 0 {
			var line [stripRoom]byte
			l := append(h1.AppendHex(line[:0], m), "\r\n"...)
			start -= len(l)
			copy(out[start:], l)
			out = append(out, "\r\n"...)
		}
		if end {
			out = append(out, lastChunk...)
		}
	}
	return out[start:]
}

func (up *upConn) timeout() {
	switch up.state {
	case upConnecting:
		up.failBefore(errDialTimeout)
	case upSending, upHead:
		c, u := up.cli, up.u
		u.m.errors[errTimeout].Inc()
		up.close()
		c.upFailed(timedOut, false)
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
	up.u.idle[up.l.id] = append(up.u.idle[up.l.id], up)
}

func (up *upConn) close() {
	if up.state == upClosed {
		return
	}
	if up.state == upIdle {
		list := up.u.idle[up.l.id]
		for i, x := range list {
			if x == up {
				up.u.idle[up.l.id] = append(list[:i], list[i+1:]...)
				break
			}
		}
	}
	up.state = upClosed
	if up.sock.fd >= 0 {
		up.l.settle(&up.sock)
		up.l.forget(up.sock.fd)
		syscall.Close(up.sock.fd)
	}
	up.u.loopConns.Add(-1)
	up.cli = nil
}

// dispatchModels answers GET /v1/models and /v1/models/{id} when a
// backend's list is unknown: a goroutine asks (with the client's
// credentials), and the loop carries on.
func (c *cliConn) dispatchModels() {
	s := c.l.s
	creds, id := c.c.modelCreds(), c.c.modelID()
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
