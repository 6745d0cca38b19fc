package chain

// ResetBefore drops backend b's locations last accessed before at (table
// time), pinned or not, and returns how many it dropped. It is how a reset
// learned from another replica is applied: unlike Reset it bumps no
// generation, so locations learned after the reset (here or by a peer)
// survive the reset message arriving late, and a second report of the same
// reset finds nothing left to drop.
func (t *Table) ResetBefore(b int, at int64) int {
	stale := func(l uint64) bool { return locBackend(l) == b && locTime(l) < at }
	keep := func(l uint64) bool { return !stale(l) }
	dropped := 0
	t.removing()
	defer t.removing()
	for si := range t.shards {
		sh := &t.shards[si]
		sh.mu.Lock()
		for i := sh.head; i >= 0; {
			next := sh.ents[i].next
			dropped += sh.filter(i, keep)
			if sh.ents[i].loc == 0 {
				sh.remove(i)
			}
			i = next
		}
		sh.mu.Unlock()
	}
	t.evictReset.Add(uint64(dropped))
	return dropped
}
