package chain

import (
	"bytes"
	"hash/maphash"
	"math/bits"
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
//
// Lookups take no lock and write nothing shared but a striped counter: an
// entry lives in a slot of a direct-mapped table chosen by its
// fingerprint (or the other slot of its pair), read with atomic loads, because the requests of one hot
// prompt look up the same strings on every core at once. Only storing and
// evicting, which happen at most once per string and fingerprint slot,
// take the mutex.
type Memo struct {
	seed  maphash.Seed
	max   int // bytes
	slots []atomic.Pointer[memoEntry]
	mask  uint64
	seen  [memoSeen]atomic.Uint64
	stats [memoStripes]memoCounts

	mu    sync.Mutex
	fifo  []*memoEntry // stored order, oldest first
	bytes int
	live  int
	seq   uint64
}

// MemoMinLiteral is the shortest literal worth remembering: below it the
// lookup costs about as much as the work it saves.
const MemoMinLiteral = 256

const (
	memoSeen    = 4096
	memoStripes = 16
	// memoOverhead approximates an entry's bookkeeping besides its bytes.
	memoOverhead = 160
)

// memoCounts is one stripe of the hit and miss counters, alone on its
// cache line.
type memoCounts struct {
	hits, misses atomic.Uint64
	_            [48]byte
}

// memoEntry is immutable once stored, but for dead, seq and slot, which
// only the writers (under Memo.mu) use.
type memoEntry struct {
	fp     uint64
	before []byte // LE64(previous hash) || partial block, before the literal
	lit    []byte
	cbr    int      // CBR bytes the literal stands for
	hashes []uint64 // blocks completed while writing it
	after  []byte   // LE64(previous hash) || partial block, after it
	dead   bool     // no longer in its slot (replaced or evicted)
	seq    uint64   // store order
	slot   *atomic.Pointer[memoEntry]
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
	// One slot per 256 bytes: two ways of mostly empty slots.
	n := 1 << bits.Len(uint(max(maxBytes/256, 64)-1))
	return &Memo{seed: maphash.MakeSeed(), max: maxBytes, slots: make([]atomic.Pointer[memoEntry], n), mask: uint64(n - 1)}
}

// fingerprint hashes a sample of the state and of the literal: the
// previous block's hash, the partial block's length and last 16 bytes,
// the literal's length and 16 bytes at each end and at three points
// between. Equal fingerprints are only a hint; lookups compare the whole
// state and literal. The sample is gathered and hashed in one call:
// mixing its words one by one, and hashing the whole partial block, was a
// tenth of canonicalising a chat body whose strings all hit.
func (m *Memo) fingerprint(state, lit []byte) uint64 {
	const s = 16
	var b [8 + s + 5*s]byte
	copy(b[:8], state)
	if t := state[8:]; len(t) > s {
		copy(b[8:8+s], t[len(t)-s:])
	} else {
		copy(b[8:8+s], t)
	}
	lens := uint64(len(state))<<32 ^ uint64(len(lit))
	if len(lit) < 8*s {
		return mix(maphash.Bytes(m.seed, b[:8+s]) ^ maphash.Bytes(m.seed, lit) ^ lens*0x9e3779b97f4a7c15)
	}
	o := b[8+s:]
	copy(o[0*s:], lit[:s])
	copy(o[1*s:], lit[len(lit)/4:len(lit)/4+s])
	copy(o[2*s:], lit[len(lit)/2:len(lit)/2+s])
	copy(o[3*s:], lit[3*len(lit)/4:3*len(lit)/4+s])
	copy(o[4*s:], lit[len(lit)-s:])
	return mix(maphash.Bytes(m.seed, b[:]) ^ lens*0x9e3779b97f4a7c15)
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

func (m *Memo) lookup(fp uint64, state, lit []byte) *memoEntry {
	st := &m.stats[fp%memoStripes]
	i := fp & m.mask
	e := m.slots[i].Load()
	if e == nil || e.fp != fp {
		e = m.slots[i^1].Load()
	}
	if e == nil || e.fp != fp || !bytes.Equal(e.before, state) || !bytes.Equal(e.lit, lit) {
		st.misses.Add(1)
		return nil
	}
	st.hits.Add(1)
	return e
}

// slotFor picks where e goes: the slot of its pair holding the same
// fingerprint, else an empty one, else the older entry's (two ways, so
// that two strings meeting in one slot do not evict each other forever).
// Under m.mu.
func (m *Memo) slotFor(fp uint64) *atomic.Pointer[memoEntry] {
	a, b := &m.slots[fp&m.mask], &m.slots[(fp&m.mask)^1]
	ea, eb := a.Load(), b.Load()
	switch {
	case ea != nil && ea.fp == fp, ea == nil && (eb == nil || eb.fp != fp):
		return a
	case eb == nil || eb.fp == fp:
		return b
	case ea.seq <= eb.seq:
		return a
	}
	return b
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
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	e.seq = m.seq
	e.slot = m.slotFor(e.fp)
	if old := e.slot.Swap(e); old != nil && !old.dead {
		old.dead = true
		m.bytes -= old.size()
		m.live--
	}
	m.fifo = append(m.fifo, e)
	m.bytes += sz
	m.live++
	drop := 0
	for m.bytes > m.max && drop < len(m.fifo) {
		old := m.fifo[drop]
		drop++
		if old.dead {
			continue
		}
		old.slot.CompareAndSwap(old, nil)
		old.dead = true
		m.bytes -= old.size()
		m.live--
	}
	if drop > 0 {
		clear(m.fifo[:drop])
		m.fifo = append(m.fifo[:0], m.fifo[drop:]...)
	}
	if len(m.fifo) > 2*m.live+64 {
		// Replaced entries linger in fifo until their turn; keep it short.
		live := m.fifo[:0]
		for _, e := range m.fifo {
			if !e.dead {
				live = append(live, e)
			}
		}
		clear(m.fifo[len(live):])
		m.fifo = live
	}
}

// MemoStats is a snapshot for metrics.
type MemoStats struct {
	Literals     int    // remembered
	Bytes        int    // their approximate memory
	Hits, Misses uint64 // lookups of literals of MemoMinLiteral or more
}

// Stats reads the counters; a nil Memo has none.
func (m *Memo) Stats() MemoStats {
	var st MemoStats
	if m == nil {
		return st
	}
	m.mu.Lock()
	st.Literals, st.Bytes = m.live, m.bytes
	m.mu.Unlock()
	for i := range m.stats {
		st.Hits += m.stats[i].hits.Load()
		st.Misses += m.stats[i].misses.Load()
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
