package mock

import (
	"strconv"
	"strings"
	"time"

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
	e.mPreempt = e.set.NewCounter("vllm:num_preemptions_total" + labels)
	e.mTTFT = e.set.NewPrometheusHistogramExt("vllm:time_to_first_token_seconds"+labels, ttftBuckets)
	e.set.NewGauge("vllm:num_requests_running"+labels, func() float64 {
		r, _, _ := e.sched.snapshot()
		return float64(r)
	})
	e.set.NewGauge("vllm:num_requests_waiting"+labels, func() float64 {
		_, w, _ := e.sched.snapshot()
		return float64(w)
	})
	// As in vLLM, usage counts the blocks running sequences hold; cached
	// blocks nobody references are free (evictable) and do not count.
	e.set.NewGauge("vllm:kv_cache_usage_perc"+labels, func() float64 {
		if e.cache.capacity <= 0 {
			return 0
		}
		return min(float64(e.kvUsed.Load())/float64(e.cache.capacity), 1)
	})
	// vLLM exports its cache configuration as an info gauge whose labels
	// carry the values; capacity in tokens is num_gpu_blocks × block_size.
	info := `vllm:cache_config_info{block_size="` + strconv.Itoa(e.cfg.BlockTokens) +
		`",enable_prefix_caching="True",engine="` + r.Replace(e.cfg.Name) +
		`",num_gpu_blocks="` + strconv.Itoa(max(e.cfg.CacheTokens, 0)/e.cfg.BlockTokens) + `"}`
	e.set.NewGauge(info, func() float64 { return 1 })
	e.set.NewGauge("process_start_time_seconds", func() float64 {
		return float64(e.started.Load()) / 1e3
	})
}

// restartMetrics makes the exported series what a freshly started engine
// exports: counters back at zero and a later start time (at least a second
// later, as a real process takes longer than that to come back).
func (e *Engine) restartMetrics() {
	for _, c := range []interface{ Set(uint64) }{e.mQueries, e.mHit, e.mPrompt, e.mGen, e.mSuccess, e.mPreempt} {
		c.Set(0)
	}
	now := time.Now().UnixMilli()
	for {
		old := e.started.Load()
		if e.started.CompareAndSwap(old, max(now, old+1000)) {
			return
		}
	}
}
