package edge

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"
)

// ListenerFlags are the flags of kvca's own listeners (public and admin):
// addresses, limits and timeouts on clients, TLS at the edge, the event
// loops, what each answer says, shutdown; env names a flag's KVCA_*
// variable.
func ListenerFlags(env func(flag string) []string) []cli.Flag {
	d := DefaultConfig()
	return []cli.Flag{
		&cli.StringFlag{Name: "listen", Value: d.Listen, Usage: "public listener `ADDR`", EnvVars: env("listen")},
		&cli.StringFlag{Name: "admin-listen", Value: d.AdminListen, Usage: "admin listener `ADDR` (metrics, state, KDN API); keep it private, empty disables", EnvVars: env("admin-listen")},
		&cli.IntFlag{Name: "max-body-bytes", Value: d.MaxBodyBytes, Usage: "largest request body accepted (413 above)", EnvVars: env("max-body-bytes")},
		&cli.BoolFlag{Name: "access-log", Usage: "log one line per request (route, model, phase, backend, blocks, status, durations, request id)", EnvVars: env("access-log")},
		&cli.GenericFlag{Name: "shutdown-timeout", Value: cliflag.Duration(d.ShutdownTimeout), Usage: "on SIGTERM, let in-flight requests finish for up to this", EnvVars: env("shutdown-timeout")},
		&cli.GenericFlag{Name: "client-read-timeout", Value: cliflag.Duration(d.ClientReadTimeout), Usage: "cut clients that take longer than this to send a request body (408)", EnvVars: env("client-read-timeout")},
		&cli.GenericFlag{Name: "drain-delay", Value: cliflag.Duration(0), Usage: "on SIGTERM, fail /ready for this long while serving as usual, then stop accepting and drain (for load balancers that are not Kubernetes)", EnvVars: env("drain-delay")},
		&cli.GenericFlag{Name: "header-timeout", Value: cliflag.Duration(d.HeaderTimeout), Usage: "cut clients that take longer than this to send a request head (408)", EnvVars: env("header-timeout")},
		&cli.IntFlag{Name: "max-client-conns", Value: d.MaxClientConns, Usage: "open client connections at most; new ones beyond it are closed at once (0: no bound)", EnvVars: env("max-client-conns")},
		&cli.IntFlag{Name: "loops", Usage: "event loops serving the public listener (0: one per core, GOMAXPROCS); the process runs one Go P more than this", EnvVars: env("loops")},
		&cli.BoolFlag{Name: "io-uring", Value: true, Usage: "batch the event loops' small writes (requests to backends, answers to clients) into one io_uring submission per round of events, where the kernel allows it (Linux; on by default: --io-uring=false sends each write with its own call)", EnvVars: env("io-uring")},
		&cli.GenericFlag{Name: "body-await", Value: cliflag.Duration(d.BodyAwait), Usage: "let the kernel wake an event loop once a large request body (64 KB or more still to come) is all in, not at every burst of it, waiting at most this long a body before reading the rest as it comes (Linux, plain TCP; 0: read every body as it comes)", EnvVars: env("body-await")},
		&cli.StringFlag{Name: "tls-cert", Usage: "serve the public listener over TLS with this PEM certificate `FILE` (re-read when it changes or on SIGHUP)", EnvVars: env("tls-cert")},
		&cli.StringFlag{Name: "tls-key", Usage: "PEM private key `FILE` for --tls-cert", EnvVars: env("tls-key")},
		&cli.StringFlag{Name: "admin-tls-cert", Usage: "serve the admin listener over TLS with this PEM certificate `FILE`", EnvVars: env("admin-tls-cert")},
		&cli.StringFlag{Name: "admin-tls-key", Usage: "PEM private key `FILE` for --admin-tls-cert", EnvVars: env("admin-tls-key")},
		&cli.StringFlag{Name: "admin-token", Usage: "require Authorization: Bearer `TOKEN` on the admin listener", EnvVars: env("admin-token")},
		&cli.GenericFlag{Name: "tls-reload-interval", Value: cliflag.Duration(10 * time.Second), Usage: "how often certificate files are checked for changes", EnvVars: env("tls-reload-interval")},
		&cli.BoolFlag{Name: "route-header", Usage: "add X-Kvca-Route to answers: phase, rule, predicted cached blocks, backend (tells clients about the fleet)", EnvVars: env("route-header")},
		&cli.BoolFlag{Name: "pprof", Usage: "serve /debug/pprof on the admin listener", EnvVars: env("pprof")},
	}
}

// UpstreamFlags are the flags of the backends and of kvca's connections
// to them: the list, retries, health, timeouts, pools, credentials, TLS
// to backends, when a streamed answer's prefill load is released.
func UpstreamFlags(env func(flag string) []string) []cli.Flag {
	d := DefaultConfig()
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "backend", Usage: "backend base `URL` (repeatable), e.g. http://10.0.0.5:8000; a #suffix of comma-separated items fixes its models and options: role=prefill|decode|both (disaggregation; default both), bootstrap-port=N (an SGLang prefill worker's; default 8998)", EnvVars: env("backend")},
		&cli.IntFlag{Name: "retries", Value: d.Retries, Usage: "retries on another backend after a connection failure (or 429/503) before any byte reached the client", EnvVars: env("retries")},
		&cli.StringFlag{Name: "health-path", Value: d.HealthPath, Usage: "backend path for active health checks", EnvVars: env("health-path")},
		&cli.GenericFlag{Name: "health-interval", Value: cliflag.Duration(d.HealthInterval), Usage: "active health check interval (0 disables)", EnvVars: env("health-interval")},
		&cli.GenericFlag{Name: "discovery-interval", Value: cliflag.Duration(0), Usage: "look backend host names up every `INTERVAL` and make each address a backend of its own (a Kubernetes headless Service); 0: a name is one backend", EnvVars: env("discovery-interval")},
		&cli.GenericFlag{Name: "upstream-header-timeout", Value: cliflag.Duration(d.UpstreamHeaderTimeout), Usage: "504 when a backend sends no response headers within this", EnvVars: env("upstream-header-timeout")},
		&cli.GenericFlag{Name: "stream-idle-timeout", Value: cliflag.Duration(d.StreamIdleTimeout), Usage: "end a response whose body stalls longer than this", EnvVars: env("stream-idle-timeout")},
		&cli.IntFlag{Name: "max-conns-per-backend", Value: d.MaxConnsPerBackend, Usage: "keep-alive pool size per backend", EnvVars: env("max-conns-per-backend")},
		&cli.StringFlag{Name: "prefill-release", Value: "first-byte", Usage: "when a streamed response's novel-block load is released: first-byte (when the backend has prefilled: vLLM and SGLang send stream headers before they prefill) or headers (when its response headers arrive)", EnvVars: env("prefill-release")},
		&cli.BoolFlag{Name: "stream-usage", Value: d.StreamUsage, Usage: "make streamed chat and completions requests that do not ask for their usage ask for it (stream_options.include_usage), so that the cache check and quotas see the engine's counts, and remove the usage event this adds from the answer (on by default: --stream-usage=false turns it off)", EnvVars: env("stream-usage")},
		&cli.BoolFlag{Name: "preserve-host", Usage: "send the client's Host to backends instead of the backend URL's host", EnvVars: env("preserve-host")},
		&cli.StringFlag{Name: "backend-api-key", Usage: "send this `KEY` to backends as Authorization: Bearer (engines started with --api-key); clients' credentials never reach backends when it or --api-keys is set", EnvVars: env("backend-api-key")},
		&cli.StringFlag{Name: "upstream-ca", Usage: "PEM `FILE` of the CA that signs https:// backends' certificates (default: system roots)", EnvVars: env("upstream-ca")},
		&cli.StringFlag{Name: "upstream-cert", Usage: "client certificate `FILE` for mutual TLS to backends", EnvVars: env("upstream-cert")},
		&cli.StringFlag{Name: "upstream-key", Usage: "client key `FILE` for --upstream-cert", EnvVars: env("upstream-key")},
		&cli.BoolFlag{Name: "upstream-insecure", Usage: "do NOT verify backends' certificates (logged loudly; for tests only)", EnvVars: env("upstream-insecure")},
		&cli.StringFlag{Name: "pd-protocol", Value: d.PD.Protocol, Usage: "how kvca drives a disaggregated fleet's prefill and decode workers (backends with a role=): vllm (kv_transfer_params, prefill then decode) or sglang (bootstrap fields, both at once)", EnvVars: env("pd-protocol")},
		&cli.IntFlag{Name: "pd-threshold", Value: d.PD.Threshold, Usage: "in a disaggregated fleet, run a request aggregated on a decode worker, without a prefill leg, when fewer than this many of its prompt `TOKENS` are uncached on its prefill worker (0: always disaggregate)", EnvVars: env("pd-threshold")},
	}
}

// FromFlags reads ListenerFlags and UpstreamFlags into a Config; kvca
// serve adds each part's settings. The backend list takes repeated flags
// and comma- or space-separated values, a "#model,model" suffix kept with
// its URL.
func FromFlags(c *cli.Context) Config {
	return Config{
		Listen:                c.String("listen"),
		AdminListen:           c.String("admin-listen"),
		Backends:              backendList(c.StringSlice("backend")),
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
		StreamUsage:           c.Bool("stream-usage"),
		BackendAPIKey:         c.String("backend-api-key"),
		MaxConnsPerBackend:    c.Int("max-conns-per-backend"),
		Loops:                 c.Int("loops"),
		NoIOUring:             !c.Bool("io-uring"),
		BodyAwait:             c.Duration("body-await"),
		Pprof:                 c.Bool("pprof"),
		PrefillAtHeaders:      c.String("prefill-release") == "headers",
		AccessLog:             c.Bool("access-log"),
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
		PD:                    PDSettings{Protocol: c.String("pd-protocol"), Threshold: c.Int("pd-threshold")},
	}
}

// backendList splits backends given as separate flags or comma-separated;
// a backend's "#model-a,model-b" suffix, itself comma-separated, stays
// with its URL.
func backendList(in []string) []string {
	var out []string
	for _, p := range cliflag.SplitList(in) {
		if !strings.Contains(p, "://") && len(out) > 0 && strings.Contains(out[len(out)-1], "#") {
			out[len(out)-1] += "," + p
			continue
		}
		out = append(out, p)
	}
	return out
}
