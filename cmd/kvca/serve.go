package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/apikeys"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/sched"
	"github.com/kvca/kvca/telemetry"
	"github.com/kvca/kvca/tracing"
)

// env names the KVCA_<NAME> variable of a flag.
func env(flag string) []string {
	return []string{"KVCA_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

// serveFlags are serve's flags, each part's own (the --config file's
// keys, the KVCA_* variables and docs/configuration.md follow them).
func serveFlags() []cli.Flag {
	return slices.Concat(
		edge.ListenerFlags(env),
		edge.UpstreamFlags(env),
		chain.Flags(env), chain.ExcludeFlags(env), chain.PredictFlags(env),
		sched.Flags(env), sched.BoundFlags(env),
		admit.Flags(env),
		apikeys.Flags(env),
		tracing.Flags(env),
		telemetry.Flags(env),
		[]cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: env("log-level")},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json", EnvVars: env("log-format")},
		},
	)
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the proxy in front of OpenAI-compatible backends",
		Flags: append(append(append(append(serveFlags(), sched.TTFTFlags(env)...), configFlag), kdnServeFlags()...), append(append(append(clusterFlags(), extProcFlags()...), poolFlags()...), retiredFlags()...)...),
		Action: func(c *cli.Context) error {
			log, err := newLogger(c.String("log-level"), c.String("log-format"))
			if err != nil {
				return err
			}
			if c.String("inference-pool") != "" && len(c.StringSlice("backend")) > 0 {
				return cli.Exit("kvca: --inference-pool and --backend both name the backends: give one", 1)
			}
			poolBackends, feed, stopPool, err := startPool(c, log)
			if err != nil {
				return err
			}
			defer stopPool()
			cfg, err := serveConfig(c, poolBackends)
			if err != nil {
				return err
			}
			cfg.Logger = log
			cfg.Version = version
			if err := checkRetired(c, log); err != nil {
				return err
			}
			srv, err := edge.New(cfg)
			if err != nil {
				return err
			}
			if err := mountKDN(c, srv); err != nil {
				return err
			}
			stopCluster, err := startCluster(c, srv, cfg)
			if err != nil {
				return err
			}
			defer stopCluster()
			// Signals are caught before anything listens: a SIGHUP sent
			// as soon as kvca answers must reload it, not end it (the
			// default action), and a SIGTERM during start-up drains.
			sig := make(chan os.Signal, 4)
			signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
			defer signal.Stop(sig)
			if err := srv.Start(); err != nil {
				return err
			}
			stopPicker, err := startExtProc(c, srv, log)
			if err != nil {
				return err
			}
			defer stopPicker()
			var backendsNow func() []string // the pool's, on a reload
			if feed != nil {
				p := srv.Picker()
				feed.attach(p.SetEndpoints)
				backendsNow = p.Backends
			}
			changed := watchFile(c.String("config"), cfg.TLSReloadInterval)
			var got os.Signal
			for got == nil {
				select {
				case got = <-sig:
					if got == syscall.SIGHUP {
						reload(srv, log, "SIGHUP", backendsNow)
						got = nil
					}
				case <-changed:
					reload(srv, log, "--config changed", backendsNow)
				}
			}
			log.Info("draining", "signal", got.String(), "timeout", cfg.ShutdownTimeout)
			ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				log.Warn("shutdown incomplete", "err", err)
				return cli.Exit("kvca: shutdown incomplete: "+err.Error(), 1)
			}
			log.Info("stopped")
			return nil
		},
	}
}

// serveConfig is the configuration serve's flags, KVCA_* variables and
// --config file give.
// pool, when not nil, is the backends an InferencePool's pods give
// (--inference-pool), in place of --backend.
func serveConfig(c *cli.Context, pool []string) (edge.Config, error) {
	if err := applyConfigFile(c); err != nil {
		return edge.Config{}, err
	}
	if err := checkHashKey(c); err != nil {
		return edge.Config{}, err
	}
	cfg := configFrom(c)
	if pool != nil {
		cfg.Backends = pool
	}
	if pr := c.String("prefill-release"); pr != "headers" && pr != "first-byte" {
		return edge.Config{}, fmt.Errorf("--prefill-release must be headers or first-byte, got %q", pr)
	}
	if err := cfg.Validate(); err != nil {
		return edge.Config{}, err
	}
	cfg.Loops = edge.SpareP(cfg.Loops)
	return cfg, nil
}

// rereadConfig parses the command line, the KVCA_* variables and the
// --config file again, as serve did at start.
func rereadConfig(args []string, pool []string) (edge.Config, error) {
	var cfg edge.Config
	app := newApp()
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	app.ExitErrHandler = func(*cli.Context, error) {}
	for _, cmd := range app.Commands {
		if cmd.Name == "serve" {
			cmd.Action = func(c *cli.Context) (err error) {
				cfg, err = serveConfig(c, pool)
				return err
			}
		}
	}
	if err := app.Run(args); err != nil {
		return edge.Config{}, err
	}
	return cfg, nil
}

// reload applies the configuration read again: what changes live is
// applied, what needs a restart is named in one line, and a configuration
// that does not validate changes nothing.
func reload(srv *edge.Server, log *slog.Logger, why string, backendsNow func() []string) {
	var pool []string
	if backendsNow != nil {
		pool = backendsNow() // the pool's pods stay the backends
	}
	cfg, err := rereadConfig(os.Args, pool)
	if err == nil {
		var ch edge.BackendChange
		var restart []string
		ch, restart, err = srv.Reload(cfg)
		if err == nil {
			log.Info(why+": configuration reloaded", "backends_added", ch.Added, "backends_removed", ch.Removed, "backends_kept", ch.Kept,
				"policy", cfg.Routing.Policy, "ttl", cfg.Table.TTL)
			if len(restart) > 0 {
				log.Warn(why+": these settings changed but take effect only at a restart", "settings", restart)
			}
			return
		}
	}
	log.Error(why+": configuration not reloaded; the one in force stays", "err", err)
}

// watchFile signals on the channel when path's modification time or size
// changes, checking every interval (nothing when path is empty).
func watchFile(path string, every time.Duration) <-chan struct{} {
	ch := make(chan struct{}, 1)
	if path == "" || every <= 0 {
		return ch
	}
	stamp := func() (time.Time, int64) {
		fi, err := os.Stat(path)
		if err != nil {
			return time.Time{}, -1
		}
		return fi.ModTime(), fi.Size()
	}
	mt, sz := stamp()
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for range t.C {
			if m, z := stamp(); !m.Equal(mt) || z != sz {
				mt, sz = m, z
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch
}

// configFrom composes the configuration of each part from its flags.
func configFrom(c *cli.Context) edge.Config {
	cfg := edge.FromFlags(c)
	cfg.Table = chain.SettingsFrom(c)
	cfg.Routing = sched.SettingsFrom(c)
	cfg.Admission = admit.SettingsFrom(c)
	cfg.APIKeys = c.String("api-keys")
	cfg.Tracing = tracing.ConfigFrom(c)
	cfg.Telemetry = telemetry.SettingsFrom(c)
	return cfg
}

func newLogger(level, format string) (*slog.Logger, error) {
	return newLoggerTo(os.Stderr, level, format)
}

func newLoggerTo(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		opts.ReplaceAttr = secondsAttr
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not text or json", format)
}

// secondsAttr writes durations as seconds (a JSON number), the unit log
// pipelines and Prometheus expect; slog's JSON handler would write
// nanoseconds.
func secondsAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key, a.Value.Duration().Seconds())
	}
	return a
}

// checkHashKey refuses a hash key given but empty (--hash-key "", an empty
// KVCA_HASH_KEY, or hash-key: "" in --config): that is usually a secret
// that did not arrive, and a random key in its place would make replicas
// disagree silently. Only a key not given at all is drawn at random.
func checkHashKey(c *cli.Context) error {
	if c.String("hash-key") != "" {
		return nil
	}
	_, inEnv := os.LookupEnv(env("hash-key")[0])
	if c.IsSet("hash-key") || inEnv {
		return fmt.Errorf("--hash-key is empty: give 32 hex digits (head -c16 /dev/urandom | xxd -p), or leave it out for a random key")
	}
	return nil
}
