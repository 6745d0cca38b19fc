package edge

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// Routes, as the route label of the request metrics.
const (
	routeChat = iota
	routeCompletions
	routeResponses
	routeMessages
	routeModels
	routePassthrough
	routeHealth // /health and /ready
	routeOther  // kvca's own answers to anything else (404, refusals)
	numRoutes
)

var routeNames = [numRoutes]string{"chat", "completions", "responses", "messages", "models", "passthrough", "health", "other"}

const numPhases = 3 // sched.PhaseBootstrap, PhaseFollowup, PhaseFallback

// Upstream error kinds for kvca_upstream_errors_total{kind}.
const (
	errConnect = iota // dial, write or read failed before any response byte
	errTimeout        // no response headers within --upstream-header-timeout
	errStream         // the response broke off or stalled after it began
	errStatus         // a 5xx or 429 answer
	errBusy           // all --max-conns-per-backend connections in use
	numErrKinds
)

var errKindNames = [numErrKinds]string{"connect", "timeout", "stream", "status", "busy"}

// serverMetrics holds every metric, resolved once so the hot path never
// builds a label string. Each Server has its own set, so tests can run
// several servers in one process.
type serverMetrics struct {
	set      *metrics.Set
	requests [numRoutes][numPhases + 1]*metrics.Counter // last phase column: unrouted
	duration [numRoutes]*metrics.PrometheusHistogram
	// responses counts answers by route and status class (1xx … 5xx).
	responses [numRoutes][6]*metrics.Counter
	// ttft is time to the first body byte by route, for models that are
	// not known (known models have theirs in the model index).
	ttftOther   [numRoutes]*metrics.PrometheusHistogram
	cached      *metrics.Counter
	novel       *metrics.Counter
	disconnects *metrics.Counter
	// usageAsked counts streamed requests whose body kvca made ask for
	// usage (--stream-usage); usageRemoved the usage events it removed
	// from their answers.
	usageAsked   *metrics.Counter
	usageRemoved *metrics.Counter
	bad          map[string]*metrics.Counter
	// The public listener's connections.
	connsRefused       *metrics.Counter // beyond --max-client-conns
	acceptErrors       *metrics.Counter // accept failed (out of descriptors)
	tlsHandshakeErrors *metrics.Counter
	// Write-behind (behind_linux.go): io_uring submissions, and the sends
	// they carried.
	ringSubmits, ringSends *metrics.Counter
	// Bodies awaited whole (await_linux.go), and those whose wait ran out.
	awaited, awaitExpired *metrics.Counter
	pd                    *pdMetrics // disaggregation (pd.go)
	// picks counts the endpoint picker's picks by the rule that chose
	// the endpoint.
	picks [sched.NumRules]*metrics.Counter
}

// backendMetrics are one backend's series.
type backendMetrics struct {
	firstByte *metrics.PrometheusHistogram
	errors    [numErrKinds]*metrics.Counter
	names     []string // every series, to unregister when the backend is removed
}

var badReasons = []string{"malformed_json", "not_object", "bad_messages", "bad_prompt", "too_large",
	"reserved_field", "bad_http", "request_header_fields_too_large", "http_version_not_supported", "not_implemented", "expectation_failed", "other"}

func newServerMetrics(table *chain.Table, memo *chain.Memo, cn *canon.Canonicalizer, conns *atomic.Int32) *serverMetrics {
	set := metrics.NewSet()
	m := &serverMetrics{set: set, bad: map[string]*metrics.Counter{}}
	phases := [numPhases + 1]string{"bootstrap", "followup", "fallback", "none"}
	for r := range numRoutes {
		for p := range phases {
			m.requests[r][p] = set.NewCounter(fmt.Sprintf(`kvca_requests_total{route=%q,phase=%q}`, routeNames[r], phases[p]))
		}
		m.duration[r] = set.NewPrometheusHistogramExt(fmt.Sprintf(`kvca_request_duration_seconds{route=%q}`, routeNames[r]), latencyBuckets)
		for k := 1; k < 6; k++ {
			m.responses[r][k] = set.NewCounter(fmt.Sprintf(`kvca_responses_total{route=%q,class="%dxx"}`, routeNames[r], k))
		}
		m.ttftOther[r] = m.ttftHistogram(r, "other")
	}
	m.cached = set.NewCounter(`kvca_routed_blocks_total{kind="cached"}`)
	m.novel = set.NewCounter(`kvca_routed_blocks_total{kind="novel"}`)
	m.disconnects = set.NewCounter(`kvca_client_disconnects_total`)
	m.usageAsked = set.NewCounter(`kvca_stream_usage_asked_total`)
	m.usageRemoved = set.NewCounter(`kvca_stream_usage_removed_total`)
	m.connsRefused = set.NewCounter(`kvca_client_connections_refused_total`)
	m.acceptErrors = set.NewCounter(`kvca_accept_errors_total`)
	m.tlsHandshakeErrors = set.NewCounter(`kvca_tls_handshake_errors_total`)
	m.ringSubmits = set.NewCounter(`kvca_io_uring_submits_total`)
	m.ringSends = set.NewCounter(`kvca_io_uring_sends_total`)
	m.awaited = set.NewCounter(`kvca_body_awaits_total`)
	m.awaitExpired = set.NewCounter(`kvca_body_awaits_expired_total`)
	m.pd = newPDMetrics(set)
	for r := sched.Rule(0); r < sched.NumRules; r++ {
		m.picks[r] = set.NewCounter(fmt.Sprintf(`kvca_picker_picks_total{rule=%q}`, r.String()))
	}
	for _, r := range badReasons {
		m.bad[r] = set.NewCounter(fmt.Sprintf(`kvca_bad_requests_total{reason=%q}`, r))
	}
	set.NewGauge(`kvca_table_blocks`, func() float64 { return float64(table.Stats().Blocks) })
	set.NewGauge(`kvca_client_connections`, func() float64 { return float64(conns.Load()) })
	set.RegisterMetricsWriter(func(w io.Writer) {
		st := table.Stats()
		metrics.WriteCounterUint64(w, `kvca_table_evictions_total{reason="expired"}`, st.EvictedExpired)
		metrics.WriteCounterUint64(w, `kvca_table_evictions_total{reason="capacity"}`, st.EvictedCapacity)
		metrics.WriteCounterUint64(w, `kvca_table_evictions_total{reason="reset"}`, st.EvictedReset)
		metrics.WriteGaugeUint64(w, `kvca_table_locations`, uint64(st.Locations))
		metrics.WriteGaugeUint64(w, `kvca_table_capacity_blocks`, uint64(st.Capacity))
		metrics.WriteCounterUint64(w, `kvca_table_vacuum_runs_total`, st.VacuumRuns)
		if memo != nil {
			ms := memo.Stats()
			metrics.WriteCounterUint64(w, `kvca_cbr_memo_lookups_total{result="hit"}`, ms.Hits)
			metrics.WriteCounterUint64(w, `kvca_cbr_memo_lookups_total{result="miss"}`, ms.Misses)
			metrics.WriteGaugeUint64(w, `kvca_cbr_memo_literals`, uint64(ms.Literals))
			metrics.WriteGaugeUint64(w, `kvca_cbr_memo_bytes`, uint64(ms.Bytes))
		}
		if cn.Resuming() {
			rs := cn.ResumeStats()
			metrics.WriteCounterUint64(w, `kvca_cbr_resume_lookups_total{result="hit"}`, rs.Hits)
			metrics.WriteCounterUint64(w, `kvca_cbr_resume_lookups_total{result="miss"}`, rs.Misses)
			metrics.WriteGaugeUint64(w, `kvca_cbr_resume_bytes`, uint64(rs.Bytes))
			metrics.WriteGaugeUint64(w, `kvca_cbr_resume_snapshots`, uint64(rs.Snapshots))
			metrics.WriteCounterUint64(w, `kvca_cbr_resume_skipped_bytes_total`, rs.Skipped)
			metrics.WriteCounterUint64(w, `kvca_cbr_resume_evictions_total`, rs.Evictions)
		}
	})
	return m
}

func (m *serverMetrics) newBackend(set *metrics.Set, b *sched.Backend, role Role) *backendMetrics {
	bm := &backendMetrics{}
	name := func(format string, args ...any) string {
		n := fmt.Sprintf(format, args...)
		bm.names = append(bm.names, n)
		return n
	}
	bm.firstByte = set.GetOrCreatePrometheusHistogramExt(name(`kvca_upstream_first_byte_seconds{backend=%q}`, b.Name), latencyBuckets)
	for k := range numErrKinds {
		bm.errors[k] = set.GetOrCreateCounter(name(`kvca_upstream_errors_total{backend=%q,kind=%q}`, b.Name, errKindNames[k]))
	}
	set.GetOrCreateGauge(name(`kvca_backend_active_requests{backend=%q}`, b.Name), func() float64 { return float64(b.Active()) })
	set.GetOrCreateGauge(name(`kvca_backend_prefill_blocks{backend=%q}`, b.Name), func() float64 { return float64(b.Prefill()) })
	set.GetOrCreateGauge(name(`kvca_backend_role{backend=%q,role=%q}`, b.Name, role.String()), func() float64 { return 1 })
	set.GetOrCreateGauge(name(`kvca_backend_healthy{backend=%q}`, b.Name), func() float64 {
		if b.Healthy() {
			return 1
		}
		return 0
	})
	return bm
}

// dropBackend removes a removed backend's series. Requests still on it
// may update them; nobody reads them any more.
func (m *serverMetrics) dropBackend(u *upstream) {
	for _, n := range u.m.names {
		m.set.UnregisterMetric(n)
	}
}

// latencyBuckets span a millisecond to half an hour: a long generation
// stream is as much an answer as a health check.
var latencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800}

// ttftHistogram is the time-to-first-token series of a route and model.
func (m *serverMetrics) ttftHistogram(route int, model string) *metrics.PrometheusHistogram {
	return m.set.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`kvca_time_to_first_token_seconds{route=%q,model=%q}`, routeNames[route], model), latencyBuckets)
}

func (m *serverMetrics) badRequest(reason string) {
	c := m.bad[reason]
	if c == nil {
		c = m.bad["other"]
	}
	c.Inc()
}

// tlsMetrics exports a certificate source's reloads, failures and expiry.
func (m *serverMetrics) tlsMetrics(cs *certSource) {
	m.set.NewGauge(fmt.Sprintf(`kvca_tls_certificate_reloads_total{listener=%q}`, cs.name), func() float64 { return float64(cs.loaded.Load()) })
	m.set.NewGauge(fmt.Sprintf(`kvca_tls_certificate_reload_errors_total{listener=%q}`, cs.name), func() float64 { return float64(cs.failed.Load()) })
	m.set.NewGauge(fmt.Sprintf(`kvca_tls_certificate_expiry_timestamp_seconds{listener=%q}`, cs.name), func() float64 {
		if c := cs.cur.Load(); c != nil && c.Leaf != nil {
			return float64(c.Leaf.NotAfter.Unix())
		}
		return 0
	})
}

// writeRoutingMetrics writes the load bound's overflows per affinity and
// each backend's checks of predicted cached tokens against its answers.
func (s *Server) writeRoutingMetrics(w io.Writer) {
	fl := s.fleet()
	ov := fl.sched.Overflows()
	for r := sched.Rule(0); r < sched.NumRules; r++ {
		if r.Affinity() {
			metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_affinity_overflow_total{reason=%q}`, r.String()), ov[r])
		}
	}
	now := time.Now()
	for _, u := range fl.live() {
		f := fl.sched.Feedback(u.b, now)
		n := u.b.Name
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_backend_predicted_cached_tokens_total{backend=%q}`, n), f.PredictedTokens)
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_backend_engine_cached_tokens_total{backend=%q}`, n), f.EngineCachedTokens)
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_backend_checked_prompt_tokens_total{backend=%q}`, n), f.PromptTokens)
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_backend_cache_prediction_error_tokens_total{backend=%q}`, n), f.ErrorTokens)
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_backend_cache_checks_total{backend=%q,verdict="agree"}`, n), f.Checks-f.Under-f.Over)
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_backend_cache_checks_total{backend=%q,verdict="under"}`, n), f.Under)
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_backend_cache_checks_total{backend=%q,verdict="over"}`, n), f.Over)
		metrics.WriteGaugeFloat64(w, fmt.Sprintf(`kvca_backend_cache_prediction_drift{backend=%q}`, n), f.Drift)
		metrics.WriteGaugeFloat64(w, fmt.Sprintf(`kvca_backend_cache_retention_seconds{backend=%q}`, n), float64(f.RetentionMs)/1000)
	}
}
