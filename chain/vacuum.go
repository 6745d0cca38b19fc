package chain

import (
	"context"
	"time"
)

// vacuumBudget bounds the blocks one shard gives up per wake, so a vacuum
// pass never holds a shard lock for long.
const vacuumBudget = 1024

// Vacuum reclaims expired locations until ctx ends. It is deadline-driven:
// each shard's LRU tail is its oldest block, so the earliest deadline the
// table knows is the minimum over shard tails of last access + TTL, and the
// vacuum sleeps until then (or at most one TTL, since anything touched
// while it sleeps expires after it wakes).
func (t *Table) Vacuum(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		next := t.VacuumOnce()
		t.vacuumNext.Store(next)
		wait := time.Duration(next-t.Now()) * time.Millisecond
		if wait < time.Millisecond {
			wait = time.Millisecond
		}
		timer.Reset(wait)
	}
}

// VacuumOnce removes up to vacuumBudget expired blocks per shard and returns
// the table time of the next deadline.
func (t *Table) VacuumOnce() int64 {
	t.vacuumRuns.Add(1)
	now := t.Now()
	next := now + t.ttl.Load()
	var expired uint64
	for si := range t.shards {
		sh := &t.shards[si]
		sh.mu.Lock()
		removed, skipped := 0, 0
		for sh.tail >= 0 {
			if removed == vacuumBudget {
				next = now // more to do: come back at once
				break
			}
			i := sh.tail
			e := &sh.ents[i]
			if sh.hasPin(e) {
				// Pinned blocks never expire; rotate them out of the way,
				// once each at most.
				if skipped++; skipped > sh.count {
					break
				}
				sh.moveToFront(i)
				continue
			}
			newest := sh.newest(e)
			if d := newest + t.ttl.Load(); d > now {
				// Live by time; its deadline bounds the next wake.
				if sh.prune(t, i, now); e.loc != 0 {
					if d < next {
						next = d
					}
					break
				}
			}
			sh.prune(t, i, now)
			expired++
			removed++
			sh.remove(i)
		}
		sh.mu.Unlock()
	}
	t.evictExpired.Add(expired)
	return next
}
