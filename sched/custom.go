package sched

import "github.com/kvca/kvca/chain"

// PickAmong is least-loaded selection for policies defined outside this
// package (the bench's precise baseline): among cand it picks the backend
// with the smallest load (plus, when addNovel, the n − match[b] blocks it
// would compute) and reserves one active request and its novel blocks
// there, as the built-in policies do.
func (s *Scheduler) PickAmong(cand *chain.Set, n int, match *[chain.MaxBackends]int32, addNovel bool, d *Decision) bool {
	return s.reserveMin(cand, n, match, addNovel, d)
}
