package mock

import (
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// ttftBuckets are vLLM's bucket bounds for time_to_first_token_seconds.
var ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
	0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}

// initMetrics registers the engine's metrics under vLLM's names in a set of
// its own, so that several engines can share a process.
func (e *Engine) initMetrics() {
	e.idPrefix = e.cfg.Name + "-"
	e.set = metrics.NewSet()
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	labels := `{model_name="` + r.Replace(e.cfg.Models[0]) + `",engine="` + r.Replace(e.cfg.Name) + `"}`
	e.mQueries = e.set.NewCounter("vllm:prefix_cache_queries_total" + labels)
	e.mHit = e.set.NewCounter("vllm:prefix_cache_hits_total" + labels)
	e.mPrompt = e.set.NewCounter("vllm:prompt_tokens_total" + labels)
	e.mGen = e.set.NewCounter("vllm:generation_tokens_total" + labels)
	e.mSuccess = e.set.NewCounter("vllm:request_success_total" + labels)
	e.mTTFT = e.set.NewPrometheusHistogramExt("vllm:time_to_first_token_seconds"+labels, ttftBuckets)
	e.set.NewGauge("vllm:num_requests_running"+labels, func() float64 {
		r, _, _ := e.sched.snapshot()
		return float64(r)
	})
	e.set.NewGauge("vllm:num_requests_waiting"+labels, func() float64 {
		_, w, _ := e.sched.snapshot()
		return float64(w)
	})
	e.set.NewGauge("vllm:kv_cache_usage_perc"+labels, func() float64 {
		if e.cache.capacity <= 0 {
			return 0
		}
		e.cacheMu.Lock()
		n := e.cache.len()
		e.cacheMu.Unlock()
		return float64(n) / float64(e.cache.capacity)
	})
}
