package live

import (
	"context"

	"github.com/valyala/fasthttp"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// Proxy is what the gateway needs of the running proxy: its block table and
// backends, the chain of a request body, warm-ups, the admin listener and
// the hooks that keep endpoint generations current. *edge.Server is one;
// the gateway imports nothing of the request path.
type Proxy interface {
	// BlockSize is the CBR block size in bytes (fixed for the proxy's life).
	BlockSize() int
	// Table is the block table; Scheduler the backends in force.
	Table() *chain.Table
	Scheduler() *sched.Scheduler
	// Chain computes the block chain the table would hold for body.
	Chain(api canon.API, body []byte) ([]uint64, canon.Info, error)
	// Warm sends body to backend i outside client traffic and, on a 2xx,
	// learns its chain as held there; it returns the chain learned.
	Warm(ctx context.Context, i int, api canon.API, path string, body []byte) ([]uint64, error)
	// HandleAdmin mounts h on the admin listener at path.
	HandleAdmin(path string, h fasthttp.RequestHandler)
	// OnBackendReset registers f to run after a backend was reset (its
	// locations dropped, its generation bumped to gen).
	OnBackendReset(f func(backend int, gen uint32))
	// OnBackends registers f to run after the backends in force changed.
	OnBackends(f func())
}
