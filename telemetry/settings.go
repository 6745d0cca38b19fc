package telemetry

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"
)

// Settings is engine telemetry as an operator sets it: kvca serve's
// --engine-metrics, --engine-metrics-interval and --backend-cache-tokens.
type Settings struct {
	// EngineMetrics scrapes each backend's Prometheus /metrics (vLLM,
	// SGLang) every EngineMetricsInterval: the engine's queue and KV usage
	// weigh in routing, its capacity bounds its locations, and a restart
	// resets them (off per backend without /metrics). kvca serve turns it
	// on unless told otherwise; DefaultSettings leaves it off, so that
	// programs embedding the server send their backends nothing they did
	// not ask for.
	EngineMetrics         bool
	EngineMetricsInterval time.Duration
	// BackendCacheTokens is the KV-cache capacity in tokens of backends
	// whose engines do not export it: one value for all, or one per
	// backend in order; 0: unknown. A value that was not a non-negative
	// integer is -1, which Validate refuses.
	BackendCacheTokens []int64
}

// DefaultSettings: scraping off, one second apart when on.
func DefaultSettings() Settings { return Settings{EngineMetricsInterval: time.Second} }

// Validate fills the interval's default and reports the first mistake in
// one sentence; backends is how many backends are configured.
func (s *Settings) Validate(backends int) error {
	if s.EngineMetricsInterval < 0 {
		return fmt.Errorf("--engine-metrics-interval must not be negative")
	}
	if s.EngineMetricsInterval == 0 {
		s.EngineMetricsInterval = DefaultSettings().EngineMetricsInterval
	}
	if n := len(s.BackendCacheTokens); n > 1 && n != backends {
		return fmt.Errorf("--backend-cache-tokens takes one value for all backends or one per backend (%d), got %d", backends, n)
	}
	for _, v := range s.BackendCacheTokens {
		if v < 0 {
			return fmt.Errorf("--backend-cache-tokens must not be negative, got %d", v)
		}
	}
	return nil
}

// Restart names the settings of next that differ from s and that a
// reload does not apply (the cache sizes are applied with the backends).
func (s *Settings) Restart(next *Settings) []string {
	if s.EngineMetrics != next.EngineMetrics || s.EngineMetricsInterval != next.EngineMetricsInterval {
		return []string{"engine-metrics"}
	}
	return nil
}

// Flags are telemetry's flags; env names a flag's KVCA_* variable.
func Flags(env func(flag string) []string) []cli.Flag {
	d := DefaultSettings()
	return []cli.Flag{
		&cli.BoolFlag{Name: "engine-metrics", Value: true, Usage: "scrape each backend's Prometheus /metrics (vLLM, SGLang names; TGI's and llama.cpp's batch and queue): its queue and KV usage weigh in routing, its KV capacity bounds its learned locations, a restart resets them; a backend without /metrics is left out (--engine-metrics=false: never scrape)", EnvVars: env("engine-metrics")},
		&cli.GenericFlag{Name: "engine-metrics-interval", Value: cliflag.Duration(d.EngineMetricsInterval), Usage: "how often engine metrics are scraped; a signal older than three intervals is ignored", EnvVars: env("engine-metrics-interval")},
		&cli.StringSliceFlag{Name: "backend-cache-tokens", Usage: "KV-cache capacity in tokens of backends whose engines do not export it: one value for all, or one per --backend in order (repeatable or comma-separated; 0: unknown)", EnvVars: env("backend-cache-tokens")},
	}
}

// SettingsFrom reads telemetry's flags.
func SettingsFrom(c *cli.Context) Settings {
	var tokens []int64
	for _, v := range c.StringSlice("backend-cache-tokens") {
		for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				n = -1
			}
			tokens = append(tokens, n)
		}
	}
	return Settings{EngineMetrics: c.Bool("engine-metrics"), EngineMetricsInterval: c.Duration("engine-metrics-interval"), BackendCacheTokens: tokens}
}
