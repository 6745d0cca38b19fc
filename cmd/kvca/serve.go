package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/sched"
)

// env names the KVCA_<NAME> variable of a flag.
func env(flag string) []string {
	return []string{"KVCA_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func serveFlags() []cli.Flag {
	d := edge.DefaultConfig()
	return []cli.Flag{
		&cli.StringFlag{Name: "listen", Value: d.Listen, Usage: "public listener `ADDR`", EnvVars: env("listen")},
		&cli.StringSliceFlag{Name: "backend", Usage: "backend base `URL` (repeatable), e.g. http://10.0.0.5:8000", EnvVars: env("backend")},
		&cli.StringFlag{Name: "admin-listen", Value: d.AdminListen, Usage: "admin listener `ADDR` (metrics, state, KDN API); keep it private, empty disables", EnvVars: env("admin-listen")},
		&cli.IntFlag{Name: "block-size", Value: d.BlockSize, Usage: "CBR block size in bytes, a positive multiple of 8", EnvVars: env("block-size")},
		&cli.DurationFlag{Name: "ttl", Value: d.TTL, Usage: "forget a cache location idle longer than this", EnvVars: env("ttl")},
		&cli.IntFlag{Name: "max-blocks", Value: d.MaxBlocks, Usage: "hard bound on tracked blocks (≈60 bytes each)", EnvVars: env("max-blocks")},
		&cli.IntFlag{Name: "cbr-memo-bytes", Value: d.CBRMemoBytes, Usage: "memory for strings of 256 bytes or more already canonicalised and hashed, compared instead of hashed again when a request repeats them (0 disables)", EnvVars: env("cbr-memo-bytes")},
		&cli.StringFlag{Name: "hash-key", Usage: "SipHash key, 32 hex digits; random when empty (replicas must share one)", EnvVars: env("hash-key")},
		&cli.StringFlag{Name: "policy", Value: d.Policy, Usage: "routing policy: " + strings.Join(sched.Policies(), ", "), EnvVars: env("policy")},
		&cli.IntFlag{Name: "active-weight", Value: d.ActiveWeight, Usage: "load of one active request, in blocks", EnvVars: env("active-weight")},
		&cli.IntFlag{Name: "max-body-bytes", Value: d.MaxBodyBytes, Usage: "largest request body accepted (413 above)", EnvVars: env("max-body-bytes")},
		&cli.IntFlag{Name: "retries", Value: d.Retries, Usage: "retries on another backend after a connection failure (or 429/503) before any byte reached the client", EnvVars: env("retries")},
		&cli.StringFlag{Name: "health-path", Value: d.HealthPath, Usage: "backend path for active health checks", EnvVars: env("health-path")},
		&cli.DurationFlag{Name: "health-interval", Value: d.HealthInterval, Usage: "active health check interval (0 disables)", EnvVars: env("health-interval")},
		&cli.StringSliceFlag{Name: "cbr-exclude", Usage: "extra top-level field to leave out of the CBR (repeatable)", EnvVars: env("cbr-exclude")},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: env("log-level")},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json", EnvVars: env("log-format")},
		&cli.BoolFlag{Name: "access-log", Usage: "log one line per request (route, model, phase, backend, blocks, status, durations, request id)", EnvVars: env("access-log")},
		&cli.DurationFlag{Name: "upstream-header-timeout", Value: d.UpstreamHeaderTimeout, Usage: "504 when a backend sends no response headers within this", EnvVars: env("upstream-header-timeout")},
		&cli.DurationFlag{Name: "stream-idle-timeout", Value: d.StreamIdleTimeout, Usage: "end a response whose body stalls longer than this", EnvVars: env("stream-idle-timeout")},
		&cli.DurationFlag{Name: "shutdown-timeout", Value: d.ShutdownTimeout, Usage: "on SIGTERM, let in-flight requests finish for up to this", EnvVars: env("shutdown-timeout")},
		&cli.DurationFlag{Name: "client-read-timeout", Value: d.ClientReadTimeout, Usage: "cut clients that take longer than this to send a request", EnvVars: env("client-read-timeout")},
		&cli.IntFlag{Name: "loops", Usage: "event loops serving --io epoll (0: one per core, GOMAXPROCS); the process runs one Go P more than this", EnvVars: env("loops")},
		&cli.StringFlag{Name: "io", Value: edge.IOAuto, Usage: "how the public listener is served: epoll (an event loop per core: Linux, plain HTTP; requests other than routed POSTs are handed to fasthttp), fasthttp (a goroutine per connection), or auto: epoll unless --tls-cert, an https backend or another OS asks for fasthttp", EnvVars: env("io")},
		&cli.BoolFlag{Name: "engine-metrics", Value: true, Usage: "scrape each backend's Prometheus /metrics (vLLM, SGLang names): its queue and KV usage weigh in routing, its KV capacity bounds its learned locations, a restart resets them; a backend without /metrics is left out (--engine-metrics=false: never scrape)", EnvVars: env("engine-metrics")},
		&cli.DurationFlag{Name: "engine-metrics-interval", Value: d.EngineMetricsInterval, Usage: "how often engine metrics are scraped; a signal older than three intervals is ignored", EnvVars: env("engine-metrics-interval")},
		&cli.StringSliceFlag{Name: "backend-cache-tokens", Usage: "KV-cache capacity in tokens of backends whose engines do not export it: one value for all, or one per --backend in order (repeatable or comma-separated; 0: unknown)", EnvVars: env("backend-cache-tokens")},
		&cli.IntFlag{Name: "max-conns-per-backend", Value: d.MaxConnsPerBackend, Usage: "keep-alive pool size per backend", EnvVars: env("max-conns-per-backend")},
		&cli.StringFlag{Name: "prefill-release", Value: "first-byte", Usage: "when a streamed response's novel-block load is released: first-byte (when the backend has prefilled: vLLM and SGLang send stream headers before they prefill) or headers (the seed's letter)", EnvVars: env("prefill-release")},
		&cli.StringFlag{Name: "tls-cert", Usage: "serve the public listener over TLS with this PEM certificate `FILE` (re-read when it changes or on SIGHUP)", EnvVars: env("tls-cert")},
		&cli.StringFlag{Name: "tls-key", Usage: "PEM private key `FILE` for --tls-cert", EnvVars: env("tls-key")},
		&cli.StringFlag{Name: "admin-tls-cert", Usage: "serve the admin listener over TLS with this PEM certificate `FILE`", EnvVars: env("admin-tls-cert")},
		&cli.StringFlag{Name: "admin-tls-key", Usage: "PEM private key `FILE` for --admin-tls-cert", EnvVars: env("admin-tls-key")},
		&cli.StringFlag{Name: "admin-token", Usage: "require Authorization: Bearer `TOKEN` on the admin listener", EnvVars: env("admin-token")},
		&cli.DurationFlag{Name: "tls-reload-interval", Value: 10 * time.Second, Usage: "how often certificate files are checked for changes", EnvVars: env("tls-reload-interval")},
		&cli.StringFlag{Name: "upstream-ca", Usage: "PEM `FILE` of the CA that signs https:// backends' certificates (default: system roots)", EnvVars: env("upstream-ca")},
		&cli.StringFlag{Name: "upstream-cert", Usage: "client certificate `FILE` for mutual TLS to backends", EnvVars: env("upstream-cert")},
		&cli.StringFlag{Name: "upstream-key", Usage: "client key `FILE` for --upstream-cert", EnvVars: env("upstream-key")},
		&cli.BoolFlag{Name: "upstream-insecure", Usage: "do NOT verify backends' certificates (logged loudly; for tests only)", EnvVars: env("upstream-insecure")},
		&cli.DurationFlag{Name: "predict-ttl", Usage: "record the chosen backend as holding a request's prefix at routing time, for this long unless its answer confirms it (0: learn only from answers, as the seed does)", EnvVars: env("predict-ttl")},
		&cli.BoolFlag{Name: "pprof", Usage: "serve /debug/pprof on the admin listener", EnvVars: env("pprof")},
	}
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the proxy in front of OpenAI-compatible backends",
		Flags: append(append(append(serveFlags(), configFlag), kdnServeFlags()...), clusterFlags()...),
		Action: func(c *cli.Context) error {
			if err := applyConfigFile(c); err != nil {
				return err
			}
			log, err := newLogger(c.String("log-level"), c.String("log-format"))
			if err != nil {
				return err
			}
			cfg := configFrom(c)
			cfg.Logger = log
			if pr := c.String("prefill-release"); pr != "headers" && pr != "first-byte" {
				return fmt.Errorf("--prefill-release must be headers or first-byte, got %q", pr)
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			if cfg.IO == edge.IOEpoll {
				cfg.Loops = edge.SpareP(cfg.Loops)
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
			if err := srv.Start(); err != nil {
				return err
			}
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
			got := <-sig
			for got == syscall.SIGHUP {
				if err := srv.ReloadTLS(); err != nil {
					log.Error("SIGHUP: certificate reload failed; the previous certificates stay in service", "err", err)
				} else {
					log.Info("SIGHUP: certificates reloaded")
				}
				got = <-sig
			}
			log.Info("draining", "signal", got.String(), "timeout", cfg.ShutdownTimeout)
			ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				log.Warn("shutdown incomplete", "err", err)
			}
			log.Info("stopped")
			return nil
		},
	}
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
		UpstreamHeaderTimeout: c.Duration("upstream-header-timeout"),
		StreamIdleTimeout:     c.Duration("stream-idle-timeout"),
		ShutdownTimeout:       c.Duration("shutdown-timeout"),
		ClientReadTimeout:     c.Duration("client-read-timeout"),
		MaxConnsPerBackend:    c.Int("max-conns-per-backend"),
		IO:                    c.String("io"),
		Loops:                 c.Int("loops"),
		Pprof:                 c.Bool("pprof"),
		PrefillAtHeaders:      c.String("prefill-release") == "headers",
		AccessLog:             c.Bool("access-log"),
		PredictTTL:            c.Duration("predict-ttl"),
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
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not text or json", format)
}
