package admit

// The flood rule: a newcomer to a full queue with no lower class to take
// a place from takes the place of the youngest waiter of its own class's
// tenant with the most waiters, if that tenant has at least two more than
// the newcomer's. So a tenant that floods the queue loses its own places
// to the others' newcomers, not theirs; a newcomer that outranks nobody
// is shed (queue_full).

// floods reports whether the biggest tenant, with biggest waiters, gives
// a place to a newcomer whose tenant has own.
func floods(biggest, own int) bool { return biggest > own+1 }
