package cluster

import "sync"

// learnBuf is where the request path leaves learned chains for the
// publisher. It is bounded in blocks and records: when full, Learned drops
// (and the caller counts) rather than waits or grows.
type learnBuf struct {
	mu        sync.Mutex
	cur       learnBatch
	maxBlocks int
	maxRecs   int
}

// learnBatch is a swap unit: records index consecutive runs of hashes.
type learnBatch struct {
	hashes []uint64
	recs   []learnRec
}

type learnRec struct {
	backend int32
	n       int32
	at      int64 // table time
}

func newLearnBuf(maxBlocks int) *learnBuf {
	recs := max(maxBlocks/4, 64)
	return &learnBuf{
		cur:       learnBatch{hashes: make([]uint64, 0, maxBlocks), recs: make([]learnRec, 0, recs)},
		maxBlocks: maxBlocks,
		maxRecs:   recs,
	}
}

// add copies chain in; it reports whether it fit, and how many blocks are
// pending afterwards (so the caller can wake the publisher).
func (lb *learnBuf) add(chain []uint64, backend int, at int64) (ok bool, pending int) {
	lb.mu.Lock()
	c := &lb.cur
	if len(c.hashes)+len(chain) > lb.maxBlocks || len(c.recs) >= lb.maxRecs {
		pending = len(c.hashes)
		lb.mu.Unlock()
		return false, pending
	}
	c.hashes = append(c.hashes, chain...)
	c.recs = append(c.recs, learnRec{backend: int32(backend), n: int32(len(chain)), at: at})
	pending = len(c.hashes)
	lb.mu.Unlock()
	return true, pending
}

// swap hands the pending batch to the publisher in exchange for spare (an
// emptied earlier batch), so steady state allocates nothing.
func (lb *learnBuf) swap(spare learnBatch) learnBatch {
	spare.hashes, spare.recs = spare.hashes[:0], spare.recs[:0]
	if cap(spare.hashes) < lb.maxBlocks {
		spare.hashes = make([]uint64, 0, lb.maxBlocks)
	}
	if cap(spare.recs) < lb.maxRecs {
		spare.recs = make([]learnRec, 0, lb.maxRecs)
	}
	lb.mu.Lock()
	out := lb.cur
	lb.cur = spare
	lb.mu.Unlock()
	return out
}
