package tick

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestEvery(t *testing.T) {
	done := make(chan struct{})
	var n atomic.Int32
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		Every(done, time.Millisecond, func() {
			if n.Add(1) == 3 {
				close(done)
			}
		})
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after done was closed")
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("f ran %d times, want 3", got)
	}
}

func TestEveryStopsBeforeFirstTick(t *testing.T) {
	done := make(chan struct{})
	close(done)
	Every(done, time.Hour, func() { t.Fatal("f ran") })
}
