package edge

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/apikeys"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/quota"
	"github.com/kvca/kvca/sched"
	"github.com/kvca/kvca/sniff"
	"github.com/kvca/kvca/streamusage"
	"github.com/kvca/kvca/tracing"
)

// call is one request's exchange as the proxy's logic sees it, whatever
// moves its bytes: what was planned and decided for it, its reservation,
// and what the access log and metrics report at its end. Pooled, so the
// hot path allocates nothing.
type call struct {
	s    *Server
	h    *chain.Hasher
	info canon.Info
	req  sched.Request
	dec  sched.Decision
	res  sched.Reservation
	fl   *fleet // the fleet the last attempt routed on
	// clock is the transport's clock (an event loop's wake-up time);
	// nil: read the system's.
	clock   *time.Time
	route   int
	routed  bool // the request carries a chain to learn
	start   time.Time
	model   []byte // passthrough: the body's model, if any
	rid     []byte // request id: the client's X-Request-Id if valid, else generated
	path    []byte
	client  []byte
	status  int
	ttfb    time.Duration // to the upstream's response head
	ttft    time.Duration // to the first body byte
	attempt int           // upstream attempts made
	inBytes int           // request bytes received (head and body)
	out     int64         // response body bytes sent to the client
	outcome int
	allowed chain.Set
	tk      admit.Ticket // admission, when --max-inflight-per-backend is set
	// queued is the time spent in the admission queue, qsince when the
	// current wait began.
	queued time.Duration
	qsince time.Time
	// The front door: the tenant of the request's API key, its quota
	// decision, the answer's usage read in passing, the trace.
	tenant   *apikeys.Tenant
	qd       quota.Decision
	sniffing bool
	sn       sniff.Sniffer
	tr       tracing.Request
	// Asking a stream's usage (--stream-usage): ask is the body's edit
	// that asks for it (planned; none when it should stay as it is),
	// asked that the transport sent it so, and stripping that its
	// answer's usage event is removed, by uf, once read.
	ask       streamusage.Edit
	asked     bool
	stripping bool
	uf        streamusage.Filter
	// session is the keyed hash naming the request's conversation (0:
	// none); idBound: the answer's id has been bound to its backend.
	session uint64
	idBound bool
	// lastAccess is when the chosen backend last used the prefix it was
	// predicted to hold (table ms, -1: none), for the answer's check;
	// engineCached the cached prompt tokens the answer reported (-1: none).
	lastAccess   int64
	engineCached int64

	// The lifecycle's own state (lifecycle.go): where the request is in
	// its life, what it is, the transport's view of its header fields,
	// the backend of the attempt in progress, and kvca's answer if it
	// gives one.
	life     int
	kind     int
	api      canon.API
	hdr      reqHeader
	u        *upstream
	lastBusy bool
	rep      reply
	own      ownAnswer
	calTick  uint32 // answers this pooled call has seen, for calibration's sample
	picker   bool   // an endpoint picker drives it: answers cannot be refused
	// pd is the prefill side of a request of a disaggregated fleet (nil:
	// none, pd.go); lo its transport, told when a prefill leg ends.
	pd *pdCall
	lo legOwner
}

// Outcomes of an exchange, as the access log names them.
const (
	outCompleted  = iota
	outClientGone // the client left before the answer ended
	outUpstream   // the backend's answer broke off or stalled
	outShutdown   // cut by a shutdown that ran out of time
	outRejected   // answered by kvca itself with an error
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"completed", "client_gone", "upstream_cut", "shutdown_cut", "rejected"}

func (s *Server) getCall() *call {
	c, _ := s.calls.Get().(*call)
	if c == nil {
		c = &call{s: s, h: chain.NewHasher(s.key, s.cfg.Table.BlockSize), lastAccess: -1, engineCached: -1}
		c.h.UseMemo(s.memo)
	}
	return c
}

// now is the time of the event being handled.
func (c *call) now() time.Time {
	if c.clock != nil {
		return *c.clock
	}
	return time.Now()
}

// stamp gives the request its instant for routing: table time, and the
// event's time so that routing reads no clock itself. A table with a
// clock of its own (tests) keeps its time.
func (s *Server) stamp(c *call) {
	c.req.T = c.start
	c.req.Now = s.tableNow(c.start)
}

// tableNow is t in table time; a table with a clock of its own (tests)
// gives its time.
func (s *Server) tableNow(t time.Time) int64 {
	if s.cfg.Now != nil {
		return s.table.Now()
	}
	return s.table.At(t)
}

func (s *Server) putCall(c *call) {
	c.h.Reset()
	c.status, c.ttfb, c.ttft, c.attempt, c.inBytes, c.out, c.outcome, c.queued = 0, 0, 0, 0, 0, 0, outCompleted, 0
	c.routed = false
	c.model, c.path, c.client = c.model[:0], c.path[:0], c.client[:0]
	c.info = canon.Info{Model: c.info.Model[:0], PreviousResponseID: c.info.PreviousResponseID[:0], Priority: c.info.Priority[:0]} // buffers kept
	c.session, c.idBound = 0, false
	c.lastAccess, c.engineCached = -1, -1
	c.req = sched.Request{}
	c.tk.Class, c.tk.Tenant, c.tk.HolderWait, c.tk.Wake, c.tk.Owner = 0, 0, 0, nil, nil
	c.tenant, c.qd, c.sniffing = nil, quota.Decision{}, false
	c.ask, c.asked, c.stripping = streamusage.Edit{}, false, false
	c.dec = sched.Decision{}
	c.res = sched.Reservation{}
	c.fl, c.clock = nil, nil
	c.life, c.kind, c.hdr, c.u, c.lastBusy, c.rep, c.own, c.picker = lifeDone, kindReply, nil, nil, false, reply{}, ownAnswer{}, false
	if c.pd != nil {
		s.putPD(c.pd)
		c.pd = nil
	}
	c.lo = nil
	s.calls.Put(c)
}

// begin starts an exchange for a request from client, its life timed by
// clock (nil: the system's); receive tells what the request is. Its id is
// generated until receive finds the client's.
func (s *Server) begin(client []byte, clock *time.Time) *call {
	c := s.getCall()
	c.clock = clock
	c.start = c.now()
	c.route, c.kind = routeOther, kindReply
	c.client = append(c.client, client...)
	c.rid = appendRequestID(c.rid[:0])
	return c
}

// validRequestID is the rule for keeping a client's X-Request-Id: 1 to
// 128 visible ASCII characters, no spaces. Anything else is replaced, so
// the id can be echoed in a response head and a log line as it is.
func validRequestID(id []byte) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// appendRequestID appends 16 random hex digits: unique enough to find one
// request in the logs of a fleet, and free of any request content.
func appendRequestID(dst []byte) []byte {
	var b [8]byte
	v := rand.Uint64()
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return hex.AppendEncode(dst, b[:])
}

// plan is body → canon → chain: it fills the scheduler's request.
func (s *Server) plan(c *call, api canon.API, body []byte) error {
	c.routed = true
	if err := s.canon.Canonicalize(api, body, c.h, &c.info); err != nil {
		return err
	}
	c.req.Chain = c.h.Sum()
	c.req.Followup = c.info.Followup
	c.req.Session = c.info.Session
	s.stamp(c)
	s.planUsage(c, api, body)
	allowed, err := s.allowedFor(c.info.Model, &c.allowed)
	c.req.Allowed = allowed
	return err
}

// planUsage plans the edit that makes a streamed chat or completions
// body ask for its usage (--stream-usage), when kvca reads the answer's
// usage: to check the cached tokens predicted, to charge a tenant's
// quota, to calibrate bytes per token. Nobody reading it, the body stays
// as the client sent it. An endpoint picker's gateway forwards the body
// itself, so its requests are not edited either.
func (s *Server) planUsage(c *call, api canon.API, body []byte) {
	if !s.cfg.StreamUsage || c.picker || !(s.cfg.Routing.CacheCheck || c.tenant != nil || s.calibrate) {
		return
	}
	switch api {
	case canon.Chat:
		c.ask = streamusage.Plan(body, "messages", c.info.PromptEnd)
	case canon.Completions:
		c.ask = streamusage.Plan(body, "prompt", c.info.PromptEnd)
	}
}

// planPassthrough narrows a passthrough request to the backends serving
// the model its body names, if any.
func (s *Server) planPassthrough(c *call, body []byte) error {
	s.stamp(c)
	if len(body) == 0 {
		return nil
	}
	c.model = s.canon.Model(body, c.model[:0])
	allowed, err := s.allowedFor(c.model, &c.allowed)
	c.req.Allowed = allowed
	return err
}

// pick routes the request for its next attempt and books it; false when
// no eligible backend is left (reply says how to answer).
func (s *Server) pick(c *call, lastBusy bool) (*upstream, *reply) {
	if !s.route(c) {
		switch {
		case c.attempt == 0:
			s.m.requests[c.route][numPhases].Inc()
			return nil, &replyNoBackend
		case lastBusy:
			return nil, &replyBusy
		}
		return nil, &replyBadGateway
	}
	if c.routed && s.cfg.Routing.CacheCheck {
		// Before anything touches the chain on this backend again: the
		// answer's check needs when kvca last saw the prefix used.
		c.lastAccess = c.fl.sched.LastAccess(&c.req, &c.dec)
	}
	if c.routed && s.cfg.Table.PredictTTL > 0 && len(c.req.Chain) > 0 {
		// Lives min(--predict-ttl, --ttl) unless a 2xx answer confirms
		// it, and never refreshes a confirmed location.
		s.table.Predict(c.req.Chain, c.dec.Backend.Index, c.req.Now)
	}
	if c.attempt == 0 {
		if c.req.Pin && !c.dec.Bound {
			s.threads.Unavailable() // the producer of previous_response_id is gone
		}
		s.m.requests[c.route][c.dec.Phase].Inc()
		if c.routed {
			s.m.cached.Add(c.dec.Cached)
			s.m.novel.Add(c.dec.Novel)
		}
		if c.tr.Active() {
			c.tr.Routed(&tracing.Routing{Route: routeNames[c.route], Model: c.info.Model, Phase: c.dec.Phase.String(),
				Backend: c.dec.Backend.Name, Cached: c.dec.Cached, Novel: c.dec.Novel, QueueWait: c.tk.Waited(), Tenant: c.tenantName()})
		}
	}
	c.attempt++
	return c.fl.ups[c.dec.Backend.Index], nil
}

// authenticate finds the tenant of the request's API key (--api-keys);
// false with the 401 answer when there is none.
func (s *Server) authenticate(c *call) (reply, bool) {
	for i := 0; c.hdr != nil && i < c.hdr.Len(); i++ {
		if key, ok := apikeys.Credential(c.hdr.At(i)); ok {
			if t, ok := s.keys.Lookup(key); ok {
				c.tenant = t
				return reply{}, true
			}
			s.keys.Refused(false)
			return reply{status: 401, body: apikeys.UnauthorizedBody(c.route == routeMessages, false)}, false
		}
	}
	s.keys.Refused(true)
	return reply{status: 401, body: apikeys.UnauthorizedBody(c.route == routeMessages, true)}, false
}

// overQuota admits the request against its tenant's quota; false with
// the 429 answer when it is over.
func (s *Server) overQuota(c *call, cbrLen int) (reply, bool) {
	if c.tenant == nil || s.quota.Admit(c.tenant, quota.EstimateTokens(cbrLen), &c.qd) {
		return reply{}, false
	}
	if c.route == routeMessages {
		return reply{status: 429, header: string(c.qd.AppendAnthropicHeaders(nil, time.Now())), body: string(c.qd.AppendErrorBody(nil, true))}, true
	}
	return reply{status: 429, header: string(c.qd.AppendHeaders(nil)), body: string(c.qd.AppendErrorBody(nil, false))}, true
}

// bindConversation applies what the request says of its conversation: a
// Responses continuation (previous_response_id) must go to the backend
// that produced that response, which alone may store it; a named session
// (prompt_cache_key, a session header) prefers its backend where the
// prefix says nothing yet. The end user's id (user, safety_identifier,
// metadata.user_id) names no conversation: one user has many, and
// applications put a tenant or a service name there, so it binds nothing
// and its conversations are placed as if they had no key.
func (s *Server) bindConversation(c *call) {
	now := c.req.Now
	if id := c.info.PreviousResponseID; len(id) > 0 {
		if be, ok := s.threads.Lookup(s.canon.HashSessionKey(id), now); ok {
			c.req.Bound, c.req.Pin = be+1, true
			return
		}
	}
	c.session = c.info.CacheKey
	if c.session == 0 {
		for _, name := range canon.SessionHeaders() {
			if k := s.canon.HashSessionKey(headerValue(c.hdr, name)); k != 0 {
				c.session = k
				break
			}
		}
	}
	if c.session != 0 {
		if be, ok := s.sessions.Lookup(c.session, now); ok {
			c.req.Bound = be + 1
		}
	}
}

// learnID binds a Responses answer's id to its backend once the answer
// has shown it, so a continuation can find the one backend storing it.
func (s *Server) learnID(c *call) {
	if id := c.sn.ID(); len(id) > 0 {
		c.idBound = true
		s.threads.Bind(s.canon.HashSessionKey(id), c.dec.Backend.Index, c.req.Now)
	}
}

// shed is the answer to a request admission turned away: 429 in OpenAI's
// shape, with when to retry.
func shed(tk *admit.Ticket) reply {
	r := tk.Reason()
	return reply{status: 429, typ: admit.ErrorType, code: r.Code(), msg: r.Message(),
		header: "Retry-After: " + strconv.Itoa(tk.RetryAfter()) + "\r\n"}
}

// route is the scheduler's choice for the next attempt. A named session
// is bound to where its first attempt goes at once, not at the answer, so
// siblings fired in parallel before any answer follow it. The binding
// moves by compare-and-swap (affinity.Map.Follow): of siblings racing on
// several loops to claim a new session, or to move one whose backend the
// load bound refused, the first wins and the others are routed once more,
// towards it; a request that went where its own (older) binding said
// stays there.
func (s *Server) route(c *call) bool {
	c.fl = s.fleet()
	if !c.fl.sched.Route(&c.req, &c.dec, &c.res) {
		return false
	}
	if c.session == 0 || c.attempt > 0 {
		return true
	}
	from := c.req.Bound - 1
	to := c.dec.Backend.Index
	w := s.sessions.Follow(c.session, from, to, c.req.Now)
	if w == to || to == from {
		return true
	}
	c.res.ReleaseActive()
	c.req.Bound = w + 1
	if !c.fl.sched.Route(&c.req, &c.dec, &c.res) {
		return false
	}
	if to = c.dec.Backend.Index; to != w {
		s.sessions.Follow(c.session, w, to, c.req.Now) // the sibling's backend was full too
	}
	return true
}

// failed books a failed attempt on u (load released, u excluded) and says
// whether another backend may be tried; if not, how to answer.
func (s *Server) failed(c *call, u *upstream, res int) (retry bool, r *reply) {
	c.res.ReleaseActive()
	c.tr.AttemptEnd(0, errAttempt[res])
	if res == timedOut {
		return false, &replyTimeout
	}
	c.req.Exclude.Add(u.b.Index)
	if c.attempt > s.cfg.Retries {
		if res == connBusy {
			return false, &replyBusy
		}
		return false, &replyBadGateway
	}
	return true, nil
}

// answered handles an upstream answer's head: first-byte metrics, health,
// and whether to refuse it and try another backend (a 429 or 503 while
// nothing has reached the client and another backend could take it).
// It learns the chain on success.
func (s *Server) answered(c *call, u *upstream, status int) (retry bool) {
	c.ttfb = c.now().Sub(c.start)
	u.m.firstByte.Update(c.ttfb.Seconds())
	u.succeeded()
	c.status = status
	if status >= 500 || status == 429 {
		u.m.errors[errStatus].Inc()
		if c.attempt <= s.cfg.Retries && (status == 429 || status == 503) && s.hasAlternative(c, u) {
			return true
		}
	}
	if status >= 200 && status < 300 {
		if c.routed && len(c.req.Chain) > 0 {
			s.learned(c.req.Chain, u.b.Index, c.req.Now)
		}
		if c.session != 0 && c.attempt > 1 {
			s.sessions.Bind(c.session, u.b.Index, c.req.Now) // it moved
		}
	}
	return false
}

// hasAlternative reports whether another eligible backend could take the
// request if u's answer is refused; otherwise u's answer is the one to give.
func (s *Server) hasAlternative(c *call, u *upstream) bool {
	r := c.req
	r.Exclude.Add(u.b.Index)
	return !s.fleet().sched.Eligible(&r).Empty()
}

// firstByte marks the answer's first body byte: the backend has prefilled.
// A streamed success teaches the backend's TTFT model (a whole answer's
// first byte comes after its decoding too). It reports whether the
// prefill load was released by this call (not already at the head).
func (c *call) firstByte(streamed bool) bool {
	if c.ttft == 0 {
		c.ttft = c.now().Sub(c.start)
	}
	released := c.res.ReleasePrefill()
	if streamed && c.status == 200 {
		c.res.FirstByteAt(c.now())
	}
	return released
}

// streamFailed books an answer that broke off after it began.
func (s *Server) streamFailed(u *upstream, err error) {
	u.m.errors[errStream].Inc()
	if !isTimeout(err) {
		// A backend that dies mid-stream counts toward ejection like a
		// refused connection.
		u.failed(s.cfg.FailThreshold, s)
	}
}

// done ends an exchange: metrics, the access log line, the call back to
// its pool. Its reservation must have been released.
func (s *Server) done(c *call) {
	if c.pd != nil {
		c.pdEnd()
	}
	c.tr.End(c.status)
	if c.sniffing && c.routed && c.status >= 200 && c.status < 300 {
		p, _, ok := c.sn.Usage()
		if ok && s.calibrate {
			s.cal.ObserveBytes(c.info.Model, c.info.CBRLen, int(p))
		}
		if s.cfg.Routing.CacheCheck && c.dec.Backend != nil && (c.pd == nil || !c.pd.split) {
			// A decode leg's cached tokens are not its own prefill's.
			s.checkCached(c, p)
		}
	}
	if c.tenant != nil && c.qd.OK {
		s.quota.Settle(c.tenant, &c.qd, c.usage())
	}
	if c.stripping {
		s.m.usageRemoved.Add(c.uf.Removed())
	}
	end := c.now()
	c.res.ReleaseActiveAt(end)
	s.adm.Done(&c.tk)
	s.m.duration[c.route].Update(end.Sub(c.start).Seconds())
	if k := c.status / 100; k >= 1 && k <= 5 {
		s.m.responses[c.route][k].Inc()
	}
	if c.ttft > 0 && c.status >= 200 && c.status < 300 {
		model := c.info.Model
		if !c.routed {
			model = c.model
		}
		s.ttftOf(c.route, model).Update(c.ttft.Seconds())
	}
	if c.outcome == outClientGone {
		s.m.disconnects.Inc()
	}
	if s.access != nil {
		s.accessLog(c)
	}
	s.putCall(c)
}

// appendRouteHeader appends the X-Kvca-Route header (--route-header):
// how the request was routed, for a client or an operator to see.
func (c *call) appendRouteHeader(dst []byte) []byte {
	if c.dec.Backend == nil {
		return dst
	}
	dst = append(dst, "X-Kvca-Route: phase="...)
	dst = append(dst, c.dec.Phase.String()...)
	dst = append(dst, "; rule="...)
	dst = append(dst, c.dec.Rule.String()...)
	if c.dec.Overflowed != sched.RuleNone {
		dst = append(dst, "; overflowed="...)
		dst = append(dst, c.dec.Overflowed.String()...)
	}
	dst = append(dst, "; cached_blocks="...)
	dst = strconv.AppendInt(dst, int64(c.dec.Cached), 10)
	dst = append(dst, "; backend="...)
	dst = append(dst, c.dec.Backend.Name...)
	if c.pd != nil {
		dst = c.appendPDRoute(dst)
	}
	return append(dst, "\r\n"...)
}

// engineBlockTokens is the block of tokens an engine caches in (vLLM's
// default; SGLang and llama.cpp cache single tokens): the rounding of its
// cached-token count.
const engineBlockTokens = 16

// checkCached holds the answer's cached-token count, if its engine
// reported one, against the blocks predicted cached on its backend
// (sched.CheckCached), prompt being the answer's prompt tokens (0: not
// reported). Tokens become CBR blocks at this request's own bytes per
// token when the answer gave its prompt tokens, else at the model's.
func (s *Server) checkCached(c *call, prompt int64) {
	cached, ok := c.sn.EngineCached()
	if !ok {
		return
	}
	c.engineCached = cached
	s.holdCached(c, c.dec.Backend, c.dec.Cached, c.lastAccess, prompt, cached, c.now())
}

// holdCached holds an engine's reported cached-token count against the
// blocks predicted cached on b (pred, last used at last): the cache
// check, for an aggregated answer and for a prefill leg's alike.
func (s *Server) holdCached(c *call, b *sched.Backend, pred int, last, prompt, cached int64, at time.Time) {
	bpt := s.bytesPerToken(c, prompt)
	bs := float64(s.cfg.Table.BlockSize)
	s.fleet().sched.CheckCached(b, sched.Check{
		PredictedBlocks: pred,
		ReportedBlocks:  int(float64(cached) * bpt / bs),
		PredictedTokens: int64(float64(pred) * bs / bpt),
		ReportedTokens:  cached,
		PromptTokens:    prompt,
		Tolerance:       sched.Tolerance(pred, bpt, s.cfg.Table.BlockSize, engineBlockTokens),
		LastAccess:      last,
		Now:             s.tableNow(at),
	}, at)
}

// usage is what the answer consumed, for the tenant's quota: as the
// backend reported it, else estimated from the CBR for a success, else
// nothing.
func (c *call) usage() quota.Usage {
	if c.sniffing {
		if p, cpl, ok := c.sn.Usage(); ok {
			return quota.Usage{Prompt: p, Completion: cpl}
		}
	}
	if c.status >= 200 && c.status < 300 {
		n := c.info.CBRLen
		if !c.routed {
			n = c.inBytes
		}
		return quota.Usage{Prompt: quota.EstimateTokens(n), Estimated: true}
	}
	return quota.Usage{}
}

// accessLog writes one line per request (--access-log). It names what
// routing did and how long it took; never body content or credentials.
func (s *Server) accessLog(c *call) {
	model := c.info.Model
	if !c.routed {
		model = c.model
	}
	class := "" // classes matter, and are read, only with admission on
	if s.adm.Limited() {
		class = c.tk.Class.String()
	}
	backend, phase := "", "none"
	if c.dec.Backend != nil {
		backend = c.dec.Backend.Name
		phase = c.dec.Phase.String()
	}
	attrs := [...]slog.Attr{
		slog.String("request_id", string(c.rid)),
		slog.String("route", routeNames[c.route]),
		slog.String("path", string(c.path)),
		slog.String("client", string(c.client)),
		slog.String("tenant", c.tenantName()),
		slog.String("model", string(model)),
		slog.String("phase", phase),
		slog.String("rule", c.dec.Rule.String()),
		slog.String("overflowed", c.dec.Overflowed.String()),
		slog.String("backend", backend),
		slog.Int("attempts", c.attempt),
		slog.Int("cached_blocks", c.dec.Cached),
		slog.Int("novel_blocks", c.dec.Novel),
		slog.Int64("engine_cached_tokens", c.engineCached),
		slog.Int("status", c.status),
		slog.String("outcome", outcomeNames[c.outcome]),
		slog.Int("request_bytes", c.inBytes),
		slog.Int64("response_bytes", c.out),
		slog.String("priority", class),
		slog.String("admission_rule", admissionRule(s, c)),
		slog.Float64("queue_ms", ms(c.queued)),
		slog.Float64("upstream_headers_ms", ms(c.ttfb)),
		slog.Float64("ttft_ms", ms(c.ttft)),
		slog.Float64("duration_ms", ms(c.now().Sub(c.start))),
	}
	all := attrs[:]
	if c.pd != nil {
		all = c.appendPDAttrs(all)
	}
	s.access.LogAttrs(context.Background(), slog.LevelInfo, "request", all...)
}

// admissionRule names the admission rule that decided the request ("":
// admission is off).
func admissionRule(s *Server, c *call) string {
	if !s.adm.Limited() {
		return ""
	}
	return c.tk.Rule().String()
}

func (c *call) tenantName() string {
	if c.tenant == nil {
		return ""
	}
	return c.tenant.Name
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// learned records a successful answer: in the table, and with the peers.
func (s *Server) learned(chain []uint64, backend int, at int64) {
	s.table.Touch(chain, backend, at)
	if s.peer != nil {
		s.peer.Learned(chain, backend, at)
	}
}

// resetBackend drops a backend's locations (its cache is gone), bumps its
// generation and tells the peers, unconditionally (ResetBackend).
func (s *Server) resetBackend(i int) uint32 {
	gen, _ := s.restarted(i, time.Time{})
	return gen
}

// restarted resets backend i for a restart of its engine that a detector
// places at or after since, unless the backend was already reset at or
// after since. The two detectors, the health check (the backend comes back
// from unhealthy) and engine telemetry (a later process start time,
// counters gone back), often see the same restart, in either order; it
// must move the generation once, and two restarts twice.
//
// The rule: a reset at R drops every location learned before R, so when
// the engine's current process started at or before the last reset the
// table holds nothing of its predecessor's, and resetting for it again
// would count one restart twice. Each detector says when the restart it
// saw happened, as closely as it knows:
//
//   - telemetry: when the new process started (telemetry.restartInstant).
//     The health check re-admits a backend once its new process answers,
//     so after that process started: telemetry's later detection of the
//     same restart finds that reset and changes nothing, while a process
//     that started after the last reset (another restart) resets again.
//   - the health check: when it last had the backend up (aliveAt); the
//     outage began after that. A reset since then was made by telemetry on
//     reading a process that answered after the outage began, and accounts
//     for it. Should yet another restart follow that reading, its process
//     starts after that reset, and telemetry resets for it in turn.
//
// A zero since always resets (ResetBackend, a reload taking the slot, a
// backend the health check never had up). The peers are told of a reset
// made. It returns the generation in force and whether it moved.
func (s *Server) restarted(i int, since time.Time) (uint32, bool) {
	gen, bumped := s.reset(i, since)
	if bumped && s.peer != nil {
		s.peer.Reset(i, gen)
	}
	return gen, bumped
}

// forgetSlot drops slot i's locations and bumps its generation without
// telling the other replicas: a backend removed from this replica's
// configuration (or the slot a new one takes) lost no cache, and the
// replicas that still send it traffic keep what they know of it.
func (s *Server) forgetSlot(i int) uint32 {
	gen, _ := s.reset(i, time.Time{})
	return gen
}

// reset drops slot i's locations and bumps its generation, unless since is
// set and the slot was reset at or after since (restarted); it records
// when, runs the OnBackendReset hooks, and returns the generation in force
// and whether it moved.
func (s *Server) reset(i int, since time.Time) (uint32, bool) {
	s.resetMu.Lock()
	for len(s.resetAt) <= i {
		s.resetAt = append(s.resetAt, time.Time{})
	}
	if last := s.resetAt[i]; !since.IsZero() && !last.IsZero() && !last.Before(since) {
		gen := s.table.Generation(i)
		s.resetMu.Unlock()
		return gen, false
	}
	// Taken before the bump: every location learned before it carries
	// the old generation.
	s.resetAt[i] = time.Now()
	gen := s.table.Reset(i)
	s.resetMu.Unlock()
	s.backendReset(i, gen)
	return gen, true
}

// connFailure books a failed connection attempt on u.
func (s *Server) connFailure(u *upstream, err error) int {
	s.log.Debug("upstream connection failed", "backend", u.b.Name, "err", err)
	u.m.errors[errConnect].Inc()
	u.failed(s.cfg.FailThreshold, s)
	return connFailed
}

// attempt outcomes.
const (
	sent        = iota // the request is on its way
	connFailed         // nothing reached us: another backend may serve it
	connBusy           // every connection to the backend is in use: busy, not dead
	timedOut           // the backend took the request but did not answer in time
	retryStatus        // 429/503 before any byte reached the client
)

// errAttempt names a failed attempt's outcome for its trace span.
var errAttempt = [...]error{
	connFailed:  errors.New("connection failed"),
	connBusy:    errors.New("every connection to the backend in use"),
	timedOut:    errors.New("no answer within --upstream-header-timeout"),
	retryStatus: errors.New("refused with 429 or 503; tried elsewhere"),
}

// usesSession says whether a routing policy reads sched.Request.Session;
// the others are spared its hash (a quarter of canon+chain at 1–4 KB).
func usesSession(policy string) bool { return policy == "session-hash" }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// noResponseYet is an error that means the backend closed the connection
// before sending anything, the signature of a stale keep-alive connection.
func noResponseYet(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// timeoutError is a net.Error that is a timeout, for isTimeout.
type timeoutError string

func (e timeoutError) Error() string   { return string(e) }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }

// bytesPerToken is the request's own CBR bytes per prompt token, from
// its answer's prompt tokens, else (none reported, or a ratio no
// tokenizer gives) the model's calibrated ratio.
func (s *Server) bytesPerToken(c *call, prompt int64) float64 {
	bpt := 0.0
	if prompt > 0 && c.info.CBRLen > 0 {
		bpt = float64(c.info.CBRLen) / float64(prompt)
	}
	if bpt < 0.25 || bpt > 64 {
		bpt, _ = s.cal.BytesPerTokenOf(c.info.Model)
	}
	return bpt
}
