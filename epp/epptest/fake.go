// Package epptest is a fake epp.Proxy for the picker's tests and the
// conformance tool's: a round-robin lifecycle that records every call
// its exchanges get, so tests can assert what the picker passed on.
package epptest

import (
	"context"
	"strconv"
	"sync"

	"github.com/kvca/kvca/epp"
)

// Test headers that steer a fake exchange; a real lifecycle knows none.
const (
	// HeaderAnswer: Pick answers with this status (429, 503, …).
	HeaderAnswer = "x-epptest-answer"
	// HeaderBlock: Pick waits until its context ends (admission queue).
	HeaderBlock = "x-epptest-block"
	// HeaderPanic: Pick panics.
	HeaderPanic = "x-epptest-panic"
	// HeaderConversation names a conversation: its next pick goes first
	// where its last answer was served (as a picker reading prompts
	// would send it where its prefix was computed).
	HeaderConversation = "x-epptest-conversation"
)

// Proxy is a fake epp.Proxy. Its zero value has no endpoints.
type Proxy struct {
	// Fallbacks is how many fallbacks follow the primary endpoint.
	Fallbacks int
	// MaxBody makes Body answer 413 past this many bytes; 0: no limit.
	MaxBody int

	mu        sync.Mutex
	eps       []string
	next      int
	exchanges []*Exchange
	changed   chan struct{}
	// served is where each conversation (HeaderConversation) was last
	// served: its next pick goes there first.
	served map[string]string
}

// Begin starts a recorded exchange.
func (p *Proxy) Begin(h epp.Headers) epp.Exchange {
	x := &Exchange{p: p, Headers: map[string]string{}}
	for i := range h.Len() {
		k, v := h.At(i)
		x.Headers[string(k)] = string(v)
	}
	p.mu.Lock()
	p.exchanges = append(p.exchanges, x)
	p.mu.Unlock()
	return x
}

// Endpoints returns the endpoints set last.
func (p *Proxy) Endpoints() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.eps...)
}

// SetEndpoints replaces the endpoints and wakes Changed's waiters.
func (p *Proxy) SetEndpoints(eps []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.eps = append([]string(nil), eps...)
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
	return nil
}

// Changed returns a channel closed at the next SetEndpoints.
func (p *Proxy) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.changed
}

// Ready is true while there are endpoints.
func (p *Proxy) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.eps) > 0
}

// Exchanges returns the exchanges begun so far, in order.
func (p *Proxy) Exchanges() []*Exchange {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Exchange(nil), p.exchanges...)
}

func (p *Proxy) servedAt(conv string) string {
	if conv == "" {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.served[conv]
}

// pick is round robin over the endpoints the subset allows.
func (p *Proxy) pick(subset []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var cands []string
	for _, e := range p.eps {
		if subset == nil || contains(subset, e) {
			cands = append(cands, e)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	p.next++
	out := make([]string, 0, 1+p.Fallbacks)
	for i := 0; i < len(cands) && i <= p.Fallbacks; i++ {
		out = append(out, cands[(p.next+i)%len(cands)])
	}
	return out
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// Exchange records what the picker told one request's lifecycle.
type Exchange struct {
	p       *Proxy
	Headers map[string]string

	mu         sync.Mutex
	body       []byte
	bodyCalls  int
	bodyEnd    bool
	subset     []string
	picked     []string
	status     int
	served     string
	respHeader map[string]string
	respBody   []byte
	respEnd    bool
	ends       int
	cancelled  bool
	endCh      chan struct{}
}

// Body keeps a copy of the chunk (the picker lends it).
func (x *Exchange) Body(chunk []byte, end bool) *epp.Answer {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.body = append(x.body, chunk...)
	x.bodyCalls++
	x.bodyEnd = end
	if x.p.MaxBody > 0 && len(x.body) > x.p.MaxBody {
		return &epp.Answer{Status: 413, Body: []byte("too large\n")}
	}
	return nil
}

// Pick answers as the test headers say, else round robin.
func (x *Exchange) Pick(ctx context.Context, subset []string) ([]string, *epp.Answer) {
	if _, ok := x.Headers[HeaderPanic]; ok {
		panic("epptest: panic asked for")
	}
	if _, ok := x.Headers[HeaderBlock]; ok {
		<-ctx.Done()
		return nil, &epp.Answer{Status: 503, Body: []byte("gave up\n")}
	}
	if s, ok := x.Headers[HeaderAnswer]; ok {
		code, _ := strconv.Atoi(s)
		return nil, &epp.Answer{Status: code, Header: [][2]string{{"retry-after", "1"}}, Body: []byte("answered " + s + "\n")}
	}
	eps := x.p.pick(subset)
	if at := x.p.servedAt(x.Headers[HeaderConversation]); at != "" && len(eps) > 0 && contains(x.p.Endpoints(), at) && (subset == nil || contains(subset, at)) {
		out := []string{at}
		for _, e := range eps {
			if e != at && len(out) < len(eps) {
				out = append(out, e)
			}
		}
		eps = out
	}
	x.mu.Lock()
	x.subset, x.picked = subset, eps
	x.mu.Unlock()
	if len(eps) == 0 {
		return nil, &epp.Answer{Status: 503, Body: []byte("no endpoint ready\n")}
	}
	return eps, nil
}

// Response records the response head and adds x-epptest-served.
func (x *Exchange) Response(status int, served string, h epp.Headers) [][2]string {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.status, x.served = status, served
	if conv := x.Headers[HeaderConversation]; conv != "" && served != "" {
		x.p.mu.Lock()
		if x.p.served == nil {
			x.p.served = map[string]string{}
		}
		x.p.served[conv] = served
		x.p.mu.Unlock()
	}
	x.respHeader = map[string]string{}
	for i := range h.Len() {
		k, v := h.At(i)
		x.respHeader[string(k)] = string(v)
	}
	return [][2]string{{"x-epptest-served", served}}
}

// ResponseBody keeps a copy of the chunk.
func (x *Exchange) ResponseBody(chunk []byte, end bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.respBody = append(x.respBody, chunk...)
	x.respEnd = end
}

// End counts its calls: the picker must make exactly one.
func (x *Exchange) End(cancelled bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.ends++
	x.cancelled = cancelled
	if x.endCh != nil {
		close(x.endCh)
		x.endCh = nil
	}
}

// Snapshot is what an exchange recorded, copied.
type Snapshot struct {
	Headers    map[string]string
	Body       []byte
	BodyCalls  int
	BodyEnd    bool
	Subset     []string
	Picked     []string
	Status     int
	Served     string
	RespHeader map[string]string
	RespBody   []byte
	RespEnd    bool
	Ends       int
	Cancelled  bool
}

// Snapshot copies what the exchange recorded so far.
func (x *Exchange) Snapshot() Snapshot {
	x.mu.Lock()
	defer x.mu.Unlock()
	return Snapshot{
		Headers: x.Headers, Body: append([]byte(nil), x.body...), BodyCalls: x.bodyCalls, BodyEnd: x.bodyEnd,
		Subset: x.subset, Picked: x.picked, Status: x.status, Served: x.served, RespHeader: x.respHeader,
		RespBody: append([]byte(nil), x.respBody...), RespEnd: x.respEnd, Ends: x.ends, Cancelled: x.cancelled,
	}
}

// Ended returns a channel closed when End is called (at once if it was).
func (x *Exchange) Ended() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ends > 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if x.endCh == nil {
		x.endCh = make(chan struct{})
	}
	return x.endCh
}
