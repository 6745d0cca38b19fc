package chain

// LastAccess returns when backend b last touched block h (table ms), if b
// holds a live location for it: how long ago a conversation's previous
// turn was answered, when h is the last block of its known prefix.
func (t *Table) LastAccess(h uint64, b int, now int64) (int64, bool) {
	sh := t.shardOf(h)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	i, ok := sh.find(h)
	if !ok {
		return 0, false
	}
	e := &sh.ents[i]
	if e.loc != 0 && locBackend(e.loc) == b && t.live(e.loc, now) {
		return locTime(e.loc), true
	}
	if e.more != nil {
		for _, l := range e.more.l {
			if locBackend(l) == b && t.live(l, now) {
				return locTime(l), true
			}
		}
	}
	return 0, false
}
