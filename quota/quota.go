// Package quota enforces each tenant's requests per minute and tokens per
// minute at admission. Each limit is a generic cell rate algorithm bucket
// (a token bucket whose burst is the limit itself): a limit of N admits
// exactly N at once from rest, then one more every minute/N. Tokens are
// reserved at admission from an estimate and settled when the answer ends
// from the usage the backend reported; an answer that used more than was
// left is never cut, its overrun is charged as debt that later requests
// wait out.
package quota

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvca/kvca/apikeys"
)

// Limiter holds every tenant's buckets. Its methods are safe for
// concurrent use; a tenant's buckets are behind that tenant's own mutex,
// so tenants never contend with each other.
type Limiter struct {
	now     func() int64
	tenants atomic.Pointer[[]*tenant] // by apikeys.Tenant.ID

	mu     sync.Mutex // guards byName and growing tenants
	byName map[string]*tenant
	set    *metrics.Set
}

type tenant struct {
	name string
	mu   sync.Mutex
	req  bucket
	tok  bucket

	// Charged here since the last TakeUsage, for the other replicas.
	pubReq, pubTok atomic.Int64

	admitted, limReq, limTok *metrics.Counter
	prompt, completion       *metrics.Counter
	estimated, overrun       *metrics.Counter
	remoteReq, remoteTok     *metrics.Counter
}

// Options configure a Limiter.
type Options struct {
	// Now returns a monotonic time in ns; default the time since New.
	Now func() int64
}

// New returns a Limiter with no tenants; Attach or Ensure adds them.
func New(o Options) *Limiter {
	l := &Limiter{now: o.Now, byName: map[string]*tenant{}, set: metrics.NewSet()}
	if l.now == nil {
		epoch := time.Now()
		l.now = func() int64 { return int64(time.Since(epoch)) }
	}
	empty := []*tenant{}
	l.tenants.Store(&empty)
	return l
}

// Attach keeps the limiter's tenants in step with a keys store: each set
// the store loads gets its tenants' state before it comes into force.
func (l *Limiter) Attach(s *apikeys.Store) {
	s.OnLoad(func(set *apikeys.Set) {
		for _, t := range set.Tenants() {
			l.Ensure(t)
		}
	})
}

// Ensure makes room for t's state; Admit does it too, but off the
// request path is better.
func (l *Limiter) Ensure(t *apikeys.Tenant) {
	st := l.ensure(t)
	st.mu.Lock()
	st.req.setLimit(t.RPM)
	st.tok.setLimit(t.TPM)
	st.mu.Unlock()
}

func (l *Limiter) ensure(t *apikeys.Tenant) *tenant {
	if ts := *l.tenants.Load(); t.ID < len(ts) && ts[t.ID] != nil {
		return ts[t.ID]
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ts := *l.tenants.Load()
	if t.ID < len(ts) && ts[t.ID] != nil {
		return ts[t.ID]
	}
	st := l.byName[t.Name]
	if st == nil {
		st = l.newTenant(t.Name)
		l.byName[t.Name] = st
	}
	n := max(len(ts), t.ID+1)
	grown := make([]*tenant, n)
	copy(grown, ts)
	grown[t.ID] = st
	l.tenants.Store(&grown)
	return st
}

func (l *Limiter) newTenant(name string) *tenant {
	q := strconv.Quote(name) // tenant names are label-safe (apikeys.ValidTenant); quoted all the same
	c := func(metric, labels string) *metrics.Counter {
		return l.set.NewCounter(metric + `{tenant=` + q + labels + `}`)
	}
	return &tenant{
		name:       name,
		admitted:   c("kvca_tenant_requests_total", `,result="admitted"`),
		limReq:     c("kvca_tenant_requests_total", `,result="limited_requests"`),
		limTok:     c("kvca_tenant_requests_total", `,result="limited_tokens"`),
		prompt:     c("kvca_tenant_tokens_total", `,kind="prompt"`),
		completion: c("kvca_tenant_tokens_total", `,kind="completion"`),
		estimated:  c("kvca_tenant_estimated_tokens_total", ""),
		overrun:    c("kvca_tenant_overrun_tokens_total", ""),
		remoteReq:  c("kvca_tenant_remote_requests_total", ""),
		remoteTok:  c("kvca_tenant_remote_tokens_total", ""),
	}
}

func (l *Limiter) state(t *apikeys.Tenant) *tenant {
	ts := *l.tenants.Load()
	if t.ID < len(ts) && ts[t.ID] != nil {
		return ts[t.ID]
	}
	return l.ensure(t)
}

// WritePrometheus writes the per-tenant metrics; tenants come from the
// keys file only, so their number is bounded by it.
func (l *Limiter) WritePrometheus(w interface{ Write([]byte) (int, error) }) {
	l.set.WritePrometheus(w)
}

// EstimateTokens is the prompt tokens assumed for a request whose answer
// reports no usage: its canonical bytes over 4, the usual bytes per token
// of BPE vocabularies on English text and JSON.
func EstimateTokens(cbrBytes int) int64 { return int64(cbrBytes+3) / 4 }

// Admit decides whether t may send a request now whose prompt is
// estimated at estTokens, and fills d (the headers of the answer either
// way). Admitted, one request and the estimate (at least 1, at most TPM)
// tokens are charged: the reservation that Settle corrects. It allocates
// nothing.
func (l *Limiter) Admit(t *apikeys.Tenant, estTokens int64, d *Decision) bool {
	st := l.state(t)
	now := l.now()
	*d = Decision{Tenant: t.ID, ReqLimit: t.RPM, TokLimit: t.TPM}
	cost := tokenCost(estTokens, t.TPM)
	st.mu.Lock()
	st.req.setLimit(t.RPM)
	st.tok.setLimit(t.TPM)
	reqOK, tokOK := true, true
	var reqWait, tokWait int64
	if t.RPM > 0 {
		reqOK, reqWait = st.req.fits(now, 1)
	}
	if t.TPM > 0 {
		tokOK, tokWait = st.tok.fits(now, cost)
	}
	d.OK = reqOK && tokOK
	if d.OK {
		st.req.charge(now, 1)
		st.tok.charge(now, cost)
		d.Reserved = cost
	}
	if t.RPM > 0 {
		d.ReqRemaining, d.ReqReset = st.req.remaining(now), st.req.reset(now)
	}
	if t.TPM > 0 {
		d.TokRemaining, d.TokReset = st.tok.remaining(now), st.tok.reset(now)
	}
	st.mu.Unlock()
	switch {
	case d.OK:
		st.admitted.Inc()
		st.pubReq.Add(1)
		st.pubTok.Add(d.Reserved)
	case !reqOK:
		st.limReq.Inc()
		d.Limited = LimitRequests
	default:
		st.limTok.Inc()
		d.Limited = LimitTokens
	}
	d.RetryAfter = max(reqWait, tokWait)
	return d.OK
}

// tokenCost is what admission reserves: the estimate, at least 1 (a
// tenant with no token left is refused, even for a request estimated at
// nothing) and at most the whole limit (so that any request can go from a
// full bucket).
func tokenCost(est, limit int64) int64 {
	if limit == 0 {
		return 0
	}
	return min(max(est, 1), limit)
}

// Usage is what an answer consumed.
type Usage struct {
	Prompt, Completion int64
	// Estimated: the backend reported no usage; Prompt is an estimate
	// (EstimateTokens) and Completion is 0.
	Estimated bool
}

// Settle charges what an admitted request really used, correcting the
// reservation Admit made (a refund when it used less). Tokens beyond what
// was left are charged all the same (the overrun of a stream that went on
// past the limit): later requests wait until it is paid back. Call it
// once per admitted request, when the answer ended however it ended.
func (l *Limiter) Settle(t *apikeys.Tenant, d *Decision, u Usage) {
	if !d.OK {
		return
	}
	st := l.state(t)
	used := max(u.Prompt, 0) + max(u.Completion, 0)
	extra := used - d.Reserved
	var overrun int64
	if t.TPM > 0 && extra != 0 {
		now := l.now()
		st.mu.Lock()
		st.tok.setLimit(t.TPM)
		if extra > 0 {
			overrun = max(extra-st.tok.remaining(now), 0)
		}
		st.tok.charge(now, extra)
		st.mu.Unlock()
	}
	st.pubTok.Add(extra)
	if u.Estimated {
		st.estimated.Add(int(used))
	} else {
		st.prompt.Add(int(max(u.Prompt, 0)))
		st.completion.Add(int(max(u.Completion, 0)))
	}
	if overrun > 0 {
		st.overrun.Add(int(overrun))
	}
}

// TakeUsage reports, per tenant, the requests and tokens charged here
// since the last call (tokens may be negative: refunds), and starts
// counting afresh; the cluster publishes them to the other replicas.
func (l *Limiter) TakeUsage(f func(tenant string, requests, tokens int64)) {
	for _, st := range *l.tenants.Load() {
		if st == nil {
			continue
		}
		r, k := st.pubReq.Swap(0), st.pubTok.Swap(0)
		if r != 0 || k != 0 {
			f(st.name, r, k)
		}
	}
}

// ChargeRemote charges what another replica admitted for a tenant, so
// the fleet shares one budget; a tenant this replica does not know is
// ignored (false).
func (l *Limiter) ChargeRemote(name string, requests, tokens int64) bool {
	l.mu.Lock()
	st := l.byName[name]
	l.mu.Unlock()
	if st == nil {
		return false
	}
	now := l.now()
	st.mu.Lock()
	if st.req.limit > 0 {
		st.req.charge(now, requests)
	}
	if st.tok.limit > 0 {
		st.tok.charge(now, tokens)
	}
	st.mu.Unlock()
	st.remoteReq.Add(int(max(requests, 0)))
	st.remoteTok.Add(int(max(tokens, 0)))
	return true
}

func (l *Limiter) tenantFor(t *apikeys.Tenant) *tenant { return l.state(t) }

// Peek fills d with t's current headers without charging anything; d.OK
// tells whether a request estimated at estTokens would be admitted now.
func (l *Limiter) Peek(t *apikeys.Tenant, estTokens int64, d *Decision) {
	st := l.state(t)
	now := l.now()
	*d = Decision{Tenant: t.ID, ReqLimit: t.RPM, TokLimit: t.TPM, OK: true}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.req.setLimit(t.RPM)
	st.tok.setLimit(t.TPM)
	if t.RPM > 0 {
		ok, w := st.req.fits(now, 1)
		d.OK, d.RetryAfter = ok, w
		d.ReqRemaining, d.ReqReset = st.req.remaining(now), st.req.reset(now)
	}
	if t.TPM > 0 {
		ok, w := st.tok.fits(now, tokenCost(estTokens, t.TPM))
		d.OK, d.RetryAfter = d.OK && ok, max(d.RetryAfter, w)
		d.TokRemaining, d.TokReset = st.tok.remaining(now), st.tok.reset(now)
	}
}
