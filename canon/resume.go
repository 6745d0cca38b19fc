package canon

import (
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
// a cold one. Memory is bounded by evicting the least recently used
// leaves. Safe for concurrent use: lookups share a read lock, recording
// takes the write lock.
type Resumer struct {
	max   int
	every int           // snapEvery; tests snapshot more often
	clock atomic.Uint64 // recency stamps for eviction

	mu        sync.RWMutex
	roots     []*rzRoot
	bytes     int
	nodes     int
	snaps     int
	leaves    []*rzNode           // eviction scratch
	free      [rzClasses][][]byte // recycled buffers by class (resumebuf.go)
	freeBytes int
	hits      atomic.Uint64
	misses    atomic.Uint64
	skipped   atomic.Uint64 // raw body bytes not parsed thanks to a hit
	evictions atomic.Uint64
}

// ResumeStats is a snapshot for metrics.
type ResumeStats struct {
	Bytes     int    // approximate memory held
	Nodes     int    // radix tree nodes (runs of raw body bytes)
	Snapshots int    // message boundaries remembered
	Hits      uint64 // requests resumed from a snapshot
	Misses    uint64 // requests canonicalised from the start
	Skipped   uint64 // raw body bytes resumed requests did not parse
	Evictions uint64 // leaves dropped to stay within the budget
}

// NewResumer returns a Resumer holding at most about maxBytes; nil (no
// resuming) if maxBytes is not positive.
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

// Resuming reports whether the Canonicalizer has a Resumer.
func (c *Canonicalizer) Resuming() bool { return c.resume != nil }

// rzRoot is the tree of one API and sink tag.
type rzRoot struct {
	api API
	tag uint64
	n   *rzNode
}

// rzNode is a run of raw body bytes, seg, at body offset start. Its
// children start where it ends, each with a different first byte. Its
// snapshots are at offsets in (start, start+len(seg)], ascending.
// Everything but used is only changed under the write lock; seg's bytes
// below len never change once published.
type rzNode struct {
	seg    []byte
	own    bool // seg is a whole buffer of its own (never split)
	start  int
	parent *rzNode
	kids   []*rzNode
	snaps  []*rzSnap
	used   atomic.Uint64
	epoch  uint32 // changes when the node is split or dropped
	dead   bool
}

func (n *rzNode) end() int { return n.start + len(n.seg) }

func (n *rzNode) kid(b byte) *rzNode {
	for _, k := range n.kids {
		if k.seg[0] == b {
			return k
		}
	}
	return nil
}

// rzSnap is the state just after the line of a message (or input item)
// whose value ends at raw offset off. Immutable once published.
type rzSnap struct {
	off     int
	prev    *rzSnap  // the snapshot before it on its path; nil: none
	blocks  int      // chain length
	delta   []uint64 // chain[prev.blocks:blocks]
	partial []byte   // the sink's Partial
	v       *rzVariant
	// Canonicaliser state after the line.
	followup   bool
	sessionSet bool
	messages   int
	session    uint64
	firstHash  uint64
	total      int
}

// rzVariant is what a body's header and top-level Info come from besides
// the bytes before its prompt array: the bytes from the array's closing
// bracket to the end, and the Info they and those bytes gave. Immutable.
type rzVariant struct {
	post     []byte
	model    []byte
	prevID   []byte
	priority []byte
	cacheKey uint64
	userKey  uint64
	refs     int // snapshots using it (under the write lock)
}

const (
	rzNodeOverhead    = 128
	rzSnapOverhead    = 160
	rzVariantOverhead = 96
)

func (s *rzSnap) size() int { return rzSnapOverhead + len(s.partial) + 8*len(s.delta) }

func (v *rzVariant) size() int {
	return rzVariantOverhead + len(v.post) + len(v.model) + len(v.prevID) + len(v.priority)
}
