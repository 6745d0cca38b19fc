package admit

import (
	"slices"
	"testing"
)

// keys walks l from the front and from the back, failing on links that
// disagree, and returns the elements' orders.
func keys(t *testing.T, l *list[Ticket, byHold]) []uint64 {
	t.Helper()
	var fwd, back []uint64
	for x := l.head; x != nil; x = x.pnext {
		fwd = append(fwd, x.order)
	}
	for x := l.tail; x != nil; x = x.pprev {
		back = append(back, x.order)
	}
	slices.Reverse(back)
	if !slices.Equal(fwd, back) || len(fwd) != l.n {
		t.Fatalf("links disagree: forward %v, backward %v, n %d", fwd, back, l.n)
	}
	return fwd
}

func TestList(t *testing.T) {
	var l list[Ticket, byHold]
	tk := make([]*Ticket, 6)
	for i := range tk {
		tk[i] = &Ticket{order: uint64(i)}
	}
	for _, c := range []struct {
		name string
		op   func()
		want []uint64
	}{
		{"empty", func() {}, nil},
		{"push back", func() { l.pushBack(tk[1]); l.pushBack(tk[2]) }, []uint64{1, 2}},
		{"push front", func() { l.pushFront(tk[0]) }, []uint64{0, 1, 2}},
		{"insert in the middle", func() { l.insertAfter(tk[1], tk[3]) }, []uint64{0, 1, 3, 2}},
		{"insert after the tail", func() { l.insertAfter(tk[2], tk[4]) }, []uint64{0, 1, 3, 2, 4}},
		{"remove the middle", func() { l.remove(tk[3]) }, []uint64{0, 1, 2, 4}},
		{"remove the tail", func() { l.remove(tk[4]) }, []uint64{0, 1, 2}},
		{"pop the front", func() {
			if x := l.popFront(); x != tk[0] {
				t.Fatalf("popped %v", x)
			}
		}, []uint64{1, 2}},
		{"remove all", func() { l.remove(tk[1]); l.remove(tk[2]) }, nil},
		{"pop empty", func() {
			if l.popFront() != nil {
				t.Fatal("popped from an empty list")
			}
		}, nil},
	} {
		c.op()
		if got := keys(t, &l); !slices.Equal(got, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if l.head != nil || l.tail != nil {
		t.Fatal("ends left set")
	}
	for _, x := range tk {
		if x.pprev != nil || x.pnext != nil {
			t.Fatalf("ticket %d keeps its links", x.order)
		}
	}
}

// One ticket on three lists at once: each list threads its own links.
func TestListsAreIndependent(t *testing.T) {
	var c list[Ticket, byClass]
	var f list[Ticket, byTenant]
	var h list[Ticket, byHold]
	a, b := &Ticket{order: 1}, &Ticket{order: 2}
	c.pushBack(a)
	c.pushBack(b)
	f.pushBack(b)
	f.pushBack(a)
	h.pushBack(a)
	c.remove(a)
	if c.head != b || f.head != b || f.tail != a || h.head != a || a.fprev != b {
		t.Fatal("removing from one list touched another")
	}
}

func TestHoldOrder(t *testing.T) {
	var l list[Ticket, byHold]
	for i, until := range []int64{5, 3, 9, 5, 1} {
		insertByUntil(&l, &Ticket{order: uint64(i), until: until})
	}
	// By the end of the holder wait, equals in arrival order.
	if got := keys(t, &l); !slices.Equal(got, []uint64{4, 1, 0, 3, 2}) {
		t.Fatalf("order %v", got)
	}
}
