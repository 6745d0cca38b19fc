package chain

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// MaxBackends bounds backend indexes so a set of backends fits in a Set and
// a location in one word.
const MaxBackends = 256

// Set is a set of backend indexes.
type Set [MaxBackends / 64]uint64

func (s *Set) Add(b int)     { s[b>>6] |= 1 << (b & 63) }
func (s *Set) Remove(b int)  { s[b>>6] &^= 1 << (b & 63) }
func (s Set) with(b int) Set { s.Add(b); return s }
func (s Set) Has(b int) bool { return s[b>>6]&(1<<(b&63)) != 0 }
func (s Set) Empty() bool    { return s[0]|s[1]|s[2]|s[3] == 0 }
func (s *Set) Or(o *Set)     { s[0] |= o[0]; s[1] |= o[1]; s[2] |= o[2]; s[3] |= o[3] }
func (s *Set) And(o *Set)    { s[0] &= o[0]; s[1] &= o[1]; s[2] &= o[2]; s[3] &= o[3] }
func (s Set) Len() int {
	return bits.OnesCount64(s[0]) + bits.OnesCount64(s[1]) + bits.OnesCount64(s[2]) + bits.OnesCount64(s[3])
}
func (s *Set) Each(f func(b int)) { eachBit(s, f) }
func eachBit(s *Set, f func(b int)) {
	for w, word := range s {
		for word != 0 {
			i := bits.TrailingZeros64(word)
			f(w<<6 | i)
			word &= word - 1
		}
	}
}

// A location is packed in one word so that a block with one holder costs a
// single uint64: last access in ms since the table's epoch (40 bits, 34
// years), the backend's generation modulo 256, flags, and the backend index.
const (
	locBackendMask = 0xff
	locPinned      = 1 << 8
	locDepthShift  = 9 // 4 bits: the block's depth in its chain, log2 (capacity.go)
	// locPredicted: recorded at routing time (Predict) and not yet
	// confirmed by an answer; it lives min(predict TTL, TTL).
	locPredicted = 1 << 13
	locGenShift  = 16
	locTimeShift = 24
)

// depthOf is the depth bucket of a chain's i-th block: bits.Len(i), at
// most 15. A block hash names its whole prefix, so a block's depth never
// changes.
func depthOf(i int) uint64 { return uint64(min(bits.Len(uint(i)), 15)) }

func locDepth(l uint64) uint64 { return l >> locDepthShift & 0xf }

func makeLoc(ms int64, gen uint32, pinned bool, b int) uint64 {
	l := uint64(ms)<<locTimeShift | uint64(gen&0xff)<<locGenShift | uint64(b)
	if pinned {
		l |= locPinned
	}
	return l
}

func locBackend(l uint64) int      { return int(l & locBackendMask) }
func locTime(l uint64) int64       { return int64(l >> locTimeShift) }
func locGen(l uint64) uint32       { return uint32(l>>locGenShift) & 0xff }
func locIsPinned(l uint64) bool    { return l&locPinned != 0 }
func locIsPredicted(l uint64) bool { return l&locPredicted != 0 }

// How a touch records a location.
type touchMode uint8

const (
	touchConfirm touchMode = iota // an answer (or a peer's) confirmed it
	touchPredict                  // routing predicted it (Predict)
	touchPin                      // pinned (Pin)
)

// Eviction reasons, as counted in Stats and the kvca_table_evictions_total
// metric.
const (
	ReasonExpired  = "expired"  // idle past the TTL (lookup, vacuum, or full table)
	ReasonCapacity = "capacity" // least recently used, removed to respect max blocks
	ReasonReset    = "reset"    // its backend was reset or cleared
)

// Config sets up a Table.
type Config struct {
	TTL       time.Duration
	MaxBlocks int
	// Shards is rounded up to a power of two; 0 picks a default that keeps
	// lock contention low on many cores.
	Shards int
	// Now is the clock; nil means time.Now. Tests move it by hand.
	Now func() time.Time
	// TouchSlack lets a chain that a backend touched at most this long ago
	// skip its next touch by that backend: its blocks keep the earlier
	// time, so such a location may expire up to TouchSlack before it has
	// been idle for TTL. A hot 128 KB prompt is 500 blocks; rewriting all of
	// them every millisecond, under their shards' write locks, cost kvca
	// serve about 7% of its CPU. 0: exact to the millisecond.
	TouchSlack time.Duration
}

// Table is the global block map: block hash → backends holding that prefix,
// each with its last successful access. It is lock-striped; no operation
// takes a global lock.
type Table struct {
	shards []shard
	mask   uint64
	ttl    atomic.Int64 // ms; SetTTL changes it live
	// predTTL bounds a predicted location's life (ms; SetPredictTTL); it
	// never exceeds ttl, which live applies as well.
	predTTL atomic.Int64
	// retention[b] is how long backend b's engine is seen to keep a block
	// after its last use (ms; SetRetention), 0: as long as the TTL.
	retention [MaxBackends]atomic.Int64
	slack     int64 // ms, Config.TouchSlack
	perShard  int
	maxBlocks int
	epoch     time.Time
	now       func() time.Time
	gens      [MaxBackends]atomic.Uint32

	// recent holds, per slot, the chain (by its last block) and backend
	// last touched and the millisecond of that touch: the requests of one
	// hot prompt all learn the same chain, and after the first of them in a
	// millisecond (or within slack) the others would only rewrite what is
	// there.
	recent [recentSlots]atomic.Uint64
	// wholes records chains confirmed whole (whole.go); removals counts
	// removals of live locations, which void those records.
	wholes   [wholeSlots]wholeSlot
	removals atomic.Uint64
	noWhole  bool // tests: never trust a record, always walk
	// groups and walks recycle touch's and walk's room for long chains.
	groups sync.Pool
	walks  sync.Pool
	// prefixes keeps each millisecond's Prefix walks (prefix.go).
	prefixes [prefixSlots]prefixSlot
	matches  [prefixSlots]matchSlot

	evictExpired  atomic.Uint64
	evictCapacity atomic.Uint64
	evictReset    atomic.Uint64
	// capBlocks bounds each backend's locations (capacity.go); 0: none.
	capBlocks       [MaxBackends]atomic.Int64
	evictBackendCap atomic.Uint64
	// departed remembers, for blocks whose location the capacity bound
	// dropped, the backend that held them (capacity.go).
	departed   [departedSlots]atomic.Uint64
	vacuumRuns atomic.Uint64
	vacuumNext atomic.Int64 // ms since epoch of the vacuum's next wake
}

// NewTable returns an empty table. TTL and MaxBlocks must be positive.
func NewTable(cfg Config) *Table {
	n := cfg.Shards
	if n <= 0 {
		n = 256
	}
	// Each shard keeps its own LRU order and bound; shards of at least
	// ~1024 blocks keep the per-shard LRU close to a global one, and small
	// tables get a single exact one.
	if m := cfg.MaxBlocks / 1024; n > m {
		n = max(m, 1)
	}
	n = 1 << (bits.Len(uint(n)) - 1)
	for (cfg.MaxBlocks+n-1)/n > maxShardEntries {
		n *= 2 // an index slot names at most maxShardEntries entries
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	t := &Table{
		shards:    make([]shard, n),
		mask:      uint64(n - 1),
		slack:     max(cfg.TouchSlack.Milliseconds(), 0),
		perShard:  (cfg.MaxBlocks + n - 1) / n,
		maxBlocks: cfg.MaxBlocks,
		epoch:     now(),
		now:       now,
	}
	t.groups.New = func() any { return new(shardGroups) }
	t.walks.New = func() any { return new(walkScratch) }
	t.SetTTL(cfg.TTL)
	t.predTTL.Store(t.ttl.Load())
	for i := range t.shards {
		t.shards[i].init()
	}
	for i := range t.gens {
		t.gens[i].Store(1)
	}
	return t
}

// Now returns the table clock in ms since its epoch; callers pass it to
// Lookup and Touch so one request uses one instant.
func (t *Table) Now() int64 {
	ms := t.now().Sub(t.epoch).Milliseconds()
	if ms < 0 {
		ms = 0
	}
	return ms
}

// TimeOf converts a table instant back to wall-clock time.
func (t *Table) TimeOf(ms int64) time.Time { return t.epoch.Add(time.Duration(ms) * time.Millisecond) }

// At converts wall-clock time to table time (for locations learned by
// other replicas, whose table epochs differ).
func (t *Table) At(w time.Time) int64 {
	ms := w.Sub(t.epoch).Milliseconds()
	if ms < 0 {
		ms = 0
	}
	return ms
}

// TTL returns the location TTL.
func (t *Table) TTL() time.Duration { return time.Duration(t.ttl.Load()) * time.Millisecond }

// SetTTL changes how long a location lives after its last refresh, for
// every location at once (expiry is computed from the refresh time).
func (t *Table) SetTTL(d time.Duration) { t.ttl.Store(max(d.Milliseconds(), 1)) }

// SetPredictTTL sets how long a predicted location lives unless an answer
// confirms it; the TTL applies too, so it lives min(d, TTL). d <= 0: as
// long as the TTL.
func (t *Table) SetPredictTTL(d time.Duration) {
	if d <= 0 {
		t.predTTL.Store(1 << 62)
		return
	}
	t.predTTL.Store(max(d.Milliseconds(), 1))
}

// PredictTTL returns the life of a predicted location: min(predict TTL, TTL).
func (t *Table) PredictTTL() time.Duration {
	return time.Duration(min(t.predTTL.Load(), t.ttl.Load())) * time.Millisecond
}

// SetRetention bounds how long backend b's unpinned locations live after
// their last access to d, below the TTL: what its engine was seen to keep
// (an engine under memory pressure evicts well before any TTL). d <= 0
// removes the bound. It applies at once to every location of b.
func (t *Table) SetRetention(b int, d time.Duration) {
	t.retention[b].Store(max(d.Milliseconds(), 0))
}

// Retention returns b's bound set by SetRetention; 0: none.
func (t *Table) Retention(b int) time.Duration {
	return time.Duration(t.retention[b].Load()) * time.Millisecond
}

// Capacity returns the maximum number of blocks (rounded up to a whole
// number per shard).
func (t *Table) Capacity() int { return t.perShard * len(t.shards) }

// Generation returns a backend's generation, starting at 1.
func (t *Table) Generation(b int) uint32 { return t.gens[b].Load() }

// StartGeneration raises backend b's generation to g, so that generations
// kept across a restart by the caller continue rather than start again at
// 1. Call it before b's locations are learned: it drops none of them. It
// never lowers a generation, skips values that are 0 mod 256 (as Reset
// does) and returns the generation in force.
func (t *Table) StartGeneration(b int, g uint32) uint32 {
	if g&0xff == 0 {
		g++
	}
	for {
		cur := t.gens[b].Load()
		if g <= cur {
			return cur
		}
		if t.gens[b].CompareAndSwap(cur, g) {
			return g
		}
	}
}

func (t *Table) shardOf(h uint64) *shard {
	// The low bits pick the shard; the map hashes the full key itself.
	return &t.shards[h&t.mask]
}

// live reports whether a location still counts at now.
func (t *Table) live(l uint64, now int64) bool {
	b := locBackend(l)
	if locGen(l) != t.gens[b].Load()&0xff {
		return false
	}
	if locIsPinned(l) {
		return true
	}
	at := locTime(l)
	ttl := t.ttl.Load()
	if r := t.retention[b].Load(); r > 0 {
		ttl = min(ttl, r)
	}
	if locIsPredicted(l) {
		ttl = min(ttl, t.predTTL.Load())
	}
	return at+ttl > now
}

// retentionDead reports whether l, not live at now, would be by the TTL:
// its backend's retention ended it.
func (t *Table) retentionDead(l uint64, now int64) bool {
	b := locBackend(l)
	r := t.retention[b].Load()
	return r > 0 && !locIsPinned(l) && !locIsPredicted(l) && locGen(l) == t.gens[b].Load()&0xff &&
		locTime(l)+t.ttl.Load() > now
}

// Lookup returns the backends with a live location for block h. Expired
// and stale locations met on the way are forgotten on the spot.
func (t *Table) Lookup(h uint64, now int64) (s Set) {
	sh := t.shardOf(h)
	// Shared first: only an entry with something to forget needs the
	// exclusive lock.
	sh.mu.RLock()
	s, clean := t.peek(sh, h, now)
	sh.mu.RUnlock()
	if clean {
		return s
	}
	s = Set{}
	sh.mu.Lock()
	if i, ok := sh.find(h); ok {
		e := &sh.ents[i]
		if dropped := sh.prune(t, i, now); dropped > 0 {
			t.evictExpired.Add(uint64(dropped))
		}
		if e.loc != 0 {
			s.Add(locBackend(e.loc))
			if e.more != nil {
				for _, l := range e.more.l {
					s.Add(locBackend(l))
				}
			}
		} else {
			sh.remove(i)
		}
	}
	sh.mu.Unlock()
	return s
}

// peek reads block h's live locations under sh's shared lock; clean is
// false (and s not to be used) when it has something to forget, which
// Lookup does under the exclusive lock.
func (t *Table) peek(sh *shard, h uint64, now int64) (s Set, clean bool) {
	i, ok := sh.find(h)
	if !ok {
		return s, true
	}
	e := &sh.ents[i]
	if e.loc == 0 || !t.live(e.loc, now) {
		return s, false
	}
	s.Add(locBackend(e.loc))
	if e.more != nil {
		for _, l := range e.more.l {
			if !t.live(l, now) {
				return s, false
			}
			s.Add(locBackend(l))
		}
	}
	return s, true
}

// Touch records that backend b holds every block of chain as of now: an
// answer confirmed it.
func (t *Table) Touch(chain []uint64, b int, now int64) {
	t.touch(chain, b, now, touchConfirm)
}

// TouchAt applies a location learned elsewhere (another replica) with its
// original time; it never moves a newer local time backwards.
func (t *Table) TouchAt(chain []uint64, b int, at int64) {
	t.touch(chain, b, at, touchConfirm)
}

// Predict records that b is expected to hold chain once it answers (it was
// just routed there): a burst of requests sharing a new prefix can follow
// the first before any answer comes. A predicted location lives
// min(predict TTL, TTL) unless Touch confirms it; it never refreshes nor
// replaces a live confirmed location, so a prediction cannot keep an
// association alive past the TTL of its last confirmed access.
func (t *Table) Predict(chain []uint64, b int, now int64) {
	if h, ok := t.wholeHolder(chain, now); ok && h == b {
		return // every block holds b's live confirmed location
	}
	t.touch(chain, b, now, touchPredict)
}

// Pin marks b's locations of chain as exempt from expiry, creating them if
// needed; Unpin clears the mark, after which the locations age from their
// last access as usual.
func (t *Table) Pin(chain []uint64, b int, now int64) { t.touch(chain, b, now, touchPin) }

func (t *Table) touch(chain []uint64, b int, now int64, mode touchMode) {
	gen := t.gens[b].Load()
	var slot *atomic.Uint64
	var mark uint64
	pin := mode == touchPin
	if !pin && len(chain) > 0 {
		slot, mark = t.recentSlot(chain[len(chain)-1], b, gen, now, mode)
		if v := slot.Load(); v>>32 == mark>>32 {
			// The same chain and backend: skip if it was touched at most
			// slack ago, or later than now: a touch dated earlier than the
			// one recorded (a request that started before another of the
			// same prompt but was answered after it, a peer's) would find
			// every block already holding b at a later time, and walking
			// a long chain for nothing costs a lock per block.
			// (A record more than the TTL in the future is a wrapped
			// clock, not a newer touch.)
			age := int64(int32(uint32(mark) - uint32(v)))
			if (age >= 0 && age <= t.slack) || (age < 0 && -age <= t.ttl.Load()) {
				return
			}
		}
	}
	epoch := t.removals.Load()
	// An agent's next turn resends the chain its last answer confirmed:
	// a prediction leaves those blocks alone, and a confirmation within
	// the slack need not write them again; only the new ones are written.
	// The record then dates the whole chain at the older time, the
	// earliest any of its blocks holds.
	whole, recAt := chain, now
	if k, at := t.wholePrefix(chain, b, gen, now, epoch, mode); k > 0 {
		chain = chain[k:]
		if mode == touchConfirm {
			recAt = at
		}
	}
	// A chain of at least two blocks per shard is taken a shard at a
	// time, in chain order within each shard (each shard keeps its own LRU
	// order): one lock per shard rather than one per block, which was half
	// of a touch's cost at 1,500 blocks.
	checking := !pin
	if len(t.shards) > 1 && len(chain) >= 2*len(t.shards) {
		g := t.groups.Get().(*shardGroups)
		g.sort(chain, t.mask)
		for s := range t.shards {
			if ps := g.order[g.start[s]:g.start[s+1]]; len(ps) > 0 {
				checking = t.touchShard(&t.shards[s], chain, ps, b, gen, now, mode, checking)
			}
		}
		t.groups.Put(g)
	} else {
		var one [1]int32
		for pos, h := range chain {
			one[0] = int32(pos)
			checking = t.touchShard(t.shardOf(h), chain, one[:], b, gen, now, mode, checking)
		}
	}
	if mode == touchConfirm && len(whole) > 0 {
		t.recordWhole(whole, b, gen, recAt, epoch)
	}
	if slot != nil {
		// Dated as the record is: a skip within the slack of a touch
		// that itself kept older blocks would add its slack to theirs.
		slot.Store(mark&^0xffffffff | uint64(uint32(recAt)))
	}
}

// touchShard touches the blocks of chain at positions ps, all in shard sh.
// While checking, it first looks under the shared lock whether they need
// anything: a prompt that many requests share is touched by all of them
// within the same millisecond, and a prediction leaves live confirmed
// locations alone. A confirmation that finds something to write ends the
// checking: the rest of the chain was learned with it and most likely
// needs writing too. It returns whether to go on checking.
func (t *Table) touchShard(sh *shard, chain []uint64, ps []int32, b int, gen uint32, now int64, mode touchMode, checking bool) bool {
	if checking {
		settled := true
		sh.mu.RLock()
		for _, p := range ps {
			if !t.settled(sh, chain[p], b, gen, now, mode) {
				settled = false
				break
			}
		}
		sh.mu.RUnlock()
		if settled {
			return true
		}
		checking = mode == touchPredict
	}
	sh.mu.Lock()
	for _, p := range ps {
		h := chain[p]
		i, ok := sh.find(h)
		if !ok {
			if sh.count >= t.perShard {
				t.evictTail(sh, now)
			}
			i = sh.insert(h)
		}
		e := &sh.ents[i]
		if mode == touchPredict && e.confirmed(t, b, gen, now) {
			// A live confirmed location stays as its answer left it.
			continue
		}
		sh.set(e, b, gen, now, mode, depthOf(int(p)))
		sh.moveToFront(i)
	}
	sh.mu.Unlock()
	return checking
}

// settled reports (under sh's shared lock) whether touching block h would
// change nothing: it already holds b's location of generation gen as of
// now or later, or, for a prediction, a live confirmed one.
func (t *Table) settled(sh *shard, h uint64, b int, gen uint32, now int64, mode touchMode) bool {
	i, ok := sh.find(h)
	if !ok {
		return false
	}
	e := &sh.ents[i]
	return e.current(b, gen, now, mode) || (mode == touchPredict && e.confirmed(t, b, gen, now))
}

// shardGroups orders a chain's positions by shard, in chain order within
// each: the positions of shard s are order[start[s]:start[s+1]].
type shardGroups struct {
	order []int32
	start []int32
}

func (g *shardGroups) sort(chain []uint64, mask uint64) {
	n := int(mask) + 1
	if cap(g.start) < n+1 {
		g.start = make([]int32, n+1)
	}
	g.start = g.start[:n+1]
	clear(g.start)
	if cap(g.order) < len(chain) {
		g.order = make([]int32, len(chain), 2*len(chain))
	}
	g.order = g.order[:len(chain)]
	for _, h := range chain {
		g.start[h&mask+1]++
	}
	for s := 1; s <= n; s++ {
		g.start[s] += g.start[s-1]
	}
	// start[s+1] is where shard s ends; filling each shard from its end,
	// going down the chain, leaves positions in chain order and start[s+1]
	// where shard s begins, which one shift puts at start[s].
	for p := len(chain) - 1; p >= 0; p-- {
		s := chain[p]&mask + 1
		g.start[s]--
		g.order[g.start[s]] = int32(p)
	}
	copy(g.start, g.start[1:])
	g.start[n] = int32(len(chain))
}

const recentSlots = 1024

// recentSlot returns the slot for chain (its last block h) touched by b of
// generation gen in mode, and the value that records a touch at now. A
// block hash names its whole prefix, so equal values mean the same chain
// (and a prediction never passes for a confirmation); the key's high 32
// bits (never all zero, which is an empty slot) share the word with the
// low 32 bits of now.
func (t *Table) recentSlot(h uint64, b int, gen uint32, now int64, mode touchMode) (*atomic.Uint64, uint64) {
	k := h ^ uint64(b)<<48 ^ uint64(gen&0xff)<<40 ^ uint64(mode)<<36
	k ^= k >> 29
	k *= 0xbf58476d1ce4e5b9
	k ^= k >> 32
	return &t.recent[k%recentSlots], (k|1<<32)&^0xffffffff | uint64(uint32(now))
}

// Unpin clears the pin of b's locations of chain; it returns how many were
// pinned.
func (t *Table) Unpin(chain []uint64, b int) int {
	n := 0
	for _, h := range chain {
		sh := t.shardOf(h)
		sh.mu.Lock()
		if i, ok := sh.find(h); ok {
			e := &sh.ents[i]
			if e.loc != 0 && locBackend(e.loc) == b && locIsPinned(e.loc) {
				e.loc &^= locPinned
				n++
			} else if e.more != nil {
				for j, l := range e.more.l {
					if locBackend(l) == b && locIsPinned(l) {
						e.more.l[j] &^= locPinned
						n++
					}
				}
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Location is one backend's hold on a block, for observation APIs.
type Location struct {
	Backend int
	Last    int64 // ms since epoch
	Pinned  bool
	// Predicted: recorded at routing, not yet confirmed by an answer; it
	// lives PredictTTL from Last.
	Predicted bool
}

// Locations lists the live locations of block h (for the admin and KDN
// APIs, not the hot path).
func (t *Table) Locations(h uint64, now int64, dst []Location) []Location {
	sh := t.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.find(h)
	if !ok {
		return dst
	}
	e := &sh.ents[i]
	add := func(l uint64) {
		if l != 0 && t.live(l, now) {
			dst = append(dst, Location{locBackend(l), locTime(l), locIsPinned(l), locIsPredicted(l)})
		}
	}
	add(e.loc)
	if e.more != nil {
		for _, l := range e.more.l {
			add(l)
		}
	}
	return dst
}

// evictTail makes room in a full shard: the least recently touched block
// goes, counted as expired if nothing live was left in it. Pinned blocks
// are passed over (moved to the front) a bounded number of times.
func (t *Table) evictTail(sh *shard, now int64) {
	for tries := 0; tries < 8 && sh.tail >= 0; tries++ {
		i := sh.tail
		e := &sh.ents[i]
		if sh.hasPin(e) {
			sh.moveToFront(i)
			continue
		}
		if sh.prune(t, i, now); e.loc == 0 {
			t.evictExpired.Add(1)
		} else {
			t.removing()
			t.evictCapacity.Add(1)
		}
		sh.remove(i)
		return
	}
	// Everything sampled was pinned: exceed the bound rather than drop a
	// pin; --max-pinned-blocks keeps this bounded.
}

// Forget drops backend b's locations of the blocks of chain (an operator
// cleared that prefix there), counted as reset evictions; blocks left with
// no location go. It returns how many locations it dropped.
func (t *Table) Forget(chain []uint64, b int) int {
	t.removing()
	defer t.removing()
	// Every touch record goes, not only this chain's: a longer or shorter
	// chain through the dropped blocks must not skip its next touch either.
	for i := range t.recent {
		t.recent[i].Store(0)
	}
	n := 0
	for _, h := range chain {
		sh := t.shardOf(h)
		sh.mu.Lock()
		if i, ok := sh.find(h); ok {
			n += sh.dropBackend(i, b)
			if sh.ents[i].loc == 0 {
				sh.remove(i)
			}
		}
		sh.mu.Unlock()
	}
	t.evictReset.Add(uint64(n))
	return n
}

// Reset drops every location of backend b and bumps its generation: its
// cache is presumed gone. It returns the new generation.
func (t *Table) Reset(b int) uint32 {
	t.removing()
	defer t.removing()
	g := t.gens[b].Add(1)
	if g&0xff == 0 {
		// Generation 0 mod 256 is kept distinct from never-touched memory.
		g = t.gens[b].Add(1)
	}
	var dropped uint64
	for si := range t.shards {
		sh := &t.shards[si]
		sh.mu.Lock()
		for i := sh.head; i >= 0; {
			next := sh.ents[i].next
			dropped += uint64(sh.dropBackend(i, b))
			if sh.ents[i].loc == 0 {
				sh.remove(i)
			}
			i = next
		}
		sh.mu.Unlock()
	}
	t.evictReset.Add(dropped)
	return g
}

// Stats is a consistent-enough snapshot for metrics and the admin API.
type Stats struct {
	Blocks, Locations, Capacity int
	EvictedExpired              uint64
	EvictedCapacity             uint64
	EvictedReset                uint64
	// EvictedBackendCapacity counts ReasonBackendCapacity evictions.
	EvictedBackendCapacity uint64
	VacuumRuns             uint64
	VacuumNext             time.Time
}

// Stats sums the shards.
func (t *Table) Stats() Stats {
	s := Stats{Capacity: t.Capacity()}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		s.Blocks += sh.count
		s.Locations += sh.locs
		sh.mu.Unlock()
	}
	s.EvictedExpired = t.evictExpired.Load()
	s.EvictedCapacity = t.evictCapacity.Load()
	s.EvictedReset = t.evictReset.Load()
	s.EvictedBackendCapacity = t.evictBackendCap.Load()
	s.VacuumRuns = t.vacuumRuns.Load()
	s.VacuumNext = t.TimeOf(t.vacuumNext.Load())
	return s
}
