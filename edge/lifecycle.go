package edge

import (
	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/h1"
	"github.com/kvca/kvca/sniff"
)

// A request's life, whatever transport moves its bytes (the event loops,
// plain or TLS; the endpoint picker). The transport turns what happens on
// its sockets or streams into the events below, in this order, and does
// what each answers (an act); every decision is taken here.
//
//	receive(head)      → classified, its id and header fields known       received
//	received(body)     → actReply | actAnswer | actModels | actPlan | actTry
//	plan(body)         → canon and chain (the transport may run it off its loop)
//	planned(err)       → actReply | actTry                            planned
//	try()              → actReply | actQueued | actSend | actPrefill      queued, attempting
//	admitted(seq)      → as try (actNone: a stale wake)
//	legDone(leg)       → a prefill leg ended (pd.go): actSend | actPrefill | actReply | actNone
//	retry(res, stale)  → actReplay | actTry | actReply: the retry rule
//	head(status, …)    → actRelay (headers to add) | as retry              answering
//	bodyBegun, Data    → the first byte; usage and ids read in passing
//	finish / left      → release, learning, checks, quota, metrics, log   done
//
// Every path ends in done exactly once: finish for a relayed answer, left
// for a client gone before one, answered (through the transport's reply)
// for kvca's own.
const (
	lifeReceived   = iota // the head is in; the body is being read
	lifePlanned           // canonicalised, its conversation bound
	lifeQueued            // waiting in the admission queue
	lifeAttempting        // routed and reserved; with a backend
	lifeAnswering         // the backend's answer is being relayed
	lifeDone
)

// act is what the transport does next.
type act uint8

const (
	actNone    act = iota // nothing now: a stale event
	actReply              // answer with kvca's error c.rep, then end
	actAnswer             // answer with kvca's own c.own, then end
	actModels             // answer the model list (s.modelsAnswer; it may ask the backends)
	actPlan               // plan the body (c.plan), then planned
	actTry                // route it: try
	actQueued             // wait for the admission queue's wake, then admitted
	actSend               // send it to c.u on a pooled or new connection
	actReplay             // send it to c.u again on a new connection: not a new attempt
	actRelay              // relay the answer
	actPrefill            // wait: a prefill leg runs (pd.go), its end comes to legDone
)

// Request kinds, from the method and path.
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

// reqHeader is a request's header fields as its transport holds them (an
// HTTP/1 head in a loop's buffer, an ext_proc header map).
type reqHeader interface {
	Len() int
	At(i int) (name, value []byte)
}

// header is the value of the field name (lower case; the last, as an
// HTTP/1 list's last element wins) and how many fields bear it.
func header(h reqHeader, name string) (v []byte, n int) {
	if h == nil {
		return nil, 0
	}
	for i := 0; i < h.Len(); i++ {
		if k, val := h.At(i); h1.EqualFold(k, name) {
			v, n = val, n+1
		}
	}
	return v, n
}

func headerValue(h reqHeader, name string) []byte {
	v, _ := header(h, name)
	return v
}

// ownAnswer is one of kvca's own successful answers.
type ownAnswer struct {
	status int
	ctype  string
	body   []byte
	header string // extra header lines, each ending in CRLF
}

// receive starts a request's life from its head: what it is, its id,
// and the transport's view of its header fields, which stays valid
// until the request ends. asterisk: the "*" target (OPTIONS *);
// authority: an authority-form target (CONNECT host:port).
func (c *call) receive(method, path []byte, asterisk, authority bool, h reqHeader) {
	c.hdr = h
	c.path = append(c.path[:0], path...)
	if rid, n := header(h, "x-request-id"); n == 1 && validRequestID(rid) {
		c.rid = append(c.rid[:0], rid...) // none, or ambiguous: the generated one stays
	}
	c.classify(method, path, asterisk, authority)
	c.life = lifeReceived
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
func (c *call) classify(method, path []byte, asterisk, authority bool) {
	c.kind, c.route = kindReply, routeOther
	if !knownMethod(method) {
		c.rep = replyMethod
		return
	}
	if string(method) == "CONNECT" && authority {
		// kvca is no forward proxy.
		c.rep = methodNotAllowed("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
		return
	}
	get := string(method) == "GET" || string(method) == "HEAD"
	post := string(method) == "POST"
	if asterisk {
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

// received continues a request whose body is in (inBytes: the bytes the
// request took on the wire): tracing, authentication, and what answers it.
func (c *call) received(body []byte, inBytes int) act {
	s := c.s
	c.inBytes = inBytes
	if s.tracer != nil {
		c.tr.Begin(s.tracer, c.start, routeNames[c.route], headerValue(c.hdr, "traceparent"), headerValue(c.hdr, "tracestate"), c.rid)
	}
	if s.keys != nil && c.kind != kindHealth && c.kind != kindReady && c.kind != kindReply && c.kind != kindOptions {
		if r, ok := s.authenticate(c); !ok {
			c.rep = r
			return actReply
		}
	}
	switch c.kind {
	case kindRouted:
		if h := s.cfg.testHook; h != nil {
			h("request", body)
		}
		return actPlan
	case kindPass:
		if err := s.planPassthrough(c, body); err != nil {
			c.rep = unknownModel(c.model)
			return actReply
		}
		c.passDecodes()
		if r, over := s.overQuota(c, len(body)); over {
			c.rep = r
			return actReply
		}
		c.admission()
		c.life = lifePlanned
		return actTry
	case kindHealth:
		c.own = ownAnswer{status: 200, ctype: "application/json", body: healthBody}
		return actAnswer
	case kindReady:
		st, b := s.readiness()
		c.own = ownAnswer{status: st, ctype: "application/json", body: b}
		return actAnswer
	case kindOptions:
		c.own = ownAnswer{status: 200, ctype: "application/json", body: optionsBody, header: "Allow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n"}
		return actAnswer
	case kindModels, kindModel:
		if !s.modelsKnown() {
			return actModels // the backends are asked (s.modelsAnswer with modelCreds)
		}
		st, b := s.modelsAnswer(nil, c.modelID())
		c.own = ownAnswer{status: st, ctype: "application/json", body: b}
		return actAnswer
	}
	return actReply
}

var (
	healthBody  = []byte(`{"status":"ok"}` + "\n")
	optionsBody = []byte("{}\n")
)

// modelID is the model a GET /v1/models/{id} names ("" for the list).
func (c *call) modelID() string {
	if c.kind != kindModel {
		return ""
	}
	return string(c.path[len("/v1/models/"):])
}

// modelCreds are the client's credentials, passed on when the model
// list must be asked of the backends.
func (c *call) modelCreds() (creds [][2]string) {
	for i := 0; c.hdr != nil && i < c.hdr.Len(); i++ {
		n, v := c.hdr.At(i)
		if h1.EqualFold(n, "authorization") || h1.EqualFold(n, "api-key") || h1.EqualFold(n, "x-api-key") {
			creds = append(creds, [2]string{string(n), string(v)})
		}
	}
	return creds
}

// plan is body → canon → chain for a routed request (c.s.plan); in a
// disaggregated fleet, its legs' pools too (pdPlan).
func (c *call) plan(body []byte) error {
	if err := c.s.plan(c, c.api, body); err != nil {
		return err
	}
	return c.pdPlan(body)
}

// planBytes estimates how many of body's bytes planning it will parse:
// those the resumer does not remember (an estimate; see
// canon.Resumer.Likely). A transport that plans large bodies off its loop
// keeps a body with little new on it.
func (c *call) planBytes(body []byte) int {
	return len(body) - c.s.canon.LikelyResumed(c.api, body, c.h)
}

// planned continues a routed request once planned: a body that cannot be
// routed is answered; the tenant's quota, the conversation it names and
// its admission ticket come next.
func (c *call) planned(err error) act {
	s := c.s
	if err != nil {
		s.m.requests[c.route][numPhases].Inc()
		if err == errUnknownModel {
			c.rep = unknownModel(c.info.Model)
		} else {
			reason := canon.Reason(err)
			if _, ok := err.(errReserved); ok {
				reason = "reserved_field"
			}
			s.m.badRequest(reason)
			c.rep = badBody(reason, err.Error())
		}
		return actReply
	}
	if r, over := s.overQuota(c, c.info.CBRLen); over {
		c.rep = r
		return actReply
	}
	s.bindConversation(c)
	c.admission()
	c.life = lifePlanned
	return actTry
}

// admission fills the request's admission ticket (priority class,
// tenant) when admission is on; Wake and Owner are the transport's, set
// before the request is received.
func (c *call) admission() {
	s := c.s
	c.lastBusy = false
	if !s.adm.Limited() {
		return
	}
	tk := &c.tk
	tk.Class = admit.ClassOf(headerValue(c.hdr, "x-kvca-priority"), c.info.Priority)
	if t := c.tenant; t != nil {
		tk.Tenant = s.adm.TenantKey([]byte(t.Name)) // the API key's tenant
	} else if h := headerValue(c.hdr, "x-kvca-tenant"); len(h) > 0 {
		tk.Tenant = s.adm.TenantKey(h)
	} else {
		tk.Tenant = admit.TenantHash(c.info.UserKey) // the end user the body names
	}
}

// try admits, routes and reserves the request's next attempt: c.u is
// the backend to send it to (actSend), or it waits in the admission queue
// (actQueued), or it is answered (actReply).
func (c *call) try() act {
	s := c.s
	for {
		limited := s.adm.Limited()
		if limited && c.attempt > 0 && s.adm.Candidates(&c.req).Empty() {
			// Every backend the request may go to was tried: the retry
			// rule answers (502, or 503 after a busy one), rather than the
			// queue waiting for a backend it can never be granted.
			limited = false
		}
		if limited {
			tk := &c.tk
			tk.Eligible = s.adm.Candidates(&c.req)
			admit.Estimate(s.table, &c.req, tk)
			if c.pd != nil {
				c.pdTicket()
			}
			switch s.adm.Admit(tk) {
			case admit.Queued:
				c.qsince = c.now()
				c.life = lifeQueued
				return actQueued
			case admit.Shed:
				c.rep = shed(tk)
				return actReply
			}
		}
		allowed := c.req.Allowed
		if limited {
			c.req.Allowed = c.tk.Room() // the backends with room
		}
		u, r := s.pick(c, c.lastBusy)
		c.req.Allowed = allowed
		if r != nil {
			c.rep = *r
			return actReply
		}
		if limited && !s.adm.Take(&c.tk, u.b.Index) {
			c.res.ReleaseActive() // its room went meanwhile: ask again
			continue
		}
		c.u = u
		c.life = lifeAttempting
		if c.pd != nil {
			return c.pdPair() // the prefill leg, if any
		}
		return actSend
	}
}

// admitted continues a request that left the admission queue after the
// wait numbered seq; actNone for a stale wake (the request ended, or
// waits anew).
func (c *call) admitted(seq uint64) act {
	if c.life != lifeQueued || c.tk.Seq() != seq {
		return actNone
	}
	c.queued += c.now().Sub(c.qsince)
	if c.tk.State() == admit.Dropped {
		c.rep = shed(&c.tk)
		return actReply
	}
	c.req.Now = c.s.table.Now() // the cache picture may have changed
	return c.try()
}

// retry is the one retry rule, for an attempt on c.u that failed with res
// before any byte reached the client:
//
//  1. replay: a pooled keep-alive connection that failed before any byte
//     of an answer (stale: the backend may have closed it while idle) is
//     replaced by a new connection to the same backend, once; it is the
//     same attempt, its reservation kept;
//  2. a backend that took the request and did not answer in time is not
//     tried again: 504;
//  3. another eligible backend, while --retries allows: route again, the
//     failed backend excluded;
//  4. otherwise 502, or 503 when the last backend was busy (every
//     connection in use).
func (c *call) retry(res int, stale bool) act {
	if stale {
		return actReplay
	}
	if c.pd != nil {
		c.pdDecodeFailed()
	}
	again, r := c.s.failed(c, c.u, res)
	c.u = nil
	if !again {
		c.rep = *r
		return actReply
	}
	c.lastBusy = res == connBusy
	return actTry
}

// within narrows the backends the request may go to to set (an endpoint
// picker's subset hint), on top of those serving its model.
func (c *call) within(set chain.Set) {
	if c.req.Allowed != nil {
		set.And(c.req.Allowed)
	}
	c.allowed = set
	c.req.Allowed = &c.allowed
}

// servedBy moves the attempt to backend i, which served it instead of
// the one picked (an endpoint picker's gateway retried on a fallback):
// the pick is booked as a failed attempt, its load released and the
// location predicted for it withdrawn (it never saw the prompt; left, it
// would draw the conversation's next turn back there), and i's load
// reserved (where routing may not place it, i is credited without a
// reservation). The admission slot moves to i with the request.
func (c *call) servedBy(i int) {
	s := c.s
	c.res.ReleaseActive()
	if c.routed && len(c.req.Chain) > 0 && s.cfg.Table.PredictTTL > 0 && c.u != nil {
		s.table.Withdraw(c.req.Chain, c.u.b.Index)
	}
	s.adm.Follow(&c.tk, i)
	c.tr.AttemptEnd(0, errAttempt[connFailed])
	var one chain.Set
	one.Add(i)
	allowed, excl := c.req.Allowed, c.req.Exclude
	c.req.Allowed, c.req.Exclude = &one, chain.Set{}
	u, r := s.pick(c, false)
	c.req.Allowed, c.req.Exclude = allowed, excl
	if r != nil {
		u = c.fl.ups[i]
		c.dec.Backend = u.b
	}
	c.u = u
}

// badAnswer: the backend answered something kvca will not relay. It is a
// protocol error, not a dead backend: 502 at once, no retry (the request
// has been processed there).
func (c *call) badAnswer() act {
	c.u.m.errors[errStatus].Inc()
	c.res.ReleaseActive()
	c.u = nil
	c.rep = replyBadAnswer
	return actReply
}

// head takes the backend's response head: status, chunked (the answer's
// body comes in chunks, so a streaming server prefills after its head)
// and sse. A refused answer (429 or 503 while another backend could take
// it) goes to the retry rule; otherwise actRelay, with the header lines
// kvca adds (quota, --route-header) appended to extra.
func (c *call) head(status int, chunked, sse bool, extra []byte) (act, []byte) {
	s := c.s
	u := c.u
	if s.cfg.PrefillAtHeaders || !chunked {
		// Streaming servers (vLLM, SGLang) send headers before they
		// prefill: a streamed answer keeps its prefill load until its
		// first body byte (unless --prefill-release headers).
		if c.res.ReleasePrefill() {
			s.adm.PrefillDone(u.b.Index)
		}
	}
	if s.answered(c, u, status) && !c.picker {
		return c.retry(retryStatus, false), extra
	}
	if c.pd != nil {
		c.pdHead(status)
	}
	ok := status < 300
	calibrate := false
	if s.calibrate && c.routed && ok {
		c.calTick++
		calibrate = c.calTick%calSample == 0
	}
	if c.tenant != nil || calibrate || (c.route == routeResponses && ok) || (s.cfg.Routing.CacheCheck && c.routed && ok) {
		// Usage is read in passing to charge the tenant what it used,
		// to check the cached tokens predicted on the backend, and a
		// Responses answer's id to find its backend again.
		c.sniffing = true
		f := sniff.JSON
		if sse {
			f = sniff.SSE
		}
		c.sn.Reset(f)
	}
	if c.asked && ok && sse {
		// kvca asked for this stream's usage on the client's behalf: the
		// usage event is read (above) and kept from the client.
		c.stripping = true
		c.uf.Reset()
	}
	if c.tenant != nil {
		extra = c.qd.AppendHeaders(extra)
	}
	if s.cfg.RouteHeader && c.routed {
		extra = c.appendRouteHeader(extra)
	}
	c.life = lifeAnswering
	return actRelay, extra
}

// calSample: one routed answer in calSample is read for its usage to
// calibrate bytes per token (counted per pooled call, so no counter is
// shared between loops); a ratio needs few samples, and reading costs ~2
// µs per 4 KB.
const calSample = 16

// bodyBegun marks bytes of the answer's body on their way to the client
// (streamed: a chunked answer): the first marks the prefill done.
func (c *call) bodyBegun(streamed bool) {
	if c.firstByte(streamed) {
		c.s.adm.PrefillDone(c.dec.Backend.Index)
	}
}

// Data takes the answer's body data as the engine wrote it, its transfer
// framing removed: usage and a Responses id are read in passing.
func (c *call) Data(p []byte) {
	if !c.sniffing {
		return
	}
	c.sn.Feed(p)
	if c.route == routeResponses && !c.idBound {
		c.s.learnID(c)
	}
}

// finish ends a relayed answer: upErr is how the backend's answer broke
// off (nil: it ended), clientGone that the client left first.
func (c *call) finish(upErr error, clientGone bool) {
	s := c.s
	if c.sniffing {
		c.sn.Close()
	}
	c.tr.AttemptEnd(c.status, upErr)
	if upErr != nil {
		if upErr != errPairBroken { // the prefill worker's failure, not the decode worker's
			s.streamFailed(c.u, upErr)
		}
		c.outcome = outUpstream
	} else if clientGone && c.outcome == outCompleted {
		c.outcome = outClientGone
	}
	s.done(c)
}

// left ends a request whose client left before an answer began (499):
// what it reserved is released; a queued one leaves the queue.
func (c *call) left() {
	if c.outcome == outCompleted {
		c.outcome = outClientGone
	}
	if c.status == 0 {
		c.status = 499
	}
	c.s.done(c)
}

// failedPlan ends a request whose plan panicked (a bug): 500, nothing
// reserved.
func (c *call) failedPlan() {
	c.status, c.outcome = 500, outRejected
	c.s.done(c)
}

// answering records kvca's own answer to the request (status, and
// whether it is an error); the transport writes it, then calls done.
func (c *call) answering(status int, rejected bool, bodyLen int) {
	c.status = status
	if rejected {
		c.outcome = outRejected
	} else {
		c.out = int64(bodyLen)
	}
}
