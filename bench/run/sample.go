package run

import (
	"sync"
	"time"
)

// LoadSeries is one engine's queue depth (running + waiting) over time.
type LoadSeries struct {
	Engine string
	At     []time.Duration // since the run started
	Load   []int
}

// sampler polls the engines' running and waiting counts.
type sampler struct {
	quit   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	series []LoadSeries
}

func newSampler(engines []engine, start time.Time, every time.Duration) *sampler {
	s := &sampler{quit: make(chan struct{}), done: make(chan struct{}), series: make([]LoadSeries, len(engines))}
	for i, e := range engines {
		s.series[i].Engine = e.Name()
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-s.quit:
				return
			}
			at := time.Since(start)
			s.mu.Lock()
			for i, e := range engines {
				st := e.Stats()
				s.series[i].At = append(s.series[i].At, at)
				s.series[i].Load = append(s.series[i].Load, st.Running+st.Waiting)
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *sampler) stop() []LoadSeries {
	close(s.quit)
	<-s.done
	return s.series
}
