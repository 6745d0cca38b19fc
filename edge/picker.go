package edge

import (
	"bytes"
	"context"
	"strings"

	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/chain"
)

// Picker is the request lifecycle driven by an endpoint picker (kvca
// serve --ext-proc): a gateway shows kvca each request and its answer,
// kvca names the endpoint, and the gateway moves the bytes. Every
// decision is the lifecycle's (lifecycle.go), as on kvca's own listener;
// what differs is only what a picker cannot do: retry on another backend
// after an answer began (the gateway retries on the fallbacks it was
// given, and says which endpoint served).
type Picker struct{ s *Server }

// Picker returns the server's request lifecycle for an endpoint picker.
func (s *Server) Picker() *Picker { return &Picker{s: s} }

// Headers is a request's or answer's header fields as the picker's
// protocol gives them (HTTP/2 pseudo-headers included, names in lower
// case).
type Headers interface {
	Len() int
	At(i int) (name, value []byte)
}

// PickAnswer is an answer kvca gives the client itself, through the
// gateway: an error, or one of kvca's own routes.
type PickAnswer struct {
	Status int
	Header [][2]string
	Body   []byte
}

// Endpoints are the backends' endpoints (host:port), in slot order.
func (p *Picker) Endpoints() []string {
	var eps []string
	for _, u := range p.s.fleet().live() {
		eps = append(eps, u.b.Name)
	}
	return eps
}

// Backends are the backends in force as SetEndpoints was given them
// (http://host:port and any options, such as a role), for a reload to
// keep them as they are.
func (p *Picker) Backends() []string {
	var out []string
	for _, u := range p.s.fleet().live() {
		out = append(out, u.addr.origin)
	}
	return out
}

// SetEndpoints makes the model servers at eps (host:port, plain HTTP)
// the backends, as a reload would. An endpoint may carry the options of
// a --backend suffix (host:port#role=prefill).
func (p *Picker) SetEndpoints(eps []string) error {
	urls := make([]string, len(eps))
	for i, e := range eps {
		urls[i] = "http://" + e
	}
	_, err := p.s.SetBackends(urls, "", -1)
	return err
}

// Ready reports whether kvca can pick: some backend is healthy and it is
// not draining.
func (p *Picker) Ready() bool {
	st, _ := p.s.readiness()
	return st == 200
}

// PickExchange is one request's lifecycle as the picker drives it: Body
// until its end, Pick, then Response and ResponseBody for a picked
// request, and End exactly once.
type PickExchange struct {
	s    *Server
	c    *call
	body []byte
	wake chan uint64
	// act is the pick's next step, kept when PickNow stops at a wait for
	// Pick to go on from; begun: the request was received.
	act   act
	begun bool
	ended bool
	own   bool // kvca answered it itself
	sse   bool
	// prefiller is the prefill worker of a disaggregated request (""
	// none), for the gateway's side to run the prefill leg on.
	prefiller string
}

// Begin starts the lifecycle of one request from its header fields.
func (p *Picker) Begin(h Headers) *PickExchange {
	s := p.s
	method, _ := header(h, ":method")
	target, _ := header(h, ":path")
	path, _, _ := bytes.Cut(target, []byte("?"))
	client, _ := header(h, "x-forwarded-for")
	if i := bytes.IndexByte(client, ','); i >= 0 {
		client = client[:i]
	}
	c := s.begin(bytes.TrimSpace(client), nil)
	x := &PickExchange{s: s, c: c, wake: make(chan uint64, 1)}
	c.picker = true
	c.tk.Owner, c.tk.Wake = x, pickerWake
	c.receive(method, path, string(target) == "*", string(method) == "CONNECT" && len(target) == 0, h)
	return x
}

// pickerWake brings an admission wake to the goroutine waiting in Pick.
func pickerWake(t *admit.Ticket, seq uint64) {
	x := t.Owner.(*PickExchange)
	for {
		select {
		case x.wake <- seq:
			return
		default: // an older wake is pending: the newest replaces it
		}
		select {
		case <-x.wake:
		default:
		}
	}
}

// Body takes the next chunk of the request body; a body over
// --max-body-bytes is answered 413. A body given whole (its first chunk
// is its end) is kept as it is, not copied: the caller must leave it
// unchanged until End. Other chunks are copied.
func (x *PickExchange) Body(chunk []byte, end bool) *PickAnswer {
	if len(x.body)+len(chunk) > x.s.cfg.MaxBodyBytes {
		x.s.m.badRequest("too_large")
		r := tooLarge(x.s.cfg.MaxBodyBytes)
		return x.answerReply(&r)
	}
	if x.body == nil && end {
		// The picker's codec puts a body with a Content-Length together
		// in one buffer: copying it again was a twentieth of the
		// picker's CPU at 128 KB to 512 KB.
		x.body = chunk[:len(chunk):len(chunk)] // an append copies
		return nil
	}
	x.body = append(x.body, chunk...)
	return nil
}

// Pick plans, admits and routes the request within subset (nil: any
// endpoint): the chosen endpoint and, for the gateway's retries, the
// other eligible ones, least loaded first; or kvca's own answer. It
// waits in the admission queue until it is admitted or ctx ends (then
// nil, nil: End follows). Called after PickNow said wait, it goes on
// from the wait.
func (x *PickExchange) Pick(ctx context.Context, subset []string) ([]string, *PickAnswer) {
	eps, ans, wait := x.step(subset, true)
	for wait {
		select {
		case seq := <-x.wake:
			x.act = x.c.admitted(seq)
		case <-ctx.Done():
			return nil, nil
		}
		eps, ans, wait = x.step(nil, true)
	}
	return eps, ans
}

// PickNow is Pick up to anything that waits: wait reports that the
// request waits in the admission queue, or has a step that may wait on
// the network (the model list asks the backends it has not cached), and
// Pick is to go on from it. The picker calls it on the goroutine that
// serves a whole connection, which must never wait.
func (x *PickExchange) PickNow(subset []string) (eps []string, ans *PickAnswer, wait bool) {
	return x.step(subset, false)
}

// step runs the pick from x.act until an answer, a pick or a wait;
// mayWait says whether the model list may be fetched here.
func (x *PickExchange) step(subset []string, mayWait bool) (eps []string, ans *PickAnswer, wait bool) {
	c := x.c
	if !x.begun {
		x.begun = true
		x.act = c.received(x.body, len(x.body))
	}
	for {
		switch x.act {
		case actReply:
			return nil, x.answerReply(&c.rep), false
		case actAnswer:
			return nil, x.answerOwn(c.own.status, c.own.body, c.own.header), false
		case actModels:
			if !mayWait {
				return nil, nil, true
			}
			st, b := x.s.modelsAnswer(c.modelCreds(), c.modelID())
			return nil, x.answerOwn(st, b, ""), false
		case actPlan:
			x.act = c.planned(c.plan(x.body))
		case actTry:
			if subset != nil {
				c.within(x.s.endpointSet(subset))
				subset = nil
			}
			x.act = c.try()
		case actSend, actReplay:
			if c.pd != nil && c.pd.header {
				x.prefiller = c.pd.pu.b.Name
			}
			x.s.m.picks[c.dec.Rule].Inc()
			return x.s.fallbacks(c), nil, false
		default: // actQueued, or actNone after a stale wake: wait on
			return nil, nil, true
		}
	}
}

// RequestHeaders are the request headers the pick sets: the prefill
// worker of a disaggregated request, in x-prefiller-host-port (the
// convention of llm-d's routing sidecar, which runs the prefill leg from
// the decode worker's side).
func (x *PickExchange) RequestHeaders() [][2]string {
	if x.prefiller == "" {
		return nil
	}
	return [][2]string{{"x-prefiller-host-port", x.prefiller}}
}

// Response takes the answer's head from served (the endpoint that
// answered; "": the one picked) and returns the header fields kvca adds.
func (x *PickExchange) Response(status int, served string, h Headers) [][2]string {
	c := x.c
	if c.life != lifeAttempting { // not picked, or already answered
		return nil
	}
	if served != "" && served != c.u.b.Name {
		if i := x.s.endpointIndex(served); i >= 0 {
			c.servedBy(i) // the gateway retried on a fallback
		}
	}
	ctype, _ := header(h, "content-type")
	_, lengths := header(h, "content-length")
	x.sse = bytes.HasPrefix(ctype, []byte("text/event-stream"))
	_, extra := c.head(status, x.sse || lengths == 0, x.sse, nil)
	return headerLines(extra)
}

// ResponseBody takes the next chunk of the answer's body (its transfer
// framing already removed by the gateway).
func (x *PickExchange) ResponseBody(chunk []byte, end bool) {
	c := x.c
	if c.life != lifeAnswering || len(chunk) == 0 {
		return
	}
	c.bodyBegun(x.sse)
	c.out += int64(len(chunk))
	c.Data(chunk)
}

// End ends the lifecycle once, whatever happened: cancelled, the stream
// ended before the answer did.
func (x *PickExchange) End(cancelled bool) {
	if x.ended {
		return
	}
	x.ended = true
	c := x.c
	switch {
	case x.own:
		x.s.done(c)
	case c.life == lifeAnswering:
		c.finish(nil, cancelled)
	case c.life == lifeAttempting && !cancelled:
		c.status = 502 // the gateway ended it without an answer from the endpoint
		c.outcome = outUpstream
		x.s.done(c)
	default:
		c.left()
	}
	x.c = nil
}

func (x *PickExchange) answerReply(r *reply) *PickAnswer {
	x.c.answering(r.status, true, 0)
	x.own = true
	return &PickAnswer{Status: r.status, Header: append(headerLines([]byte(r.header)), [2]string{"content-type", "application/json"}),
		Body: r.appendBody(nil, x.c.route == routeMessages)}
}

func (x *PickExchange) answerOwn(status int, body []byte, hdr string) *PickAnswer {
	x.c.answering(status, false, len(body))
	x.own = true
	return &PickAnswer{Status: status, Header: append(headerLines([]byte(hdr)), [2]string{"content-type", "application/json"}), Body: body}
}

// headerLines splits header lines ("Name: value\r\n"…) into fields.
func headerLines(b []byte) [][2]string {
	if len(b) == 0 {
		return nil
	}
	// One string for all the lines, the fields slicing it.
	rest := string(b)
	out := make([][2]string, 0, bytes.Count(b, []byte("\n"))+1)
	for rest != "" {
		var line string
		line, rest, _ = strings.Cut(rest, "\r\n")
		if n, v, ok := strings.Cut(line, ":"); ok {
			out = append(out, [2]string{strings.ToLower(strings.TrimSpace(n)), strings.TrimSpace(v)})
		}
	}
	return out
}

// endpointIndex is the slot of the live backend at endpoint ep (-1: none).
func (s *Server) endpointIndex(ep string) int {
	for _, u := range s.fleet().live() {
		if u.b.Name == ep {
			return u.b.Index
		}
	}
	return -1
}

// endpointSet is the slots of the endpoints named.
func (s *Server) endpointSet(eps []string) chain.Set {
	var set chain.Set
	for _, ep := range eps {
		if i := s.endpointIndex(strings.TrimSpace(ep)); i >= 0 {
			set.Add(i)
		}
	}
	return set
}

// fallbacks is the endpoint picked, then the other eligible healthy
// backends by load, for the gateway to retry on.
func (s *Server) fallbacks(c *call) []string {
	out := append(make([]string, 0, maxFallbacks), c.u.b.Name) // one allocation, not one per growth
	r := c.req
	r.Exclude.Add(c.u.b.Index)
	elig := c.fl.sched.Eligible(&r)
	for len(out) < maxFallbacks {
		best := -1
		elig.Each(func(i int) {
			if best < 0 || c.fl.sched.Backends[i].Active() < c.fl.sched.Backends[best].Active() {
				best = i
			}
		})
		if best < 0 {
			break
		}
		elig[best>>6] &^= 1 << (best & 63)
		out = append(out, c.fl.sched.Backends[best].Name)
	}
	return out
}

// maxFallbacks bounds the endpoints named for one request: the pick and
// as many retries as a gateway's retry policy commonly allows.
const maxFallbacks = 4
