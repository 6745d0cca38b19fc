// Package edge is kvca's HTTP face: the event loops that read each
// request, have it canonicalised, chained and routed, forward it and relay
// the answer; the upstream connection pools, health checking, and the
// admin listener.
package edge

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// Config is everything `kvca serve` takes. Zero values are replaced by the
// defaults of DefaultConfig in Validate.
type Config struct {
	Listen      string
	AdminListen string
	Backends    []string

	BlockSize int
	TTL       time.Duration
	MaxBlocks int
	// CBRMemoBytes bounds the memo of long strings already canonicalised
	// and hashed (chain.Memo); 0 turns it off.
	CBRMemoBytes int
	HashKey      string // 32 hex digits; empty draws a random key
	Policy       string
	ActiveWeight int
	CBRExclude   []string

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
	// PredictTTL, when positive, records the chosen backend as a location
	// of the request's chain at routing time, expiring after
	// min(PredictTTL, TTL) unless the answer confirms it (--predict-ttl): a
	// burst of requests with a new prefix then follows the first instead of
	// scattering before any of them has answered.
	PredictTTL time.Duration
	// AffinityEpsilon is ε of the load bound over every affinity
	// (--affinity-epsilon): a session, a prefix holder, a prediction may
	// send a request to a backend only while it holds at most
	// ceil((1+ε) × the mean) + 1 requests. Negative: unbounded.
	AffinityEpsilon float64
	// CacheCheck reads the cached-token count of every routed answer and
	// checks the prediction against it (--cache-check): an engine that
	// evicted what kvca believed it held has those locations dropped.
	CacheCheck bool
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

	// Admission: its settings (docs/admission.md).
	Admission admit.Settings

	// The front door (docs/frontdoor.md): APIKeys is the keys file
	// (--api-keys; empty: no keys asked, no quotas); BackendAPIKey is
	// sent to backends instead of any client credential
	// (--backend-api-key); OTLPEndpoint turns tracing on.
	APIKeys          string
	BackendAPIKey    string
	OTLPEndpoint     string
	TraceSampleRatio float64

	// Loops is how many event loops serve; 0: one per P (GOMAXPROCS).
	// The process should run at least one P more than it has loops: see
	// SpareP.
	Loops int

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

	// TTFT is the ttft policy's model where it is known (--batch-capacity,
	// --prefill-block-time, --first-token-base) and the resident-work bound
	// (--resident-epsilon, --resident-window); zeros are learned.
	TTFT sched.TTFTConfig

	// CustomPolicy, when set (tests and the bench only), routes instead of
	// the policy named by Policy.
	CustomPolicy sched.Policy

	// EngineMetrics scrapes each backend's Prometheus /metrics (vLLM,
	// SGLang) every EngineMetricsInterval: the engine's queue and KV usage
	// weigh in routing, its capacity bounds its locations, and a restart
	// resets them (--engine-metrics; off per backend without /metrics).
	// `kvca serve` turns it on unless told otherwise; DefaultConfig leaves
	// it off, so that programs embedding the server send their backends
	// nothing they did not ask for.
	EngineMetrics         bool
	EngineMetricsInterval time.Duration
	// BackendCacheTokens is the KV-cache capacity in tokens of backends
	// whose engines do not export it: one value for all, or one per
	// backend in order; 0: unknown (--backend-cache-tokens).
	BackendCacheTokens []int64
}

// DefaultConfig returns the defaults documented in the README.
func DefaultConfig() Config {
	return Config{
		Listen:                ":8080",
		AdminListen:           "127.0.0.1:8079",
		BlockSize:             256,
		TTL:                   10 * time.Minute,
		MaxBlocks:             4 << 20,
		CBRMemoBytes:          64 << 20,
		Policy:                sched.DefaultPolicy,
		ActiveWeight:          4,
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
		TTFT:                  sched.TTFTConfig{ResidentEpsilon: sched.DefaultResidentEpsilon},
		AffinityEpsilon:       sched.DefaultAffinityEpsilon,
		CacheCheck:            true,
		EngineMetricsInterval: time.Second,
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
	sni    string // the host name TLS verifies
	origin string // the --backend entry it comes from
}

func parseBackend(raw string) (backendAddr, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return backendAddr{}, fmt.Errorf("backend %q must be an absolute http:// or https:// URL", raw)
	}
	if u.RawQuery != "" || u.User != nil {
		return backendAddr{}, fmt.Errorf("backend %q must not carry a query or credentials", raw)
	}
	var models []string
	if u.Fragment != "" {
		for _, m := range strings.Split(u.Fragment, ",") {
			if m = strings.TrimSpace(m); m == "" {
				return backendAddr{}, fmt.Errorf("backend %q: empty model name after #", raw)
			}
			models = append(models, m)
		}
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
		url:       u.Scheme + "://" + u.Host + prefix,
		host:      host,
		authority: u.Host,
		tls:       u.Scheme == "https",
		prefix:    prefix,
		models:    models,
		sni:       u.Hostname(),
		origin:    raw,
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
	if c.BlockSize == 0 {
		c.BlockSize = d.BlockSize
	}
	if err := chain.CheckBlockSize(c.BlockSize); err != nil {
		return fmt.Errorf("--block-size: %v", err)
	}
	if c.TTL <= 0 {
		return fmt.Errorf("--ttl must be positive, got %v", c.TTL)
	}
	if c.PredictTTL < 0 {
		return fmt.Errorf("--predict-ttl must be 0 (off) or positive, got %v", c.PredictTTL)
	}
	if math.IsNaN(c.AffinityEpsilon) || math.IsInf(c.AffinityEpsilon, 0) {
		return fmt.Errorf("--affinity-epsilon must be a number (negative: no bound), got %v", c.AffinityEpsilon)
	}
	if c.MaxBlocks <= 0 {
		return fmt.Errorf("--max-blocks must be positive, got %d", c.MaxBlocks)
	}
	if c.CBRMemoBytes < 0 {
		return fmt.Errorf("--cbr-memo-bytes must be 0 (off) or positive, got %d", c.CBRMemoBytes)
	}
	if c.HashKey != "" {
		if _, err := chain.ParseKey(c.HashKey); err != nil {
			return fmt.Errorf("--hash-key: %v", err)
		}
	}
	if c.Policy == "" {
		c.Policy = d.Policy
	}
	if _, err := sched.PolicyByName(c.Policy); err != nil {
		return fmt.Errorf("--policy: %v", err)
	}
	if c.ActiveWeight < 0 {
		return fmt.Errorf("--active-weight must not be negative, got %d", c.ActiveWeight)
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
	if err := c.TTFT.Check(); err != nil {
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
	if c.EngineMetricsInterval < 0 {
		return fmt.Errorf("--engine-metrics-interval must not be negative")
	}
	if c.EngineMetricsInterval == 0 {
		c.EngineMetricsInterval = d.EngineMetricsInterval
	}
	if n := len(c.BackendCacheTokens); n > 1 && n != len(c.Backends) {
		return fmt.Errorf("--backend-cache-tokens takes one value for all backends or one per backend (%d), got %d", len(c.Backends), n)
	}
	for _, v := range c.BackendCacheTokens {
		if v < 0 {
			return fmt.Errorf("--backend-cache-tokens must not be negative, got %d", v)
		}
	}
	if !epollSupported {
		return fmt.Errorf("kvca serve needs Linux (its event loops use epoll)")
	}
	return nil
}
