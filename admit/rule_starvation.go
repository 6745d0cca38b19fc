package admit

// The starvation rule: classes are served in strict priority, except that
// a class with waiters passed over StarvationLimit (K) grants to higher
// classes in a row is served next, so a lower class still gets at least
// one grant in K+1 under sustained higher-priority load.

// starved reports whether a class with n waiters, passed over passed
// times since it was last served, is served next under limit k.
func starved(passed, k, n int) bool { return n > 0 && passed >= k }

// served books a grant to class g: g's count restarts, and each lower
// class with waiters was passed over once more.
func (a *Admitter) served(g Class) {
	a.passed[g] = 0
	for l := g + 1; l < NumClasses; l++ {
		if a.q[l].n > 0 {
			a.passed[l]++
		}
	}
}
