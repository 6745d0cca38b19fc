package run

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/bench/workload"
)

// Spec is everything `kvca-bench bench` needs besides the proxy.
type Spec struct {
	Run Options

	// Trace is a Mooncake-format file to replay; empty: Synth.
	Trace     string
	TraceOpts workload.TraceOptions
	Synth     workload.Synthetic
	// Kind is what the conversations are sent as: "chat" (default),
	// "messages" (the same conversations on the Anthropic Messages API),
	// "threads" (Responses API threads continued by previous_response_id
	// only), "subagents" (SubAgents) or "agent" (Agent).
	Kind      string
	SubAgents workload.SubAgents
	Agent     workload.Agent
	// TimeScale multiplies arrival times (and, through Run.Engine.TimeScale,
	// every simulated duration) so that long workloads replay quickly with
	// the same load shape. ArrivalScale multiplies arrivals only: below 1 it
	// raises the load.
	TimeScale    float64
	ArrivalScale float64
	// PlainStreams sends streamed chat and completions requests without
	// stream_options.include_usage, as the OpenAI SDKs do by default.
	PlainStreams bool

	JSON   string // write the JSON report here
	Charts string // write PNG charts into this directory

	// Scenario, when its Name is set, runs an admission scenario
	// (RunScenario) instead of the policy comparison.
	Scenario Scenario
}

// ScenarioPolicy is the policy a scenario runs unless --policies names one.
const ScenarioPolicy = "kvca-cost"

// env names the KVCA_BENCH_<NAME> variable of a flag, apart from kvca
// serve's KVCA_<NAME>.
func env(name string) []string {
	return []string{"KVCA_BENCH_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

// Flags are `kvca-bench bench`'s flags; read them back with SpecFromCLI.
func Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "workload", Value: "chat", Usage: "what the conversations are sent as: chat, messages (the same conversations on the Anthropic Messages API, /v1/messages), " +
			"threads (synthetic conversations as Responses API threads continued by previous_response_id only), subagents (Messages API sessions fanning out parallel sub-agent requests that share a new prefix, named by x-claude-code-session-id), " +
			"agent (coding agents' long chat sessions of tool calls and results, each request repeating the previous one, with sub-agents sharing the whole prompt; the --agent-* flags)", EnvVars: env("workload")},
		&cli.IntFlag{Name: "agents", Value: 4, Usage: "subagents: parallel sub-agent requests per fan-out", EnvVars: env("agents")},
		&cli.IntFlag{Name: "fanouts", Value: 2, Usage: "subagents: fan-outs per session", EnvVars: env("fanouts")},
		&cli.IntFlag{Name: "agent-context-tokens", Value: 2048, Usage: "subagents: tokens of the new prefix a fan-out's requests share", EnvVars: env("agent-context-tokens")},
		&cli.IntFlag{Name: "agent-kinds", Value: 3, Usage: "agent: distinct agents, each with a system prompt and tool definitions all its sessions start with", EnvVars: env("agent-kinds")},
		&cli.IntFlag{Name: "agent-sessions", Value: 24, Usage: "agent: sessions", EnvVars: env("agent-sessions")},
		&cli.Float64Flag{Name: "agent-rate", Value: 0.05, Usage: "agent: session arrivals per second (Poisson)", EnvVars: env("agent-rate")},
		&cli.IntFlag{Name: "agent-min-turns", Value: 20, Usage: "agent: fewest main-agent requests per session", EnvVars: env("agent-min-turns")},
		&cli.IntFlag{Name: "agent-max-turns", Value: 60, Usage: "agent: most main-agent requests per session", EnvVars: env("agent-max-turns")},
		&cli.IntFlag{Name: "agent-prefix-bytes", Value: 20_000, Usage: "agent: bytes of an agent's system prompt and tool definitions (the first request: these and a task)", EnvVars: env("agent-prefix-bytes")},
		&cli.IntFlag{Name: "agent-min-bytes", Value: 500_000, Usage: "agent: fewest bytes a session's last request reaches (drawn per session up to --agent-max-bytes; the mock counts 4 bytes a token)", EnvVars: env("agent-min-bytes")},
		&cli.IntFlag{Name: "agent-max-bytes", Value: 1_000_000, Usage: "agent: most bytes a session's last request reaches", EnvVars: env("agent-max-bytes")},
		&cli.GenericFlag{Name: "agent-think-time", Value: cliflag.Duration(2 * time.Second), Usage: "agent: mean (exponential) of the model's step before each next request", EnvVars: env("agent-think-time")},
		&cli.GenericFlag{Name: "agent-tool-time", Value: cliflag.Duration(4 * time.Second), Usage: "agent: median (log-normal, σ 1, at most 20×) of a tool's run, added to the step", EnvVars: env("agent-tool-time")},
		&cli.IntFlag{Name: "agent-fanouts", Value: 2, Usage: "agent: sub-agent fan-outs per session (0: none)", EnvVars: env("agent-fanouts")},
		&cli.IntFlag{Name: "agent-subagents", Value: 4, Usage: "agent: most sub-agents per fan-out (each has 2 to this many), started at once from the session's whole prompt", EnvVars: env("agent-subagents")},
		&cli.IntFlag{Name: "agent-subagent-turns", Value: 4, Usage: "agent: most requests per sub-agent (each runs 2 to this many)", EnvVars: env("agent-subagent-turns")},
		&cli.StringFlag{Name: "trace", Usage: "Mooncake-format JSONL trace `FILE` to replay (default: synthetic chat)", EnvVars: env("trace")},
		&cli.IntFlag{Name: "max-requests", Usage: "replay only the first N requests of the trace (0: all)", EnvVars: env("max-requests")},
		&cli.BoolFlag{Name: "plain", Usage: "send each trace request as one user message (no conversation reconstruction)", EnvVars: env("plain")},
		&cli.IntFlag{Name: "max-output-tokens", Usage: "cap each request's output tokens (0: as the workload says)", EnvVars: env("max-output-tokens")},
		&cli.Float64Flag{Name: "time-scale", Value: 0.1, Usage: "multiply arrival times and every simulated engine duration (0.1: 10× faster; smaller values make the replay CPU-bound on small machines)", EnvVars: env("time-scale")},
		&cli.Float64Flag{Name: "arrival-scale", Value: 0.22, Usage: "further multiply arrival times only: the default 0.22 replays arrivals 4.5× denser than recorded, so the engines run as busy as a production fleet (1: the recorded rate)", EnvVars: env("arrival-scale")},

		&cli.IntFlag{Name: "sessions", Value: 200, Usage: "synthetic: conversations", EnvVars: env("sessions")},
		&cli.Float64Flag{Name: "rate", Value: 5, Usage: "synthetic: conversation arrivals per second (Poisson)", EnvVars: env("rate")},
		&cli.IntFlag{Name: "min-turns", Value: 2, Usage: "synthetic: fewest user turns per conversation", EnvVars: env("min-turns")},
		&cli.IntFlag{Name: "max-turns", Value: 8, Usage: "synthetic: most user turns per conversation", EnvVars: env("max-turns")},
		&cli.GenericFlag{Name: "think-time", Value: cliflag.Duration(5 * time.Second), Usage: "synthetic: mean gap between a conversation's requests", EnvVars: env("think-time")},
		&cli.IntFlag{Name: "system-prompts", Value: 4, Usage: "synthetic: distinct shared system prompts", EnvVars: env("system-prompts")},
		&cli.BoolFlag{Name: "cycle-prompts", Usage: "synthetic: conversation i gets system prompt i mod --system-prompts instead of a random one (equal shares; the sticky oracle then deals each prompt to one engine when there are as many engines as prompts)", EnvVars: env("cycle-prompts")},
		&cli.IntFlag{Name: "system-tokens", Value: 2048, Usage: "synthetic: tokens per system prompt", EnvVars: env("system-tokens")},
		&cli.IntFlag{Name: "user-tokens", Value: 256, Usage: "synthetic: mean tokens per user message", EnvVars: env("user-tokens")},
		&cli.IntFlag{Name: "output-tokens", Value: 128, Usage: "synthetic: output tokens per request", EnvVars: env("output-tokens")},
		&cli.Float64Flag{Name: "tool-rate", Value: 0.2, Usage: "synthetic: probability that a turn calls a tool", EnvVars: env("tool-rate")},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "synthetic: random seed", EnvVars: env("seed")},

		&cli.IntFlag{Name: "engines", Value: 8, Usage: "mock engines behind the proxy", EnvVars: env("engines")},
		&cli.IntFlag{Name: "cache-tokens", Value: 2_000_000, Usage: "KV cache capacity of each engine, in tokens", EnvVars: env("cache-tokens")},
		&cli.IntFlag{Name: "block-tokens", Value: 16, Usage: "engine KV block size in tokens", EnvVars: env("block-tokens")},
		&cli.IntFlag{Name: "max-seqs", Value: 64, Usage: "sequences an engine runs at once; the rest queue", EnvVars: env("max-seqs")},
		&cli.BoolFlag{Name: "engine-priority", Usage: "engines queue by the body's priority field (lower first) and preempt a running sequence of lower priority for an arrival when every slot is taken, as SGLang with --enable-priority-scheduling (default: first come first served)", EnvVars: env("engine-priority")},
		&cli.GenericFlag{Name: "prefill-overhead", Value: cliflag.Duration(5 * time.Millisecond), Usage: "engine prefill cost per request (before time-scale)", EnvVars: env("prefill-overhead")},
		&cli.GenericFlag{Name: "prefill-per-token", Value: cliflag.Duration(50 * time.Microsecond), Usage: "engine prefill cost per uncached token (before time-scale)", EnvVars: env("prefill-per-token")},
		&cli.GenericFlag{Name: "decode-per-token", Value: cliflag.Duration(10 * time.Millisecond), Usage: "engine decode time per output token (before time-scale)", EnvVars: env("decode-per-token")},
		&cli.GenericFlag{Name: "transfer-per-token", Value: cliflag.Duration(5 * time.Microsecond), Usage: "engine: with --pd-prefill, a decode leg's wait per prompt token its cache lacks, read from the prefill worker (before time-scale)", EnvVars: env("transfer-per-token")},
		&cli.StringFlag{Name: "engine-command", Usage: "run each engine as this `COMMAND` instead of a mock (split at spaces; " + PortPlaceholder + " becomes its port on 127.0.0.1, " + NamePlaceholder + " its name): any OpenAI-compatible server exporting vLLM's or SGLang's /metrics, e.g. an independent vLLM simulator; hit rate and load are read from its /metrics, its durations are its own (not scaled by --time-scale), --block-tokens should match its block size; the precise policy needs mocks", EnvVars: env("engine-command")},
		&cli.IntFlag{Name: "pd-prefill", Usage: "a disaggregated fleet: the first N engines are prefill workers, the others decode workers (the proxy is given their roles; docs/disaggregation.md); 0: every engine aggregated", EnvVars: env("pd-prefill")},
		&cli.StringFlag{Name: "engine-ready-path", Value: "/health", Usage: "with --engine-command: path polled until the engine answers 200", EnvVars: env("engine-ready-path")},

		&cli.StringFlag{Name: "policies", Value: strings.Join(DefaultPolicies, ","), Usage: "comma-separated routing policies to compare", EnvVars: env("policies")},
		&cli.IntFlag{Name: "max-in-flight", Value: 2048, Usage: "bound on concurrent requests (later arrivals wait)", EnvVars: env("max-in-flight")},
		&cli.GenericFlag{Name: "timeout", Value: cliflag.Duration(10 * time.Minute), Usage: "per-request timeout", EnvVars: env("timeout")},
		&cli.StringFlag{Name: "json", Usage: "write the JSON report to `FILE`", EnvVars: env("json")},
		&cli.StringFlag{Name: "charts", Usage: "write PNG charts into `DIR`", EnvVars: env("charts")},
		&cli.BoolFlag{Name: "quiet", Usage: "no progress lines on stderr", EnvVars: env("quiet")},
		&cli.BoolFlag{Name: "plain-streams", Usage: "send streamed chat and completions requests without stream_options.include_usage, as the OpenAI SDKs do by default (the engines then report cached tokens in a stream only when the proxy asks)", EnvVars: env("plain-streams")},

		&cli.StringFlag{Name: "scenario", Usage: "run an admission scenario on the synthetic chat workload instead of comparing policies: overload (arrivals at --load × the fleet's capacity against an unloaded run), " +
			"priority (the same with --high-share of the conversations high priority), flood (--tenants normal tenants with and without one tenant sending --flood-factor × as much as all of them); one policy (the first of --policies, else " + ScenarioPolicy + "); the arrival rate comes from the capacity, not from --rate or --arrival-scale", EnvVars: env("scenario")},
		&cli.Float64Flag{Name: "load", Value: 2, Usage: "scenario: arrivals of the loaded run over the fleet's capacity (engines × max-seqs / mean service time)", EnvVars: env("load")},
		&cli.Float64Flag{Name: "unloaded-load", Value: 0.25, Usage: "scenario overload, priority: arrivals of the reference run over the capacity", EnvVars: env("unloaded-load")},
		&cli.GenericFlag{Name: "duration", Value: cliflag.Duration(20 * time.Second), Usage: "scenario: span of conversation starts of each run (before --time-scale)", EnvVars: env("duration")},
		&cli.Float64Flag{Name: "high-share", Value: 0.1, Usage: "scenario priority: share of conversations sent with X-KVCA-Priority: high", EnvVars: env("high-share")},
		&cli.IntFlag{Name: "tenants", Value: 9, Usage: "scenario flood: normal tenants (X-KVCA-Tenant), conversations spread over them in turn", EnvVars: env("tenants")},
		&cli.Float64Flag{Name: "flood-factor", Value: 3, Usage: "scenario flood: the flooding tenant's arrivals over all normal tenants' together (with --load 2 and 3: the normal tenants send half the capacity)", EnvVars: env("flood-factor")},
	}
}

// SpecFromCLI reads the flags of Flags.
func SpecFromCLI(c *cli.Context) (Spec, error) {
	var s Spec
	s.TimeScale = c.Float64("time-scale")
	s.ArrivalScale = c.Float64("arrival-scale")
	if s.TimeScale <= 0 || s.ArrivalScale <= 0 {
		return s, fmt.Errorf("--time-scale and --arrival-scale must be positive")
	}
	s.Trace = c.String("trace")
	s.TraceOpts = workload.TraceOptions{
		MaxRequests:     c.Int("max-requests"),
		Plain:           c.Bool("plain"),
		MaxOutputTokens: c.Int("max-output-tokens"),
	}
	s.Synth = workload.Synthetic{
		Seed: c.Uint64("seed"), Sessions: c.Int("sessions"), Rate: c.Float64("rate"),
		MinTurns: c.Int("min-turns"), MaxTurns: c.Int("max-turns"), ThinkTime: c.Duration("think-time"),
		SystemPrompts: c.Int("system-prompts"), CyclePrompts: c.Bool("cycle-prompts"), SystemPromptTokens: c.Int("system-tokens"),
		UserTokens: c.Int("user-tokens"), OutputTokens: c.Int("output-tokens"), ToolRate: c.Float64("tool-rate"),
	}
	s.Kind = c.String("workload")
	switch s.Kind {
	case "chat", "messages", "subagents", "agent":
	case "threads":
		if s.Trace != "" {
			return s, fmt.Errorf("--workload threads is synthetic; it cannot replay --trace")
		}
	default:
		return s, fmt.Errorf("--workload %q: want chat, messages, threads, subagents or agent", s.Kind)
	}
	if (s.Kind == "subagents" || s.Kind == "agent") && s.Trace != "" {
		return s, fmt.Errorf("--workload %s is synthetic; it cannot replay --trace", s.Kind)
	}
	s.SubAgents = workload.SubAgents{
		Seed: c.Uint64("seed"), Sessions: c.Int("sessions"), Rate: c.Float64("rate"),
		Rounds: c.Int("fanouts"), Agents: c.Int("agents"), ContextTokens: c.Int("agent-context-tokens"),
		SystemTokens: c.Int("system-tokens"), UserTokens: c.Int("user-tokens"), OutputTokens: c.Int("output-tokens"),
		ThinkTime: c.Duration("think-time"),
	}
	s.Agent = workload.Agent{
		Seed: c.Uint64("seed"), Kinds: c.Int("agent-kinds"), Sessions: c.Int("agent-sessions"), Rate: c.Float64("agent-rate"),
		MinTurns: c.Int("agent-min-turns"), MaxTurns: c.Int("agent-max-turns"),
		PrefixBytes: c.Int("agent-prefix-bytes"), MinBytes: c.Int("agent-min-bytes"), MaxBytes: c.Int("agent-max-bytes"),
		ThinkTime: c.Duration("agent-think-time"), ToolTime: c.Duration("agent-tool-time"),
		Fanouts: c.Int("agent-fanouts"), MaxSubAgents: c.Int("agent-subagents"), SubAgentTurns: c.Int("agent-subagent-turns"),
		OutputTokens: c.Int("output-tokens"),
	}
	if s.Agent.Fanouts == 0 {
		s.Agent.Fanouts = -1 // none, where the struct's zero is its default
	}
	var policies []string
	for _, p := range strings.Split(c.String("policies"), ",") {
		if p = strings.TrimSpace(p); p != "" {
			policies = append(policies, p)
		}
	}
	s.Run = Options{
		Engines: c.Int("engines"),
		Engine: mock.Config{
			CacheTokens: c.Int("cache-tokens"), BlockTokens: c.Int("block-tokens"), MaxSeqs: c.Int("max-seqs"), Priority: c.Bool("engine-priority"),
			PrefillOverhead: c.Duration("prefill-overhead"), PrefillPerToken: c.Duration("prefill-per-token"),
			DecodePerToken: c.Duration("decode-per-token"), TransferPerToken: c.Duration("transfer-per-token"), TimeScale: s.TimeScale,
		},
		Policies:        policies,
		MaxInFlight:     c.Int("max-in-flight"),
		Timeout:         c.Duration("timeout"),
		EngineCommand:   strings.Fields(c.String("engine-command")),
		EngineReadyPath: c.String("engine-ready-path"),
		PrefillEngines:  c.Int("pd-prefill"),
	}
	if s.Run.PrefillEngines < 0 || (s.Run.PrefillEngines > 0 && s.Run.PrefillEngines >= s.Run.Engines) {
		return s, fmt.Errorf("--pd-prefill %d: a disaggregated fleet needs between 1 and --engines - 1 (%d) prefill workers", s.Run.PrefillEngines, s.Run.Engines-1)
	}
	if !c.Bool("quiet") {
		s.Run.Progress = os.Stderr
	}
	s.JSON, s.Charts = c.String("json"), c.String("charts")
	s.PlainStreams = c.Bool("plain-streams")
	s.Scenario = Scenario{
		Name: c.String("scenario"), Load: c.Float64("load"), RefLoad: c.Float64("unloaded-load"),
		Duration: c.Duration("duration"), HighShare: c.Float64("high-share"), Tenants: c.Int("tenants"),
		FloodFactor: c.Float64("flood-factor"),
	}
	if s.Scenario.Name != "" && !c.IsSet("policies") {
		s.Run.Policies = []string{ScenarioPolicy}
	}
	return s, nil
}

// Workload builds the spec's workload with its arrival times scaled.
func (s Spec) Workload() (*workload.Workload, error) {
	var w *workload.Workload
	if s.Trace != "" {
		var err error
		if w, err = workload.LoadTrace(s.Trace, s.TraceOpts); err != nil {
			return nil, err
		}
	} else {
		switch s.Kind {
		case "threads":
			w = s.Synth.Threads()
		case "subagents":
			w = s.SubAgents.Generate()
		case "agent":
			w = s.Agent.Generate()
		default:
			w = s.Synth.Generate()
		}
	}
	if s.Kind == "messages" {
		var err error
		if w, err = workload.AsMessages(w); err != nil {
			return nil, err
		}
	}
	if s.PlainStreams {
		workload.PlainStreams(w)
	}
	scale := s.TimeScale * s.ArrivalScale
	if scale <= 0 {
		scale = 1
	}
	for i := range w.Requests {
		w.Requests[i].At = time.Duration(float64(w.Requests[i].At) * scale)
	}
	return w, nil
}

// Main runs the bench described by spec against proxies from factory and
// writes the table to stdout, and the JSON report and charts if asked.
func Main(ctx context.Context, spec Spec, factory ProxyFactory, stdout io.Writer) error {
	if spec.Scenario.Name != "" {
		return RunScenario(ctx, spec, spec.Scenario, factory, stdout)
	}
	w, err := spec.Workload()
	if err != nil {
		return err
	}
	if spec.Run.Progress != nil {
		fmt.Fprintf(spec.Run.Progress, "bench: workload %s, %d requests over %s; policies %s\n",
			w.Name, len(w.Requests), w.Duration().Round(time.Second), strings.Join(spec.Run.Policies, ","))
	}
	rep, err := Run(ctx, w, spec.Run, factory)
	if rep != nil && len(rep.Results) > 0 {
		rep.WriteTable(stdout)
		if spec.JSON != "" {
			f, ferr := os.Create(spec.JSON)
			if ferr != nil {
				return ferr
			}
			ferr = rep.WriteJSON(f)
			if cerr := f.Close(); ferr == nil {
				ferr = cerr
			}
			if ferr != nil {
				return ferr
			}
		}
		if spec.Charts != "" {
			if cerr := rep.WriteCharts(spec.Charts); cerr != nil {
				return cerr
			}
		}
	}
	return err
}
