package admit

// The lower_class rule: a newcomer to a full queue takes the place of a
// waiter of a lower class, the youngest of that class's tenant with the
// most waiters, from the lowest class below its own that holds more than
// its reserve of places (QueueSize/(StarvationLimit+1)): the starvation
// rule needs waiters in every class to serve it.

// lowerClassVictim returns the class a newcomer of class c takes a place
// from, given each class's waiters (lens), the queue size and the
// starvation limit k; false: none.
func lowerClassVictim(c Class, lens [NumClasses]int, size, k int) (Class, bool) {
	for l := Class(NumClasses - 1); l > c; l-- {
		if lens[l] > size/(k+1) {
			return l, true
		}
	}
	return c, false
}
