package chain

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// Memo remembers what hashing a long string of the CBR did to a Hasher, so
// that the next request carrying the same string at the same point of its
// chain (a shared system prompt or document, or an earlier turn that every
// later turn of a conversation sends again) costs one comparison instead of
// canonicalising and hashing it again: at 128 KB, about 5 µs instead of 90.
//
// An entry is keyed by the Hasher's state before the string (the previous
// block's hash and the partial block) and the string's JSON literal, and is
// only used after both compare equal, so a hit gives exactly the chain a
// miss would. A string is admitted the second time it is seen: prompts that
// never repeat cost no memory and allocate nothing. Memory is bounded by
// evicting the oldest entries. Safe for concurrent use.
type Memo struct {
	seed   maphash.Seed
	max    int // bytes per shard
	seen   [memoSeen]atomic.Uint64
	shards [memoShards]memoShard
}

// MemoMinLiteral is the shortest literal worth remembering: below it the
// lookup costs about as much as the work it saves.
const MemoMinLiteral = 1 << 10

const (
	memoShards = 16
	memoSeen   = 4096
	// memoOverhead approximates an entry's bookkeeping besides its bytes.
	memoOverhead = 160
)

type memoShard struct {
	mu     sync.Mutex
	m      map[uint64]*memoEntry
	fifo   []*memoEntry // insertion order, oldest first
	bytes  int
	hits   atomic.Uint64
	misses atomic.Uint64
}

// memoEntry is immutable once stored.
type memoEntry struct {
	fp     uint64
	before []byte // LE64(previous hash) || partial block, before the literal
	lit    []byte
	cbr    int      // CBR bytes the literal stands for
	hashes []uint64 // blocks completed while writing it
	after  []byte   // LE64(previous hash) || partial block, after it
}

func (e *memoEntry) size() int {
	return len(e.before) + len(e.lit) + len(e.after) + 8*len(e.hashes) + memoOverhead
}

// NewMemo returns a Memo holding at most about maxBytes; nil if maxBytes
// is not positive (a nil *Memo remembers nothing).
func NewMemo(maxBytes int) *Memo {
	if maxBytes <= 0 {
		return nil
	}
	m := &Memo{seed: maphash.MakeSeed(), max: max(maxBytes/memoShards, 1)}
	for i := range m.shards {
		m.shards[i].m = make(map[uint64]*memoEntry)
	}
	return m
}

// fingerprint hashes the state and a sample of the literal: its length
// and 16 bytes at each end and at three points between. Equal
// fingerprints are only a hint; lookups compare the whole literal.
func (m *Memo) fingerprint(state, lit []byte) uint64 {
	fp := maphash.Bytes(m.seed, state) ^ uint64(len(lit))*0x9e3779b97f4a7c15
	const s = 16
	if len(lit) < 8*s {
		return mix(fp ^ maphash.Bytes(m.seed, lit))
	}
	for _, at := range [...]int{0, len(lit) / 4, len(lit) / 2, 3 * len(lit) / 4, len(lit) - s} {
		fp = mix(fp ^ binary.LittleEndian.Uint64(lit[at:]))
		fp = mix(fp ^ binary.LittleEndian.Uint64(lit[at+8:]))
	}
	return fp
}

// mix is a 64-bit finaliser (splitmix64's): every input bit moves about
// half of the output bits.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (m *Memo) shard(fp uint64) *memoShard { return &m.shards[fp%memoShards] }

func (m *Memo) lookup(fp uint64, state, lit []byte) *memoEntry {
	sh := m.shard(fp)
	sh.mu.Lock()
	e := sh.m[fp]
	sh.mu.Unlock()
	if e == nil || !bytes.Equal(e.before, state) || !bytes.Equal(e.lit, lit) {
		sh.misses.Add(1)
		return nil
	}
	sh.hits.Add(1)
	return e
}

// admit reports whether fp was seen before, and marks it seen.
func (m *Memo) admit(fp uint64) bool {
	slot := &m.seen[(fp>>32)%memoSeen]
	if slot.Load() == fp {
		return true
	}
	slot.Store(fp)
	return false
}

func (m *Memo) store(e *memoEntry) {
	sz := e.size()
	if sz > m.max {
		return
	}
	sh := m.shard(e.fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old := sh.m[e.fp]; old != nil {
		sh.bytes -= old.size()
	}
	sh.m[e.fp] = e
	sh.fifo = append(sh.fifo, e)
	sh.bytes += sz
	drop := 0
	for sh.bytes > m.max && drop < len(sh.fifo) {
		old := sh.fifo[drop]
		drop++
		if sh.m[old.fp] == old {
			delete(sh.m, old.fp)
			sh.bytes -= old.size()
		}
	}
	if drop > 0 {
		sh.fifo = append(sh.fifo[:0], sh.fifo[drop:]...)
	}
	if len(sh.fifo) > 2*len(sh.m)+64 {
		// Replaced entries linger in fifo until their turn; keep it short.
		live := sh.fifo[:0]
		for _, e := range sh.fifo {
			if sh.m[e.fp] == e {
				live = append(live, e)
			}
		}
		clear(sh.fifo[len(live):])
		sh.fifo = live
	}
}

// MemoStats is a snapshot for metrics.
type MemoStats struct {
	Literals     int    // remembered
	Bytes        int    // their approximate memory
	Hits, Misses uint64 // lookups of literals of MemoMinLiteral or more
}

// Stats sums the shards; a nil Memo has none.
func (m *Memo) Stats() MemoStats {
	var st MemoStats
	if m == nil {
		return st
	}
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		st.Literals += len(sh.m)
		st.Bytes += sh.bytes
		sh.mu.Unlock()
		st.Hits += sh.hits.Load()
		st.Misses += sh.misses.Load()
	}
	return st
}

// Len returns the number of remembered literals.
func (m *Memo) Len() int { return m.Stats().Literals }

// UseMemo makes the Hasher consult and fill m (nil: none).
func (h *Hasher) UseMemo(m *Memo) { h.memo = m }

// SkipLiteral is called with the JSON literal of a string whose CBR is to
// be written next. If the memo holds it at the Hasher's present state, the
// Hasher advances as if the CBR had been written and SkipLiteral returns
// its length. Otherwise the caller writes the CBR and then calls
// WroteLiteral with the same literal.
func (h *Hasher) SkipLiteral(lit []byte) (int, bool) {
	h.pending = false
	if h.memo == nil || len(lit) < MemoMinLiteral {
		return 0, false
	}
	state := h.buf[:8+h.n]
	fp := h.memo.fingerprint(state, lit)
	if e := h.memo.lookup(fp, state, lit); e != nil {
		h.Chain = append(h.Chain, e.hashes...)
		copy(h.buf, e.after)
		h.n = len(e.after) - 8
		return e.cbr, true
	}
	h.pending = true
	h.pendFP = fp
	h.pendChain = len(h.Chain)
	h.pendBefore = append(h.pendBefore[:0], state...)
	return 0, false
}

// WroteLiteral records what writing lit's CBR (cbr bytes, since the
// SkipLiteral that missed) did, if lit has been seen before.
func (h *Hasher) WroteLiteral(lit []byte, cbr int) {
	if !h.pending {
		return
	}
	h.pending = false
	if !h.memo.admit(h.pendFP) {
		return
	}
	h.memo.store(&memoEntry{
		fp:     h.pendFP,
		before: bytes.Clone(h.pendBefore),
		lit:    bytes.Clone(lit),
		cbr:    cbr,
		hashes: append([]uint64(nil), h.Chain[h.pendChain:]...),
		after:  bytes.Clone(h.buf[:8+h.n]),
	})
}
