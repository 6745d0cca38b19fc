package mock

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
)

// slotOf returns a fresh slot that has arrived at s with priority prio.
func slotOf(s *scheduler, prio int64) *seqSlot {
	q := newSeqSlot()
	s.arrive(q, prio)
	return q
}

func TestSchedulerFIFO(t *testing.T) {
	s := newScheduler(1, false)
	quit := make(chan struct{})
	first := slotOf(s, 0)
	if !s.acquire(first, quit) {
		t.Fatal("first acquire failed")
	}
	order := make(chan int, 3)
	slots := make([]*seqSlot, 3)
	for i := range slots {
		// Without priority the field is ignored: arrival order rules.
		slots[i] = slotOf(s, int64(-i))
		go func() {
			if s.acquire(slots[i], quit) {
				order <- i
			}
		}()
		// Wait until it is queued so that arrival order is known.
		testkit.WaitUntil(t, fmt.Sprintf("%d waiting", i+1), func() bool {
			_, w, _ := s.snapshot()
			return w == i+1
		})
	}
	held := first
	for want := 0; want < 3; want++ {
		s.release(held)
		got := <-order
		if got != want {
			t.Fatalf("admitted %d, want %d", got, want)
		}
		held = slots[got]
		if r, w, _ := s.snapshot(); r != 1 || w != 2-want {
			t.Fatalf("running %d waiting %d", r, w)
		}
	}
	s.release(held)
	if r, w, busy := s.snapshot(); r != 0 || w != 0 || busy <= 0 {
		t.Fatalf("idle: running %d waiting %d busy %v", r, w, busy)
	}
}

func TestSchedulerQuitWhileWaiting(t *testing.T) {
	s := newScheduler(1, false)
	quit := make(chan struct{})
	s.acquire(slotOf(s, 0), quit)
	res := make(chan bool)
	q := slotOf(s, 0)
	go func() { res <- s.acquire(q, quit) }()
	testkit.WaitUntil(t, "1 waiting", func() bool {
		_, w, _ := s.snapshot()
		return w == 1
	})
	close(quit)
	if <-res {
		t.Fatal("acquired after quit")
	}
	if r, w, _ := s.snapshot(); r != 1 || w != 0 {
		t.Fatalf("running %d waiting %d", r, w)
	}
}

// With priority, waiters are served lower value first, and an arrival
// preempts the lowest-priority running sequence (of equals the latest)
// only when it is of higher priority than that one.
func TestSchedulerPriorityPreemption(t *testing.T) {
	s := newScheduler(2, true)
	quit := make(chan struct{})
	older, newer := slotOf(s, 0), slotOf(s, 0)
	s.acquire(older, quit)
	s.acquire(newer, quit)

	// An equal priority waits: no preemption.
	same := slotOf(s, 0)
	got := make(chan *seqSlot, 4)
	go func() {
		if s.acquire(same, quit) {
			got <- same
		}
	}()
	testkit.WaitUntil(t, "1 waiting", func() bool { _, w, _ := s.snapshot(); return w == 1 })

	// A higher priority takes the latest admitted normal one's slot.
	high := slotOf(s, -1)
	if !s.acquire(high, quit) {
		t.Fatal("high did not start")
	}
	select {
	case <-newer.preempt:
	default:
		t.Fatal("the latest admitted normal sequence was not preempted")
	}
	select {
	case <-older.preempt:
		t.Fatal("the older one was preempted too")
	default:
	}
	if r, w, _ := s.snapshot(); r != 2 || w != 1 || s.preemptions() != 1 {
		t.Fatalf("running %d waiting %d preemptions %d", r, w, s.preemptions())
	}
	// The preempted one queues again ahead of the later arrival of its
	// priority; a releasing preempted sequence frees nothing.
	s.release(newer)
	go func() {
		if s.acquire(newer, quit) {
			got <- newer
		}
	}()
	testkit.WaitUntil(t, "2 waiting", func() bool { _, w, _ := s.snapshot(); return w == 2 })
	// A low arrival cannot preempt normal or high, and queues last.
	low := slotOf(s, 1)
	go func() {
		if s.acquire(low, quit) {
			got <- low
		}
	}()
	testkit.WaitUntil(t, "3 waiting", func() bool { _, w, _ := s.snapshot(); return w == 3 })
	s.release(high)
	if g := <-got; g != newer {
		t.Fatal("the preempted sequence was not served first")
	}
	s.release(older)
	if g := <-got; g != same {
		t.Fatal("the normal waiter was not served before the low one")
	}
	s.release(newer)
	if g := <-got; g != low {
		t.Fatal("low not served last")
	}
	s.release(same)
	s.release(low)
	if r, w, _ := s.snapshot(); r != 0 || w != 0 {
		t.Fatalf("running %d waiting %d", r, w)
	}
}

func TestPrefillLaneIsSerial(t *testing.T) {
	s := newScheduler(4, false)
	now := time.Unix(1000, 0)
	q := newSeqSlot()
	a := s.reservePrefill(q, now, 10*time.Millisecond)
	b := s.reservePrefill(q, now, 5*time.Millisecond)
	c := s.reservePrefill(q, now.Add(time.Second), time.Millisecond)
	if a != now.Add(10*time.Millisecond) || b != now.Add(15*time.Millisecond) || c != now.Add(time.Second+time.Millisecond) {
		t.Fatalf("prefill ends %v %v %v", a, b, c)
	}
}

// With priority, a prefill goes ahead of those of lower priority not yet
// begun, never ahead of one begun or of its own priority; those it passes
// move later and are told, and move back when a preempted one leaves the
// lane before its prefill began.
func TestPrefillLaneByPriority(t *testing.T) {
	s := newScheduler(4, true)
	now := time.Unix(1000, 0)
	ms := time.Millisecond
	a, b, h, h2 := newSeqSlot(), newSeqSlot(), newSeqSlot(), newSeqSlot()
	s.arrive(a, 0)
	s.arrive(b, 0)
	s.arrive(h, -1)
	s.arrive(h2, -1)
	if end := s.reservePrefill(a, now, 10*ms); end != now.Add(10*ms) {
		t.Fatalf("a ends %v", end.Sub(now))
	}
	if end := s.reservePrefill(b, now, 10*ms); end != now.Add(20*ms) {
		t.Fatalf("b ends %v", end.Sub(now))
	}
	// h passes b, not begun, but not a, begun.
	if end := s.reservePrefill(h, now, 5*ms); end != now.Add(15*ms) {
		t.Fatalf("h ends %v, want after a only", end.Sub(now))
	}
	select {
	case <-b.moved:
	default:
		t.Fatal("b was not told it moved")
	}
	if d := s.moved(b); d != 5*ms {
		t.Fatalf("b moved %v", d)
	}
	// Of equal priority, arrival order: h2 after h, before b.
	if end := s.reservePrefill(h2, now, 5*ms); end != now.Add(20*ms) {
		t.Fatalf("h2 ends %v", end.Sub(now))
	}
	if d := s.moved(b); d != 5*ms {
		t.Fatalf("b moved %v by h2", d)
	}
	select {
	case <-h.moved:
		t.Fatal("h moved for an equal priority")
	default:
	}
	// h leaves before its prefill began: h2 and b move up.
	s.mu.Lock()
	s.unbook(h, now)
	s.mu.Unlock()
	if dh, db := s.moved(h2), s.moved(b); dh != -5*ms || db != -5*ms {
		t.Fatalf("after h left: h2 moved %v, b %v", dh, db)
	}
	if s.prefill != now.Add(25*ms) {
		t.Fatalf("lane ends %v", s.prefill.Sub(now))
	}
}

// A preempted sequence leaves the lane with its prefill not begun, and a
// move of that prefill it was not yet told of is forgotten: it must not
// shift the prefill it books when it runs again.
func TestPreemptionForgetsAPendingMove(t *testing.T) {
	s := newScheduler(1, true)
	quit := make(chan struct{})
	now := time.Now().Add(time.Hour) // later than the preemption below: a's prefill has not begun then
	x, a, h, h2 := slotOf(s, 0), slotOf(s, 0), slotOf(s, -1), slotOf(s, -1)
	s.acquire(a, quit)
	s.reservePrefill(x, now, 10*time.Millisecond) // begun at now
	s.reservePrefill(a, now, 10*time.Millisecond) // after x
	s.reservePrefill(h, now, 5*time.Millisecond)  // passes a: a moved by 5 ms
	if len(a.moved) != 1 || a.shift != 5*time.Millisecond {
		t.Fatalf("a not moved: %d signals, shift %v", len(a.moved), a.shift)
	}
	if !s.acquire(h2, quit) {
		t.Fatal("h2 did not preempt a")
	}
	if len(a.preempt) != 1 || len(a.moved) != 0 || a.shift != 0 {
		t.Fatalf("after preemption: %d preempt, %d moved signals, shift %v", len(a.preempt), len(a.moved), a.shift)
	}
	for _, b := range s.lane {
		if b.q == a {
			t.Fatal("the preempted sequence's prefill is still on the lane")
		}
	}
}
