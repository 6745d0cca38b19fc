// Package precise is the bench's upper bound for kvca's approximate
// routing: a policy that knows exactly what each mock engine's KV cache
// holds and how much prefill each has queued, as a router fed perfect KV
// events and load reports would, and otherwise decides as kvca-cost does.
// It reads the engines in the same process, so it exists only in the
// bench.
package precise

import (
	"fmt"
	"sync"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/bench/workload"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// Policy is the precise baseline. It recognises each request by the last
// block of its chain (which names the whole CBR), renders that request's
// prompt as the engines do, and asks each engine how much of it is cached.
type Policy struct {
	engines []*mock.Engine // by backend index
	reqs    []workload.Request
	byLast  map[uint64]int32 // last chain block → request
	bt      int
	// tokenBlocks converts an engine's prefill backlog (wall time) into
	// CBR blocks: the wall time one CBR block of novel prompt takes.
	blockTime time.Duration
	scratch   sync.Pool // *buffers
}

type buffers struct {
	prompt []byte
	hashes []uint64
}

// New indexes w's requests by their chains as a kvca with key, blockSize
// and the default CBR exclusions computes them.
func New(engines []*mock.Engine, w *workload.Workload, key chain.Key, blockSize int) (*Policy, error) {
	if len(engines) == 0 {
		return nil, fmt.Errorf("precise: no engines")
	}
	cfg := engines[0].Config()
	p := &Policy{engines: engines, reqs: w.Requests, byLast: make(map[uint64]int32, len(w.Requests)), bt: cfg.BlockTokens}
	perToken := time.Duration(float64(cfg.PrefillPerToken) * cfg.TimeScale)
	p.blockTime = max(perToken*time.Duration(blockSize)/mock.BytesPerToken, 1)
	cn := canon.New(nil)
	h := chain.NewHasher(key, blockSize)
	var info canon.Info
	for i, r := range w.Requests {
		api := canon.Chat
		if r.Path == mock.PathCompletions {
			api = canon.Completions
		}
		h.Reset()
		if err := cn.Canonicalize(api, r.Body, h, &info); err != nil {
			return nil, fmt.Errorf("precise: request %d: %w", i, err)
		}
		if c := h.Sum(); len(c) > 0 {
			p.byLast[c[len(c)-1]] = int32(i)
		}
	}
	return p, nil
}

// Name is "precise".
func (p *Policy) Name() string { return "precise" }

// ExtraLoad is the prefill an engine has queued beyond what kvca has
// reserved on it, in CBR blocks (install as Scheduler.ExtraLoad): with
// true cache contents kvca's reservations are nearly the engines' queues
// already, and this adds what they still miss.
func (p *Policy) ExtraLoad(b *sched.Backend) uint64 {
	if b.Index >= len(p.engines) {
		return 0
	}
	q := uint64(p.engines[b.Index].Backlog() / p.blockTime)
	if r := uint64(b.Prefill()); q > r {
		return q - r
	}
	return 0
}

// Pick routes a follow-up whose prefix some engine truly holds to the
// least-loaded of the engines holding the longest of it, and everything
// else to the least cost (load plus the blocks each would compute), with
// the true cached prefix of every engine.
func (p *Policy) Pick(s *sched.Scheduler, r *sched.Request, d *sched.Decision) bool {
	elig := s.Eligible(r)
	var match [chain.MaxBackends]int32
	best := p.matches(r, &elig, &match)
	n := len(r.Chain)
	if r.Followup && best > 0 {
		var holders chain.Set
		elig.Each(func(i int) {
			if match[i] == best {
				holders.Add(i)
			}
		})
		d.Phase = sched.PhaseFollowup
		return s.PickAmong(&holders, n, &match, false, d)
	}
	switch {
	case !r.Followup:
		d.Phase = sched.PhaseBootstrap
	case best > 0:
		d.Phase = sched.PhaseFollowup
	default:
		d.Phase = sched.PhaseFallback
	}
	return s.PickAmong(&elig, n, &match, true, d)
}

// matches sets match[b], for b in elig, to the CBR blocks of r's chain
// that engine b truly holds (its cached tokens, in proportion), and
// returns the longest.
func (p *Policy) matches(r *sched.Request, elig *chain.Set, match *[chain.MaxBackends]int32) int32 {
	if len(r.Chain) == 0 {
		return 0
	}
	i, ok := p.byLast[r.Chain[len(r.Chain)-1]]
	if !ok {
		return 0
	}
	buf, _ := p.scratch.Get().(*buffers)
	if buf == nil {
		buf = &buffers{}
	}
	defer p.scratch.Put(buf)
	var err error
	buf.prompt, err = mock.Render(buf.prompt[:0], p.reqs[i].Path, p.reqs[i].Body)
	if err != nil {
		return 0
	}
	buf.hashes = mock.BlockHashes(buf.hashes[:0], buf.prompt, p.bt)
	tokens := mock.Tokens(buf.prompt)
	best := int32(0)
	elig.Each(func(b int) {
		if b >= len(p.engines) || tokens == 0 {
			return
		}
		held := p.engines[b].CachedPrefix(buf.hashes, tokens)
		m := int32(min(held*p.bt*len(r.Chain)/tokens, len(r.Chain)))
		match[b] = m
		best = max(best, m)
	})
	return best
}
