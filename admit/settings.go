package admit

import (
	"errors"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"
	"github.com/kvca/kvca/sched"
)

// Settings is admission as an operator sets it: kvca serve's
// --max-inflight-per-backend and --queue-* flags (their KVCA_* variables
// and --config keys), with their defaults, validation, flags, and what a
// reload may change. Config adds what the server gives at start.
type Settings struct {
	// MaxInflightPerBackend > 0 bounds the requests in flight on each
	// backend; beyond, requests wait in one queue of QueueSize for at most
	// QueueTimeout, served by priority class and fairly across tenants.
	MaxInflightPerBackend int
	QueueSize             int
	QueueTimeout          time.Duration
	QueueHolderWait       time.Duration
	QueueStarvationLimit  int
	QueueEngineAware      bool
	QueueMaxPrefill       time.Duration // Config.MaxPrefill
	QueueHighReserve      int           // Config.HighReserve
	QueueTenantReserve    int           // Config.TenantReserve
	QueueHighPool         int           // Config.HighPool
	QueueHighPreempts     bool          // Config.HighPreempts
}

// DefaultSettings are the command line's defaults: admission off.
func DefaultSettings() Settings {
	return Settings{
		QueueSize:            DefaultQueueSize,
		QueueTimeout:         DefaultQueueTimeout,
		QueueHolderWait:      DefaultHolderWait,
		QueueStarvationLimit: DefaultStarvationLimit,
		QueueTenantReserve:   DefaultTenantReserve,
	}
}

// Validate reports the first mistake in one sentence.
func (s *Settings) Validate() error {
	if s.MaxInflightPerBackend < 0 || s.QueueSize < 0 || s.QueueTimeout < 0 || s.QueueHolderWait < 0 || s.QueueStarvationLimit < 0 || s.QueueMaxPrefill < 0 || s.QueueHighReserve < 0 || s.QueueTenantReserve < 0 || s.QueueHighPool < 0 {
		return errors.New("--max-inflight-per-backend, --queue-size, --queue-timeout, --queue-holder-wait, --queue-starvation-limit, --queue-max-prefill, --queue-high-reserve, --queue-tenant-reserve and --queue-high-pool must not be negative")
	}
	if s.MaxInflightPerBackend > 0 && s.QueueHighReserve >= s.MaxInflightPerBackend {
		return errors.New("--queue-high-reserve must be below --max-inflight-per-backend")
	}
	return nil
}

// Config is the admitter's configuration for these settings over
// backends, its metrics in set.
func (s *Settings) Config(backends []*sched.Backend, set *metrics.Set) Config {
	return Config{Backends: backends, MaxInflight: s.MaxInflightPerBackend,
		QueueSize: s.QueueSize, QueueTimeout: s.QueueTimeout, HolderWait: s.QueueHolderWait, MaxPrefill: s.QueueMaxPrefill,
		HighReserve: s.QueueHighReserve, TenantReserve: s.QueueTenantReserve, HighPool: s.QueueHighPool, HighPreempts: s.QueueHighPreempts,
		StarvationLimit: s.QueueStarvationLimit, EngineAware: s.QueueEngineAware, Metrics: set}
}

// Restart names the settings of next that differ from s: admission is
// built at start, so each takes effect at a restart.
func (s *Settings) Restart(next *Settings) []string {
	return cliflag.Changed(
		cliflag.Change{Name: "max-inflight-per-backend", Differ: s.MaxInflightPerBackend != next.MaxInflightPerBackend},
		cliflag.Change{Name: "queue-size", Differ: s.QueueSize != next.QueueSize},
		cliflag.Change{Name: "queue-timeout", Differ: s.QueueTimeout != next.QueueTimeout},
		cliflag.Change{Name: "queue-holder-wait", Differ: s.QueueHolderWait != next.QueueHolderWait},
		cliflag.Change{Name: "queue-starvation-limit", Differ: s.QueueStarvationLimit != next.QueueStarvationLimit},
		cliflag.Change{Name: "queue-engine-aware", Differ: s.QueueEngineAware != next.QueueEngineAware},
		cliflag.Change{Name: "queue-max-prefill", Differ: s.QueueMaxPrefill != next.QueueMaxPrefill},
		cliflag.Change{Name: "queue-high-reserve", Differ: s.QueueHighReserve != next.QueueHighReserve},
		cliflag.Change{Name: "queue-tenant-reserve", Differ: s.QueueTenantReserve != next.QueueTenantReserve},
		cliflag.Change{Name: "queue-high-pool", Differ: s.QueueHighPool != next.QueueHighPool},
		cliflag.Change{Name: "queue-high-preempts", Differ: s.QueueHighPreempts != next.QueueHighPreempts},
	)
}

// Flags are admission's flags; env names a flag's KVCA_* variable.
func Flags(env func(flag string) []string) []cli.Flag {
	d := DefaultSettings()
	return []cli.Flag{
		&cli.IntFlag{Name: "max-inflight-per-backend", Usage: "requests in flight on each backend at most; beyond, requests wait in kvca's admission queue (0: no limit, no queue)", EnvVars: env("max-inflight-per-backend")},
		&cli.IntFlag{Name: "queue-size", Value: d.QueueSize, Usage: "requests the admission queue holds at most (429 beyond)", EnvVars: env("queue-size")},
		&cli.GenericFlag{Name: "queue-timeout", Value: cliflag.Duration(d.QueueTimeout), Usage: "longest wait in the admission queue (429 after)", EnvVars: env("queue-timeout")},
		&cli.GenericFlag{Name: "queue-max-prefill", Value: cliflag.Duration(0), Usage: "a backend takes no request but of high priority while the prefill of kvca's requests there not yet at their first byte would take longer than this, at its learned rate (0: no bound)", EnvVars: env("queue-max-prefill")},
		&cli.IntFlag{Name: "queue-high-reserve", Usage: "of each backend's --max-inflight-per-backend slots, how many only high-priority requests may take (0: none)", EnvVars: env("queue-high-reserve")},
		&cli.IntFlag{Name: "queue-tenant-reserve", Value: d.QueueTenantReserve, Usage: "while the admission queue sheds, how many of the fleet's free slots the tenants holding at least half the busiest tenant's slots may not take while a lighter tenant holds slots: they are kept for the lighter tenants' next requests (0: none)", EnvVars: env("queue-tenant-reserve")},
		&cli.IntFlag{Name: "queue-high-pool", Usage: "of the fleet's free slots, how many only high-priority requests may take: other classes wait while no more are free, so that a high-priority request finds a slot at once under overload (0: none)", EnvVars: env("queue-high-pool")},
		&cli.BoolFlag{Name: "queue-high-preempts", Usage: "the engines preempt a running lower-priority sequence for a high-priority request (SGLang's --enable-priority-scheduling, the priority in the body's priority field): a high-priority request may go past --max-inflight-per-backend on a backend while fewer than that many high-priority requests are in flight there", EnvVars: env("queue-high-preempts")},
		&cli.GenericFlag{Name: "queue-holder-wait", Value: cliflag.Duration(d.QueueHolderWait), Usage: "how long a normal or low priority follow-up waits for a holder of its prefix before any backend with room may take it", EnvVars: env("queue-holder-wait")},
		&cli.IntFlag{Name: "queue-starvation-limit", Value: d.QueueStarvationLimit, Usage: "a waiting priority class is passed over by at most this many grants to higher classes in a row", EnvVars: env("queue-starvation-limit")},
		&cli.BoolFlag{Name: "queue-engine-aware", Usage: "lower a backend's admission limit while its engine reports a queue of its own (needs engine telemetry)", EnvVars: env("queue-engine-aware")},
	}
}

// SettingsFrom reads admission's flags.
func SettingsFrom(c *cli.Context) Settings {
	return Settings{
		MaxInflightPerBackend: c.Int("max-inflight-per-backend"),
		QueueSize:             c.Int("queue-size"),
		QueueTimeout:          c.Duration("queue-timeout"),
		QueueHolderWait:       c.Duration("queue-holder-wait"),
		QueueMaxPrefill:       c.Duration("queue-max-prefill"),
		QueueHighReserve:      c.Int("queue-high-reserve"),
		QueueTenantReserve:    c.Int("queue-tenant-reserve"),
		QueueHighPool:         c.Int("queue-high-pool"),
		QueueHighPreempts:     c.Bool("queue-high-preempts"),
		QueueStarvationLimit:  c.Int("queue-starvation-limit"),
		QueueEngineAware:      c.Bool("queue-engine-aware"),
	}
}
