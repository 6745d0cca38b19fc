package mock

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
)

func TestSchedulerFIFO(t *testing.T) {
	s := newScheduler(1)
	quit := make(chan struct{})
	if !s.acquire(quit) {
		t.Fatal("first acquire failed")
	}
	order := make(chan int, 3)
	for i := 0; i < 3; i++ {
		go func() {
			if s.acquire(quit) {
				order <- i
			}
		}()
		// Wait until it is queued so that arrival order is known.
		testkit.WaitUntil(t, fmt.Sprintf("%d waiting", i+1), func() bool {
			_, w, _ := s.snapshot()
			return w == i+1
		})
	}
	for want := 0; want < 3; want++ {
		s.release()
		if got := <-order; got != want {
			t.Fatalf("admitted %d, want %d", got, want)
		}
		if r, w, _ := s.snapshot(); r != 1 || w != 2-want {
			t.Fatalf("running %d waiting %d", r, w)
		}
	}
	s.release()
	if r, w, busy := s.snapshot(); r != 0 || w != 0 || busy <= 0 {
		t.Fatalf("idle: running %d waiting %d busy %v", r, w, busy)
	}
}

func TestSchedulerQuitWhileWaiting(t *testing.T) {
	s := newScheduler(1)
	quit := make(chan struct{})
	s.acquire(quit)
	res := make(chan bool)
	go func() { res <- s.acquire(quit) }()
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

func TestPrefillLaneIsSerial(t *testing.T) {
	s := newScheduler(4)
	now := time.Unix(1000, 0)
	a := s.reservePrefill(now, 10*time.Millisecond)
	b := s.reservePrefill(now, 5*time.Millisecond)
	c := s.reservePrefill(now.Add(time.Second), time.Millisecond)
	if a != now.Add(10*time.Millisecond) || b != now.Add(15*time.Millisecond) || c != now.Add(time.Second+time.Millisecond) {
		t.Fatalf("prefill ends %v %v %v", a, b, c)
	}
}
