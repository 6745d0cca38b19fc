package sched

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"
)

// Settings is routing as an operator sets it: kvca serve's --policy,
// --active-weight, --affinity-epsilon, --cache-check and the ttft
// policy's model (TTFTFlags), with their defaults, validation and flags.
type Settings struct {
	Policy       string
	ActiveWeight int
	// AffinityEpsilon is ε of the load bound over affinities that hold
	// nothing yet (a session's new conversation): one
	// may send a request to a backend only while it holds at most
	// (1+ε) × the mean requests, and two. Negative: unbounded, and the
	// overload rule over affinities holding cached work off too.
	AffinityEpsilon float64
	// CacheCheck holds every routed answer's cached-token count against
	// the prediction (CheckCached): an engine that evicted what kvca
	// believed it held has those locations dropped.
	CacheCheck bool
	// TTFT is the ttft policy's model where it is known and the
	// resident-work bound; zeros are learned.
	TTFT TTFTConfig
}

// DefaultSettings are the command line's defaults.
func DefaultSettings() Settings {
	return Settings{Policy: DefaultPolicy, ActiveWeight: 4, AffinityEpsilon: DefaultAffinityEpsilon, CacheCheck: true,
		TTFT: TTFTConfig{ResidentEpsilon: DefaultResidentEpsilon}}
}

// Validate fills the policy's default and reports the first mistake in
// one sentence.
func (s *Settings) Validate() error {
	if math.IsNaN(s.AffinityEpsilon) || math.IsInf(s.AffinityEpsilon, 0) {
		return fmt.Errorf("--affinity-epsilon must be a number (negative: no bound), got %v", s.AffinityEpsilon)
	}
	if s.Policy == "" {
		s.Policy = DefaultPolicy
	}
	if _, err := PolicyByName(s.Policy); err != nil {
		return fmt.Errorf("--policy: %v", err)
	}
	if s.ActiveWeight < 0 {
		return fmt.Errorf("--active-weight must not be negative, got %d", s.ActiveWeight)
	}
	return nil
}

// Restart names the settings of next that differ from s and that a
// reload does not apply: the policy, the active weight and ε are applied
// live.
func (s *Settings) Restart(next *Settings) []string {
	var out []string
	if s.CacheCheck != next.CacheCheck {
		out = append(out, "cache-check")
	}
	if s.TTFT != next.TTFT {
		out = append(out, "ttft settings (batch-capacity, prefill-block-time, first-token-base, resident-window, resident-epsilon)")
	}
	return out
}

// Flags are routing's flags but the ttft model's (TTFTFlags); env names a
// flag's KVCA_* variable.
func Flags(env func(flag string) []string) []cli.Flag {
	d := DefaultSettings()
	return []cli.Flag{
		&cli.StringFlag{Name: "policy", Value: d.Policy, Usage: "routing policy: " + strings.Join(Policies(), ", "), EnvVars: env("policy")},
		&cli.IntFlag{Name: "active-weight", Value: d.ActiveWeight, Usage: "load of one active request, in blocks", EnvVars: env("active-weight")},
	}
}

// BoundFlags are the flags of the load bound and of the cache check.
func BoundFlags(env func(flag string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.Float64Flag{Name: "affinity-epsilon", Value: DefaultAffinityEpsilon, Usage: "ε of the load bound over affinities that hold nothing yet (a session key's new conversation): one may send a request to a backend only while it holds at most (1+ε) × the fleet's mean requests, and two; affinities that hold cached work (prefix and prompt holders, a session's conversation) yield only to overload (a saturated backend predicted slower than another recomputing what it holds); negative: both off", EnvVars: env("affinity-epsilon")},
		&cli.BoolFlag{Name: "cache-check", Value: true, Usage: "read every answer's cached-token count (usage.prompt_tokens_details.cached_tokens, cache_read_input_tokens, timings.cache_n) and check the prediction: locations an engine evicted are dropped", EnvVars: env("cache-check")},
	}
}

// TTFTFlags are the flags of the ttft policy's model and the resident-work
// bound (docs/placement.md), shared by kvca serve and the bench.
func TTFTFlags(env func(flag string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "batch-capacity", Usage: "sequences each backend runs at once (vLLM's --max-num-seqs): when its batch is full, for the overload rule over affinities and ttft's predictions; 0: read from the engine's queue where its metrics report one, else learned from first-byte latencies (set it for engines without queue metrics on a busy host, whose slow answers can read as slot waits)", EnvVars: env("batch-capacity")},
		&cli.GenericFlag{Name: "prefill-block-time", Value: cliflag.Duration(0), Usage: "ttft: a backend's prefill time per novel block of --block-size bytes; 0: learned", EnvVars: env("prefill-block-time")},
		&cli.GenericFlag{Name: "first-token-base", Value: cliflag.Duration(0), Usage: "ttft: a backend's time to first token with nothing to compute or wait for; 0: learned", EnvVars: env("first-token-base")},
		&cli.Float64Flag{Name: "resident-epsilon", Value: DefaultResidentEpsilon, Usage: "place a new conversation only where it leaves the backend's resident work at most (1+E)x the mean (negative: no bound)", EnvVars: env("resident-epsilon")},
		&cli.GenericFlag{Name: "resident-window", Value: cliflag.Duration(0), Usage: "how long a backend's turns count as resident work (decay time constant); 0: three times the observed gap between a conversation's turns, at most --ttl", EnvVars: env("resident-window")},
	}
}

// TTFTFrom reads TTFTFlags; scale multiplies the durations (the bench
// replays time faster).
func TTFTFrom(c *cli.Context, scale float64) TTFTConfig {
	d := func(name string) time.Duration { return time.Duration(float64(c.Duration(name)) * scale) }
	return TTFTConfig{
		Capacity:        c.Int("batch-capacity"),
		BlockTime:       d("prefill-block-time"),
		Base:            d("first-token-base"),
		ResidentEpsilon: c.Float64("resident-epsilon"),
		ResidentWindow:  d("resident-window"),
	}
}

// SettingsFrom reads Flags, BoundFlags and TTFTFlags.
func SettingsFrom(c *cli.Context) Settings {
	return Settings{Policy: c.String("policy"), ActiveWeight: c.Int("active-weight"), AffinityEpsilon: c.Float64("affinity-epsilon"),
		CacheCheck: c.Bool("cache-check"), TTFT: TTFTFrom(c, 1)}
}
