package chain

// Withdraw drops backend b's predicted locations of the blocks of chain,
// keeping its confirmed ones: the request they were predicted for went
// elsewhere (a gateway served it at another endpoint than the one
// picked), so b never saw the prompt. Blocks left with no location go. It
// returns how many locations it dropped.
func (t *Table) Withdraw(chain []uint64, b int) int {
	if len(chain) == 0 {
		return 0
	}
	t.removing()
	defer t.removing()
	slot, _ := t.recentSlot(chain[len(chain)-1], b, t.gens[b].Load(), 0, touchPredict)
	slot.Store(0) // a later prediction of the chain there is no repeat
	n := 0
	for _, h := range chain {
		sh := t.shardOf(h)
		sh.mu.Lock()
		if i, ok := sh.find(h); ok {
			n += sh.filter(i, func(l uint64) bool { return locBackend(l) != b || !locIsPredicted(l) })
			if sh.ents[i].loc == 0 {
				sh.remove(i)
			}
		}
		sh.mu.Unlock()
	}
	return n
}
