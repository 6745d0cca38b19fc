package edge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/apikeys"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/h1"
	"github.com/kvca/kvca/pd"
	"github.com/kvca/kvca/sched"
)

// A request in a disaggregated fleet (one with backends of role prefill or
// decode; docs/disaggregation.md) lives the lifecycle's life with its
// decode worker as its backend: admission, routing, the retry rule,
// relaying, learning and release act on the decode leg as on any
// request's one attempt. This file adds the prefill leg: whether there is
// one, which prefill worker takes it, the legs' bodies, what follows a
// failed leg, and the prefill worker's load, admission slot and learning.
// The protocol orders the legs:
//
//	vllm:   prefill leg → its kv_transfer_params → decode leg
//	sglang: prefill leg ∥ decode leg, paired by a bootstrap room
//
// A prefill leg is one HTTP exchange run by a goroutine (pdLeg): its
// answer is small (one token, or drained unread), so it needs none of the
// event loops' relaying. The goroutine tells the request's transport when
// the leg ends, and the transport hands the leg to the lifecycle (legDone)
// on the request's own goroutine, like any other event. As endpoint picker
// kvca runs no leg: it names the prefill worker in a request header, and
// the gateway's side runs the legs.

// Why a request of a disaggregated fleet ran aggregated, on its decode
// worker alone.
const (
	whyNone          = iota
	whyThreshold     // few of its prompt's tokens uncached on the prefill worker (--pd-threshold)
	whyNoPrefill     // no prefill worker could take it (unhealthy, tried, no admission room)
	whySame          // the prefill worker chosen was its decode worker (a backend of both roles)
	whyAPI           // a kind of request the protocols do not split (the Messages API)
	whyContinuation  // a Responses continuation: only its producer stores what it continues
	whyPrefillFailed // its prefill legs failed
	numWhy
)

var whyNames = [numWhy]string{"", "threshold", "no_prefill_worker", "same_backend", "api", "continuation", "prefill_failed"}

// Outcomes of prefill legs, for kvca_pd_prefill_legs_total.
const (
	legOK         = iota // answered 2xx (vllm: with its transfer)
	legFailed            // no answer: connection failed, broke or timed out
	legStatus            // answered 5xx or 429
	legRefused           // answered another status (the request, not the worker, was refused)
	legNoTransfer        // vllm: a 2xx answer without kv_transfer_params
	legCancelled         // ended by kvca: the client left, or the decode leg failed
	legDetached          // sglang: the request ended well before the prefill answer came; drained on
	numLegOutcomes
)

var legOutcomeNames = [numLegOutcomes]string{"ok", "failed", "status", "refused", "no_transfer", "cancelled", "detached"}

// pdMetrics are the disaggregation's series.
type pdMetrics struct {
	split   *metrics.Counter
	agg     [numWhy]*metrics.Counter
	legs    [numLegOutcomes]*metrics.Counter
	prefill *metrics.PrometheusHistogram
	decode  *metrics.PrometheusHistogram
	cached  *metrics.Counter
	novel   *metrics.Counter
	running atomic.Int32 // prefill legs whose goroutine runs (tests wait on it)
}

func newPDMetrics(set *metrics.Set) *pdMetrics {
	m := &pdMetrics{}
	m.split = set.NewCounter(`kvca_pd_requests_total{mode="disaggregated",reason=""}`)
	for w := whyThreshold; w < numWhy; w++ {
		m.agg[w] = set.NewCounter(fmt.Sprintf(`kvca_pd_requests_total{mode="aggregated",reason=%q}`, whyNames[w]))
	}
	for o := range numLegOutcomes {
		m.legs[o] = set.NewCounter(fmt.Sprintf(`kvca_pd_prefill_legs_total{outcome=%q}`, legOutcomeNames[o]))
	}
	m.prefill = set.NewPrometheusHistogramExt(`kvca_pd_prefill_seconds`, latencyBuckets)
	m.decode = set.NewPrometheusHistogramExt(`kvca_pd_decode_first_byte_seconds`, latencyBuckets)
	m.cached = set.NewCounter(`kvca_pd_prefill_blocks_total{kind="cached"}`)
	m.novel = set.NewCounter(`kvca_pd_prefill_blocks_total{kind="novel"}`)
	set.NewGauge(`kvca_pd_prefill_legs_running`, func() float64 { return float64(m.running.Load()) })
	return m
}

// pdCall is what a request of a disaggregated fleet holds besides its
// decode leg: pooled with the server, so that a request allocates only its
// legs' bodies.
type pdCall struct {
	sglang bool
	api    pd.API
	client []byte // the client's body (the transport's, valid until the request ends), or edited
	edited []byte // the client's body edited to ask for its usage
	// fixed: a reason the request runs aggregated whatever its prefix
	// (whyAPI, whyContinuation); why: the current attempt's.
	fixed, why uint8
	// split: the current attempt has a prefill leg (or, as picker, names
	// a prefill worker).
	split bool
	// The prefill worker of the current pair: its routing, load and
	// admission slot; pallowed the prefill workers serving the request's
	// model; pexcl those whose leg failed.
	pu       *upstream
	preq     sched.Request
	pdec     sched.Decision
	pres     sched.Reservation
	pslot    admit.Leg
	pallowed chain.Set
	proom    chain.Set
	pexcl    chain.Set
	legs     int    // prefill legs started
	last     int    // the last prefill leg's outcome (legOK…), -1: none ended
	pname    string // the prefill worker of the last leg
	pstatus  int    // its status (0: no answer)
	ptime    time.Duration
	pbody    []byte // vllm: the prefill leg's body, built once
	params   []byte // vllm: the transfer the last prefill answered; the same goes to any decode worker
	body     []byte // the decode leg's body; nil: the client's own
	leg      *pdLeg // the prefill leg running; nil: none
	dsent    time.Time
	cachedP  int // the prefill worker's predicted cached and novel blocks
	novelP   int
	noRetry  bool // the last prefill answer refused the request itself: no other prefill worker will differ
	header   bool // picker: the prefill worker goes in x-prefiller-host-port
	uncached int  // prompt tokens estimated uncached on the prefill worker
	// plast is when the prefill worker last used the prefix predicted
	// there (table ms, -1: none), for its answer's cache check.
	plast int64
}

func (p *pdCall) reset() {
	*p = pdCall{pbody: p.pbody[:0], params: p.params[:0], body: p.body[:0], edited: p.edited[:0], last: -1, plast: -1}
}

// legOwner is the transport of a request whose prefill leg runs: legEnded
// is called from the leg's goroutine once the leg ended, and must hand it
// to the request's lifecycle (call.legDone) on the request's own
// goroutine, never block, and drop it if the request ended meanwhile.
type legOwner interface {
	legEnded(leg *pdLeg)
}

// pdLeg is one prefill leg: an HTTP exchange with a prefill worker,
// owned by its goroutine until it ends, then read by the lifecycle. It
// shares nothing with the request (body and headers are its own), so a
// leg the request no longer waits for can end on its own.
type pdLeg struct {
	u      *upstream
	url    string
	host   string
	body   []byte
	hdr    [][2]string
	key    string // --backend-api-key
	drain  bool   // sglang: the answer is read and dropped
	ctx    context.Context
	cancel context.CancelFunc
	start  time.Time
	// Written by the goroutine before legEnded.
	status int
	answer []byte
	head   time.Duration // to the answer's head
	dur    time.Duration
	err    error
}

// maxLegAnswer bounds a prefill answer kvca reads: one token, usage and
// a transfer naming a block id per 16 tokens of a prompt (a million-token
// prompt's ids fit many times over).
const maxLegAnswer = 8 << 20

var (
	errLegAnswer   = errors.New("the prefill answer is over 8 MB")
	errLegPanic    = errors.New("panic in a prefill leg")
	errPairBroken  = errors.New("the paired prefill leg failed")
	errNoPrefiller = errors.New("no prefill worker is available for a decode worker that cannot prefill")
)

// errReserved refuses a body that names a field only kvca may set in a
// disaggregated fleet.
type errReserved string

func (e errReserved) Error() string {
	return string(e) + " is set by kvca in a disaggregated fleet; a request must not carry it"
}

// pdPlan readies a routed request of a disaggregated fleet once it is
// planned (body: the client's): its decode leg may go only to a backend
// that decodes, its prefill leg only to one that prefills, and a body
// naming a transfer or a bootstrap server is refused.
func (c *call) pdPlan(body []byte) error {
	fl := c.s.fleet()
	if !fl.pools.split {
		return nil
	}
	if k := pd.Reserved(body); k != "" {
		return errReserved(k)
	}
	p := c.s.getPD()
	c.pd = p
	p.sglang = c.s.cfg.PD.Protocol == ProtocolSGLang
	p.client = body
	if c.ask.Asks() {
		// The legs' bodies are written from the body as it is edited to
		// ask for a streamed answer's usage (--stream-usage).
		p.edited = c.ask.Append(p.edited[:0], body)
		p.client = p.edited
	}
	switch c.api {
	case canon.Chat:
		p.api = pd.Chat
	case canon.Completions:
		p.api = pd.Completions
	case canon.Responses:
		p.api = pd.Responses
	default:
		p.fixed = whyAPI
	}
	if len(c.info.PreviousResponseID) > 0 {
		p.fixed = whyContinuation
	}
	p.pallowed = fl.pools.prefill
	dec := fl.pools.decode
	if c.req.Allowed != nil {
		p.pallowed.And(c.req.Allowed)
		dec.And(c.req.Allowed)
	}
	c.allowed = dec
	c.req.Allowed = &c.allowed
	return nil
}

// passDecodes keeps a passthrough request of a disaggregated fleet to
// the backends that answer requests: a prefill worker takes prefill legs
// only.
func (c *call) passDecodes() {
	fl := c.s.fleet()
	if !fl.pools.split {
		return
	}
	set := fl.pools.decode
	if c.req.Allowed != nil {
		set.And(c.req.Allowed)
	}
	c.allowed = set
	c.req.Allowed = &c.allowed
}

// pdTicket keeps the request's admission to its decode leg: the prefill
// workers holding its prefix (where it was prefilled) are no backends its
// ticket may wait for, since its decode leg cannot go there.
func (c *call) pdTicket() {
	tk := &c.tk
	tk.Preferred.And(&tk.Eligible)
	tk.Sharing.And(&tk.Eligible)
}

// pdPair follows the routing of the request's decode leg to c.u: it
// chooses the prefill worker and whether there is a prefill leg, and
// starts the legs. actSend: send the decode leg (its body c.sendBody());
// actPrefill: a prefill leg runs first, its end comes to legDone.
func (c *call) pdPair() act {
	p := c.pd
	p.split, p.why, p.body = false, whyNone, p.body[:0]
	if len(p.params) > 0 {
		// vllm: a prefill answered for a decode worker that failed; the
		// transfer waits on the prefill worker for any decode worker.
		p.split = true
		return c.pdDecode()
	}
	if p.fixed != whyNone {
		return c.pdAggregate(p.fixed)
	}
	if !c.pdPickPrefill() {
		return c.pdAggregate(whyNoPrefill)
	}
	if p.pu == c.u {
		c.pdRelease()
		return c.pdAggregate(whySame)
	}
	if p.uncached < c.s.cfg.PD.Threshold && c.canAggregate() {
		c.pdRelease()
		return c.pdAggregate(whyThreshold)
	}
	return c.pdStart()
}

// canAggregate: the decode worker can run the request alone. A vLLM
// decode worker runs any request; an SGLang decode server decodes only
// what a prefill server hands it.
func (c *call) canAggregate() bool {
	return !c.pd.sglang || c.u.addr.role == RoleBoth
}

// pdAggregate runs the request on its decode worker alone, or, where that
// worker cannot (sglang), answers 503.
func (c *call) pdAggregate(why uint8) act {
	p := c.pd
	p.split, p.why, p.body = false, why, p.body[:0]
	if !c.canAggregate() {
		c.res.ReleaseActive()
		c.u = nil
		c.rep = replyNoBackend
		c.rep.msg = errNoPrefiller.Error()
		return actReply
	}
	p.dsent = c.now()
	return actSend
}

// pdPickPrefill routes the prefill leg among the prefill workers serving
// the request's model, not yet failed, with admission room: by the
// policy, over the same chain, so the prefix is prefilled where it was
// prefilled before. It reserves the worker's load and a slot (a leg never
// queues: without room the request runs aggregated).
func (c *call) pdPickPrefill() bool {
	s, p := c.s, c.pd
	c.pdRelease()
	fl := c.fl
	p.preq = c.req
	p.preq.Bound, p.preq.Pin = 0, false // a session or thread binds the decode worker
	p.preq.Exclude = p.pexcl
	p.proom = p.pallowed
	if s.adm.Limited() {
		p.proom = s.adm.Free(&p.pallowed, c.tk.Class)
	}
	p.preq.Allowed = &p.proom
	if !fl.sched.Route(&p.preq, &p.pdec, &p.pres) {
		return false
	}
	i := p.pdec.Backend.Index
	if !s.adm.TakeLeg(&p.pslot, i) {
		p.pres.ReleaseActive()
		return false
	}
	p.pu = fl.ups[i]
	p.cachedP, p.novelP = p.pdec.Cached, p.pdec.Novel
	if s.cfg.Routing.CacheCheck {
		p.plast = fl.sched.LastAccess(&p.preq, &p.pdec)
	}
	bpt, _ := s.cal.BytesPerTokenOf(c.info.Model)
	p.uncached = int(float64(max(c.info.CBRLen-p.pdec.Cached*s.cfg.Table.BlockSize, 0)) / max(bpt, 0.25))
	return true
}

// pdRelease gives back the prefill worker's load and admission slot.
func (c *call) pdRelease() {
	c.pd.pres.ReleaseActive()
	c.s.adm.DoneLeg(&c.pd.pslot)
}

// pdStart starts a pair: the prefill leg to p.pu, and with sglang the
// decode leg at once.
func (c *call) pdStart() act {
	s, p := c.s, c.pd
	p.split = true
	p.legs++
	p.pname = p.pu.b.Name
	s.m.pd.cached.Add(p.cachedP)
	s.m.pd.novel.Add(p.novelP)
	if s.cfg.Table.PredictTTL > 0 && len(c.req.Chain) > 0 {
		s.table.Predict(c.req.Chain, p.pu.b.Index, c.req.Now)
	}
	if c.picker {
		// The gateway's side runs the legs (x-prefiller-host-port).
		p.header = true
		return actSend
	}
	var err error
	if p.sglang {
		host := hostOnly(p.pu.addr.host)
		p.body, err = pd.BootstrapBody(p.body[:0], p.client, host, p.pu.addr.bootstrapPort, pd.Room(rand.Uint64()))
		if err != nil {
			c.pdRelease()
			return c.pdAggregate(whyPrefillFailed)
		}
		c.startLeg(p.body, true)
		p.dsent = c.now()
		return actSend
	}
	if len(p.pbody) == 0 {
		if p.pbody, err = pd.PrefillBody(p.pbody[:0], p.client, p.api); err != nil {
			c.pdRelease()
			return c.pdAggregate(whyPrefillFailed)
		}
	}
	c.startLeg(p.pbody, false)
	return actPrefill
}

// pdDecode sends the vllm decode leg: the client's body with the
// transfer the prefill answered.
func (c *call) pdDecode() act {
	p := c.pd
	var err error
	if p.body, err = pd.DecodeBody(p.body[:0], p.client, p.params); err != nil {
		p.params = p.params[:0]
		return c.pdAggregate(whyPrefillFailed)
	}
	p.dsent = c.now()
	return actSend
}

// sendBody is the body the decode leg sends: nil for the client's own.
func (c *call) sendBody() []byte {
	if c.pd == nil || len(c.pd.body) == 0 {
		return nil
	}
	return c.pd.body
}

// startLeg starts the prefill leg to p.pu with body (copied).
func (c *call) startLeg(body []byte, drain bool) {
	s, p := c.s, c.pd
	u := p.pu
	leg := &pdLeg{u: u, url: u.addr.url + string(c.path), host: string(u.authority), body: bytes.Clone(body),
		hdr: c.legHeaders(), key: s.cfg.BackendAPIKey, drain: drain, start: time.Now()}
	if s.cfg.PreserveHost {
		if h := headerValue(c.hdr, "host"); len(h) > 0 {
			leg.host = string(h)
		}
	}
	leg.hdr = append(leg.hdr, [2]string{"X-Request-Id", string(c.rid)}, [2]string{"X-Forwarded-For", string(c.client)})
	timeout := s.cfg.UpstreamHeaderTimeout
	if drain {
		timeout += s.cfg.StreamIdleTimeout
	}
	leg.ctx, leg.cancel = context.WithTimeout(s.bg, timeout)
	p.leg = leg
	s.m.pd.running.Add(1)
	go s.runLeg(leg, c.lo)
}

// legHeaders are the client's header fields a prefill leg carries, by the
// forwarding rules: no hop-by-hop or framing field, none kvca writes
// itself, no client credential where kvca sends its own.
func (c *call) legHeaders() [][2]string {
	s := c.s
	drop := s.keys != nil || s.cfg.BackendAPIKey != ""
	var out [][2]string
	for i := 0; c.hdr != nil && i < c.hdr.Len(); i++ {
		n, v := c.hdr.At(i)
		if len(n) == 0 || n[0] == ':' || dropRequestField(n) || (drop && apikeys.IsCredentialHeader(n)) ||
			isTraceHeader(n) || h1.EqualFold(n, "content-type") || h1.EqualFold(n, "accept-encoding") {
			continue
		}
		out = append(out, [2]string{string(n), string(v)})
	}
	return out
}

// runLeg runs a prefill leg to its end, then tells o.
func (s *Server) runLeg(leg *pdLeg, o legOwner) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in a prefill leg", "panic", r)
			leg.err = errLegPanic
		}
		leg.dur = time.Since(leg.start)
		leg.cancel()
		s.m.pd.running.Add(-1)
		if o != nil {
			o.legEnded(leg)
		}
	}()
	req, err := http.NewRequestWithContext(leg.ctx, http.MethodPost, leg.url, bytes.NewReader(leg.body))
	if err != nil {
		leg.err = err
		return
	}
	req.Host = leg.host
	for _, h := range leg.hdr {
		req.Header.Add(h[0], h[1])
	}
	req.Header.Set("Content-Type", "application/json")
	if leg.key != "" {
		req.Header.Set("Authorization", "Bearer "+leg.key)
	}
	resp, err := leg.u.hc.Do(req)
	if err != nil {
		leg.err = err
		return
	}
	defer resp.Body.Close()
	leg.status = resp.StatusCode
	leg.head = time.Since(leg.start)
	if leg.drain {
		_, leg.err = io.Copy(io.Discard, resp.Body)
		return
	}
	leg.answer, leg.err = io.ReadAll(io.LimitReader(resp.Body, maxLegAnswer+1))
	if leg.err == nil && len(leg.answer) > maxLegAnswer {
		leg.err = errLegAnswer
	}
}

// legDone takes a prefill leg that ended. cut: the decode leg in flight
// must be abandoned (sglang: its pair broke); a is what follows (actNone:
// nothing, the decode leg goes on or the answer is being cut).
func (c *call) legDone(leg *pdLeg) (cut bool, a act) {
	p := c.pd
	if p == nil || p.leg != leg {
		return false, actNone // the request ended, or moved on, without it
	}
	p.leg = nil
	ok := c.legEnded(leg)
	if !p.sglang {
		if ok {
			return false, c.pdDecode()
		}
		return false, c.pdPrefillAgain()
	}
	if ok || p.last == legRefused {
		return false, actNone // drained; a refused request is refused by its decode leg too
	}
	if c.life != lifeAttempting {
		return true, actNone // the answer has begun: it is cut
	}
	return true, c.pdPrefillAgain()
}

// legEnded books a prefill leg's end on its worker (health, load,
// admission slot, metrics; learning on success) and reports whether it
// served: vllm, a 2xx answer with a transfer; sglang, a 2xx answer.
func (c *call) legEnded(leg *pdLeg) bool {
	s, p := c.s, c.pd
	u := leg.u
	p.pstatus, p.ptime = leg.status, leg.dur
	out := legOK
	switch {
	case leg.status == 0:
		out = legFailed
		if isTimeout(leg.err) || errors.Is(leg.err, context.DeadlineExceeded) {
			u.m.errors[errTimeout].Inc()
		} else {
			s.connFailure(u, leg.err)
		}
	case leg.err != nil:
		out = legFailed
		s.streamFailed(u, leg.err)
	case leg.status >= 500 || leg.status == 429:
		out = legStatus
		u.succeeded()
		u.m.errors[errStatus].Inc()
	case leg.status < 200 || leg.status >= 300:
		out = legRefused
		u.succeeded()
	default:
		u.succeeded()
	}
	if out == legOK && !p.sglang {
		var err error
		if p.params, err = pd.TransferParams(p.params[:0], leg.answer); err != nil {
			out = legNoTransfer
			u.m.errors[errStatus].Inc()
		}
	}
	p.last = out
	s.m.pd.legs[out].Inc()
	at := leg.start.Add(leg.head)
	if out == legOK {
		u.m.firstByte.Update(leg.head.Seconds())
		s.m.pd.prefill.Update(leg.dur.Seconds())
		p.pres.FirstByteAt(at)
		if len(c.req.Chain) > 0 {
			s.learned(c.req.Chain, u.b.Index, c.req.Now)
		}
		if s.cfg.Routing.CacheCheck && !p.sglang {
			c.pdCheck(leg.answer, at)
		}
	}
	p.pres.ReleaseActiveAt(leg.start.Add(leg.dur))
	s.adm.DoneLeg(&p.pslot)
	if out != legOK {
		p.pexcl.Add(u.b.Index)
		p.noRetry = out == legRefused
	}
	return out == legOK
}

// pdCheck holds a vLLM prefill answer's cached-token count against the
// blocks predicted cached on its prefill worker, as an aggregated answer's
// is held against its backend's (checkCached): the prefill workers' cache
// is the one prefixes are routed by.
func (c *call) pdCheck(answer []byte, at time.Time) {
	prompt, cached, ok := pd.Usage(answer)
	if !ok {
		return
	}
	c.s.holdCached(c, c.pd.pu.b, c.pd.cachedP, c.pd.plast, prompt, cached, at)
}

// pdPrefillAgain follows a failed prefill leg: another prefill worker
// while --retries allows (a fresh pair, with sglang), else the request
// runs aggregated on its decode worker where it can; else 502.
func (c *call) pdPrefillAgain() act {
	p := c.pd
	if !p.noRetry && p.legs <= c.s.cfg.Retries && c.pdPickPrefill() {
		if p.pu != c.u {
			return c.pdStart()
		}
		c.pdRelease()
	}
	if !c.canAggregate() {
		c.res.ReleaseActive()
		c.u = nil
		c.rep = replyBadGateway
		return actReply
	}
	return c.pdAggregate(whyPrefillFailed)
}

// pdDecodeFailed follows a failed decode attempt (the retry rule tries
// another decode worker): a sglang pair's prefill leg ends with it (its
// room waits for this decode worker only), while a vllm transfer waits
// for whichever decode worker comes next.
func (c *call) pdDecodeFailed() {
	p := c.pd
	if leg := p.leg; leg != nil {
		leg.cancel()
		p.leg = nil
		c.s.m.pd.legs[legCancelled].Inc()
	}
	if p.sglang {
		c.pdRelease()
	}
}

// pdHead takes the decode leg's answer head: as picker (where the
// gateway's side ran the prefill leg, so its answer is unseen) and with
// sglang (whose prefill answer may come later), a 2xx decode answer says
// the prefill worker holds the prompt; as picker its load ends there too.
func (c *call) pdHead(status int) {
	p := c.pd
	if !p.split {
		return
	}
	if (c.picker || p.sglang) && status >= 200 && status < 300 && len(c.req.Chain) > 0 && p.pu != nil {
		c.s.learned(c.req.Chain, p.pu.b.Index, c.req.Now)
	}
	if c.picker {
		c.pdRelease()
	}
}

// pdEnd ends the request's prefill side as the request ends: a leg still
// running is cancelled (the client left, or the answer failed), or, after
// a complete answer, left to drain on its own; the prefill worker's load
// and slot are released; the request is counted.
func (c *call) pdEnd() {
	s, p := c.s, c.pd
	if leg := p.leg; leg != nil {
		p.leg = nil
		if c.outcome == outCompleted && c.status >= 200 && c.status < 300 {
			s.m.pd.legs[legDetached].Inc()
		} else {
			leg.cancel()
			s.m.pd.legs[legCancelled].Inc()
		}
	}
	c.pdRelease()
	if p.split {
		s.m.pd.split.Inc()
		if c.ttft > 0 && !p.dsent.IsZero() {
			s.m.pd.decode.Update((c.ttft - p.dsent.Sub(c.start)).Seconds())
		}
	} else if p.why != whyNone {
		s.m.pd.agg[p.why].Inc()
	}
}

// decodeTTFT is the decode leg's time from its sending to its first byte.
func (c *call) decodeTTFT() time.Duration {
	p := c.pd
	if c.ttft <= 0 || p.dsent.IsZero() {
		return 0
	}
	return c.ttft - p.dsent.Sub(c.start)
}

// appendPDAttrs appends the request's disaggregation to its access log
// line: how it ran, its prefill worker and leg, the decode leg's TTFT.
func (c *call) appendPDAttrs(a []slog.Attr) []slog.Attr {
	p := c.pd
	mode := "aggregated"
	if p.split {
		mode = "disaggregated"
	}
	return append(a,
		slog.String("pd", mode),
		slog.String("pd_reason", whyNames[p.why]),
		slog.String("prefill_backend", p.pname),
		slog.Int("prefill_legs", p.legs),
		slog.Int("prefill_status", p.pstatus),
		slog.Int("prefill_cached_blocks", p.cachedP),
		slog.Int("prefill_novel_blocks", p.novelP),
		slog.Float64("prefill_ms", ms(p.ptime)),
		slog.Float64("decode_ttft_ms", ms(c.decodeTTFT())),
	)
}

// appendPDRoute appends the prefill worker to X-Kvca-Route.
func (c *call) appendPDRoute(dst []byte) []byte {
	p := c.pd
	if !p.split || p.pu == nil {
		if p.why != whyNone {
			dst = append(dst, "; pd=aggregated:"...)
			dst = append(dst, whyNames[p.why]...)
		}
		return dst
	}
	dst = append(dst, "; pd=disaggregated; prefill="...)
	return append(dst, p.pu.b.Name...)
}

// PDCounts says how the routed requests of a disaggregated fleet ran so
// far: through a prefill leg and a decode leg (split), or on a decode
// worker alone (aggregated, whatever the reason).
func (s *Server) PDCounts() (split, aggregated uint64) {
	m := s.m.pd
	for w := whyThreshold; w < numWhy; w++ {
		aggregated += m.agg[w].Get()
	}
	return m.split.Get(), aggregated
}

func (s *Server) getPD() *pdCall {
	p, _ := s.pds.Get().(*pdCall)
	if p == nil {
		p = &pdCall{}
	}
	p.reset()
	return p
}

func (s *Server) putPD(p *pdCall) {
	p.client, p.pu, p.leg = nil, nil, nil
	s.pds.Put(p)
}
