package run

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/kvca/kvca/bench/mock"
)

// Report is a bench run's outcome.
type Report struct {
	Workload WorkloadInfo
	Results  []Result
}

// WorkloadInfo describes the replayed workload.
type WorkloadInfo struct {
	Name     string
	Requests int
	// IdealHitRate is the workload's ideal in the engines' own units
	// (infinite cache, one engine, BlockTokens-token blocks).
	IdealHitRate float64
	// TraceIdealHitRate is the same bound in the trace's own blocks (nil
	// for synthetic workloads).
	TraceIdealHitRate *float64
	BlockTokens       int
	Engines           int
	// WorkingSetTokens is the tokens of the workload's distinct blocks;
	// CacheTokens one engine's KV-cache capacity.
	WorkingSetTokens, CacheTokens int64
	// TTFTFloor is the p50, p90 and p99 of each request's bare prefill
	// with the ideal cache and nothing queued: what no routing can beat.
	TTFTFloor [3]time.Duration
	// DistinctPrefixes is how many shared prefixes (system prompts) the
	// first turns start with; 0 when the workload does not say.
	DistinctPrefixes int
}

// Result is one policy's outcome.
type Result struct {
	Policy                    string
	Requests                  int
	Errors                    int      // failed or never sent
	ErrorSamples              []string // the first few errors
	Delayed                   int      // arrivals held back by MaxInFlight
	HitRate                   float64  // token-weighted, from the engines
	TTFTp50, TTFTp90, TTFTp99 time.Duration
	E2Ep50, E2Ep99            time.Duration
	// ITLp50 and ITLp99 are percentiles over streamed answers of their
	// mean inter-token latency: the time between their first and last
	// token events over the gaps between them.
	ITLp50, ITLp99 time.Duration
	// PrefillHitRate is the prefill workers' own hit rate in a
	// disaggregated fleet (-1: none); Split and Aggregated how the proxy
	// says the requests ran (through both legs, or on a decode worker
	// alone).
	PrefillHitRate    float64
	Split, Aggregated uint64
	Throughput        float64 // successful requests per second
	Imbalance         float64 // max/mean engine busy time
	// FirstTurns counts answered first turns with a known shared prefix;
	// ColdFirstTurns those of them whose engine had not cached it.
	FirstTurns, ColdFirstTurns int
	Wall                       time.Duration // first arrival to last completion or failure

	// ProxyCPUPerRequest is CPU time per request, measured as CPUMeasure says
	// (empty when unknown).
	ProxyCPUPerRequest time.Duration
	CPUMeasure         string

	// Predicted is the hit rate the proxy believed it routed for (cached
	// blocks it routed on over all it routed), -1 when it cannot tell;
	// CapacityEvictions the locations it dropped because a backend's cache
	// could not hold them.
	Predicted         float64
	CapacityEvictions uint64
	// PredictedPerEngine is Predicted per engine (-1: nothing routed
	// there), when the proxy can tell.
	PredictedPerEngine []float64

	TTFT        []time.Duration // successful requests, sorted
	EngineStats []mock.Stats
	Load        []LoadSeries

	start    time.Time // of the replay
	outcomes []outcome // per request of the workload
}

// jsonReport is the --json schema, exactly.
type jsonReport struct {
	Workload struct {
		Name         string  `json:"name"`
		Requests     int     `json:"requests"`
		IdealHitRate float64 `json:"ideal_hit_rate"`
	} `json:"workload"`
	Results []jsonResult `json:"results"`
}

type jsonResult struct {
	Policy  string  `json:"policy"`
	HitRate float64 `json:"hit_rate"`
	TTFTp50 float64 `json:"ttft_p50_ms"`
	TTFTp90 float64 `json:"ttft_p90_ms"`
	TTFTp99 float64 `json:"ttft_p99_ms"`
	E2Ep50  float64 `json:"e2e_p50_ms"`
	E2Ep99  float64 `json:"e2e_p99_ms"`
	ITLp50  float64 `json:"itl_p50_ms,omitempty"`
	ITLp99  float64 `json:"itl_p99_ms,omitempty"`
	// PrefillHitRate and the legs are a disaggregated fleet's.
	PrefillHitRate *float64 `json:"prefill_hit_rate,omitempty"`
	Split          uint64   `json:"disaggregated,omitempty"`
	Aggregated     uint64   `json:"aggregated,omitempty"`
	ThroughputRPS  float64  `json:"throughput_rps"`
	Imbalance      float64  `json:"imbalance"`
	Errors         int      `json:"errors"`
	// PredictedHitRate is omitted when the proxy cannot tell.
	PredictedHitRate  *float64 `json:"predicted_hit_rate,omitempty"`
	CapacityEvictions uint64   `json:"capacity_evictions,omitempty"`
}

func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// WriteJSON writes the report in the bench's JSON schema.
func (r *Report) WriteJSON(w io.Writer) error {
	var j jsonReport
	j.Workload.Name = r.Workload.Name
	j.Workload.Requests = r.Workload.Requests
	j.Workload.IdealHitRate = round(r.Workload.IdealHitRate, 6)
	j.Results = []jsonResult{}
	for _, res := range r.Results {
		jr := jsonResult{
			Policy: res.Policy, HitRate: round(res.HitRate, 6),
			TTFTp50: ms(res.TTFTp50), TTFTp90: ms(res.TTFTp90), TTFTp99: ms(res.TTFTp99),
			E2Ep50: ms(res.E2Ep50), E2Ep99: ms(res.E2Ep99),
			ThroughputRPS: round(res.Throughput, 3), Imbalance: round(res.Imbalance, 4), Errors: res.Errors,
			CapacityEvictions: res.CapacityEvictions,
			ITLp50:            ms(res.ITLp50), ITLp99: ms(res.ITLp99),
			Split: res.Split, Aggregated: res.Aggregated,
		}
		if res.PrefillHitRate >= 0 {
			v := round(res.PrefillHitRate, 6)
			jr.PrefillHitRate = &v
		}
		if res.Predicted >= 0 {
			v := round(res.Predicted, 6)
			jr.PredictedHitRate = &v
		}
		j.Results = append(j.Results, jr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(j)
}

// WriteTable writes a human-readable table.
func (r *Report) WriteTable(w io.Writer) {
	wl := r.Workload
	fmt.Fprintf(w, "workload %s: %d requests, %d engines; ideal hit rate %.1f%% (%d-token blocks)",
		wl.Name, wl.Requests, wl.Engines, 100*wl.IdealHitRate, wl.BlockTokens)
	if wl.TraceIdealHitRate != nil {
		fmt.Fprintf(w, ", %.1f%% in the trace's own blocks", 100**wl.TraceIdealHitRate)
	}
	fmt.Fprintln(w)
	if wl.WorkingSetTokens > 0 && wl.CacheTokens > 0 {
		fmt.Fprintf(w, "working set %d tokens; each engine caches %d tokens (%.1f%% of it), all %d together %.1f%%\n",
			wl.WorkingSetTokens, wl.CacheTokens, 100*float64(wl.CacheTokens)/float64(wl.WorkingSetTokens),
			wl.Engines, 100*float64(wl.CacheTokens)*float64(wl.Engines)/float64(wl.WorkingSetTokens))
	}
	if f := wl.TTFTFloor; f[2] > 0 {
		fmt.Fprintf(w, "TTFT floor (ideal cache, nothing queued, prefill only): p50 %s, p90 %s, p99 %s\n",
			fmtDur(f[0]), fmtDur(f[1]), fmtDur(f[2]))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\thit rate\tof ideal\tpredicted\tTTFT p50\tp90\tp99\te2e p50\tp99\treq/s\timbalance\terrors\tCPU/req\t")
	for _, res := range r.Results {
		ofIdeal := "-"
		if wl.IdealHitRate > 0 {
			ofIdeal = fmt.Sprintf("%.0f%%", 100*res.HitRate/wl.IdealHitRate)
		}
		cpu := "-"
		if res.CPUMeasure != "" {
			cpu = fmtDur(res.ProxyCPUPerRequest)
		}
		pred := "-"
		if res.Predicted >= 0 {
			pred = fmt.Sprintf("%.1f%%", 100*res.Predicted)
		}
		fmt.Fprintf(tw, "%s\t%.1f%%\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%d\t%s\t\n",
			res.Policy, 100*res.HitRate, ofIdeal, pred, fmtDur(res.TTFTp50), fmtDur(res.TTFTp90), fmtDur(res.TTFTp99),
			fmtDur(res.E2Ep50), fmtDur(res.E2Ep99), res.Throughput, res.Imbalance, res.Errors, cpu)
	}
	tw.Flush()
	for _, res := range r.Results {
		if res.CPUMeasure != "" {
			fmt.Fprintf(w, "CPU/req: %s\n", res.CPUMeasure)
			break
		}
	}
	for _, res := range r.Results {
		if res.ITLp50 > 0 {
			fmt.Fprintf(w, "%s: inter-token latency p50 %s, p99 %s (each streamed answer's mean gap between token events)\n", res.Policy, fmtDur(res.ITLp50), fmtDur(res.ITLp99))
		}
	}
	for _, res := range r.Results {
		if res.PrefillHitRate >= 0 {
			fmt.Fprintf(w, "%s: prefill workers' hit rate %.1f%%; %d requests through a prefill and a decode leg, %d on a decode worker alone\n",
				res.Policy, 100*res.PrefillHitRate, res.Split, res.Aggregated)
		}
	}
	writeCold(w, r)
	fmt.Fprintln(w, "hit rate: what the engines' prefix caches report (token-weighted); predicted: what the proxy believed when routing (cached CBR blocks over all it routed)")
	for _, res := range r.Results {
		if gap, mean, ok := res.PredictionGap(); ok {
			fmt.Fprintf(w, "%s: predicted against engine hit rate per engine: largest gap %.1f points, mean %.1f\n", res.Policy, 100*gap, 100*mean)
		}
	}
	for _, res := range r.Results {
		if res.CapacityEvictions > 0 {
			fmt.Fprintf(w, "%s: %d locations dropped because a backend's cache could not hold them\n", res.Policy, res.CapacityEvictions)
		}
	}
	for _, res := range r.Results {
		if res.Delayed > 0 {
			fmt.Fprintf(w, "%s: %d arrivals waited for the in-flight limit\n", res.Policy, res.Delayed)
		}
		for _, e := range res.ErrorSamples {
			fmt.Fprintf(w, "%s: error: %s\n", res.Policy, e)
		}
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
}

// PredictionGap is the largest and the mean difference, over the engines
// that were routed to, between the hit rate the proxy predicted there and
// the one the engine reported.
func (res *Result) PredictionGap() (largest, mean float64, ok bool) {
	n := 0
	for i, p := range res.PredictedPerEngine {
		if p < 0 || i >= len(res.EngineStats) || res.EngineStats[i].QueryTokens == 0 {
			continue
		}
		d := math.Abs(p - res.EngineStats[i].HitRate())
		largest = max(largest, d)
		mean += d
		n++
	}
	if n == 0 {
		return 0, 0, false
	}
	return largest, mean / float64(n), true
}
