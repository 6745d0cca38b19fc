package edge

import (
	"io"
	"net/http"
	"time"

	"github.com/kvca/kvca/telemetry"
)

// capacityEvery is how often backends' locations are held to their
// capacity; a check costs one shared lock per table shard.
const capacityEvery = 100 * time.Millisecond

// startTelemetry scrapes the engines' metrics (--engine-metrics) and keeps
// each backend's locations within its cache capacity (from the engine, or
// --backend-cache-tokens), in the background loops.
func (s *Server) startTelemetry() {
	tokens := make([]int64, len(s.ups))
	for i := range tokens {
		switch n := len(s.cfg.BackendCacheTokens); {
		case n == 1:
			tokens[i] = s.cfg.BackendCacheTokens[0]
		case n > i:
			tokens[i] = s.cfg.BackendCacheTokens[i]
		}
	}
	bounded := false
	for _, t := range tokens {
		bounded = bounded || t > 0
	}
	if !s.cfg.EngineMetrics && !bounded {
		return
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tc, err := upstreamTLS(&s.cfg); err == nil {
		tr.TLSClientConfig = tc
	}
	cal := s.cal
	s.calibrate = true
	sc := telemetry.New(s.sched.Backends, telemetry.Config{
		Interval:    s.cfg.EngineMetricsInterval,
		Client:      &http.Client{Transport: tr, Timeout: s.cfg.EngineMetricsInterval},
		Logger:      s.log,
		OnRestart:   func(i int) { s.resetBackend(i) },
		OnSignals:   s.adm.AdaptToEngine,
		Table:       s.table,
		BlockSize:   s.cfg.BlockSize,
		Calibrator:  cal,
		CacheTokens: tokens,
	})
	if s.cfg.EngineMetrics {
		s.sched.SetEngineMaxAge(sc.MaxAge())
		s.loops.Add(1)
		go func() { defer s.loops.Done(); sc.Run(s.bg) }()
	} else {
		// No scraping: the configured capacities apply as they are.
		for i := range tokens {
			s.table.SetBackendCapacity(i, cal.Blocks("", tokens[i], s.cfg.BlockSize))
		}
	}
	s.loops.Add(1)
	go func() { defer s.loops.Done(); s.table.CapacityLoop(s.bg, capacityEvery) }()
	s.m.set.RegisterMetricsWriter(func(w io.Writer) {
		telemetry.WriteMetrics(w, s.sched.Backends, s.table, cal, time.Now(), sc.MaxAge())
	})
}

// engineState is backend i's telemetry for /admin/state; nil when
// --engine-metrics is off.
func (s *Server) engineState(i int) *telemetry.BackendState {
	if !s.cfg.EngineMetrics {
		return nil
	}
	st := telemetry.StateOf(s.sched.Backends[i], s.table, time.Now(), telemetry.StaleIntervals*s.cfg.EngineMetricsInterval)
	return &st
}
