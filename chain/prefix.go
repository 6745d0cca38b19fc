package chain

import "sync/atomic"

// Prefix walks chain from its first block and returns how many leading
// blocks have a live location (the walk stops at the first that has none)
// and the backends holding the last of them: the longest known prefix of
// a follow-up and its replicas.
//
// The walk of a long prompt is hundreds of lookups, and concurrent
// requests carrying the same prompt walk the same blocks at once. Each
// result is kept for the millisecond it was computed in, in a slot chosen
// by the chain's last block (which names the whole chain), and the other
// requests of that millisecond read it without taking any lock. A
// location learned within that millisecond is seen from the next one.
func (t *Table) Prefix(chain []uint64, now int64) (int, Set) {
	if len(chain) == 0 {
		return 0, Set{}
	}
	last := chain[len(chain)-1]
	sl := &t.prefixes[(last>>20)%prefixSlots]
	if n, s, ok := sl.read(last, len(chain), now); ok {
		return n, s
	}
	if _, ok := t.wholeHolder(chain, now); ok {
		// Every block is held: the walk would end at the last one.
		s := t.Lookup(last, now)
		sl.write(last, len(chain), now, len(chain), s)
		return len(chain), s
	}
	var prev Set
	n := 0
	t.walk(chain, now, func(_ int, locs Set) bool {
		if locs.Empty() {
			return false
		}
		prev = locs
		n++
		return true
	})
	sl.write(last, len(chain), now, n, prev)
	return n, prev
}

const prefixSlots = 256

// walk calls visit with the live locations of each block of chain in
// order (what Lookup returns) until visit returns false. A chain of at
// least two blocks per shard whose first block is held is read a shard at
// a time under one shared lock each, as touch writes it; a block with
// something to forget is looked up alone when the walk reaches it, so
// nothing past where the walk stops is forgotten, as block by block.
func (t *Table) walk(chain []uint64, now int64, visit func(i int, locs Set) bool) {
	if len(t.shards) == 1 || len(chain) < 2*len(t.shards) {
		for i, h := range chain {
			if !visit(i, t.Lookup(h, now)) {
				return
			}
		}
		return
	}
	if !visit(0, t.Lookup(chain[0], now)) {
		return
	}
	w := t.walks.Get().(*walkScratch)
	defer t.walks.Put(w)
	w.g.sort(chain, t.mask)
	if cap(w.sets) < len(chain) {
		w.sets = make([]Set, len(chain), 2*len(chain))
		w.clean = make([]bool, len(chain), 2*len(chain))
	}
	sets, clean := w.sets[:len(chain)], w.clean[:len(chain)]
	for s := range t.shards {
		ps := w.g.order[w.g.start[s]:w.g.start[s+1]]
		if len(ps) == 0 {
			continue
		}
		sh := &t.shards[s]
		sh.mu.RLock()
		for _, p := range ps {
			sets[p], clean[p] = t.peek(sh, chain[p], now)
		}
		sh.mu.RUnlock()
	}
	for i := 1; i < len(chain); i++ {
		locs := sets[i]
		if !clean[i] {
			locs = t.Lookup(chain[i], now)
		}
		if !visit(i, locs) {
			return
		}
	}
}

// walkScratch is walk's recycled room.
type walkScratch struct {
	g     shardGroups
	sets  []Set
	clean []bool
}

// prefixSlot is a seqlock: seq is odd while a writer fills the slot, and a
// reader that saw it change discards what it read. Every field is atomic,
// so readers never write and never wait.
type prefixSlot struct {
	seq  atomic.Uint64
	last atomic.Uint64
	len  atomic.Int64
	at   atomic.Int64
	n    atomic.Int64
	set  [4]atomic.Uint64
	_    [48]byte // one slot per pair of cache lines: writers of neighbours do not disturb readers
}

func (sl *prefixSlot) read(last uint64, length int, now int64) (int, Set, bool) {
	seq := sl.seq.Load()
	if seq&1 != 0 || sl.last.Load() != last || sl.len.Load() != int64(length) || sl.at.Load() != now {
		return 0, Set{}, false
	}
	n := int(sl.n.Load())
	var s Set
	for i := range s {
		s[i] = sl.set[i].Load()
	}
	if sl.seq.Load() != seq {
		return 0, Set{}, false
	}
	return n, s, true
}

func (sl *prefixSlot) write(last uint64, length int, now int64, n int, s Set) {
	seq := sl.seq.Load()
	if seq&1 != 0 || !sl.seq.CompareAndSwap(seq, seq+1) {
		return // another writer is at it; its result is as good
	}
	sl.last.Store(last)
	sl.len.Store(int64(length))
	sl.at.Store(now)
	sl.n.Store(int64(n))
	for i := range s {
		sl.set[i].Store(s[i])
	}
	sl.seq.Store(seq + 2)
}

// Matches sets dst[b], for every backend b holding the chain's first
// block, to the number of leading blocks b holds (the walk ends where no
// backend holds all blocks so far), and returns those backends; other
// entries of dst are left alone. Like Prefix, each result is kept for the
// millisecond it was computed in, if at most matchPairs backends hold the
// first block.
func (t *Table) Matches(chain []uint64, now int64, dst *[MaxBackends]int32) Set {
	if len(chain) == 0 {
		return Set{}
	}
	last := chain[len(chain)-1]
	sl := &t.matches[(last>>20)%prefixSlots]
	if held, ok := sl.read(last, len(chain), now, dst); ok {
		return held
	}
	if b, ok := t.wholeHolder(chain, now); ok {
		// b holds every block; if no other backend holds the first, the
		// walk would find b alone all the way.
		if held := t.Lookup(chain[0], now); held == (Set{}).with(b) {
			dst[b] = int32(len(chain))
			sl.write(last, len(chain), now, held, dst)
			return held
		}
	}
	var held, cur Set
	t.walk(chain, now, func(i int, locs Set) bool {
		if i == 0 {
			held, cur = locs, locs
		} else {
			cur.And(&locs)
		}
		if cur.Empty() {
			return false
		}
		n := int32(i + 1)
		cur.Each(func(b int) { dst[b] = n })
		return true
	})
	sl.write(last, len(chain), now, held, dst)
	return held
}

const matchPairs = 8

// matchSlot is Matches' seqlock slot: up to matchPairs (backend, blocks)
// pairs, each packed in one word.
type matchSlot struct {
	seq   atomic.Uint64
	last  atomic.Uint64
	len   atomic.Int64
	at    atomic.Int64
	cnt   atomic.Int64
	pairs [matchPairs]atomic.Uint64
}

func (sl *matchSlot) read(last uint64, length int, now int64, dst *[MaxBackends]int32) (Set, bool) {
	seq := sl.seq.Load()
	if seq&1 != 0 || sl.last.Load() != last || sl.len.Load() != int64(length) || sl.at.Load() != now {
		return Set{}, false
	}
	cnt := int(sl.cnt.Load())
	var pairs [matchPairs]uint64
	for i := range cnt {
		pairs[i] = sl.pairs[i].Load()
	}
	if sl.seq.Load() != seq {
		return Set{}, false
	}
	var held Set
	for _, p := range pairs[:cnt] {
		b := int(p >> 32)
		held.Add(b)
		dst[b] = int32(uint32(p))
	}
	return held, true
}

func (sl *matchSlot) write(last uint64, length int, now int64, held Set, dst *[MaxBackends]int32) {
	if held.Len() > matchPairs {
		return
	}
	seq := sl.seq.Load()
	if seq&1 != 0 || !sl.seq.CompareAndSwap(seq, seq+1) {
		return
	}
	sl.last.Store(last)
	sl.len.Store(int64(length))
	sl.at.Store(now)
	cnt := 0
	held.Each(func(b int) {
		sl.pairs[cnt].Store(uint64(b)<<32 | uint64(uint32(dst[b])))
		cnt++
	})
	sl.cnt.Store(int64(cnt))
	sl.seq.Store(seq + 2)
}
