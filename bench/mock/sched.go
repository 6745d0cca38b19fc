package mock

import (
	"sync"
	"time"
)

// scheduler admits at most maxSeqs sequences at a time, first come first
// served, and runs prefills one after another: prefill is compute bound, so
// a burst of uncached prompts delays every first token behind it, which is
// the cost that cache-aware routing avoids.
type scheduler struct {
	mu       sync.Mutex
	maxSeqs  int
	running  int
	queue    []chan struct{} // waiting sequences, oldest first
	chans    []chan struct{} // reusable wake-up channels
	prefill  time.Time       // when the prefill lane frees up
	since    time.Time       // start of the current busy period
	busy     time.Duration   // closed busy periods
	admitted uint64
}

func newScheduler(maxSeqs int) *scheduler { return &scheduler{maxSeqs: maxSeqs} }

// acquire blocks until the sequence may run. It returns false if quit closed
// first, in which case the caller holds no slot.
func (s *scheduler) acquire(quit <-chan struct{}) bool {
	s.mu.Lock()
	s.markActive()
	if s.running < s.maxSeqs && len(s.queue) == 0 {
		s.running++
		s.admitted++
		s.mu.Unlock()
		return true
	}
	var ch chan struct{}
	if n := len(s.chans); n > 0 {
		ch = s.chans[n-1]
		s.chans = s.chans[:n-1]
	} else {
		ch = make(chan struct{}, 1)
	}
	s.queue = append(s.queue, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		s.mu.Lock()
		s.chans = append(s.chans, ch)
		s.mu.Unlock()
		return true
	case <-quit:
		s.mu.Lock()
		for i, c := range s.queue {
			if c == ch {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				s.markIdle()
				s.mu.Unlock()
				return false
			}
		}
		// Admitted while quitting: give the slot back.
		s.mu.Unlock()
		s.release()
		return false
	}
}

// release frees a running slot, handing it to the oldest waiter.
func (s *scheduler) release() {
	s.mu.Lock()
	if len(s.queue) > 0 {
		ch := s.queue[0]
		copy(s.queue, s.queue[1:])
		s.queue = s.queue[:len(s.queue)-1]
		s.admitted++
		ch <- struct{}{}
	} else {
		s.running--
		s.markIdle()
	}
	s.mu.Unlock()
}

// reservePrefill books d on the prefill lane and returns when it ends.
func (s *scheduler) reservePrefill(now time.Time, d time.Duration) time.Time {
	s.mu.Lock()
	start := s.prefill
	if start.Before(now) {
		start = now
	}
	s.prefill = start.Add(d)
	end := s.prefill
	s.mu.Unlock()
	return end
}

// markActive and markIdle keep busy time: the wall time during which the
// engine had at least one sequence running or waiting. Called with mu held.
func (s *scheduler) markActive() {
	if s.running == 0 && len(s.queue) == 0 {
		s.since = time.Now()
	}
}

func (s *scheduler) markIdle() {
	if s.running == 0 && len(s.queue) == 0 {
		s.busy += time.Since(s.since)
	}
}

func (s *scheduler) snapshot() (running, waiting int, busy time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy = s.busy
	if s.running > 0 || len(s.queue) > 0 {
		busy += time.Since(s.since)
	}
	return s.running, len(s.queue), busy
}
