package cluster

import "sync"

// dedup remembers, per (block, backend), the newest time the cluster was
// told about it, so a refresh is published at most once per refresh
// interval. It is a direct-mapped cache: a collision only costs a message
// that was not strictly needed, and its size is fixed.
type dedup struct {
	mu    sync.Mutex
	slots []dedupSlot
	mask  uint64
}

type dedupSlot struct {
	key uint64
	at  int64 // wall ms
}

func newDedup(entries int) *dedup {
	n := 1
	for n < entries {
		n <<= 1
	}
	return &dedup{slots: make([]dedupSlot, n), mask: uint64(n - 1)}
}

func dedupKey(h, backendKey uint64) uint64 {
	k := h ^ (backendKey * 0x9e3779b97f4a7c15)
	if k == 0 {
		k = 1 // 0 marks an empty slot
	}
	return k
}

// filter appends to dst the hashes of src that the cluster has not heard
// of for backend since at−refresh (or before floor, the backend's last
// reset), and records them as told at at.
func (d *dedup) filter(dst, src []uint64, backendKey uint64, at, refresh, floor int64) []uint64 {
	d.mu.Lock()
	for _, h := range src {
		k := dedupKey(h, backendKey)
		s := &d.slots[(k^k>>29)&d.mask]
		if s.key == k && s.at >= floor && at-s.at < refresh {
			continue
		}
		s.key, s.at = k, at
		dst = append(dst, h)
	}
	d.mu.Unlock()
	return dst
}

// heard records that a peer told the cluster about hashes at at, so this
// replica need not repeat it within the refresh interval.
func (d *dedup) heard(hashes []uint64, backendKey uint64, at int64) {
	d.mu.Lock()
	for _, h := range hashes {
		k := dedupKey(h, backendKey)
		s := &d.slots[(k^k>>29)&d.mask]
		if s.key != k || s.at < at {
			s.key, s.at = k, at
		}
	}
	d.mu.Unlock()
}
