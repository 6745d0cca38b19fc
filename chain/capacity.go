package chain

import (
	"context"
	"slices"
	"time"

	"github.com/kvca/kvca/internal/tick"
)

// ReasonBackendCapacity counts locations dropped because their backend's
// cache cannot hold them all: its least recently used chains, which the
// engine's own LRU has evicted by then.
const ReasonBackendCapacity = "backend_capacity"

// SetBackendCapacity bounds backend b's locations to blocks (CBR blocks);
// 0 or less removes the bound. EnforceCapacity applies it.
func (t *Table) SetBackendCapacity(b int, blocks int) {
	t.capBlocks[b].Store(int64(max(blocks, 0)))
}

// BackendCapacity returns b's bound in blocks; 0: unbounded.
func (t *Table) BackendCapacity(b int) int { return int(t.capBlocks[b].Load()) }

// Held returns how many locations backend b has in the table (live or
// not yet forgotten), the figure its capacity bounds.
func (t *Table) Held(b int) int {
	n := 0
	for si := range t.shards {
		sh := &t.shards[si]
		sh.mu.RLock()
		n += int(sh.held[b])
		sh.mu.RUnlock()
	}
	return n
}

// capacitySlack is the fraction (1/capacitySlack) of a backend's capacity
// that one enforcement frees below the bound, so that a backend filling up
// is scanned once per that much new content rather than on every check.
const capacitySlack = 32

// EnforceCapacity drops, for every backend holding more locations than its
// capacity, its least recently touched chains until it holds at most
// capacity − capacity/32, and returns how many locations it dropped.
// Oldest first, as the engine's LRU: a chain's blocks share the time of the
// touch that learned them, so whole chains go, and the one chain that goes
// only in part loses its deepest blocks first (in depth buckets of powers
// of two), as an engine frees a finished prompt's blocks tail first and so
// evicts them first. It
// takes each shard's lock twice (count, then drop) and a third time only
// when something is over: it is for a background loop, not the request
// path.
func (t *Table) EnforceCapacity() int {
	var over [MaxBackends]int
	var any bool
	var bounded [MaxBackends]bool
	for b := range t.capBlocks {
		bounded[b] = t.capBlocks[b].Load() > 0
	}
	var held [MaxBackends]int
	for si := range t.shards {
		sh := &t.shards[si]
		sh.mu.RLock()
		for b, ok := range bounded {
			if ok {
				held[b] += int(sh.held[b])
			}
		}
		sh.mu.RUnlock()
	}
	for b, ok := range bounded {
		if !ok {
			continue
		}
		c := int(t.capBlocks[b].Load())
		if held[b] > c {
			over[b] = held[b] - (c - c/capacitySlack)
			any = true
		}
	}
	if !any {
		return 0
	}

	// Collect the over-capacity backends' eviction keys, and find for each
	// the key at or below which enough of them fall.
	times := make(map[int][]int64)
	for si := range t.shards {
		sh := &t.shards[si]
		sh.mu.RLock()
		for i := range sh.ents {
			e := &sh.ents[i]
			if e.loc == 0 {
				continue
			}
			see := func(l uint64) {
				if b := locBackend(l); over[b] > 0 && !locIsPinned(l) {
					times[b] = append(times[b], evictKey(l))
				}
			}
			see(e.loc)
			if e.more != nil {
				for _, l := range e.more.l {
					see(l)
				}
			}
		}
		sh.mu.RUnlock()
	}
	var cutoff [MaxBackends]int64
	for b := range cutoff {
		cutoff[b] = -1
	}
	for b, ts := range times {
		if len(ts) == 0 {
			continue
		}
		slices.Sort(ts)
		cutoff[b] = ts[min(over[b], len(ts))-1]
	}
	keep := func(l uint64) bool {
		c := cutoff[locBackend(l)]
		return c < 0 || locIsPinned(l) || evictKey(l) > c
	}
	var block uint64 // the entry being filtered, for keepOrRemember
	keepOrRemember := func(l uint64) bool {
		if keep(l) {
			return true
		}
		t.remember(block, locBackend(l))
		return false
	}
	dropped := 0
	if slices.ContainsFunc(cutoff[:], func(c int64) bool { return c >= 0 }) {
		t.removing()
		defer t.removing()
	}
	for si := range t.shards {
		sh := &t.shards[si]
		sh.mu.Lock()
		for i := range sh.ents {
			if sh.ents[i].loc == 0 {
				continue
			}
			block = sh.ents[i].hash
			if n := sh.filter(int32(i), keepOrRemember); n > 0 {
				dropped += n
				if sh.ents[i].loc == 0 {
					sh.remove(int32(i))
				}
			}
		}
		sh.mu.Unlock()
	}
	for b := range cutoff {
		if cutoff[b] >= 0 {
			// A dropped chain's touch record must not skip its next touch.
			for i := range t.recent {
				t.recent[i].Store(0)
			}
			break
		}
	}
	t.evictBackendCap.Add(uint64(dropped))
	return dropped
}

// evictKey orders locations for EnforceCapacity: by last access, and
// among those of one access the deepest first.
func evictKey(l uint64) int64 { return locTime(l)<<4 | int64(15-locDepth(l)) }

// CapacityLoop runs EnforceCapacity every period until ctx ends. Checking
// costs one shared lock per shard, so a period well under the time a
// backend takes to fill 1/32 of its cache keeps the table close to the
// engines' contents.
func (t *Table) CapacityLoop(ctx context.Context, every time.Duration) {
	tick.Every(ctx.Done(), every, func() { t.EnforceCapacity() })
}

// departedSlots is the size of the departed-location memory: a direct
// mapped array, so that a newer departure overwrites an older one in its
// slot and the memory stays bounded whatever the churn.
const departedSlots = 1 << 16

// remember notes that backend b's location of block went for capacity.
// The slot keeps the block's high bits beside b, to tell it from the
// other blocks that map to the same slot.
func (t *Table) remember(block uint64, b int) {
	t.departed[block%departedSlots].Store(block&^0xff | uint64(b))
}

// Departed returns the backend whose location of block the capacity bound
// dropped last, if that is still remembered. A follow-up whose chain went
// that way knows only a shorter prefix, often one many backends share (a
// system prompt); the backend that held the rest of its conversation is
// where the engine may still hold part of it, and is the one to prefer
// among those that hold the prefix.
func (t *Table) Departed(block uint64) (int, bool) {
	v := t.departed[block%departedSlots].Load()
	if v == 0 || v&^0xff != block&^0xff {
		return 0, false
	}
	return int(v & 0xff), true
}
