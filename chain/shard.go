package chain

import "sync"

// entry is one tracked block. Entries live in a per-shard slab linked into
// an LRU list by index, found through an open-addressing index of 32-bit
// slots: a block with one location costs its 32-byte entry plus 4–11 bytes
// of index, and nothing but the rare extra-location lists for the GC to
// scan.
type entry struct {
	hash       uint64
	prev, next int32 // LRU neighbours (head = most recent); -1 = none
	loc        uint64
	more       *moreLocs // further locations; rare (shared prefixes)
}

type moreLocs struct{ l []uint64 }

type shard struct {
	// mu is read-locked by lookups and by touches that change nothing (the
	// location is already this fresh), so the requests of one hot prompt,
	// which walk the same blocks at the same time, do not queue behind each
	// other; everything that writes takes it exclusively.
	mu sync.RWMutex
	// idx is a linear-probing hash index: 0 is empty, otherwise a slot
	// (its entry's index plus one and bits of the block's hash: slotKey).
	// Its length is a power of two, at most 3/4 full.
	idx        []uint32
	ents       []entry
	free       int32 // free-list head through entry.next
	head, tail int32
	count      int
	locs       int
	// held counts each backend's locations in this shard, for the
	// per-backend capacity bound (capacity.go).
	held *[MaxBackends]int32
	_    [32]byte // keep neighbouring shards' locks off one cache line
}

func (sh *shard) init() {
	sh.idx = make([]uint32, 16)
	sh.free, sh.head, sh.tail = -1, -1, -1
	sh.held = new([MaxBackends]int32)
}

// home is a block's first probe position. Block hashes are SipHash
// outputs, uniform in every bit; the low bits already chose the shard.
func home(h uint64, mask int) int { return int(h>>16) & mask }

// An index slot holds, from its low bits up, the entry's index plus one
// (20 bits), a far bit, a 3-bit tag (the hash's bits 13–15: above the
// shard's bits up to 8192 shards, below the home's) and the low 8 bits of the block's home (the
// hash's bits 16–23). Entries lie anywhere in the slab, so reading one is
// a cache miss; with its home and tag in the slot:
//   - a probe reads the entry only when both agree, so a lookup costs
//     about one miss on its index line and one on the entry it finds,
//     and a block not in the table (every block of a new conversation)
//     none beyond the index;
//   - a deletion (every insert into a full shard evicts one) shifts its
//     probe run back without reading the entries that follow it: a
//     slot's position and its home's low 8 bits give its home, unless it
//     sits maxDisplacement or more past it (far; never seen with hashes,
//     it takes hundreds of blocks on one home), whose entry is read.
//
// Hence at most maxShardEntries entries a shard (NewTable has enough
// shards).
const (
	slotIndexBits   = 20
	slotIndexMask   = 1<<slotIndexBits - 1
	slotFar         = 1 << slotIndexBits
	slotKeyMask     = ^uint32(slotIndexMask | slotFar)
	maxShardEntries = slotIndexMask - 1
	maxDisplacement = 255
)

// slotKey is what a slot of block h holds beside its entry's index and
// far bit: the hash's bits 13–23 in the slot's 21–31.
func slotKey(h uint64) uint32 { return uint32(h<<8) & slotKeyMask }

// slotEntry is the entry index slot v (non-zero) names.
func slotEntry(v uint32) int32 { return int32(v&slotIndexMask) - 1 }

// slotHome is the home of slot v found at position j.
func (sh *shard) slotHome(v uint32, j, mask int) int {
	low := int(v >> 24)
	switch {
	case mask < 0xff:
		return low & mask
	case v&slotFar != 0:
		return home(sh.ents[slotEntry(v)].hash, mask)
	}
	return (j - (j-low)&0xff) & mask
}

// find returns the entry index of block h.
func (sh *shard) find(h uint64) (int32, bool) {
	mask := len(sh.idx) - 1
	// slotKey(h) unmasked and home(h, mask) written out: find stays
	// within the inliner's budget.
	key := uint32(h << 8)
	for p := int(h>>16) & mask; ; p = (p + 1) & mask {
		v := sh.idx[p]
		if v == 0 {
			return 0, false
		}
		if (v^key)&slotKeyMask == 0 && sh.ents[v&slotIndexMask-1].hash == h {
			return int32(v&slotIndexMask) - 1, true
		}
	}
}

func (sh *shard) indexAdd(h uint64, i int32) {
	if (sh.count+1)*4 > len(sh.idx)*3 {
		sh.regrow(len(sh.idx) * 2)
	}
	sh.place(h, slotKey(h)|uint32(i+1))
}

// place puts slot v of block h in the first free position of its probe
// run, marked far if that is maxDisplacement or more past its home.
func (sh *shard) place(h uint64, v uint32) {
	mask := len(sh.idx) - 1
	p := home(h, mask)
	for d := 0; ; d++ {
		if q := (p + d) & mask; sh.idx[q] == 0 {
			if v &^= slotFar; d >= maxDisplacement {
				v |= slotFar
			}
			sh.idx[q] = v
			return
		}
	}
}

func (sh *shard) regrow(n int) {
	old := sh.idx
	sh.idx = make([]uint32, n)
	for _, v := range old {
		if v != 0 {
			sh.place(sh.ents[slotEntry(v)].hash, v)
		}
	}
}

// indexDel removes block h, shifting later members of its probe run back
// so lookups never need tombstones.
func (sh *shard) indexDel(h uint64) {
	mask := len(sh.idx) - 1
	key := slotKey(h)
	p := home(h, mask)
	for v := sh.idx[p]; v&slotKeyMask != key || sh.ents[slotEntry(v)].hash != h; v = sh.idx[p] {
		p = (p + 1) & mask
	}
	for j := p; ; {
		j = (j + 1) & mask
		v := sh.idx[j]
		if v == 0 {
			break
		}
		k := sh.slotHome(v, j, mask)
		// v may move back to p unless its home lies cyclically in (p, j].
		if (p <= j && (k <= p || k > j)) || (p > j && k <= p && k > j) {
			sh.idx[p] = v
			p = j
		}
	}
	sh.idx[p] = 0
}

func (sh *shard) insert(h uint64) int32 {
	var i int32
	if sh.free >= 0 {
		i = sh.free
		sh.free = sh.ents[i].next
	} else {
		i = int32(len(sh.ents))
		sh.ents = append(sh.ents, entry{})
	}
	sh.ents[i] = entry{hash: h, prev: -1, next: -1}
	sh.indexAdd(h, i)
	sh.count++
	sh.linkFront(i)
	return i
}

func (sh *shard) remove(i int32) {
	e := &sh.ents[i]
	sh.unlink(i)
	sh.indexDel(e.hash)
	if e.loc != 0 {
		sh.locs--
		sh.held[locBackend(e.loc)]--
	}
	if e.more != nil {
		sh.locs -= len(e.more.l)
		for _, l := range e.more.l {
			sh.held[locBackend(l)]--
		}
	}
	*e = entry{next: sh.free, prev: -1}
	sh.free = i
	sh.count--
}

func (sh *shard) linkFront(i int32) {
	e := &sh.ents[i]
	e.prev = -1
	e.next = sh.head
	if sh.head >= 0 {
		sh.ents[sh.head].prev = i
	}
	sh.head = i
	if sh.tail < 0 {
		sh.tail = i
	}
}

func (sh *shard) unlink(i int32) {
	e := &sh.ents[i]
	if e.prev >= 0 {
		sh.ents[e.prev].next = e.next
	} else {
		sh.head = e.next
	}
	if e.next >= 0 {
		sh.ents[e.next].prev = e.prev
	} else {
		sh.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (sh *shard) moveToFront(i int32) {
	if sh.head == i {
		return
	}
	sh.unlink(i)
	sh.linkFront(i)
}

// current reports whether e already holds b's location of this generation
// as of now or later, so that a touch would change nothing but LRU order
// among blocks touched within the same millisecond.
func (e *entry) current(b int, gen uint32, now int64, mode touchMode) bool {
	return e.anyLoc(func(l uint64) bool {
		// A confirmation must clear a prediction's mark, however fresh.
		return locBackend(l) == b && locGen(l) == gen&0xff && locTime(l) >= now &&
			(mode == touchPredict || !locIsPredicted(l))
	})
}

// confirmed reports whether e holds a live location of b, of generation
// gen, that an answer confirmed.
func (e *entry) confirmed(t *Table, b int, gen uint32, now int64) bool {
	return e.anyLoc(func(l uint64) bool {
		return locBackend(l) == b && locGen(l) == gen&0xff && !locIsPredicted(l) && t.live(l, now)
	})
}

// anyLoc reports whether f holds for one of e's locations.
func (e *entry) anyLoc(f func(uint64) bool) bool {
	if e.loc != 0 && f(e.loc) {
		return true
	}
	if e.more != nil {
		for _, l := range e.more.l {
			if f(l) {
				return true
			}
		}
	}
	return false
}

// set creates or refreshes b's location in e, a block at depth bucket
// depth of its chain. A refresh never moves the time backwards (remote
// updates may arrive late) and keeps an existing pin; a confirmation
// clears a prediction's mark, and a prediction marks what it creates or
// refreshes (the caller leaves live confirmed locations alone).
func (sh *shard) set(e *entry, b int, gen uint32, now int64, mode touchMode, depth uint64) {
	depth <<= locDepthShift
	pin := mode == touchPin
	if mode == touchPredict {
		depth |= locPredicted
	}
	upd := func(l uint64) uint64 {
		if locGen(l) == gen&0xff {
			// A prediction's time is no access: a confirmation over it
			// (a peer's, dated earlier) keeps its own time.
			if t := locTime(l); t > now && (mode == touchPredict || !locIsPredicted(l)) {
				now = t
			}
			pin = pin || locIsPinned(l)
		}
		return makeLoc(now, gen, pin, b) | depth
	}
	if e.loc == 0 {
		e.loc = makeLoc(now, gen, pin, b) | depth
		sh.locs++
		sh.held[b]++
		return
	}
	if locBackend(e.loc) == b {
		e.loc = upd(e.loc)
		return
	}
	if e.more != nil {
		for j, l := range e.more.l {
			if locBackend(l) == b {
				e.more.l[j] = upd(l)
				return
			}
		}
	} else {
		e.more = &moreLocs{l: make([]uint64, 0, 2)}
	}
	e.more.l = append(e.more.l, makeLoc(now, gen, pin, b)|depth)
	sh.locs++
	sh.held[b]++
}

// prune drops the locations of e that are no longer live and returns how
// many it dropped; e.loc is 0 afterwards if none is left.
//
// A location dead only by its backend's retention, not by the TTL, is
// remembered as departed (Departed), as one the capacity bound drops is:
// the engine evicts a prompt tail first, and may still hold its head.
func (sh *shard) prune(t *Table, i int32, now int64) int {
	h := sh.ents[i].hash
	return sh.filter(i, func(l uint64) bool {
		if t.live(l, now) {
			return true
		}
		if t.retentionDead(l, now) {
			t.remember(h, locBackend(l))
		}
		return false
	})
}

// dropBackend removes b's location from entry i.
func (sh *shard) dropBackend(i int32, b int) int {
	return sh.filter(i, func(l uint64) bool { return locBackend(l) != b })
}

// filter keeps the locations of entry i for which keep is true, compacting
// them so that e.loc is the first; it returns how many were dropped.
func (sh *shard) filter(i int32, keep func(uint64) bool) int {
	e := &sh.ents[i]
	dropped := 0
	if e.loc != 0 && !keep(e.loc) {
		sh.held[locBackend(e.loc)]--
		e.loc = 0
		dropped++
	}
	if e.more != nil {
		kept := e.more.l[:0]
		for _, l := range e.more.l {
			if keep(l) {
				kept = append(kept, l)
			} else {
				sh.held[locBackend(l)]--
				dropped++
			}
		}
		e.more.l = kept
		if e.loc == 0 && len(kept) > 0 {
			e.loc = kept[0]
			e.more.l = append(kept[:0], kept[1:]...)
		}
		if len(e.more.l) == 0 {
			e.more = nil
		}
	}
	sh.locs -= dropped
	return dropped
}

func (sh *shard) hasPin(e *entry) bool { return e.anyLoc(locIsPinned) }

// newest returns the latest access among e's locations, for the vacuum's
// deadline; pinned-only entries report -1 (no deadline).
func (sh *shard) newest(e *entry) int64 {
	n := int64(-1)
	see := func(l uint64) {
		if l != 0 && !locIsPinned(l) && locTime(l) > n {
			n = locTime(l)
		}
	}
	see(e.loc)
	if e.more != nil {
		for _, l := range e.more.l {
			see(l)
		}
	}
	return n
}
