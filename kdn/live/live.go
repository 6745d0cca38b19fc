package live

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
)

// Options configure a Gateway.
type Options struct {
	// CompatibilityProfileID names the deployment (--compatibility-profile-id);
	// requests for another profile are incompatible. Default "kvca".
	CompatibilityProfileID string
	// StateDir holds the knowledge store and the endpoint generations
	// (--state-dir); empty keeps the store in memory only and starts every
	// generation at 1.
	StateDir string
	// MaxPinnedBlocks bounds the blocks pinned at once across endpoints
	// (--max-pinned-blocks); pins beyond it are refused. Default 65536.
	MaxPinnedBlocks int
	// OpTimeout bounds one warm-up operation (all its attempts). Default 2m.
	OpTimeout time.Duration
	// Clock stamps answers; default time.Now.
	Clock func() time.Time
	// Logger receives the gateway's errors; nil discards.
	Logger *slog.Logger
}

// DefaultMaxPinnedBlocks is the default of --max-pinned-blocks.
const DefaultMaxPinnedBlocks = 65536

// Gateway is kvca's own KDN gateway (runtime profile v1): every backend of
// srv is an endpoint, knowledge is a registered prefix, and every answer
// comes from the live block table and scheduler. It implements
// gateway.Gateway and gateway.KnowledgeService.
type Gateway struct {
	srv     Proxy
	compat  string
	clock   func() time.Time
	log     *slog.Logger
	maxPins int
	opTTL   time.Duration
	cat     *catalog
	gens    *generations
	tasks   *taskTable

	ctx   context.Context // parent of every operation; Close cancels it
	stop  context.CancelFunc
	ops   sync.WaitGroup
	pinMu sync.Mutex
	pins  map[pinKey]pinRec
}

var (
	_ gateway.Gateway          = (*Gateway)(nil)
	_ gateway.KnowledgeService = (*Gateway)(nil)
)

// ErrCompatibilityProfile rejects a blank --compatibility-profile-id.
var ErrCompatibilityProfile = errors.New("kdn: --compatibility-profile-id must not be blank")

// New builds the gateway over srv, opens the knowledge store and restores
// the endpoint generations (see generations); call it before srv.Start.
// It starts no goroutine: operations run in their own, bounded by OpTimeout (or the
// TTL for clear) and by Close.
func New(srv Proxy, o Options) (*Gateway, error) {
	if o.CompatibilityProfileID == "" {
		o.CompatibilityProfileID = "kvca"
	}
	if strings.TrimSpace(o.CompatibilityProfileID) == "" {
		return nil, ErrCompatibilityProfile
	}
	if o.MaxPinnedBlocks <= 0 {
		o.MaxPinnedBlocks = DefaultMaxPinnedBlocks
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 2 * time.Minute
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	der := deriver{compat: o.CompatibilityProfileID, blockSize: srv.BlockSize(), chain: srv.Chain}
	cat, err := openCatalog(store{dir: o.StateDir}, der, o.Logger)
	if err != nil {
		return nil, err
	}
	gens, err := openGenerations(o.StateDir, srv.Table(), srv.Scheduler().Backends, o.Logger)
	if err != nil {
		return nil, err
	}
	srv.OnBackendReset(gens.note)
	g := &Gateway{
		srv: srv, compat: o.CompatibilityProfileID, clock: o.Clock, log: o.Logger,
		maxPins: o.MaxPinnedBlocks, opTTL: o.OpTimeout, cat: cat, gens: gens, tasks: newTaskTable(),
		pins: map[pinKey]pinRec{},
	}
	srv.OnBackends(func() { gens.follow(srv.Table(), srv.Scheduler().Backends) })
	g.ctx, g.stop = context.WithCancel(context.Background())
	return g, nil
}

// Close cancels every running operation and waits for them to stop.
func (g *Gateway) Close() {
	g.stop()
	g.ops.Wait()
}

// now is the answer clock, at the wire's microsecond resolution.
func (g *Gateway) now() time.Time { return g.clock().UTC().Truncate(time.Microsecond) }

// endpoint resolves an endpoint id to a backend index.
func (g *Gateway) endpoint(id string) (int, bool) {
	for _, b := range g.srv.Scheduler().Backends {
		if !b.Retired() && kdn.EndpointIDForName(b.URL) == id {
			return b.Index, true
		}
	}
	return 0, false
}

// generation is the endpoint generation a backend has now, persisted
// before it is shown.
func (g *Gateway) generation(b int) int64 {
	gen := g.srv.Table().Generation(b)
	g.gens.note(b, gen)
	return int64(gen)
}

// healthy reports whether kvca currently sends traffic to backend b: an
// unhealthy one may have lost its cache or be unreachable, so nothing is
// vouched for or sent there until it is re-admitted (with a new generation).
func (g *Gateway) healthy(b int) bool { return g.srv.Scheduler().Backends[b].Healthy() }

// begin stamps the reply to a targeted request and negotiates it against
// the snapshot of the endpoint it names (§9). An unknown endpoint is
// negotiated against the first backend's snapshot, which it cannot match:
// incompatible, as the contract wants.
func (g *Gateway) begin(env kdn.Envelope, t kdn.Target, gate kdn.Capability) (kdn.CacheServiceResponse, int, bool) {
	now := g.now()
	r := gateway.NewTargetedReply(env, t, now)
	b, ok := g.endpoint(t.EndpointID)
	if !ok {
		b = 0
	}
	if f, refused := gateway.Negotiate(g.snapshotOf(b, now), env, t, gate); refused {
		return gateway.Refuse(r, f), b, false
	}
	return r, b, true
}

// Why an endpoint's answers cannot be vouched for right now; both are
// retryable: a re-admitted endpoint, or a client that re-reads the
// generation, may succeed.
const msgUnhealthy = "endpoint is unhealthy: kvca sends it nothing and cannot vouch for its cache"

// vouch refuses to speak for backend b at generation gen when kvca has
// ejected it (unhealthy: its cache may be gone or unreachable), answering
// outcome then, or when its generation moved on since negotiation (it was
// reset in between: stale). Reads check it before reading the table and
// again after, so that what they answer held for the whole read.
func (g *Gateway) vouch(b int, gen int64, outcome kdn.OutcomeCode) (gateway.Refusal, bool) {
	switch {
	case !g.healthy(b):
		return gateway.Refusal{Outcome: outcome, Message: msgUnhealthy, Retryable: true}, true
	case g.generation(b) != gen:
		return gateway.Refusal{Outcome: kdn.OutcomeStale, Message: gateway.MsgStaleGeneration, Retryable: true}, true
	}
	return gateway.Refusal{}, false
}

func refuse(r kdn.CacheServiceResponse, outcome kdn.OutcomeCode, msg string) kdn.CacheServiceResponse {
	return gateway.Refuse(r, gateway.Refusal{Outcome: outcome, Message: msg})
}

func (g *Gateway) endpointIDOf(b int) string {
	return kdn.EndpointIDForName(g.srv.Scheduler().Backends[b].URL)
}
