// Package edge is kvca's HTTP face: the event loops that read each
// request, have it canonicalised, chained and routed, forward it and relay
// the answer; the upstream connection pools, health checking, and the
// admin listener.
package edge

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
	"github.com/kvca/kvca/telemetry"
	"github.com/kvca/kvca/tracing"
)

// Config is everything `kvca serve` takes. Zero values are replaced by the
// defaults of DefaultConfig in Validate.
type Config struct {
	Listen      string
	AdminListen string
	Backends    []string

	// Table: the CBR's blocks and the block table (chain.Settings).
	Table chain.Settings
	// Routing: the policy and its settings (sched.Settings).
	Routing sched.Settings

	MaxBodyBytes   int
	Retries        int
	HealthPath     string
	HealthInterval time.Duration
	// FailThreshold is how many consecutive connection failures eject a
	// backend (passive health).
	FailThreshold int
	// PrefillAtHeaders releases a streamed response's novel-block load at its
	// headers (--prefill-release headers). By default it
	// is released at the first body byte: streaming servers send headers
	// before they prefill, and the bench shows the later release cuts TTFT
	// p99 by a quarter on the Mooncake trace.
	PrefillAtHeaders bool
	// RouteHeader adds an X-Kvca-Route header to every routed answer
	// (--route-header): the phase, the rule that chose the backend, the
	// blocks predicted cached and the backend. Off by default: it tells a
	// client about the fleet.
	RouteHeader bool
	// ModelsInterval is how often backends' /v1/models are asked (those
	// without models fixed by a #suffix); 0 takes the default.
	ModelsInterval time.Duration
	// DiscoveryInterval, when positive, makes a backend named by host name
	// stand for one backend per address the name resolves to, looked up
	// again every interval (--discovery-interval): a Kubernetes headless
	// Service's pods come and go without a restart. 0: a name is one
	// backend, its address looked up again for new connections.
	DiscoveryInterval time.Duration

	UpstreamHeaderTimeout time.Duration
	StreamIdleTimeout     time.Duration
	ShutdownTimeout       time.Duration
	// DrainDelay: at shutdown, /ready fails this long first while traffic
	// is served as usual, so a load balancer stops sending before the
	// listener closes (--drain-delay).
	DrainDelay time.Duration
	// HeaderTimeout bounds how long a client takes to send a request head
	// (--header-timeout), ClientReadTimeout its body.
	HeaderTimeout      time.Duration
	ClientReadTimeout  time.Duration
	ClientIdleTimeout  time.Duration
	MaxConnsPerBackend int
	// MaxClientConns bounds open client connections; beyond it new ones
	// are closed at once and counted (--max-client-conns, 0: no bound).
	MaxClientConns int
	// PreserveHost sends the client's Host to backends instead of the
	// backend URL's authority (--preserve-host).
	PreserveHost bool
	// StreamUsage makes a streamed chat or completions request that does
	// not ask for its usage ask for it ("stream_options":{"include_usage":
	// true}) when kvca reads usage (the cache check, a tenant's quota,
	// calibration), and removes from the answer the usage event that
	// asking added (--stream-usage; package streamusage).
	StreamUsage bool

	// Admission: its settings (docs/admission.md).
	Admission admit.Settings

	// The front door (docs/frontdoor.md): APIKeys is the keys file
	// (--api-keys; empty: no keys asked, no quotas); BackendAPIKey is
	// sent to backends instead of any client credential
	// (--backend-api-key).
	APIKeys       string
	BackendAPIKey string
	// Tracing: its settings (--otlp-endpoint, --trace-sample-ratio).
	Tracing tracing.Config

	// Loops is how many event loops serve; 0: one per P (GOMAXPROCS).
	// The process should run at least one P more than it has loops: see
	// SpareP.
	Loops int
	// NoIOUring: every write of the loops is its own send call, even
	// where io_uring could batch a round's small writes into one
	// (--io-uring=false).
	NoIOUring bool
	// BodyAwait bounds how long a large request body is awaited whole
	// before it is read as it comes (--body-await; await_linux.go); 0:
	// always read as it comes.
	BodyAwait time.Duration

	Pprof bool
	// AccessLog writes one line per request to Logger (--access-log).
	AccessLog bool

	// TLS at the edge: PEM files, re-read when they change (polled every
	// TLSReloadInterval) or on ReloadTLS (SIGHUP).
	TLSCert, TLSKey           string
	AdminTLSCert, AdminTLSKey string
	TLSReloadInterval         time.Duration
	// AdminToken, when set, is required as "Authorization: Bearer <token>"
	// on every admin request.
	AdminToken string
	// TLS to https:// backends.
	UpstreamCA                string
	UpstreamCert, UpstreamKey string
	UpstreamInsecure          bool
	// Version is kvca's version, for kvca_build_info.
	Version string
	// Logger receives health transitions and errors; nil discards.
	Logger *slog.Logger
	// Now overrides the table clock in tests.
	Now func() time.Time
	// testHook, when set (tests only), is called by the event loops as a
	// request is dispatched (at "request") and as its answer's head
	// arrives (at "answer"), with the request body: a test makes it panic
	// to prove the loops' panic guard.
	testHook func(at string, body []byte)

	// CustomPolicy, when set (tests and the bench only), routes instead of
	// the policy named by Policy.
	CustomPolicy sched.Policy

	// Telemetry: engine metrics and cache sizes (telemetry.Settings).
	Telemetry telemetry.Settings

	// PD: prefill/decode disaggregation, for fleets whose backends have
	// roles (roles.go, docs/disaggregation.md).
	PD PDSettings
}

// DefaultConfig returns the defaults documented in the README.
func DefaultConfig() Config {
	return Config{
		Listen:                ":8080",
		AdminListen:           "127.0.0.1:8079",
		Table:                 chain.DefaultSettings(),
		Routing:               sched.DefaultSettings(),
		MaxBodyBytes:          8 << 20,
		Retries:               2,
		HealthPath:            "/health",
		HealthInterval:        5 * time.Second,
		FailThreshold:         3,
		ModelsInterval:        30 * time.Second,
		UpstreamHeaderTimeout: 5 * time.Minute,
		StreamIdleTimeout:     2 * time.Minute,
		ShutdownTimeout:       30 * time.Second,
		HeaderTimeout:         10 * time.Second,
		ClientReadTimeout:     30 * time.Second,
		MaxClientConns:        10000,
		Admission:             admit.DefaultSettings(),
		ClientIdleTimeout:     2 * time.Minute,
		MaxConnsPerBackend:    1024,
		BodyAwait:             2 * time.Millisecond,
		StreamUsage:           true,
		Telemetry:             telemetry.DefaultSettings(),
		PD:                    DefaultPDSettings(),
	}
}

// backendAddr is a parsed --backend URL.
type backendAddr struct {
	url       string // normalised, no trailing slash
	host      string // host:port
	authority string // host[:port] as the URL gives it: the Host sent
	tls       bool
	prefix    string // path prefix to prepend, usually empty
	// models, from a "#model-a,model-b" suffix, fixes the backend's models
	// instead of discovering them from /v1/models.
	models []string
	// role and bootstrapPort, from "role=" and "bootstrap-port=" items of
	// the suffix, place the backend in a disaggregated fleet (roles.go).
	role          Role
	bootstrapPort int
	sni           string // the host name TLS verifies
	origin        string // the --backend entry it comes from
}

func parseBackend(raw string) (backendAddr, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return backendAddr{}, fmt.Errorf("backend %q must be an absolute http:// or https:// URL", raw)
	}
	if u.RawQuery != "" || u.User != nil {
		return backendAddr{}, fmt.Errorf("backend %q must not carry a query or credentials", raw)
	}
	var opts backendAddr
	if err := backendOptions(raw, u.Fragment, &opts); err != nil {
		return backendAddr{}, err
	}
	host := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			host = net.JoinHostPort(u.Hostname(), "443")
		} else {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	prefix := strings.TrimSuffix(u.Path, "/")
	prefix = strings.TrimSuffix(prefix, "/v1")
	return backendAddr{
		url:           u.Scheme + "://" + u.Host + prefix,
		host:          host,
		authority:     u.Host,
		tls:           u.Scheme == "https",
		prefix:        prefix,
		models:        opts.models,
		role:          opts.role,
		bootstrapPort: opts.bootstrapPort,
		sni:           u.Hostname(),
		origin:        raw,
	}, nil
}

// Validate fills defaults and reports the first mistake in one sentence.
func (c *Config) Validate() error {
	d := DefaultConfig()
	if c.Listen == "" {
		c.Listen = d.Listen
	}
	if len(c.Backends) == 0 {
		return fmt.Errorf("at least one --backend is required")
	}
	if len(c.Backends) > chain.MaxBackends {
		return fmt.Errorf("at most %d backends are supported, got %d", chain.MaxBackends, len(c.Backends))
	}
	seen := map[string]bool{}
	for _, b := range c.Backends {
		a, err := parseBackend(b)
		if err != nil {
			return err
		}
		if seen[a.url] {
			return fmt.Errorf("backend %q is listed twice", b)
		}
		seen[a.url] = true
	}
	if err := c.Table.Validate(); err != nil {
		return err
	}
	if err := c.Routing.Validate(); err != nil {
		return err
	}
	if c.MaxBodyBytes <= 0 {
		return fmt.Errorf("--max-body-bytes must be positive, got %d", c.MaxBodyBytes)
	}
	if c.Retries < 0 {
		return fmt.Errorf("--retries must not be negative, got %d", c.Retries)
	}
	if c.HealthPath == "" {
		c.HealthPath = d.HealthPath
	}
	if !strings.HasPrefix(c.HealthPath, "/") {
		return fmt.Errorf("--health-path must start with /, got %q", c.HealthPath)
	}
	if c.HealthInterval < 0 {
		return fmt.Errorf("--health-interval must not be negative")
	}
	if c.DiscoveryInterval < 0 {
		return fmt.Errorf("--discovery-interval must not be negative (0: off)")
	}
	if c.Loops < 0 {
		return fmt.Errorf("--loops must not be negative (0: one per core)")
	}
	if c.FailThreshold <= 0 {
		c.FailThreshold = d.FailThreshold
	}
	if err := c.Routing.TTFT.Check(); err != nil {
		return err
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	if (c.AdminTLSCert == "") != (c.AdminTLSKey == "") {
		return fmt.Errorf("--admin-tls-cert and --admin-tls-key go together")
	}
	if c.TLSReloadInterval <= 0 {
		c.TLSReloadInterval = 10 * time.Second
	}
	if c.ModelsInterval <= 0 {
		c.ModelsInterval = d.ModelsInterval
	}
	for name, v := range map[string]*time.Duration{
		"--upstream-header-timeout": &c.UpstreamHeaderTimeout,
		"--stream-idle-timeout":     &c.StreamIdleTimeout,
		"--shutdown-timeout":        &c.ShutdownTimeout,
		"--client-read-timeout":     &c.ClientReadTimeout,
		"--header-timeout":          &c.HeaderTimeout,
		"--drain-delay":             &c.DrainDelay,
		"--client-idle-timeout":     &c.ClientIdleTimeout,
		"--body-await":              &c.BodyAwait,
	} {
		if *v < 0 {
			return fmt.Errorf("%s must not be negative", name)
		}
	}
	if c.UpstreamHeaderTimeout == 0 {
		c.UpstreamHeaderTimeout = d.UpstreamHeaderTimeout
	}
	if c.StreamIdleTimeout == 0 {
		c.StreamIdleTimeout = d.StreamIdleTimeout
	}
	if c.HeaderTimeout == 0 {
		c.HeaderTimeout = d.HeaderTimeout
	}
	if err := c.Admission.Validate(); err != nil {
		return err
	}
	if err := c.Tracing.Validate(); err != nil {
		return err
	}
	if c.MaxClientConns < 0 {
		return fmt.Errorf("--max-client-conns must not be negative (0: no bound)")
	}
	if c.ClientReadTimeout == 0 {
		c.ClientReadTimeout = d.ClientReadTimeout
	}
	if c.ClientIdleTimeout == 0 {
		c.ClientIdleTimeout = d.ClientIdleTimeout
	}
	if c.MaxConnsPerBackend <= 0 {
		c.MaxConnsPerBackend = d.MaxConnsPerBackend
	}
	if err := c.Telemetry.Validate(len(c.Backends)); err != nil {
		return err
	}
	if err := c.PD.Validate(); err != nil {
		return err
	}
	if !epollSupported {
		return fmt.Errorf("kvca serve needs Linux (its event loops use epoll)")
	}
	return nil
}
