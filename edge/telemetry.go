package edge

import (
	"io"
	"net/http"
	"time"

	"github.com/kvca/kvca/sched"
	"github.com/kvca/kvca/telemetry"
)

// capacityEvery is how often backends' locations are held to their
// capacity; a check costs one shared lock per table shard.
const capacityEvery = 100 * time.Millisecond

// startTelemetry sets up engine telemetry (--engine-metrics) and keeps
// each backend's locations within its cache capacity (from the engine, or
// --backend-cache-tokens), in the background loops; each backend's scraper
// starts with its upstream (startScraper).
func (s *Server) startTelemetry() {
	bounded := false
	for _, t := range s.cacheTokens {
		bounded = bounded || t > 0
	}
	if !s.cfg.Telemetry.EngineMetrics && !bounded {
		return
	}
	s.calibrate = true
	s.scraping = s.cfg.Telemetry.EngineMetrics
	if s.scraping {
		s.fleet().sched.SetEngineMaxAge(telemetry.StaleIntervals * s.cfg.Telemetry.EngineMetricsInterval)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tc, err := upstreamTLS(&s.cfg); err == nil {
		tr.TLSClientConfig = tc
	}
	s.scrapeClient = &http.Client{Transport: tr, Timeout: s.cfg.Telemetry.EngineMetricsInterval}
	s.loops.Add(1)
	go func() { defer s.loops.Done(); s.table.CapacityLoop(s.bg, capacityEvery) }()
	s.m.set.RegisterMetricsWriter(func(w io.Writer) {
		var bs []*sched.Backend
		for _, u := range s.fleet().live() {
			bs = append(bs, u.b)
		}
		telemetry.WriteMetrics(w, bs, s.table, s.cal, time.Now(), telemetry.StaleIntervals*s.cfg.Telemetry.EngineMetricsInterval)
	})
}

// scraperConfig is the telemetry of one backend whose configured cache
// size is tokens (0: unknown).
func (s *Server) scraperConfig(tokens int64) telemetry.Config {
	return telemetry.Config{
		Interval:    s.cfg.Telemetry.EngineMetricsInterval,
		Client:      s.scrapeClient,
		Logger:      s.log,
		OnRestart:   s.engineRestarted,
		OnSignals:   s.adm.AdaptToEngine,
		Table:       s.table,
		BlockSize:   s.cfg.Table.BlockSize,
		Calibrator:  s.cal,
		CacheTokens: []int64{tokens},
	}
}

// engineRestarted resets backend i, whose engine telemetry saw a process
// that started at started, unless that restart is already accounted for
// (restarted): the health check re-admitted the backend since.
func (s *Server) engineRestarted(i int, started time.Time) {
	gen, bumped := s.restarted(i, started)
	name := ""
	if bs := s.fleet().sched.Backends; i < len(bs) {
		name = bs[i].Name
	}
	if bumped {
		s.log.Info("engine restart: its locations are reset", "backend", name, "generation", gen)
	} else {
		s.log.Info("engine restart already accounted for: the backend was reset since it started", "backend", name, "generation", gen)
	}
}

// engineState is backend i's telemetry for /admin/state; nil when
// --engine-metrics is off.
func (s *Server) engineState(i int) *telemetry.BackendState {
	if !s.cfg.Telemetry.EngineMetrics {
		return nil
	}
	st := telemetry.StateOf(s.fleet().sched.Backends[i], s.table, time.Now(), telemetry.StaleIntervals*s.cfg.Telemetry.EngineMetricsInterval)
	return &st
}
