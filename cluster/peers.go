package cluster

import (
	"sync"
	"time"
)

// peerLoads keeps every other replica's latest in-flight counts, mapped to
// local backend indexes, and sums the live ones. A replica that stays
// silent for more than staleAfter of its own publish intervals is aged out:
// its requests have ended or it is gone, and a stale count would steer
// traffic away from a backend for nothing.
type peerLoads struct {
	mu    sync.Mutex
	peers map[uint64]*peerLoad
	nb    int
}

const staleAfter = 3

type peerLoad struct {
	seen     time.Time
	interval time.Duration
	active   []uint32
	prefill  []uint32
}

func newPeerLoads(backends int) *peerLoads {
	return &peerLoads{peers: map[uint64]*peerLoad{}, nb: backends}
}

// update replaces sender's counts; index maps a wire key to a local index.
func (p *peerLoads) update(sender uint64, now time.Time, interval time.Duration, ents []loadEntry, index func(uint64) (int, bool)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.peers[sender]
	if pl == nil {
		pl = &peerLoad{active: make([]uint32, p.nb), prefill: make([]uint32, p.nb)}
		p.peers[sender] = pl
	}
	pl.seen, pl.interval = now, interval
	clear(pl.active)
	clear(pl.prefill)
	for _, e := range ents {
		if i, ok := index(e.key); ok {
			pl.active[i], pl.prefill[i] = e.active, e.prefill
		}
	}
}

// sum ages out silent peers and adds up the rest into active and prefill
// (one entry per backend); it returns how many peers are live.
func (p *peerLoads) sum(now time.Time, active, prefill []uint32) int {
	clear(active)
	clear(prefill)
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, pl := range p.peers {
		if now.Sub(pl.seen) > staleAfter*pl.interval {
			delete(p.peers, id)
			continue
		}
		for i := range active {
			active[i] = satAdd(active[i], pl.active[i])
			prefill[i] = satAdd(prefill[i], pl.prefill[i])
		}
	}
	return len(p.peers)
}

func satAdd(a, b uint32) uint32 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<32 - 1
}
