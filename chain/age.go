package chain

// LastAccess returns when backend b last touched block h (table ms), if b
// holds a live location for it: how long ago a conversation's previous
// turn was answered, when h is the last block of its known prefix.
func (t *Table) LastAccess(h uint64, b int, now int64) (int64, bool) {
	l, ok := t.LocationOf(h, b, now)
	return l.Last, ok
}

// LocationOf returns backend b's live location of block h, if any.
func (t *Table) LocationOf(h uint64, b int, now int64) (Location, bool) {
	sh := t.shardOf(h)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	i, ok := sh.find(h)
	if !ok {
		return Location{}, false
	}
	e := &sh.ents[i]
	var found uint64
	e.anyLoc(func(l uint64) bool {
		if locBackend(l) == b && t.live(l, now) {
			found = l
			return true
		}
		return false
	})
	if found == 0 {
		return Location{}, false
	}
	return Location{b, locTime(found), locIsPinned(found), locIsPredicted(found)}, true
}
