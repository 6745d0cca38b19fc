package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/bench/precise"
	"github.com/kvca/kvca/internal/cliflag"
	"github.com/kvca/kvca/sched"

	"github.com/kvca/kvca/bench/run"
	"github.com/kvca/kvca/bench/workload"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/cluster"
	"github.com/kvca/kvca/cluster/embednats"
	"github.com/kvca/kvca/edge"
)

// proxyFlags are the proxy settings the bench varies, beside the policy.
func proxyFlags() []cli.Flag {
	d := edge.DefaultConfig()
	return append([]cli.Flag{
		&cli.IntFlag{Name: "block-size", Value: d.Table.BlockSize, Usage: "proxy: CBR block size in bytes", EnvVars: env("block-size")},
		&cli.GenericFlag{Name: "ttl", Value: cliflag.Duration(d.Table.TTL), Usage: "proxy: location TTL (before --time-scale)", EnvVars: env("ttl")},
		&cli.IntFlag{Name: "max-blocks", Value: d.Table.MaxBlocks, Usage: "proxy: block table bound", EnvVars: env("max-blocks")},
		&cli.IntFlag{Name: "active-weight", Value: d.Routing.ActiveWeight, Usage: "proxy: load of one active request, in blocks", EnvVars: env("active-weight")},
		&cli.StringFlag{Name: "prefill-release", Value: "first-byte", Usage: "proxy: first-byte or headers", EnvVars: env("prefill-release")},
		&cli.GenericFlag{Name: "predict-ttl", Value: cliflag.Duration(10 * time.Second), Usage: "proxy: predicted locations at routing time (before --time-scale; 0: off)", EnvVars: env("predict-ttl")},
		&cli.Float64Flag{Name: "affinity-epsilon", Value: d.Routing.AffinityEpsilon, Usage: "proxy: ε of the load bound over affinities (negative: unbounded; a policy suffix /eps=X sets it for that policy)", EnvVars: env("affinity-epsilon")},
		&cli.BoolFlag{Name: "cache-check", Value: d.Routing.CacheCheck, Usage: "proxy: check each answer's cached tokens against the prediction (a policy suffix /no-check turns it off for that policy)", EnvVars: env("cache-check")},
		&cli.IntFlag{Name: "replicas", Value: 1, Usage: "kvca replicas sharing state through an embedded NATS server; requests are spread over them in turn", EnvVars: env("replicas")},
		&cli.BoolFlag{Name: "no-cluster", Usage: "with --replicas N: replicas do not share state (the baseline clustering fixes)", EnvVars: env("no-cluster")},
		&cli.BoolFlag{Name: "engine-metrics", Value: true, Usage: "proxy: scrape the engines' /metrics (--engine-metrics=false: kvca's own view only)", EnvVars: env("engine-metrics")},
		&cli.DurationFlag{Name: "engine-metrics-interval", Value: d.Telemetry.EngineMetricsInterval, Usage: "proxy: engine metrics scrape interval (before --time-scale)", EnvVars: env("engine-metrics-interval")},
		&cli.BoolFlag{Name: "proxy-process", Usage: "run each proxy as a `kvca serve` child process (exact proxy CPU per request)", EnvVars: env("proxy-process")},
		&cli.StringFlag{Name: "kvca", Usage: "with --proxy-process: the kvca `BINARY` (default: kvca beside this executable, else on PATH)", EnvVars: env("kvca")},
		&cli.IntFlag{Name: "max-inflight-per-backend", Usage: "proxy: requests in flight on each backend at most, the rest wait in kvca's admission queue (0: no limit, no queue)", EnvVars: env("max-inflight-per-backend")},
		&cli.IntFlag{Name: "queue-size", Value: d.Admission.QueueSize, Usage: "proxy: requests the admission queue holds at most", EnvVars: env("queue-size")},
		&cli.GenericFlag{Name: "queue-timeout", Value: cliflag.Duration(d.Admission.QueueTimeout), Usage: "proxy: longest wait in the admission queue (before --time-scale)", EnvVars: env("queue-timeout")},
		&cli.GenericFlag{Name: "queue-max-prefill", Value: cliflag.Duration(0), Usage: "proxy: the prefill a request may find waiting ahead of it on a backend, high priority excepted (before --time-scale; 0: no bound)", EnvVars: env("queue-max-prefill")},
		&cli.IntFlag{Name: "queue-high-reserve", Usage: "proxy: of each backend's slots, how many only high-priority requests may take", EnvVars: env("queue-high-reserve")},
		&cli.IntFlag{Name: "queue-tenant-reserve", Value: d.Admission.QueueTenantReserve, Usage: "proxy: while the queue sheds, how many of the fleet's free slots the tenants holding at least half the busiest one's slots may not take while a lighter tenant holds slots", EnvVars: env("queue-tenant-reserve")},
		&cli.IntFlag{Name: "queue-high-pool", Usage: "proxy: of the fleet's free slots, how many only high-priority requests may take", EnvVars: env("queue-high-pool")},
		&cli.BoolFlag{Name: "queue-high-preempts", Usage: "proxy: the engines preempt for high priority, which may then go past --max-inflight-per-backend (pair with --engine-priority)", EnvVars: env("queue-high-preempts")},
		&cli.GenericFlag{Name: "queue-holder-wait", Value: cliflag.Duration(d.Admission.QueueHolderWait), Usage: "proxy: how long a follow-up waits for a holder of its prefix (before --time-scale)", EnvVars: env("queue-holder-wait")},
		&cli.IntFlag{Name: "queue-starvation-limit", Value: d.Admission.QueueStarvationLimit, Usage: "proxy: grants to higher classes a waiting class may be passed over by in a row", EnvVars: env("queue-starvation-limit")},
		&cli.BoolFlag{Name: "queue-engine-aware", Usage: "proxy: lower a backend's admission limit while its engine reports a queue", EnvVars: env("queue-engine-aware")},
		&cli.StringFlag{Name: "pd-protocol", Value: d.PD.Protocol, Usage: "proxy: with --pd-prefill, how the legs speak to the workers (vllm or sglang)", EnvVars: env("pd-protocol")},
		&cli.IntFlag{Name: "pd-threshold", Value: d.PD.Threshold, Usage: "proxy: with --pd-prefill, run a request aggregated on a decode worker when fewer of its prompt tokens than this are uncached on its prefill worker", EnvVars: env("pd-threshold")},
	}, sched.TTFTFlags(env)...)
}

// Suffixes after a policy name, each after a slash and in any order, vary
// the proxy in one run: "no-telemetry" runs it without engine metrics,
// "no-check" without the cache check, "eps=X" with --affinity-epsilon X.
const (
	noTelemetry = "no-telemetry"
	noCheck     = "no-check"
	epsSet      = "eps="
)

// benchProxy is an in-process kvca.
type benchProxy struct{ s *edge.Server }

func (p benchProxy) URL() string { return "http://" + p.s.Addr() }

// PDCounts says how the requests of a disaggregated fleet ran.
func (p benchProxy) PDCounts() (split, aggregated uint64) { return p.s.PDCounts() }

// Predicted is the share of the CBR blocks routed that the scheduler
// believed cached on the backend it chose.
func (p benchProxy) Predicted() (float64, bool) {
	var blocks, cached uint64
	for _, b := range p.s.Scheduler().Backends {
		_, n, c := b.Routed()
		blocks += n
		cached += c
	}
	if blocks == 0 {
		return 0, false
	}
	return float64(cached) / float64(blocks), true
}

// PredictedPerBackend is Predicted per backend, in the order given.
func (p benchProxy) PredictedPerBackend() []float64 {
	bs := p.s.Scheduler().Backends
	out := make([]float64, len(bs))
	for i, b := range bs {
		_, n, c := b.Routed()
		out[i] = -1
		if n > 0 {
			out[i] = float64(c) / float64(n)
		}
	}
	return out
}

func (p benchProxy) CapacityEvictions() uint64 {
	return p.s.Table().Stats().EvictedBackendCapacity
}

func (p benchProxy) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.s.Shutdown(ctx)
}

// replicaSet is several in-process kvca replicas, clustered through an
// embedded NATS server unless they are the unclustered baseline.
type replicaSet struct {
	servers  []*edge.Server
	nodes    []*cluster.Node
	stopNATS func()
}

func (r *replicaSet) URL() string { return "http://" + r.servers[0].Addr() }

func (r *replicaSet) URLs() []string {
	urls := make([]string, len(r.servers))
	for i, s := range r.servers {
		urls[i] = "http://" + s.Addr()
	}
	return urls
}

func (r *replicaSet) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range r.servers {
		_ = s.Shutdown(ctx)
	}
	for _, n := range r.nodes {
		n.Close()
	}
	if r.stopNATS != nil {
		r.stopNATS()
	}
	return nil
}

func startReplicas(cfg edge.Config, n int, clustered bool) (run.Proxy, error) {
	rs := &replicaSet{}
	var url string
	if clustered {
		var err error
		if url, rs.stopNATS, err = embednats.Start(""); err != nil {
			return nil, err
		}
	}
	cfg.Table.HashKey = chain.RandomKey().String() // replicas must share one
	for range n {
		s, err := edge.New(cfg)
		if err != nil {
			rs.Close()
			return nil, err
		}
		if clustered {
			node, err := cluster.Join(s, cluster.Options{URL: url, Name: "bench"})
			if err != nil {
				rs.Close()
				return nil, err
			}
			rs.nodes = append(rs.nodes, node)
		}
		if err := s.Start(); err != nil {
			rs.Close()
			return nil, err
		}
		rs.servers = append(rs.servers, s)
	}
	return rs, nil
}

// proxyFactory builds kvca proxies as the bench's flags describe, with
// the TTL scaled like every other duration of the replay.
func proxyFactory(c *cli.Context, timeScale float64) run.ProxyFactory {
	ttl := time.Duration(float64(c.Duration("ttl")) * timeScale)
	if ttl < time.Second {
		ttl = time.Second
	}
	interval := max(time.Duration(float64(c.Duration("engine-metrics-interval"))*timeScale), 10*time.Millisecond)
	scaled := func(name string) time.Duration { return time.Duration(float64(c.Duration(name)) * timeScale) }
	if c.Bool("proxy-process") {
		exe := kvcaBinary(c.String("kvca"))
		return run.ExecFactory(func(policy string, backends []string, listen string) []string {
			argv := []string{exe, "serve", "--listen", listen, "--admin-listen", "", "--policy", policy,
				"--block-size", strconv.Itoa(c.Int("block-size")), "--ttl", ttl.String(),
				"--max-blocks", strconv.Itoa(c.Int("max-blocks")), "--active-weight", strconv.Itoa(c.Int("active-weight")),
				"--log-level", "warn", "--prefill-release", c.String("prefill-release"),
				"--predict-ttl", time.Duration(float64(c.Duration("predict-ttl")) * timeScale).String(),
				"--engine-metrics=" + strconv.FormatBool(c.Bool("engine-metrics")), "--engine-metrics-interval", interval.String(),
				"--affinity-epsilon", strconv.FormatFloat(c.Float64("affinity-epsilon"), 'g', -1, 64), "--cache-check=" + strconv.FormatBool(c.Bool("cache-check"))}
			tc := sched.TTFTFrom(c, timeScale)
			argv = append(argv, "--batch-capacity", strconv.Itoa(tc.Capacity), "--prefill-block-time", tc.BlockTime.String(),
				"--first-token-base", tc.Base.String(), "--resident-window", tc.ResidentWindow.String(),
				"--resident-epsilon", strconv.FormatFloat(tc.ResidentEpsilon, 'g', -1, 64),
				"--max-inflight-per-backend", strconv.Itoa(c.Int("max-inflight-per-backend")), "--queue-size", strconv.Itoa(c.Int("queue-size")),
				"--queue-timeout", scaled("queue-timeout").String(), "--queue-holder-wait", scaled("queue-holder-wait").String(), "--queue-max-prefill", scaled("queue-max-prefill").String(),
				"--queue-starvation-limit", strconv.Itoa(c.Int("queue-starvation-limit")), "--queue-high-reserve", strconv.Itoa(c.Int("queue-high-reserve")),
				"--queue-tenant-reserve", strconv.Itoa(c.Int("queue-tenant-reserve")), "--queue-high-pool", strconv.Itoa(c.Int("queue-high-pool")),
				"--queue-high-preempts="+strconv.FormatBool(c.Bool("queue-high-preempts")),
				"--queue-engine-aware="+strconv.FormatBool(c.Bool("queue-engine-aware")),
				"--pd-protocol", c.String("pd-protocol"), "--pd-threshold", strconv.Itoa(c.Int("pd-threshold")))
			for _, b := range backends {
				argv = append(argv, "--backend", b)
			}
			return argv
		}, "/ready")
	}
	return func(policy string, backends []string) (run.Proxy, error) {
		// "<policy>/no-telemetry" runs the policy with --engine-metrics
		// off, so that one run compares both.
		policy, eps, offTelemetry, offCheck, err := policyVariant(policy, c.Float64("affinity-epsilon"))
		if err != nil {
			return nil, err
		}
		cfg := edge.DefaultConfig()
		cfg.Routing.AffinityEpsilon = eps
		cfg.Routing.CacheCheck = c.Bool("cache-check") && !offCheck
		cfg.Listen, cfg.AdminListen = "127.0.0.1:0", ""
		cfg.Backends = backends
		cfg.Routing.Policy = policy
		cfg.Table.BlockSize = c.Int("block-size")
		cfg.Table.TTL = ttl
		cfg.Table.MaxBlocks = c.Int("max-blocks")
		cfg.Routing.ActiveWeight = c.Int("active-weight")
		cfg.PrefillAtHeaders = c.String("prefill-release") == "headers"
		cfg.Table.PredictTTL = time.Duration(float64(c.Duration("predict-ttl")) * timeScale)
		cfg.Telemetry.EngineMetrics = c.Bool("engine-metrics") && !offTelemetry
		cfg.Telemetry.EngineMetricsInterval = interval
		cfg.Routing.TTFT = sched.TTFTFrom(c, timeScale)
		cfg.Admission.MaxInflightPerBackend = c.Int("max-inflight-per-backend")
		cfg.Admission.QueueSize = c.Int("queue-size")
		cfg.Admission.QueueTimeout = scaled("queue-timeout")
		cfg.Admission.QueueHolderWait = scaled("queue-holder-wait")
		cfg.Admission.QueueMaxPrefill = scaled("queue-max-prefill")
		cfg.Admission.QueueHighReserve = c.Int("queue-high-reserve")
		cfg.Admission.QueueTenantReserve = c.Int("queue-tenant-reserve")
		cfg.Admission.QueueHighPool = c.Int("queue-high-pool")
		cfg.Admission.QueueHighPreempts = c.Bool("queue-high-preempts")
		cfg.Admission.QueueStarvationLimit = c.Int("queue-starvation-limit")
		cfg.Admission.QueueEngineAware = c.Bool("queue-engine-aware")
		cfg.PD = edge.PDSettings{Protocol: c.String("pd-protocol"), Threshold: c.Int("pd-threshold")}
		if n := c.Int("replicas"); n > 1 {
			return startReplicas(cfg, n, !c.Bool("no-cluster"))
		}
		s, err := edge.New(cfg)
		if err != nil {
			return nil, err
		}
		if err := s.Start(); err != nil {
			return nil, err
		}
		return benchProxy{s}, nil
	}
}

// policyVariant splits a policy name from its suffixes (see noTelemetry):
// the policy, ε (eps unless a suffix sets it), and whether engine metrics
// and the cache check are off.
func policyVariant(policy string, eps float64) (name string, e float64, offTelemetry, offCheck bool, err error) {
	name, mods, _ := strings.Cut(policy, "/")
	e = eps
	for _, m := range strings.Split(mods, "/") {
		switch v, isEps := strings.CutPrefix(m, epsSet); {
		case m == "":
		case m == noTelemetry:
			offTelemetry = true
		case m == noCheck:
			offCheck = true
		case isEps:
			if e, err = strconv.ParseFloat(v, 64); err != nil {
				return "", 0, false, false, fmt.Errorf("policy %q: %v", policy, err)
			}
		default:
			return "", 0, false, false, fmt.Errorf("policy %q: unknown suffix /%s", policy, m)
		}
	}
	return name, e, offTelemetry, offCheck, nil
}

// kvcaBinary finds the kvca binary that --proxy-process runs: the one
// named, else the kvca beside this executable (make build puts both in
// bin/), else kvca on PATH.
func kvcaBinary(named string) string {
	if named != "" {
		return named
	}
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "kvca"); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath("kvca"); err == nil {
		return p
	}
	return "kvca"
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "replay a workload through kvca in front of mock engines, once per policy, and compare",
		Description: `Starts --engines mock inference engines and, per policy, a kvca proxy in
front of them; replays the same arrivals (a synthetic multi-turn chat, or a
Mooncake-format trace with --trace) and reports engine prefix-cache hit rate,
TTFT and end-to-end latency percentiles, throughput, load imbalance, errors
and proxy CPU per request.`,
		Flags: append(run.Flags(), proxyFlags()...),
		Action: func(c *cli.Context) error {
			spec, err := run.SpecFromCLI(c)
			if err != nil {
				return err
			}
			spec.Run.Precise = preciseFactory(c, spec.TimeScale)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return run.Main(ctx, spec, proxyFactory(c, spec.TimeScale), os.Stdout)
		},
	}
}

// preciseFactory starts an in-process kvca whose policy is the precise
// oracle over the bench's own engines, with the same proxy settings (and
// so the same chains) as the others.
func preciseFactory(c *cli.Context, timeScale float64) func([]*mock.Engine, *workload.Workload, []string) (run.Proxy, error) {
	return func(engines []*mock.Engine, w *workload.Workload, backends []string) (run.Proxy, error) {
		key := chain.RandomKey()
		p, err := precise.New(engines, w, key, c.Int("block-size"))
		if err != nil {
			return nil, err
		}
		ttl := max(time.Duration(float64(c.Duration("ttl"))*timeScale), time.Second)
		cfg := edge.DefaultConfig()
		cfg.Listen, cfg.AdminListen = "127.0.0.1:0", ""
		cfg.Backends = backends
		cfg.Table.HashKey = key.String()
		cfg.CustomPolicy = p
		cfg.Table.BlockSize = c.Int("block-size")
		cfg.Table.TTL = ttl
		cfg.Table.MaxBlocks = c.Int("max-blocks")
		cfg.Routing.ActiveWeight = c.Int("active-weight")
		cfg.PrefillAtHeaders = c.String("prefill-release") == "headers"
		// The oracle needs no telemetry: it reads the engines.
		cfg.Telemetry.EngineMetrics = false
		s, err := edge.New(cfg)
		if err != nil {
			return nil, err
		}
		s.Scheduler().ExtraLoad = p.ExtraLoad
		if err := s.Start(); err != nil {
			return nil, err
		}
		return benchProxy{s}, nil
	}
}
