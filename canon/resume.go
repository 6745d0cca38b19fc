package canon

import (
	"bytes"
	"encoding/binary"
	"sync"
	"sync/atomic"
)

// A Resumer remembers where canonicalisation and the chain stood at
// message boundaries of bodies already seen, keyed by their raw bytes, so
// that a body repeating an earlier one's bytes (an agent's next turn,
// which resends the whole history and adds to it) is parsed, canonicalised
// and hashed only from the last remembered boundary it shares. See
// docs/cbr.md, "Resuming".
//
// It holds a radix tree of raw body prefixes per API and hasher (key and
// block size); a boundary's snapshot keeps the canonicaliser's line state,
// the hasher's partial block and the hashes completed since the snapshot
// before it. A snapshot is only used after the body's bytes up to the
// boundary compared equal to the remembered ones, and its body's bytes
// from the prompt array's closing bracket to the end (everything the
// header and Info come from besides what precedes the array) compared
// equal too, so a resumed request has exactly the CBR, chain and Info of
// a cold one.
//
// Memory is bounded by evicting the least recently used leaves. What a
// dropped leaf held (its nodes, snapshots and buffers) goes to free lists
// that new records take from, so that recording allocates nothing once
// the budget is reached; the free lists count against the budget. Safe
// for concurrent use: lookups share a read lock, recording takes the
// write lock, and whatever a request needs from a snapshot is copied out
// under the read lock, since once it is released the snapshot may be
// dropped and its memory reused.
type Resumer struct {
	max   int
	every int           // snapEvery; tests snapshot more often
	clock atomic.Uint64 // recency stamps for eviction

	mu        sync.RWMutex
	roots     []*rzRoot
	bytes     int // held: the trees and the free lists
	nodes     int
	snaps     int
	leaves    []rzLeaf // eviction scratch
	free      rzFree   // what dropped leaves left, for new records (resumebuf.go)
	hits      atomic.Uint64
	misses    atomic.Uint64
	skipped   atomic.Uint64 // raw body bytes not parsed thanks to a hit
	evictions atomic.Uint64
}

// ResumeStats is a snapshot for metrics.
type ResumeStats struct {
	Bytes     int    // approximate memory held, free lists included
	Nodes     int    // radix tree nodes (runs of raw body bytes)
	Snapshots int    // message boundaries remembered
	Hits      uint64 // requests resumed from a snapshot
	Misses    uint64 // requests canonicalised from the start
	Skipped   uint64 // raw body bytes resumed requests did not parse
	Evictions uint64 // leaves dropped to stay within the budget
}

// NewResumer returns a Resumer holding at most maxBytes (its structures
// counted at approximate sizes, buffers and free lists exactly) after
// every request; nil (no resuming) if maxBytes is not positive.
func NewResumer(maxBytes int) *Resumer {
	if maxBytes <= 0 {
		return nil
	}
	return &Resumer{max: maxBytes, every: snapEvery}
}

// Stats reads the counters; a nil Resumer has none.
func (r *Resumer) Stats() ResumeStats {
	var s ResumeStats
	if r == nil {
		return s
	}
	r.mu.RLock()
	s.Bytes, s.Nodes, s.Snapshots = r.bytes, r.nodes, r.snaps
	r.mu.RUnlock()
	s.Hits, s.Misses = r.hits.Load(), r.misses.Load()
	s.Skipped, s.Evictions = r.skipped.Load(), r.evictions.Load()
	return s
}

// ResumableSink is a Sink whose whole state can be saved at a line
// boundary and restored later (chain.Hasher). Canonicalize resumes only
// into such a sink, and only from states saved by a sink of the same
// ResumeTag.
type ResumableSink interface {
	Sink
	// ResumeTag names everything that makes two sinks' states
	// interchangeable (for the Hasher: key and block size).
	ResumeTag() uint64
	// Blocks is the chain so far; Partial the rest of the state. Both
	// alias the sink's storage.
	Blocks() []uint64
	Partial() []byte
	// Restore sets the state to blocks hashes (returned for the caller
	// to fill) and partial.
	Restore(blocks int, partial []byte) []uint64
	Reset()
}

// UseResumer makes Canonicalize consult and fill r (nil: none) whenever
// its sink is a ResumableSink. Call it before the Canonicalizer is shared:
// a Resumer remembers the CBR of this Canonicalizer's options, and must
// serve no other.
func (c *Canonicalizer) UseResumer(r *Resumer) { c.resume = r }

// ResumeStats reads the Canonicalizer's Resumer's counters (zero if none).
func (c *Canonicalizer) ResumeStats() ResumeStats { return c.resume.Stats() }

// LikelyResumed estimates how many of body's leading bytes the resumer
// remembers for rs's hasher (Resumer.Likely); 0 without a resumer.
func (c *Canonicalizer) LikelyResumed(api API, body []byte, rs ResumableSink) int {
	return c.resume.Likely(api, rs.ResumeTag(), body)
}

// Resuming reports whether the Canonicalizer has a Resumer.
func (c *Canonicalizer) Resuming() bool { return c.resume != nil }

// rzRoot is the tree of one API and sink tag.
type rzRoot struct {
	api API
	tag uint64
	n   *rzNode
}

// rzNode is a run of raw body bytes, seg, at body offset start, in a
// buffer of its own, buf (nil for a root). Its children start where it
// ends, each with a different first byte. Its snapshots are at offsets in
// (start, start+len(seg)], ascending. Nodes are recycled: epoch changes
// whenever a node is split or dropped and is never reset, so a path
// walked earlier tells whether its nodes are still what it saw. Everything
// but used is only changed under the write lock.
type rzNode struct {
	seg    []byte
	buf    []byte
	start  int
	parent *rzNode
	kids   []*rzNode
	firsts []byte // kids[i].seg[0]: a lookup scans one line, not every kid
	snaps  []*rzSnap
	used   atomic.Uint64
	epoch  uint64
	dead   bool
}

func (n *rzNode) end() int { return n.start + len(n.seg) }

// kid is the child whose run starts with b. A node where many
// conversations part (after a shared system prompt) has dozens of kids:
// reading each kid's first byte would miss the cache once per kid.
func (n *rzNode) kid(b byte) *rzNode {
	if i := bytes.IndexByte(n.firsts, b); i >= 0 {
		return n.kids[i]
	}
	return nil
}

// slices is what a node's kids and snaps hold, counted in the budget.
func (n *rzNode) slices() int { return 8*(cap(n.kids)+cap(n.snaps)) + cap(n.firsts) }

// rzLine is the state just after the line of a message (or input item)
// whose value ends at raw offset off: the chain's length and the
// canonicaliser's line state.
type rzLine struct {
	off, blocks int
	followup    bool
	sessionSet  bool
	messages    int
	session     uint64
	firstHash   uint64
	total       int
}

// rzSnap is a remembered rzLine with the sink's Partial and the hashes
// completed since the snapshot before it on its path, prev, in data:
// data[:plen] is the Partial, the rest chain[prev.blocks:blocks] in
// little-endian words. Immutable while published; gen changes when it is
// dropped, so a request that found it can tell whether it still is.
type rzSnap struct {
	rzLine
	prev *rzSnap // nil: none
	data []byte
	plen int
	v    *rzVariant
	gen  uint64
}

func (s *rzSnap) partial() []byte { return s.data[:s.plen] }

// deltaInto writes the snapshot's hashes into dst, chain[prev.blocks:blocks].
func (s *rzSnap) deltaInto(dst []uint64) {
	d := s.data[s.plen:]
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint64(d[8*i:])
	}
}

// rzVariant is what a body's header and top-level Info come from besides
// the bytes before its prompt array: the bytes from the array's closing
// bracket to the end, and the Info they and those bytes gave, all in
// data. Immutable while published.
type rzVariant struct {
	data     []byte
	post     []byte
	model    []byte
	prevID   []byte
	priority []byte
	cacheKey uint64
	userKey  uint64
	refs     int // snapshots using it (under the write lock)
}

// Approximate sizes of the structures, counted in the budget.
const (
	rzNodeOverhead    = 160
	rzSnapOverhead    = 160
	rzVariantOverhead = 160
)
