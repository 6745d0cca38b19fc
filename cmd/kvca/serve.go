package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"
	"github.com/kvca/kvca/internal/ttftflag"

	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/sched"
)

// env names the KVCA_<NAME> variable of a flag.
func env(flag string) []string {
	return []string{"KVCA_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func serveFlags() []cli.Flag {
	d := edge.DefaultConfig()
	return append(append([]cli.Flag{
		&cli.StringFlag{Name: "listen", Value: d.Listen, Usage: "public listener `ADDR`", EnvVars: env("listen")},
		&cli.StringSliceFlag{Name: "backend", Usage: "backend base `URL` (repeatable), e.g. http://10.0.0.5:8000", EnvVars: env("backend")},
		&cli.StringFlag{Name: "admin-listen", Value: d.AdminListen, Usage: "admin listener `ADDR` (metrics, state, KDN API); keep it private, empty disables", EnvVars: env("admin-listen")},
		&cli.IntFlag{Name: "block-size", Value: d.BlockSize, Usage: "CBR block size in bytes, a positive multiple of 8", EnvVars: env("block-size")},
		&cli.GenericFlag{Name: "ttl", Value: cliflag.Duration(d.TTL), Usage: "forget a cache location idle longer than this", EnvVars: env("ttl")},
		&cli.IntFlag{Name: "max-blocks", Value: d.MaxBlocks, Usage: "hard bound on tracked blocks (about 40 bytes each)", EnvVars: env("max-blocks")},
		&cli.IntFlag{Name: "cbr-memo-bytes", Value: d.CBRMemoBytes, Usage: "memory for strings of 256 bytes or more already canonicalised and hashed, compared instead of hashed again when a request repeats them (0 disables)", EnvVars: env("cbr-memo-bytes")},
		&cli.StringFlag{Name: "hash-key", Usage: "SipHash key, 32 hex digits (replicas must share one); without the flag a random key is drawn at start-up", EnvVars: env("hash-key")},
		&cli.StringFlag{Name: "policy", Value: d.Policy, Usage: "routing policy: " + strings.Join(sched.Policies(), ", "), EnvVars: env("policy")},
		&cli.IntFlag{Name: "active-weight", Value: d.ActiveWeight, Usage: "load of one active request, in blocks", EnvVars: env("active-weight")},
		&cli.IntFlag{Name: "max-body-bytes", Value: d.MaxBodyBytes, Usage: "largest request body accepted (413 above)", EnvVars: env("max-body-bytes")},
		&cli.IntFlag{Name: "retries", Value: d.Retries, Usage: "retries on another backend after a connection failure (or 429/503) before any byte reached the client", EnvVars: env("retries")},
		&cli.StringFlag{Name: "health-path", Value: d.HealthPath, Usage: "backend path for active health checks", EnvVars: env("health-path")},
		&cli.GenericFlag{Name: "health-interval", Value: cliflag.Duration(d.HealthInterval), Usage: "active health check interval (0 disables)", EnvVars: env("health-interval")},
		&cli.GenericFlag{Name: "discovery-interval", Value: cliflag.Duration(0), Usage: "look backend host names up every `INTERVAL` and make each address a backend of its own (a Kubernetes headless Service); 0: a name is one backend", EnvVars: env("discovery-interval")},
		&cli.StringSliceFlag{Name: "cbr-exclude", Usage: "extra top-level field to leave out of the CBR (repeatable)", EnvVars: env("cbr-exclude")},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: env("log-level")},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json", EnvVars: env("log-format")},
		&cli.BoolFlag{Name: "access-log", Usage: "log one line per request (route, model, phase, backend, blocks, status, durations, request id)", EnvVars: env("access-log")},
		&cli.GenericFlag{Name: "upstream-header-timeout", Value: cliflag.Duration(d.UpstreamHeaderTimeout), Usage: "504 when a backend sends no response headers within this", EnvVars: env("upstream-header-timeout")},
		&cli.GenericFlag{Name: "stream-idle-timeout", Value: cliflag.Duration(d.StreamIdleTimeout), Usage: "end a response whose body stalls longer than this", EnvVars: env("stream-idle-timeout")},
		&cli.GenericFlag{Name: "shutdown-timeout", Value: cliflag.Duration(d.ShutdownTimeout), Usage: "on SIGTERM, let in-flight requests finish for up to this", EnvVars: env("shutdown-timeout")},
		&cli.GenericFlag{Name: "client-read-timeout", Value: cliflag.Duration(d.ClientReadTimeout), Usage: "cut clients that take longer than this to send a request body (408)", EnvVars: env("client-read-timeout")},
		&cli.GenericFlag{Name: "drain-delay", Value: cliflag.Duration(0), Usage: "on SIGTERM, fail /ready for this long while serving as usual, then stop accepting and drain (for load balancers that are not Kubernetes)", EnvVars: env("drain-delay")},
		&cli.GenericFlag{Name: "header-timeout", Value: cliflag.Duration(d.HeaderTimeout), Usage: "cut clients that take longer than this to send a request head (408)", EnvVars: env("header-timeout")},
		&cli.IntFlag{Name: "max-client-conns", Value: d.MaxClientConns, Usage: "open client connections at most; new ones beyond it are closed at once (0: no bound)", EnvVars: env("max-client-conns")},
	}, admit.Flags(env)...), []cli.Flag{
		&cli.StringFlag{Name: "api-keys", Usage: "require an API key from clients, from this keys `FILE` (lines: sha256:<hex> tenant=<name> [rpm=<n>] [tpm=<n>]; kvca keys hash prints one); re-read when it changes and on SIGHUP", EnvVars: env("api-keys")},
		&cli.StringFlag{Name: "backend-api-key", Usage: "send this `KEY` to backends as Authorization: Bearer (engines started with --api-key); clients' credentials never reach backends when it or --api-keys is set", EnvVars: env("backend-api-key")},
		&cli.StringFlag{Name: "otlp-endpoint", Usage: "export OpenTelemetry traces to this OTLP/HTTP `URL` (e.g. http://127.0.0.1:4318/v1/traces); empty: tracing off", EnvVars: env("otlp-endpoint")},
		&cli.Float64Flag{Name: "trace-sample-ratio", Value: 1, Usage: "share of traces recorded when the client's traceparent does not decide", EnvVars: env("trace-sample-ratio")},
		&cli.BoolFlag{Name: "preserve-host", Usage: "send the client's Host to backends instead of the backend URL's host", EnvVars: env("preserve-host")},
		&cli.IntFlag{Name: "loops", Usage: "event loops serving the public listener (0: one per core, GOMAXPROCS); the process runs one Go P more than this", EnvVars: env("loops")},
		&cli.BoolFlag{Name: "engine-metrics", Value: true, Usage: "scrape each backend's Prometheus /metrics (vLLM, SGLang names): its queue and KV usage weigh in routing, its KV capacity bounds its learned locations, a restart resets them; a backend without /metrics is left out (--engine-metrics=false: never scrape)", EnvVars: env("engine-metrics")},
		&cli.GenericFlag{Name: "engine-metrics-interval", Value: cliflag.Duration(d.EngineMetricsInterval), Usage: "how often engine metrics are scraped; a signal older than three intervals is ignored", EnvVars: env("engine-metrics-interval")},
		&cli.StringSliceFlag{Name: "backend-cache-tokens", Usage: "KV-cache capacity in tokens of backends whose engines do not export it: one value for all, or one per --backend in order (repeatable or comma-separated; 0: unknown)", EnvVars: env("backend-cache-tokens")},
		&cli.IntFlag{Name: "max-conns-per-backend", Value: d.MaxConnsPerBackend, Usage: "keep-alive pool size per backend", EnvVars: env("max-conns-per-backend")},
		&cli.StringFlag{Name: "prefill-release", Value: "first-byte", Usage: "when a streamed response's novel-block load is released: first-byte (when the backend has prefilled: vLLM and SGLang send stream headers before they prefill) or headers (when its response headers arrive)", EnvVars: env("prefill-release")},
		&cli.StringFlag{Name: "tls-cert", Usage: "serve the public listener over TLS with this PEM certificate `FILE` (re-read when it changes or on SIGHUP)", EnvVars: env("tls-cert")},
		&cli.StringFlag{Name: "tls-key", Usage: "PEM private key `FILE` for --tls-cert", EnvVars: env("tls-key")},
		&cli.StringFlag{Name: "admin-tls-cert", Usage: "serve the admin listener over TLS with this PEM certificate `FILE`", EnvVars: env("admin-tls-cert")},
		&cli.StringFlag{Name: "admin-tls-key", Usage: "PEM private key `FILE` for --admin-tls-cert", EnvVars: env("admin-tls-key")},
		&cli.StringFlag{Name: "admin-token", Usage: "require Authorization: Bearer `TOKEN` on the admin listener", EnvVars: env("admin-token")},
		&cli.GenericFlag{Name: "tls-reload-interval", Value: cliflag.Duration(10 * time.Second), Usage: "how often certificate files are checked for changes", EnvVars: env("tls-reload-interval")},
		&cli.StringFlag{Name: "upstream-ca", Usage: "PEM `FILE` of the CA that signs https:// backends' certificates (default: system roots)", EnvVars: env("upstream-ca")},
		&cli.StringFlag{Name: "upstream-cert", Usage: "client certificate `FILE` for mutual TLS to backends", EnvVars: env("upstream-cert")},
		&cli.StringFlag{Name: "upstream-key", Usage: "client key `FILE` for --upstream-cert", EnvVars: env("upstream-key")},
		&cli.BoolFlag{Name: "upstream-insecure", Usage: "do NOT verify backends' certificates (logged loudly; for tests only)", EnvVars: env("upstream-insecure")},
		&cli.GenericFlag{Name: "predict-ttl", Value: cliflag.Duration(10 * time.Second), Usage: "record the chosen backend as holding a request's prefix at routing time, for this long (at most --ttl) unless its answer confirms it (0: learn only from answers)", EnvVars: env("predict-ttl")},
		&cli.Float64Flag{Name: "affinity-epsilon", Value: sched.DefaultAffinityEpsilon, Usage: "ε of the load bound over every affinity (session key, user, prefix holder, prediction): one may send a request to a backend only while it holds at most ceil((1+ε) × the fleet's mean) + 1 requests; negative: unbounded", EnvVars: env("affinity-epsilon")},
		&cli.BoolFlag{Name: "cache-check", Value: true, Usage: "read every answer's cached-token count (usage.prompt_tokens_details.cached_tokens, cache_read_input_tokens, timings.cache_n) and check the prediction: locations an engine evicted are dropped", EnvVars: env("cache-check")},
		&cli.BoolFlag{Name: "route-header", Usage: "add X-Kvca-Route to answers: phase, rule, predicted cached blocks, backend (tells clients about the fleet)", EnvVars: env("route-header")},
		&cli.BoolFlag{Name: "pprof", Usage: "serve /debug/pprof on the admin listener", EnvVars: env("pprof")},
	}...)
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the proxy in front of OpenAI-compatible backends",
		Flags: append(append(append(append(serveFlags(), ttftflag.Flags(env)...), configFlag), kdnServeFlags()...), append(append(append(clusterFlags(), extProcFlags()...), poolFlags()...), retiredFlags()...)...),
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
				backendsNow = func() []string {
					var urls []string
					for _, ep := range p.Endpoints() {
						urls = append(urls, "http://"+ep)
					}
					return urls
				}
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
				"policy", cfg.Policy, "ttl", cfg.TTL)
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

func configFrom(c *cli.Context) edge.Config {
	return edge.Config{
		Listen:                c.String("listen"),
		AdminListen:           c.String("admin-listen"),
		Backends:              backendList(c.StringSlice("backend")),
		BlockSize:             c.Int("block-size"),
		TTL:                   c.Duration("ttl"),
		MaxBlocks:             c.Int("max-blocks"),
		CBRMemoBytes:          c.Int("cbr-memo-bytes"),
		HashKey:               c.String("hash-key"),
		Policy:                c.String("policy"),
		ActiveWeight:          c.Int("active-weight"),
		CBRExclude:            splitList(c.StringSlice("cbr-exclude")),
		MaxBodyBytes:          c.Int("max-body-bytes"),
		Retries:               c.Int("retries"),
		HealthPath:            c.String("health-path"),
		HealthInterval:        c.Duration("health-interval"),
		DiscoveryInterval:     c.Duration("discovery-interval"),
		UpstreamHeaderTimeout: c.Duration("upstream-header-timeout"),
		StreamIdleTimeout:     c.Duration("stream-idle-timeout"),
		ShutdownTimeout:       c.Duration("shutdown-timeout"),
		ClientReadTimeout:     c.Duration("client-read-timeout"),
		HeaderTimeout:         c.Duration("header-timeout"),
		DrainDelay:            c.Duration("drain-delay"),
		MaxClientConns:        c.Int("max-client-conns"),
		PreserveHost:          c.Bool("preserve-host"),
		APIKeys:               c.String("api-keys"),
		BackendAPIKey:         c.String("backend-api-key"),
		OTLPEndpoint:          c.String("otlp-endpoint"),
		TraceSampleRatio:      c.Float64("trace-sample-ratio"),
		Admission:             admit.SettingsFrom(c),
		MaxConnsPerBackend:    c.Int("max-conns-per-backend"),
		Loops:                 c.Int("loops"),
		Pprof:                 c.Bool("pprof"),
		PrefillAtHeaders:      c.String("prefill-release") == "headers",
		AccessLog:             c.Bool("access-log"),
		PredictTTL:            c.Duration("predict-ttl"),
		AffinityEpsilon:       c.Float64("affinity-epsilon"),
		CacheCheck:            c.Bool("cache-check"),
		RouteHeader:           c.Bool("route-header"),
		TLSCert:               c.String("tls-cert"),
		TLSKey:                c.String("tls-key"),
		AdminTLSCert:          c.String("admin-tls-cert"),
		AdminTLSKey:           c.String("admin-tls-key"),
		AdminToken:            c.String("admin-token"),
		TLSReloadInterval:     c.Duration("tls-reload-interval"),
		UpstreamCA:            c.String("upstream-ca"),
		UpstreamCert:          c.String("upstream-cert"),
		UpstreamKey:           c.String("upstream-key"),
		UpstreamInsecure:      c.Bool("upstream-insecure"),
		TTFT:                  ttftflag.From(c, 1),
		EngineMetrics:         c.Bool("engine-metrics"),
		EngineMetricsInterval: c.Duration("engine-metrics-interval"),
		BackendCacheTokens:    cacheTokens(c.StringSlice("backend-cache-tokens")),
	}
}

// cacheTokens parses --backend-cache-tokens; a value that is not a
// non-negative integer becomes -1, which Validate refuses.
func cacheTokens(in []string) []int64 {
	var out []int64
	for _, v := range splitList(in) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			n = -1
		}
		out = append(out, n)
	}
	return out
}

// splitList accepts both repeated flags and comma- or space-separated
// values (as environment variables carry them).
func splitList(in []string) []string {
	var out []string
	for _, v := range in {
		out = append(out, strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })...)
	}
	return out
}

// backendList splits backends given as separate flags or comma-separated,
// keeping a "#model-a,model-b" suffix whole: a piece that is not a URL
// continues the previous backend's model list.
func backendList(in []string) []string {
	var out []string
	for _, p := range splitList(in) {
		if !strings.Contains(p, "://") && len(out) > 0 && strings.Contains(out[len(out)-1], "#") {
			out[len(out)-1] += "," + p
			continue
		}
		out = append(out, p)
	}
	return out
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
