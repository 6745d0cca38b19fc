package admit

// list is an intrusive doubly linked list of *T: the links live in the
// elements, so queueing a waiter allocates nothing and removing one from
// the middle (a client that left, a grant out of arrival order) is one
// step. An element may be on several lists at once, one pair of links
// each; L names which pair this list threads through. Every queue of the
// admitter is one: a class's waiters in arrival order, a tenant's FIFO,
// the holder-bound waiters by the end of their holder wait, a class's
// tenants with waiters, and the recycled tenant FIFOs.
type list[T any, L linker[T]] struct {
	head, tail *T
	n          int
}

// linker selects one pair of links within an element.
type linker[T any] interface {
	links(x *T) (prev, next **T)
}

func (l *list[T, L]) links(x *T) (prev, next **T) {
	var k L
	return k.links(x)
}

// pushBack appends x, which is on no list of this kind.
func (l *list[T, L]) pushBack(x *T) { l.insertAfter(l.tail, x) }

// pushFront prepends x, which is on no list of this kind.
func (l *list[T, L]) pushFront(x *T) { l.insertAfter(nil, x) }

// insertAfter places x after p (nil: at the front).
func (l *list[T, L]) insertAfter(p, x *T) {
	xp, xn := l.links(x)
	*xp = p
	if p != nil {
		_, pn := l.links(p)
		*xn, *pn = *pn, x
	} else {
		*xn, l.head = l.head, x
	}
	if *xn != nil {
		np, _ := l.links(*xn)
		*np = x
	} else {
		l.tail = x
	}
	l.n++
}

// remove takes x, which is on this list, off it and clears its links.
func (l *list[T, L]) remove(x *T) {
	xp, xn := l.links(x)
	if *xp != nil {
		_, pn := l.links(*xp)
		*pn = *xn
	} else {
		l.head = *xn
	}
	if *xn != nil {
		np, _ := l.links(*xn)
		*np = *xp
	} else {
		l.tail = *xp
	}
	*xp, *xn = nil, nil
	l.n--
}

// popFront removes and returns the first element, or nil.
func (l *list[T, L]) popFront() *T {
	x := l.head
	if x != nil {
		l.remove(x)
	}
	return x
}

// The lists a ticket or a tenant's FIFO is on.
type (
	byClass  struct{} // Ticket: its class's waiters, in arrival order
	byTenant struct{} // Ticket: its tenant's FIFO within the class
	byHold   struct{} // Ticket: the holder-bound waiters, by end of holder wait
	byFlow   struct{} // flow: a class's tenants with waiters, or the free FIFOs
)

func (byClass) links(t *Ticket) (prev, next **Ticket)  { return &t.cprev, &t.cnext }
func (byTenant) links(t *Ticket) (prev, next **Ticket) { return &t.fprev, &t.fnext }
func (byHold) links(t *Ticket) (prev, next **Ticket)   { return &t.pprev, &t.pnext }
func (byFlow) links(f *flow) (prev, next **flow)       { return &f.prev, &f.next }
