package telemetry

import (
	"fmt"
	"io"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// BackendState is one backend's telemetry in the admin API.
type BackendState struct {
	Status string `json:"status"` // pending, on, error or off
	Error  string `json:"error,omitempty"`
	Source string `json:"source,omitempty"` // vllm or sglang
	Model  string `json:"model,omitempty"`
	// AgeSeconds is the age of the signals; they are ignored by routing
	// when Fresh is false. -1: never read.
	AgeSeconds     float64 `json:"age_seconds"`
	Fresh          bool    `json:"fresh"`
	Running        int32   `json:"running"`
	Waiting        int32   `json:"waiting"`
	Foreign        int32   `json:"foreign"`
	KVUsage        float32 `json:"kv_usage"`
	CapacityTokens int64   `json:"capacity_tokens"`
	// CapacityBlocks bounds the backend's locations (CBR blocks; 0:
	// unbounded) and HeldBlocks is how many it has.
	CapacityBlocks int   `json:"capacity_blocks"`
	HeldBlocks     int   `json:"held_blocks"`
	PromptTokens   int64 `json:"prompt_tokens"`
	PrefixQueries  int64 `json:"prefix_cache_queries"`
	PrefixHits     int64 `json:"prefix_cache_hits"`
	// EngineHitRate is what the engine's prefix-cache counters say, and
	// PredictedHitRate what kvca believed when routing, over the same
	// window; nil when unknown.
	EngineHitRate    *float64 `json:"engine_hit_rate"`
	PredictedHitRate *float64 `json:"predicted_hit_rate"`
	Restarts         uint32   `json:"restarts"`
}

// StateOf reports backend b's telemetry as last published on it; signals
// older than maxAge at now are not Fresh.
func StateOf(b *sched.Backend, t *chain.Table, now time.Time, maxAge time.Duration) BackendState {
	st := BackendState{Status: StatusPending, AgeSeconds: -1}
	if t != nil {
		st.CapacityBlocks = t.BackendCapacity(b.Index)
		st.HeldBlocks = t.Held(b.Index)
	}
	sig, ok := b.EngineLatest()
	if !ok {
		return st
	}
	st.Status, st.Error = sig.Status, sig.Err
	st.Source, st.Model = sig.Source, sig.Model
	if sig.At > 0 {
		age := now.Sub(time.UnixMilli(sig.At))
		st.AgeSeconds = age.Seconds()
		st.Fresh = age <= maxAge
	}
	st.Running, st.Waiting, st.Foreign = sig.Running, sig.Waiting, sig.Foreign
	st.KVUsage, st.CapacityTokens = sig.KVUsage, sig.CapacityTokens
	st.PromptTokens, st.PrefixQueries, st.PrefixHits = sig.PromptTokens, sig.PrefixQueries, sig.PrefixHits
	if sig.At > 0 && sig.EngineHitRate >= 0 {
		v := sig.EngineHitRate
		st.EngineHitRate = &v
	}
	if sig.At > 0 && sig.PredictedHitRate >= 0 {
		v := sig.PredictedHitRate
		st.PredictedHitRate = &v
	}
	st.Restarts = sig.Restarts
	return st
}

// WriteMetrics writes the backends' telemetry series in Prometheus text:
// kvca_engine_* mirror what each engine said, kvca_backend_hit_rate sets
// the engine's prefix-cache hit rate beside kvca's prediction, and the
// capacity series show the bound on each backend's locations.
func WriteMetrics(w io.Writer, backends []*sched.Backend, t *chain.Table, cal *chain.Calibrator, now time.Time, maxAge time.Duration) {
	for _, b := range backends {
		st := StateOf(b, t, now, maxAge)
		lb := fmt.Sprintf(`{backend=%q}`, b.Name)
		up := 0.0
		if st.Status == StatusOn && st.Fresh {
			up = 1
		}
		metrics.WriteGaugeFloat64(w, "kvca_engine_metrics_up"+lb, up)
		metrics.WriteGaugeFloat64(w, "kvca_engine_signal_age_seconds"+lb, st.AgeSeconds)
		metrics.WriteGaugeUint64(w, "kvca_engine_requests_running"+lb, uint64(max(st.Running, 0)))
		metrics.WriteGaugeUint64(w, "kvca_engine_requests_waiting"+lb, uint64(max(st.Waiting, 0)))
		metrics.WriteGaugeUint64(w, "kvca_engine_requests_foreign"+lb, uint64(max(st.Foreign, 0)))
		metrics.WriteGaugeFloat64(w, "kvca_engine_kv_usage_ratio"+lb, float64(st.KVUsage))
		metrics.WriteGaugeUint64(w, "kvca_engine_capacity_tokens"+lb, uint64(max(st.CapacityTokens, 0)))
		metrics.WriteCounterUint64(w, "kvca_engine_restarts_total"+lb, uint64(st.Restarts))
		metrics.WriteGaugeUint64(w, "kvca_backend_capacity_blocks"+lb, uint64(st.CapacityBlocks))
		metrics.WriteGaugeUint64(w, "kvca_backend_held_blocks"+lb, uint64(st.HeldBlocks))
		if st.EngineHitRate != nil {
			metrics.WriteGaugeFloat64(w, fmt.Sprintf(`kvca_backend_hit_rate{backend=%q,source="engine"}`, b.Name), *st.EngineHitRate)
		}
		if st.PredictedHitRate != nil {
			metrics.WriteGaugeFloat64(w, fmt.Sprintf(`kvca_backend_hit_rate{backend=%q,source="predicted"}`, b.Name), *st.PredictedHitRate)
		}
	}
	if t != nil {
		metrics.WriteCounterUint64(w, `kvca_table_evictions_total{reason="`+chain.ReasonBackendCapacity+`"}`, t.Stats().EvictedBackendCapacity)
	}
	if cal != nil {
		for m, r := range cal.Ratios() {
			metrics.WriteGaugeFloat64(w, fmt.Sprintf(`kvca_cbr_bytes_per_token{model=%q}`, m), r)
		}
	}
}
