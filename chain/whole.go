package chain

import "sync/atomic"

// A chain that a backend's answer confirmed whole leaves a record: which
// backend, its generation, when, and the table's removal count then. Every
// block of the chain then holds that backend's confirmed location, dated
// then or later (a touch never moves a time back, and a prediction never
// replaces a live confirmed location), until one of three things happens:
// the location dies by the clock (the record's own time tells when, by
// the same rule), the backend is reset (its generation moves), or
// something removes live locations: a capacity eviction, Forget, a reset
// learned from a peer (each counts a removal first). While the record
// holds, an agent's next request on a history of thousands of blocks
// needs no walk to know its backend holds all of it: prediction has
// nothing to do, and the longest held prefix is the whole chain.
//
// Expiry needs no count: a location that died by the clock and was
// forgotten was, being dated at least the record's time, dead for the
// record too.

// wholeSlots: the agents of a busy fleet each have a chain in flight; a
// slot is 64 bytes.
const wholeSlots = 1024

// wholeSlot is a seqlock like prefixSlot: readers never write nor wait.
type wholeSlot struct {
	seq   atomic.Uint64
	last  atomic.Uint64
	n     atomic.Int64
	b     atomic.Int64
	gen   atomic.Uint32
	at    atomic.Int64
	epoch atomic.Uint64
	_     [8]byte
}

// removing counts a removal of live locations. It is called before they
// go, so that a record read after they went is already stale, and again
// after, where other locks are taken meanwhile (Forget, the resets, the
// capacity bound): a touch that began between the two, and wrote a block
// before the removal reached it, would otherwise record a removal count
// that still stands. (The table's own eviction removes under the lock of
// the shard it counts in, so a touch cannot slip between.)
func (t *Table) removing() { t.removals.Add(1) }

// recordWhole notes that b's answer confirmed every block of chain at at,
// with the removal count read before the touch began.
func (t *Table) recordWhole(chain []uint64, b int, gen uint32, at int64, epoch uint64) {
	last := chain[len(chain)-1]
	sl := &t.wholes[(last>>20)%wholeSlots]
	seq := sl.seq.Load()
	if seq&1 != 0 || !sl.seq.CompareAndSwap(seq, seq+1) {
		return // another writer is at it
	}
	sl.last.Store(last)
	sl.n.Store(int64(len(chain)))
	sl.b.Store(int64(b))
	sl.gen.Store(gen)
	sl.at.Store(at)
	sl.epoch.Store(epoch)
	sl.seq.Store(seq + 2)
}

// wholeHolder returns the backend known to hold a live confirmed location
// of every block of chain at now, if a record says so.
func (t *Table) wholeHolder(chain []uint64, now int64) (int, bool) {
	if len(chain) == 0 || t.noWhole {
		return 0, false
	}
	last := chain[len(chain)-1]
	sl := &t.wholes[(last>>20)%wholeSlots]
	seq := sl.seq.Load()
	if seq&1 != 0 || sl.last.Load() != last || sl.n.Load() != int64(len(chain)) {
		return 0, false
	}
	b, gen, at, epoch := int(sl.b.Load()), sl.gen.Load(), sl.at.Load(), sl.epoch.Load()
	if sl.seq.Load() != seq || epoch != t.removals.Load() || gen != t.gens[b].Load() {
		return 0, false
	}
	return b, t.live(makeLoc(at, gen, false, b), now)
}

// wholePrefix returns the length of the longest proper prefix of chain
// that a record says b's answer confirmed whole, on generation gen, with
// nothing removed since epoch, and the record's time; 0 if there is none.
// Its blocks all hold b's live confirmed location dated then or later, so:
//   - a prediction of chain has nothing to do there (a prediction never
//     touches a live confirmed location); any live record serves;
//   - a confirmation need not write them again if the record is within
//     the touch slack of now: that is the slack's rule (a time may be up
//     to the slack early) applied to a prefix instead of the whole chain.
//
// It looks from the end: an agent's next turn follows its last one, whose
// record is near it.
func (t *Table) wholePrefix(chain []uint64, b int, gen uint32, now int64, epoch uint64, mode touchMode) (int, int64) {
	if t.noWhole || (mode == touchConfirm && t.slack == 0) || mode == touchPin {
		return 0, 0
	}
	for k := len(chain) - 1; k > 0; k-- {
		h := chain[k-1]
		sl := &t.wholes[(h>>20)%wholeSlots]
		seq := sl.seq.Load()
		if seq&1 != 0 || sl.last.Load() != h || sl.n.Load() != int64(k) {
			continue
		}
		rb, rgen, at, rep := int(sl.b.Load()), sl.gen.Load(), sl.at.Load(), sl.epoch.Load()
		if sl.seq.Load() != seq || rb != b || rgen != gen || rep != epoch || at > now {
			return 0, 0 // the latest record on this chain does not serve
		}
		if mode == touchConfirm && now-at > t.slack {
			return 0, 0
		}
		if mode == touchPredict && !t.live(makeLoc(at, gen, false, b), now) {
			return 0, 0
		}
		return k, at
	}
	return 0, 0
}
