package telemetry

import (
	"fmt"
	"io"
	"math"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Reading is what one scrape of an engine's /metrics said, summed over
// its series (a data-parallel engine exports one per rank). A Has* false
// means the engine did not export that signal or exported it malformed.
type Reading struct {
	Source string // "vllm", "sglang", "tgi" or "llamacpp"; empty if none was recognised
	Model  string // model_name label of the first series seen

	Running, Waiting       int64
	HasRunning, HasWaiting bool
	KVUsage                float64 // 0..1
	HasKVUsage             bool
	CapacityTokens         int64
	HasCapacity            bool
	PrefixQueries          float64 // tokens looked up in the prefix cache, since start
	PrefixHits             float64 // of which found
	HasPrefix              bool
	PromptTokens           float64
	HasPrompt              bool
	StartTime              float64 // process_start_time_seconds
	HasStartTime           bool

	// prefixExported and promptExported: the counters' families were in
	// the exposition, usable or not (a counter gone from one is a restart;
	// a malformed one is not).
	prefixExported, promptExported bool

	// Malformed lists the signals present but unusable (NaN, negative,
	// unparsable labels), for the log.
	Malformed []string
}

// names of one engine family's signals; the first name present is used.
type names struct {
	source                 string
	running, waiting       []string
	kvUsage                []string
	capacityInfo           string // info gauge with num_gpu_blocks and block_size labels
	capacityTokens         string // gauge in tokens
	queries, hits, prompts []string
	// hitsAreOfPrompts: the engine counts cached tokens but not queries;
	// the prompt tokens are the queries.
	hitsAreOfPrompts bool
}

// Counters appear under their family name with or without _total,
// depending on the client library and the exposition version.
var vllmNames = names{
	source:       "vllm",
	running:      []string{"vllm:num_requests_running"},
	waiting:      []string{"vllm:num_requests_waiting"},
	kvUsage:      []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
	capacityInfo: "vllm:cache_config_info",
	queries:      []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"},
	hits:         []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"},
	prompts:      []string{"vllm:prompt_tokens_total", "vllm:prompt_tokens"},
}

var sglangNames = names{
	source:           "sglang",
	running:          []string{"sglang:num_running_reqs"},
	waiting:          []string{"sglang:num_queue_reqs"},
	kvUsage:          []string{"sglang:token_usage"},
	capacityTokens:   "sglang:max_total_num_tokens",
	hits:             []string{"sglang:cached_tokens_total", "sglang:cached_tokens"},
	prompts:          []string{"sglang:prompt_tokens_total", "sglang:prompt_tokens"},
	hitsAreOfPrompts: true,
}

// TGI and llama.cpp's server export their batch and their queue, and no
// prefix-cache counters. Their KV figures are left out: llama.cpp keeps
// each slot's context in its KV cache between requests, so its usage
// reads near full on an idle server, which kvca would take for a full
// batch; TGI exports none per cache.
var tgiNames = names{
	source:  "tgi",
	running: []string{"tgi_batch_current_size"},
	waiting: []string{"tgi_queue_size"},
}

var llamacppNames = names{
	source:  "llamacpp",
	running: []string{"llamacpp:requests_processing"},
	waiting: []string{"llamacpp:requests_deferred"},
}

// Parse reads a Prometheus text exposition. An exposition the parser
// rejects is an error (nothing of it is used); a recognised family with a
// bad value is left out of the reading and named in Malformed.
func Parse(r io.Reader) (Reading, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Reading{}, err
	}
	var rd Reading
	for _, n := range []names{vllmNames, sglangNames, tgiNames, llamacppNames} {
		if rd.read(fams, n) {
			rd.Source = n.source
			break
		}
	}
	if f := fams["process_start_time_seconds"]; f != nil {
		if v, ok := sum(f); ok && v > 0 {
			rd.StartTime, rd.HasStartTime = v, true
		} else {
			rd.Malformed = append(rd.Malformed, "process_start_time_seconds")
		}
	}
	return rd, nil
}

// read fills rd from the families of one engine and reports whether any
// of its signals was there.
func (rd *Reading) read(fams map[string]*dto.MetricFamily, n names) bool {
	found := false
	pick := func(list []string) (*dto.MetricFamily, string) {
		for _, name := range list {
			if f := fams[name]; f != nil && len(f.Metric) > 0 {
				found = true
				if rd.Model == "" {
					rd.Model = label(f.Metric[0], "model_name")
				}
				return f, name
			}
		}
		return nil, ""
	}
	count := func(list []string) (int64, bool) {
		f, name := pick(list)
		if f == nil {
			return 0, false
		}
		v, ok := sum(f)
		if !ok || v != math.Trunc(v) {
			rd.Malformed = append(rd.Malformed, name)
			return 0, false
		}
		return int64(v), true
	}
	exported := false // by the last total
	total := func(list []string) (float64, bool) {
		f, name := pick(list)
		exported = f != nil
		if f == nil {
			return 0, false
		}
		v, ok := sum(f)
		if !ok {
			rd.Malformed = append(rd.Malformed, name)
		}
		return v, ok
	}
	rd.Running, rd.HasRunning = count(n.running)
	rd.Waiting, rd.HasWaiting = count(n.waiting)
	if f, name := pick(n.kvUsage); f != nil {
		v, ok := mean(f)
		// A few exporters give a percentage despite the fraction the
		// names promise.
		if ok && v > 1 && v <= 100 {
			v /= 100
		}
		if ok && v <= 1 {
			rd.KVUsage, rd.HasKVUsage = v, true
		} else {
			rd.Malformed = append(rd.Malformed, name)
		}
	}
	if n.capacityInfo != "" {
		if f := fams[n.capacityInfo]; f != nil && len(f.Metric) > 0 {
			found = true
			c, err := capacityFromInfo(f)
			if err != nil {
				rd.Malformed = append(rd.Malformed, n.capacityInfo+": "+err.Error())
			} else {
				rd.CapacityTokens, rd.HasCapacity = c, true
			}
		}
	}
	if n.capacityTokens != "" {
		if v, ok := count([]string{n.capacityTokens}); ok && v > 0 {
			rd.CapacityTokens, rd.HasCapacity = v, true
		}
	}
	rd.PromptTokens, rd.HasPrompt = total(n.prompts)
	rd.promptExported = exported
	hits, hasHits := total(n.hits)
	hitsExported := exported
	var queries float64
	hasQueries, queriesExported := false, false
	if n.hitsAreOfPrompts {
		queries, hasQueries, queriesExported = rd.PromptTokens, rd.HasPrompt, rd.promptExported
	} else {
		queries, hasQueries = total(n.queries)
		queriesExported = exported
	}
	rd.prefixExported = hitsExported && queriesExported
	if hasHits && hasQueries {
		rd.PrefixQueries, rd.PrefixHits, rd.HasPrefix = queries, hits, true
	}
	return found
}

// capacityFromInfo reads num_gpu_blocks × block_size from each series of
// vLLM's cache_config_info (one per engine rank) and sums them.
func capacityFromInfo(f *dto.MetricFamily) (int64, error) {
	var total int64
	for _, m := range f.Metric {
		nb, err1 := strconv.ParseInt(label(m, "num_gpu_blocks"), 10, 64)
		bs, err2 := strconv.ParseInt(label(m, "block_size"), 10, 64)
		if err1 != nil || err2 != nil || nb <= 0 || bs <= 0 {
			return 0, fmt.Errorf("num_gpu_blocks=%q block_size=%q", label(m, "num_gpu_blocks"), label(m, "block_size"))
		}
		total += nb * bs
	}
	return total, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// value is a sample's value whatever the family's declared type.
func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return math.NaN()
}

// sum adds a family's series; false if any is NaN, infinite or negative.
func sum(f *dto.MetricFamily) (float64, bool) {
	s := 0.0
	for _, m := range f.Metric {
		v := value(m)
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return 0, false
		}
		s += v
	}
	return s, true
}

func mean(f *dto.MetricFamily) (float64, bool) {
	s, ok := sum(f)
	if !ok || len(f.Metric) == 0 {
		return 0, false
	}
	return s / float64(len(f.Metric)), true
}
