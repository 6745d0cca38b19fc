package run

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/bench/workload"
)

// Scenario names.
const (
	ScenarioOverload = "overload" // arrivals at Load × capacity against an unloaded run
	ScenarioPriority = "priority" // the same, HighShare of the conversations high priority
	ScenarioFlood    = "flood"    // Tenants normal tenants with and without one flooding tenant
)

// Scenario is an admission scenario: one policy, two runs on fresh
// engines (a reference and a loaded one) of synthetic chat whose arrival
// rate is set from the fleet's capacity, compared within the one
// invocation.
type Scenario struct {
	Name string
	// Load is the loaded run's arrival rate over the capacity; default 2.
	Load float64
	// RefLoad is the reference run's (overload, priority); default 0.25.
	RefLoad float64
	// Duration is the span of conversation starts of each run, before
	// the time scale; default 20s.
	Duration time.Duration
	// HighShare is the share of conversations sent as high priority
	// (priority); default 0.1.
	HighShare float64
	// Tenants is the number of normal tenants (flood); default 9.
	Tenants int
	// FloodFactor is the flooding tenant's arrival rate over the normal
	// tenants' together (flood); default 3, so that with Load 2 the normal
	// tenants send half the capacity and the flooder the rest.
	FloodFactor float64
}

func (s *Scenario) defaults() {
	if s.Load <= 0 {
		s.Load = 2
	}
	if s.RefLoad <= 0 {
		s.RefLoad = 0.25
	}
	if s.Duration <= 0 {
		s.Duration = 20 * time.Second
	}
	if s.HighShare <= 0 {
		s.HighShare = 0.1
	}
	if s.Tenants <= 0 {
		s.Tenants = 9
	}
	if s.FloodFactor <= 0 {
		s.FloodFactor = 3
	}
}

// Capacity is what a fleet of mock engines completes per second at most
// with every sequence slot busy: engines × max-seqs / mean service time,
// the service time being a request's time in its slot (its prefill with
// the ideal cache, then one decode step per output token after the
// first). It holds while the engines' prefill lanes are not the
// bottleneck (PrefillBound above it).
type Capacity struct {
	Engines, MaxSeqs int
	MeanService      time.Duration // scaled
	MeanPrefill      time.Duration // scaled
	PerSecond        float64       // scaled requests per second
	// PrefillBound is engines / mean prefill: the rate at which the
	// engines' serial prefill lanes would saturate.
	PrefillBound float64
}

// CapacityOf derives the capacity of engines engines configured as ecfg
// (defaults applied, durations scaled by its TimeScale) for w's requests.
func CapacityOf(w *workload.Workload, ecfg mock.Config, engines int) (Capacity, error) {
	var novel []int
	if _, err := workload.IdealNovel(w.Requests, ecfg.BlockTokens, &novel); err != nil {
		return Capacity{}, err
	}
	if len(novel) == 0 {
		return Capacity{}, fmt.Errorf("empty workload")
	}
	var service, prefill float64
	for i, n := range novel {
		p := float64(ecfg.PrefillOverhead + time.Duration(n)*ecfg.PrefillPerToken)
		out := max(w.Requests[i].OutputTokens, 1)
		prefill += p
		service += p + float64(out-1)*float64(ecfg.DecodePerToken)
	}
	k := ecfg.TimeScale / float64(len(novel))
	c := Capacity{Engines: engines, MaxSeqs: ecfg.MaxSeqs,
		MeanService: time.Duration(service * k), MeanPrefill: time.Duration(prefill * k)}
	c.PerSecond = float64(engines*ecfg.MaxSeqs) / c.MeanService.Seconds()
	c.PrefillBound = float64(engines) / c.MeanPrefill.Seconds()
	return c, nil
}

// ScenarioRun is one run of a scenario.
type ScenarioRun struct {
	Name string
	Load float64 // arrivals over capacity, by construction
	// Offered and Goodput are the arrivals and the completed requests per
	// second in the steady window (the last three quarters of the span of
	// conversation starts, once every conversation length is under way).
	Offered, Goodput float64
	// HitRate is the engines' prefix-cache hit rate over the run.
	HitRate float64
	// MeanE2E is the mean end-to-end latency of the requests completed in
	// the window: in an unloaded run, the service time as the client
	// sees it (relays included).
	MeanE2E  time.Duration
	Requests int
	// Groups are the TTFT and outcomes of the requests arriving in the
	// window: "all", then per class and per tenant group as the scenario
	// has them.
	Groups []Group
	// Errors counts every failed request of the run by kind ("429
	// queue_full", "502 ...", "transport").
	Errors map[string]int
	res    *Result
}

// Group is the outcome of a set of requests.
type Group struct {
	Name             string
	Sent, OK         int
	TTFTp50, TTFTp99 time.Duration
}

// ScenarioReport is a scenario's outcome.
type ScenarioReport struct {
	Scenario Scenario
	Policy   string
	Capacity Capacity
	// EnginePriority: the engines scheduled by priority and preempted for
	// it (mock.Config.Priority).
	EnginePriority bool
	Runs           []ScenarioRun
	// Checks are the scenario's targets, measured.
	Checks []Check
}

// Check is one target.
type Check struct {
	What          string
	Value, Target float64
	AtMost        bool // Value must be ≤ Target (else ≥)
}

// Met reports whether the check's target is met.
func (c Check) Met() bool {
	if c.AtMost {
		return c.Value <= c.Target
	}
	return c.Value >= c.Target
}

// RunScenario runs sc with spec's engines, synthetic workload settings and
// first policy.
func RunScenario(ctx context.Context, spec Spec, sc Scenario, factory ProxyFactory, stdout io.Writer) error {
	sc.defaults()
	opt := spec.Run
	opt.defaults()
	if spec.Trace != "" || (spec.Kind != "chat" && spec.Kind != "") {
		return fmt.Errorf("--scenario runs the synthetic chat workload only")
	}
	policy := opt.Policies[0]
	ecfg := mock.New(opt.Engine).Config()
	// The capacity of this workload's mix, from a sample of it.
	probe := spec.Synth
	probe.Sessions, probe.Rate = 400, 1
	pw := probe.Generate()
	capy, err := CapacityOf(pw, ecfg, opt.Engines)
	if err != nil {
		return err
	}
	perSession := float64(len(pw.Requests)) / float64(probe.Sessions)
	gen := func(load float64, seed uint64, span time.Duration) *workload.Workload {
		s := spec.Synth
		s.Seed = seed
		// Capacity in requests per unscaled second, into sessions.
		s.Rate = load * capy.PerSecond * ecfg.TimeScale / perSession
		s.Sessions = max(1, int(math.Round(s.Rate*span.Seconds())))
		w := s.Generate()
		for i := range w.Requests {
			w.Requests[i].At = time.Duration(float64(w.Requests[i].At) * ecfg.TimeScale)
		}
		return w
	}
	rep := &ScenarioReport{Scenario: sc, Policy: policy, Capacity: capy, EnginePriority: ecfg.Priority}
	if spec.Run.Progress != nil {
		fmt.Fprintf(spec.Run.Progress, "bench: scenario %s, policy %s, capacity %.1f req/s\n", sc.Name, policy, capy.PerSecond)
	}
	type plan struct {
		name string
		load float64
		w    *workload.Workload
		span time.Duration
	}
	var plans []plan
	seed := spec.Synth.Seed
	switch sc.Name {
	case ScenarioOverload, ScenarioPriority:
		// The reference run is twice as long, so that its p99 rests on
		// a number of requests closer to what the loaded run admits.
		ref, loaded := gen(sc.RefLoad, seed, 2*sc.Duration), gen(sc.Load, seed, sc.Duration)
		if sc.Name == ScenarioPriority {
			for _, w := range []*workload.Workload{ref, loaded} {
				workload.SetClass(w, "high", sc.HighShare, seed)
				workload.SetBodyPriority(w, "high", -1)
			}
		}
		plans = []plan{{"unloaded", sc.RefLoad, ref, 2 * sc.Duration}, {sc.Name, sc.Load, loaded, sc.Duration}}
	case ScenarioFlood:
		normal := sc.Load / (1 + sc.FloodFactor)
		alone := gen(normal, seed, sc.Duration)
		workload.SpreadTenants(alone, "tenant-", sc.Tenants)
		flooder := gen(normal*sc.FloodFactor, seed+1, sc.Duration)
		workload.SetTenant(flooder, "flooder")
		plans = []plan{{"without flooder", normal, alone, sc.Duration}, {"with flooder", sc.Load, workload.Merge("flood", alone, flooder), sc.Duration}}
	default:
		return fmt.Errorf("--scenario %q: want %s, %s or %s", sc.Name, ScenarioOverload, ScenarioPriority, ScenarioFlood)
	}
	for _, p := range plans {
		span := time.Duration(float64(p.span) * ecfg.TimeScale)
		lo, hi := span/4, span
		if spec.Run.Progress != nil {
			fmt.Fprintf(spec.Run.Progress, "bench: %s run, %d requests at %.2f× capacity\n", p.name, len(p.w.Requests), p.load)
		}
		res, err := runPolicy(ctx, p.w, opt, policy, factory, &Report{})
		if err != nil {
			return fmt.Errorf("%s run: %w", p.name, err)
		}
		rep.Runs = append(rep.Runs, summarize(p.name, p.load, p.w, res, lo, hi))
	}
	rep.check()
	rep.WriteText(stdout)
	if spec.JSON != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := writeFile(spec.JSON, append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}

// summarize measures a run in the steady window [lo, hi) of arrival times.
func summarize(name string, load float64, w *workload.Workload, res *Result, lo, hi time.Duration) ScenarioRun {
	sr := ScenarioRun{Name: name, Load: load, Requests: len(w.Requests), Errors: map[string]int{}, HitRate: res.HitRate, res: res}
	start := res.start
	arrived, completed := 0, 0
	var e2e time.Duration
	groups := map[string][]int{}
	var order []string
	add := func(g string, i int) {
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}
	for i := range w.Requests {
		r := &w.Requests[i]
		o := &res.outcomes[i]
		if o.err != nil {
			sr.Errors[errorKind(o)]++
		}
		if o.err == nil && !o.sent.IsZero() {
			if end := o.sent.Add(o.e2e).Sub(start); end >= lo && end < hi {
				completed++
				e2e += o.e2e
			}
		}
		if r.At < lo || r.At >= hi {
			continue
		}
		arrived++
		add("all", i)
		if r.Class != "" {
			add("class "+r.Class, i)
		} else if hasClasses(w) {
			add("class normal", i)
		}
		if r.Tenant != "" {
			g := "normal tenants"
			if r.Tenant == "flooder" {
				g = "flooder"
			}
			add(g, i)
		}
		if r.Turn == 0 {
			add("first turns", i)
		} else {
			add("follow-ups", i)
		}
	}
	secs := (hi - lo).Seconds()
	sr.Offered, sr.Goodput = float64(arrived)/secs, float64(completed)/secs
	if completed > 0 {
		sr.MeanE2E = e2e / time.Duration(completed)
	}
	for _, g := range order {
		var ttft []time.Duration
		gr := Group{Name: g, Sent: len(groups[g])}
		for _, i := range groups[g] {
			if o := &res.outcomes[i]; o.err == nil {
				ttft = append(ttft, o.ttft)
			}
		}
		sortDurations(ttft)
		gr.OK = len(ttft)
		gr.TTFTp50, gr.TTFTp99 = pct(ttft, 0.5), pct(ttft, 0.99)
		sr.Groups = append(sr.Groups, gr)
	}
	return sr
}

func hasClasses(w *workload.Workload) bool {
	for i := range w.Requests {
		if w.Requests[i].Class != "" {
			return true
		}
	}
	return false
}

// errorKind names a failure for the error breakdown.
func errorKind(o *outcome) string {
	switch {
	case o.status == 0:
		return "transport: " + firstWords(o.err.Error())
	case o.code != "":
		return fmt.Sprintf("%d %s", o.status, o.code)
	case o.status == 200:
		return "200 " + firstWords(o.err.Error())
	}
	return fmt.Sprintf("%d", o.status)
}

func firstWords(s string) string {
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

func (r *ScenarioRun) group(name string) (Group, bool) {
	for _, g := range r.Groups {
		if g.Name == name {
			return g, true
		}
	}
	return Group{}, false
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 1e9 // nothing to compare with: fails any target
	}
	return float64(a) / float64(b)
}

// check sets the scenario's targets.
func (rep *ScenarioReport) check() {
	if len(rep.Runs) != 2 {
		return
	}
	ref, run := &rep.Runs[0], &rep.Runs[1]
	refAll, _ := ref.group("all")
	runAll, _ := run.group("all")
	other := 0
	for k, n := range run.Errors {
		if !strings.HasPrefix(k, "429 ") {
			other += n
		}
	}
	for k, n := range ref.Errors {
		if !strings.HasPrefix(k, "429 ") {
			other += n
		}
	}
	switch rep.Scenario.Name {
	case ScenarioOverload:
		rep.Checks = append(rep.Checks,
			Check{What: "goodput / capacity", Value: run.Goodput / rep.Capacity.PerSecond, Target: 0.95},
			Check{What: "admitted TTFT p99 / unloaded p99", Value: ratio(runAll.TTFTp99, refAll.TTFTp99), Target: 2, AtMost: true})
	case ScenarioPriority:
		hi, _ := run.group("class high")
		refHi, _ := ref.group("class high")
		rep.Checks = append(rep.Checks,
			Check{What: "goodput / capacity", Value: run.Goodput / rep.Capacity.PerSecond, Target: 0.95},
			Check{What: "high TTFT p99 / unloaded p99 (all)", Value: ratio(hi.TTFTp99, refAll.TTFTp99), Target: 1.5, AtMost: true},
			Check{What: "high TTFT p99 / unloaded high p99", Value: ratio(hi.TTFTp99, refHi.TTFTp99), Target: 1.5, AtMost: true})
	case ScenarioFlood:
		n, _ := run.group("normal tenants")
		n0, _ := ref.group("normal tenants")
		rep.Checks = append(rep.Checks,
			Check{What: "normal tenants' TTFT p99 with / without flooder", Value: ratio(n.TTFTp99, n0.TTFTp99), Target: 1.2, AtMost: true},
			Check{What: "normal tenants' requests served with flooder", Value: float64(n.OK) / float64(max(n.Sent, 1)), Target: 0.99})
	}
	rep.Checks = append(rep.Checks, Check{What: "errors other than 429", Value: float64(other), Target: 0, AtMost: true})
}

// WriteText writes the scenario's report.
func (rep *ScenarioReport) WriteText(w io.Writer) {
	c := rep.Capacity
	fmt.Fprintf(w, "scenario %s, policy %s", rep.Scenario.Name, rep.Policy)
	if rep.EnginePriority {
		fmt.Fprint(w, ", engines preempting by priority")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "capacity = %d engines × %d seqs / mean service %s (prefill %s + decode) = %.1f req/s; prefill lanes saturate at %.1f req/s\n",
		c.Engines, c.MaxSeqs, fmtDur(c.MeanService), fmtDur(c.MeanPrefill), c.PerSecond, c.PrefillBound)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tgroup\tload\toffered/s\tgoodput/s\tof capacity\thit rate\tsent\tok\tTTFT p50\tp99\t")
	for _, r := range rep.Runs {
		for i, g := range r.Groups {
			load, off, good, of, hit := "", "", "", "", ""
			if i == 0 {
				load = fmt.Sprintf("%.2f×", r.Load)
				off = fmt.Sprintf("%.1f", r.Offered)
				good = fmt.Sprintf("%.1f", r.Goodput)
				of = fmt.Sprintf("%.1f%%", 100*r.Goodput/c.PerSecond)
				hit = fmt.Sprintf("%.1f%%", 100*r.HitRate)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t\n", r.Name, g.Name, load, off, good, of, hit, g.Sent, g.OK, fmtDur(g.TTFTp50), fmtDur(g.TTFTp99))
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "measured over arrivals (TTFT) and completions (goodput) in the last three quarters of the span of conversation starts")
	if ref := rep.Runs[0]; ref.Name == "unloaded" && ref.MeanE2E > 0 && len(rep.Runs) > 1 {
		measured := float64(c.Engines*c.MaxSeqs) / ref.MeanE2E.Seconds()
		fmt.Fprintf(w, "unloaded mean end-to-end %s: at that service time the capacity is %.1f req/s, and the %s run's goodput %.1f%% of it\n",
			fmtDur(ref.MeanE2E), measured, rep.Runs[1].Name, 100*rep.Runs[1].Goodput/measured)
	}
	for _, r := range rep.Runs {
		keys := make([]string, 0, len(r.Errors))
		total := 0
		for k, n := range r.Errors {
			keys = append(keys, k)
			total += n
		}
		sort.Strings(keys)
		fmt.Fprintf(w, "%s: %d requests, %d failed", r.Name, r.Requests, total)
		for _, k := range keys {
			fmt.Fprintf(w, "; %s: %d", k, r.Errors[k])
		}
		fmt.Fprintln(w)
	}
	for _, ch := range rep.Checks {
		op, verdict := "≥", "met"
		if ch.AtMost {
			op = "≤"
		}
		if !ch.Met() {
			verdict = "MISSED"
		}
		fmt.Fprintf(w, "%s: %.3g (target %s %g) %s\n", ch.What, ch.Value, op, ch.Target, verdict)
	}
}
