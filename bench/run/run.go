// Package run is the bench's load driver: it starts mock engines and, per
// routing policy, a proxy in front of them, replays one workload open-loop
// at its recorded times, and reports what each policy achieved. The proxy
// comes from a ProxyFactory, so the driver knows nothing of kvca's edge.
package run

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/bench/workload"
)

// Proxy is a running proxy under test.
type Proxy interface {
	URL() string // base URL, e.g. "http://127.0.0.1:8080"
	Close() error
}

// Replicas is implemented by a proxy made of several replicas: requests
// are spread over their URLs in turn, as an L4 balancer spreads them.
type Replicas interface {
	URLs() []string
}

// CPUReporter is implemented by proxies that run in a process of their own
// and can tell their CPU time (user + system) so far.
type CPUReporter interface {
	CPUTime() (time.Duration, error)
}

// ProxyFactory starts a proxy with a routing policy in front of backends
// ("http://127.0.0.1:port").
type ProxyFactory func(policy string, backends []string) (Proxy, error)

// DefaultPolicies are the policies the bench compares. "precise" is the
// bench's own oracle (Options.Precise), the bound for the others.
var DefaultPolicies = []string{"precise", "kvca-cost", "kvca", "cost", "round-robin", "least-loaded", "random", "session-hash"}

// PrecisePolicy names the oracle baseline, run by Options.Precise.
const PrecisePolicy = "precise"

// Predictor is implemented by proxies that can tell what they predicted:
// the share of the blocks they routed that they believed cached where
// they sent them, and how many locations they dropped because a
// backend's cache could not hold them.
type Predictor interface {
	Predicted() (hitRate float64, ok bool)
	CapacityEvictions() uint64
}

// BackendPredictor is implemented by proxies that can tell what they
// predicted on each backend, in the order of the backends they were
// given: the share of the blocks routed there believed cached (-1: none
// routed).
type BackendPredictor interface {
	PredictedPerBackend() []float64
}

// Options configure a bench run.
type Options struct {
	Engines  int         // default 8
	Engine   mock.Config // template for every engine; Name is set per engine
	Policies []string    // default DefaultPolicies

	// MaxInFlight bounds concurrent requests; arrivals beyond it wait (and
	// are counted as Delayed). Default 2048.
	MaxInFlight int
	Timeout     time.Duration // per request; default 10m
	SampleEvery time.Duration // engine load sampling period; default 200ms
	Progress    io.Writer     // a line per second while running; nil: quiet
	// Precise starts the proxy for PrecisePolicy, which reads the engines
	// themselves; nil: that policy is refused.
	Precise func(engines []*mock.Engine, w *workload.Workload, backends []string) (Proxy, error)

	// EngineCommand, when set, runs every engine as this command instead
	// of a mock: PortPlaceholder in an argument becomes the port it must
	// listen on (127.0.0.1), NamePlaceholder its name. Fresh processes for
	// every policy, as with mocks; the hit rate and load come from their
	// /metrics (vLLM's or SGLang's names). Engine (the mock template) then
	// only gives the block size of the workload's ideal hit rate; the
	// command's own durations are not scaled by TimeScale.
	EngineCommand []string
	// EngineReadyPath is polled until it answers 200 after an engine
	// starts; default "/health". EngineStartTimeout bounds that wait;
	// default 60s.
	EngineReadyPath    string
	EngineStartTimeout time.Duration

	// PrefillEngines, when positive, makes the fleet disaggregated: the
	// first PrefillEngines engines are given to the proxy as prefill
	// workers (URL#role=prefill), the others as decode workers
	// (URL#role=decode), and the report gives the prefill workers' hit
	// rate apart.
	PrefillEngines int
}

// PDReporter is implemented by proxies that can tell how the requests of a
// disaggregated fleet ran: through a prefill leg and a decode leg (split),
// or on a decode worker alone (aggregated).
type PDReporter interface {
	PDCounts() (split, aggregated uint64)
}

func (o *Options) defaults() {
	if o.Engines <= 0 {
		o.Engines = 8
	}
	if len(o.Policies) == 0 {
		o.Policies = DefaultPolicies
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 2048
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 200 * time.Millisecond
	}
	if o.EngineReadyPath == "" {
		o.EngineReadyPath = "/health"
	}
	if o.EngineStartTimeout <= 0 {
		o.EngineStartTimeout = time.Minute
	}
}

// Run replays w once per policy, each time on fresh engines with empty
// caches, and reports the results in policy order.
func Run(ctx context.Context, w *workload.Workload, opt Options, factory ProxyFactory) (*Report, error) {
	opt.defaults()
	ecfg := mock.New(opt.Engine).Config()
	bt := ecfg.BlockTokens
	novel := make([]int, 0, len(w.Requests))
	ideal, err := workload.IdealNovel(w.Requests, bt, &novel)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	rep := &Report{Workload: WorkloadInfo{
		Name: w.Name, Requests: len(w.Requests), IdealHitRate: ideal.Rate(),
		BlockTokens: bt, Engines: opt.Engines,
		WorkingSetTokens: ideal.UniqueTokens, CacheTokens: int64(max(ecfg.CacheTokens, 0)),
	}}
	// The TTFT floor: every request's prefill with the ideal cache and no
	// queueing. No routing can beat it, so it shows how much of a TTFT
	// percentile is left for routing to win at this load.
	// An external engine's prefill costs are its own: no floor, and its
	// capacity is read from it.
	if len(opt.EngineCommand) == 0 {
		floor := make([]time.Duration, len(novel))
		for i, n := range novel {
			floor[i] = time.Duration(float64(ecfg.PrefillOverhead+time.Duration(n)*ecfg.PrefillPerToken) * ecfg.TimeScale)
		}
		sort.Slice(floor, func(i, j int) bool { return floor[i] < floor[j] })
		rep.Workload.TTFTFloor = [3]time.Duration{pct(floor, 0.5), pct(floor, 0.9), pct(floor, 0.99)}
	} else {
		rep.Workload.CacheTokens = 0
	}
	rep.Workload.DistinctPrefixes = distinctPrefixes(w)
	if w.HasTraceIdeal {
		r := w.TraceIdeal.Rate()
		rep.Workload.TraceIdealHitRate = &r
	}
	for _, policy := range opt.Policies {
		res, err := runPolicy(ctx, w, opt, policy, factory, rep)
		if err != nil {
			return rep, fmt.Errorf("policy %s: %w", policy, err)
		}
		rep.Results = append(rep.Results, *res)
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func runPolicy(ctx context.Context, w *workload.Workload, opt Options, policy string, factory ProxyFactory, rep *Report) (*Result, error) {
	engines := make([]engine, opt.Engines)
	mocks := make([]*mock.Engine, 0, opt.Engines)
	backends := make([]string, opt.Engines)
	defer func() {
		for _, e := range engines {
			if e != nil {
				e.Close()
			}
		}
	}()
	for i := range engines {
		name := fmt.Sprintf("e%d", i)
		if len(opt.EngineCommand) > 0 {
			e, err := startExternal(opt.EngineCommand, name, opt.EngineReadyPath, opt.EngineStartTimeout)
			if err != nil {
				return nil, err
			}
			engines[i] = e
			if rep.Workload.CacheTokens == 0 {
				rep.Workload.CacheTokens = e.CapacityTokens()
			}
		} else {
			cfg := opt.Engine
			cfg.Name = name
			m := mock.New(cfg)
			if err := m.Start("127.0.0.1:0"); err != nil {
				return nil, err
			}
			engines[i] = mockEngine{m}
			mocks = append(mocks, m)
		}
		backends[i] = engines[i].URL()
		if n := opt.PrefillEngines; n > 0 && i < n {
			backends[i] += "#role=prefill"
		} else if n > 0 {
			backends[i] += "#role=decode"
		}
	}
	var proxy Proxy
	var err error
	switch {
	case policy == OraclePolicy:
		proxy = oracle{}
	case policy != PrecisePolicy:
		proxy, err = factory(policy, backends)
	case opt.Precise != nil && len(mocks) == len(engines):
		proxy, err = opt.Precise(mocks, w, backends)
	case opt.Precise != nil:
		err = errors.New("the precise baseline reads mock engines' caches; external engines have none to read")
	default:
		err = errors.New("this proxy cannot run the precise baseline (it runs in-process only)")
	}
	if err != nil {
		return nil, fmt.Errorf("starting proxy: %w", err)
	}
	defer proxy.Close()
	pinned := oracleBases(policy, w, backends)
	cpuBefore, cpuHow := cpuTime(proxy)

	transport := &http.Transport{
		MaxIdleConns:        opt.MaxInFlight,
		MaxIdleConnsPerHost: opt.MaxInFlight,
		DisableCompression:  true,
		IdleConnTimeout:     time.Minute,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	bases := []string{proxy.URL()}
	if rp, ok := proxy.(Replicas); ok && len(rp.URLs()) > 0 {
		bases = rp.URLs()
	}

	n := len(w.Requests)
	outcomes := make([]outcome, n)
	// finished[i] is closed once outcomes[i] is set: a Responses API
	// continuation waits for the answer it continues.
	finished := make([]chan struct{}, n)
	for i := range finished {
		finished[i] = make(chan struct{})
	}
	var sent, done, failed, delayed atomic.Int64
	sem := make(chan struct{}, opt.MaxInFlight)
	var wg sync.WaitGroup

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	sampler := newSampler(engines, start, opt.SampleEvery)
	stopProgress := progress(opt.Progress, func() string {
		var q, h uint64
		for _, e := range engines {
			st := e.Stats()
			q += st.QueryTokens
			h += st.HitTokens
		}
		rate := 0.0
		if q > 0 {
			rate = float64(h) / float64(q)
		}
		d := done.Load()
		return fmt.Sprintf("bench %-12s %6.0fs  sent %d/%d  done %d  in flight %d  errors %d  hit %.1f%%",
			policy, time.Since(start).Seconds(), sent.Load(), n, d, sent.Load()-d, failed.Load(), 100*rate)
	})

	timer := time.NewTimer(0)
	<-timer.C
loop:
	for i := range w.Requests {
		r := &w.Requests[i]
		due := start.Add(r.At)
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-runCtx.Done():
				break loop
			}
		}
		select {
		case sem <- struct{}{}:
		default:
			delayed.Add(1)
			select {
			case sem <- struct{}{}:
			case <-runCtx.Done():
				break loop
			}
		}
		sent.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(finished[i])
			base := bases[i%len(bases)]
			if pinned != nil {
				base = pinned[i]
			}
			var o outcome
			if body, at, err := continuation(runCtx, r, outcomes, finished, due); err != nil {
				o = outcome{sent: at, err: err, cached: -1}
			} else {
				o = send(runCtx, client, base, r, body, at, opt.Timeout)
			}
			outcomes[i] = o
			if o.err != nil {
				failed.Add(1)
			}
			done.Add(1)
			<-sem
		}()
	}
	wg.Wait()
	for i := int(sent.Load()); i < n; i++ {
		close(finished[i]) // never sent
	}
	end := time.Now()
	stopProgress()
	load := sampler.stop()
	cpuAfter, _ := cpuTime(proxy)
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	res := &Result{Policy: policy, Requests: n, Delayed: int(delayed.Load()), Wall: end.Sub(start), Load: load, Predicted: -1,
		start: start, outcomes: outcomes}
	if pr, ok := proxy.(Predictor); ok {
		if v, ok := pr.Predicted(); ok {
			res.Predicted = v
		}
		res.CapacityEvictions = pr.CapacityEvictions()
	}
	if bp, ok := proxy.(BackendPredictor); ok {
		res.PredictedPerEngine = bp.PredictedPerBackend()
	}
	var hit, query, phit, pquery uint64
	var busy []time.Duration
	for i, e := range engines {
		st := e.Stats()
		res.EngineStats = append(res.EngineStats, st)
		hit += st.HitTokens
		query += st.QueryTokens
		busy = append(busy, st.BusyTime)
		if i < opt.PrefillEngines {
			phit += st.HitTokens
			pquery += st.QueryTokens
		}
	}
	if query > 0 {
		res.HitRate = float64(hit) / float64(query)
	}
	res.PrefillHitRate = -1
	if pquery > 0 {
		res.PrefillHitRate = float64(phit) / float64(pquery)
	}
	if pr, ok := proxy.(PDReporter); ok && opt.PrefillEngines > 0 {
		res.Split, res.Aggregated = pr.PDCounts()
	}
	res.Imbalance = imbalance(busy)
	var ttft, e2e, itl []time.Duration
	var firstSend, lastDone time.Time
	ok := 0
	for _, o := range outcomes {
		if o.err != nil {
			res.Errors++
			if len(res.ErrorSamples) < 5 {
				res.ErrorSamples = append(res.ErrorSamples, o.err.Error())
			}
			continue
		}
		ok++
		ttft = append(ttft, o.ttft)
		e2e = append(e2e, o.e2e)
		if o.itl > 0 {
			itl = append(itl, o.itl)
		}
		if firstSend.IsZero() || o.sent.Before(firstSend) {
			firstSend = o.sent
		}
		if t := o.sent.Add(o.e2e); t.After(lastDone) {
			lastDone = t
		}
	}
	res.Errors += n - int(sent.Load())
	res.FirstTurns, res.ColdFirstTurns = coldFirstTurns(w, outcomes)
	sortDurations(ttft)
	sortDurations(e2e)
	res.TTFT = ttft
	res.TTFTp50, res.TTFTp90, res.TTFTp99 = pct(ttft, 0.50), pct(ttft, 0.90), pct(ttft, 0.99)
	res.E2Ep50, res.E2Ep99 = pct(e2e, 0.50), pct(e2e, 0.99)
	sortDurations(itl)
	res.ITLp50, res.ITLp99 = pct(itl, 0.50), pct(itl, 0.99)
	if span := lastDone.Sub(firstSend); ok > 0 && span > 0 {
		res.Throughput = float64(ok) / span.Seconds()
	}
	if cpuHow != "" && ok > 0 {
		res.ProxyCPUPerRequest = (cpuAfter - cpuBefore) / time.Duration(n)
		res.CPUMeasure = cpuHow
	}
	return res, nil
}

// imbalance is max/mean engine busy time; 1 is perfectly even.
func imbalance(busy []time.Duration) float64 {
	var sum, mx time.Duration
	for _, b := range busy {
		sum += b
		mx = max(mx, b)
	}
	if sum == 0 {
		return 1
	}
	return float64(mx) / (float64(sum) / float64(len(busy)))
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

// pct is the q-quantile of sorted d (nearest rank).
func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q*float64(len(d))+0.999999) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// progress calls line every second and writes it to w until stopped.
func progress(w io.Writer, line func() string) (stop func()) {
	if w == nil {
		return func() {}
	}
	quit := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				fmt.Fprintln(w, line())
			case <-quit:
				fmt.Fprintln(w, line())
				return
			}
		}
	}()
	return func() { close(quit); <-stopped }
}

var errNoDone = errors.New("stream ended without its final event (data: [DONE], message_stop or response.completed)")

// continuation returns the body to send for r and the time its latency
// counts from: a request continuing an earlier answer waits for it, is
// sent with that answer's id as previous_response_id, and is timed from
// when it could be sent at the earliest.
func continuation(ctx context.Context, r *workload.Request, outcomes []outcome, finished []chan struct{}, due time.Time) ([]byte, time.Time, error) {
	if r.Continues <= 0 {
		return r.Body, due, nil
	}
	k := r.Continues - 1
	select {
	case <-finished[k]:
	case <-ctx.Done():
		return nil, due, ctx.Err()
	}
	prev := outcomes[k]
	if prev.err != nil || len(prev.respID) == 0 {
		return nil, due, fmt.Errorf("the response it continues failed or had no id (%v)", prev.err)
	}
	if t := prev.sent.Add(prev.e2e); t.After(due) {
		due = t
	}
	body := make([]byte, 0, len(r.Body)+len(prev.respID)+32)
	body = append(body, `{"previous_response_id":"`...)
	body = append(body, prev.respID...)
	body = append(body, `",`...)
	return append(body, bytes.TrimPrefix(bytes.TrimSpace(r.Body), []byte("{"))...), due, nil
}

func writeFile(name string, b []byte) error { return os.WriteFile(name, b, 0o644) }
