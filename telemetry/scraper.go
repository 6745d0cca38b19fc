// Package telemetry reads what inference engines say about themselves on
// their Prometheus /metrics (vLLM's and SGLang's names): running and
// queued requests, KV-cache usage and capacity, prefix-cache counters and
// restarts. It records them on each sched.Backend for the policies, bounds
// each backend's learned locations by its cache capacity, calibrates CBR
// bytes per token, and reports a restart so the backend's locations can
// be reset. A backend without /metrics is simply left out.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// DefaultInterval is how often each backend is scraped.
const DefaultInterval = time.Second

// StaleIntervals is how many intervals a signal stays usable: one older
// than that is ignored by routing.
const StaleIntervals = 3

// reprobeIntervals is how long, in intervals, a backend whose /metrics is
// absent stays off before it is asked again.
const reprobeIntervals = 60

// calibrateWindow is the fewest prompt tokens one calibration
// observation spans: large against the requests routed but not yet
// admitted by the engine, whose tokens one side counts and the other not.
const calibrateWindow = 1 << 20

// maxBody bounds what one scrape reads; engines export a few hundred KB at
// most.
const maxBody = 8 << 20

// Config sets up a Scraper.
type Config struct {
	Interval time.Duration // default DefaultInterval
	// Client does the scrapes; nil: one with the interval as its timeout.
	Client *http.Client
	Logger *slog.Logger // nil discards
	// OnRestart is called (from the scraping goroutine) when the engine
	// of the backend whose Index is i restarted: its cache is gone.
	// started is when the new process started, on the Now clock, as
	// closely as the scrapes place it (restartInstant): the caller uses it
	// to tell this restart from one it already accounted for. Callbacks
	// and the table name backends by Index, so a scraper may cover any
	// subset of the scheduler's backends.
	OnRestart func(i int, started time.Time)
	// OnSignals, when set, is called (from the scraping goroutine) after
	// each scrape of backend i with its latest signals; fresh is false
	// when the scrape failed and the signals are the earlier ones.
	OnSignals func(i int, sig sched.EngineSignals, fresh bool)
	// Table, when set, gets each backend's capacity in blocks of
	// BlockSize bytes (SetBackendCapacity): the engine's, or CacheTokens[i]
	// where the engine does not say, converted with Calibrator.
	Table       *chain.Table
	BlockSize   int
	Calibrator  *chain.Calibrator // nil: a new one with the default ratio
	CacheTokens []int64           // per backend given to New, in order; 0: unknown
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Status of a backend's telemetry.
const (
	StatusPending = "pending" // not scraped yet
	StatusOn      = "on"      // last scrape succeeded
	StatusError   = "error"   // last scrape failed; earlier signals age out
	StatusOff     = "off"     // no /metrics (404) or no engine metrics in it
)

// statusUnparsable is fetch's verdict on an answer that is no
// exposition: off for a backend that never gave one (a server answering
// every path alike), an error for one that did.
const statusUnparsable = "unparsable"

// Scraper scrapes every backend's /metrics.
type Scraper struct {
	cfg      Config
	backends []*sched.Backend
	log      *slog.Logger
	per      []*backend
}

// backend is one backend's scrape state, owned by its goroutine but read
// by Snapshot.
type backend struct {
	mu       sync.Mutex
	url      string
	status   string
	err      string
	offUntil time.Time
	restarts uint32
	// baselines of the hit-rate window (since the first reading or the
	// last restart).
	based                bool
	baseQ, baseH         float64
	baseBlocks, baseHits uint64
	// the previous reading's counters, for restarts and calibration, and
	// when it was done with (its OnRestart returned).
	prev     Reading
	havePrev bool
	prevDone time.Time
	// the calibration window's start: engine prompt tokens and kvca's
	// routed blocks.
	calTokens float64
	calBlocks uint64
	calSet    bool
	capBlocks int
	// logged keeps the last logged problem, so a persisting one is logged
	// once and its end is logged too.
	logged string
}

// New returns a scraper for backends; Run starts it.
func New(backends []*sched.Backend, cfg Config) *Scraper {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Interval}
	}
	if cfg.Calibrator == nil {
		cfg.Calibrator = chain.NewCalibrator(0)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Scraper{cfg: cfg, backends: backends, log: log}
	for _, b := range backends {
		s.per = append(s.per, &backend{url: strings.TrimSuffix(b.URL, "/") + "/metrics", status: StatusPending})
	}
	return s
}

// Calibrator is the bytes-per-token calibrator in use; the request path
// may feed it answers' usage (Observe).
func (s *Scraper) Calibrator() *chain.Calibrator { return s.cfg.Calibrator }

// MaxAge is the age beyond which a signal is ignored.
func (s *Scraper) MaxAge() time.Duration { return StaleIntervals * s.cfg.Interval }

// Run scrapes every backend each interval until ctx ends.
func (s *Scraper) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range s.per {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(s.cfg.Interval)
			defer t.Stop()
			for {
				s.ScrapeOnce(ctx, i)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	wg.Wait()
}

// ScrapeOnce scrapes backend i now (Run calls it; tests call it directly)
// and returns the scrape's problem, if any.
func (s *Scraper) ScrapeOnce(ctx context.Context, i int) error {
	st := s.per[i]
	now := s.cfg.Now()
	st.mu.Lock()
	off := st.status == StatusOff && now.Before(st.offUntil)
	st.mu.Unlock()
	if off {
		s.applyCapacity(i, Reading{})
		return nil
	}
	rd, status, err := s.fetch(ctx, st.url)
	if err != nil {
		rd = Reading{}
	}
	restarted, started := s.record(i, now, s.cfg.Now(), rd, status, err)
	b := s.backends[i]
	if restarted && s.cfg.OnRestart != nil {
		s.cfg.OnRestart(b.Index, started)
	}
	if err == nil {
		st.mu.Lock()
		st.prevDone = s.cfg.Now()
		st.mu.Unlock()
	}
	if s.cfg.OnSignals != nil {
		sig, _ := b.EngineLatest()
		s.cfg.OnSignals(b.Index, sig, err == nil)
	}
	s.applyCapacity(i, rd)
	return err
}

// record keeps one scrape's outcome (begun at now, answered by arrived)
// and, if it succeeded, publishes the signals on the backend; it reports
// whether the engine restarted, and when (restartInstant).
func (s *Scraper) record(i int, now, arrived time.Time, rd Reading, status string, err error) (bool, time.Time) {
	st, b := s.per[i], s.backends[i]
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		if status == statusUnparsable {
			status = StatusError
			if !st.havePrev {
				status = StatusOff
			}
		}
		st.status, st.err = status, err.Error()
		sig, _ := b.EngineLatest()
		sig.Status, sig.Err = status, st.err
		sig.Queue = false // the queue is not being read
		b.SetEngine(sig)
		if status == StatusOff {
			st.offUntil = now.Add(reprobeIntervals * s.cfg.Interval)
			s.report(st, b, "engine metrics off for this backend; routing uses kvca's own view of it", err)
		} else {
			s.report(st, b, "engine metrics scrape failed; its signals are ignored once stale", err)
		}
		return false, time.Time{}
	}
	if len(rd.Malformed) > 0 {
		s.report(st, b, "engine metrics malformed; those signals are ignored", errors.New(strings.Join(rd.Malformed, ", ")))
	} else {
		s.report(st, b, "", nil)
	}
	st.status, st.err = StatusOn, ""
	restarted := st.havePrev && restartedBetween(st.prev, rd)
	var started time.Time
	if restarted {
		st.restarts++
		st.based = false
		started = restartInstant(st.prev, rd, st.prevDone, arrived)
		s.log.Warn("engine restarted: its cache is gone", "backend", b.Name,
			"start_before", st.prev.StartTime, "start_now", rd.StartTime)
	}
	_, blocks, cached := b.Routed()
	if !st.based {
		st.based = true
		st.baseQ, st.baseH = rd.PrefixQueries, rd.PrefixHits
		st.baseBlocks, st.baseHits = blocks, cached
	}
	// Calibration: the prompt tokens the engine counted against the CBR
	// bytes kvca routed to it over the same window. kvca counts a request
	// when it routes it and the engine when it admits it, so a window is
	// observed only once it holds many times what can be in between
	// (calibrateWindow). Whole blocks only are counted, so the ratio errs
	// low by half a block per request.
	switch {
	case restarted || !rd.HasPrompt || s.cfg.BlockSize <= 0:
		st.calTokens, st.calBlocks, st.calSet = 0, 0, false
	case !st.calSet:
		st.calTokens, st.calBlocks, st.calSet = rd.PromptTokens, blocks, true
	default:
		dt := rd.PromptTokens - st.calTokens
		db := blocks - st.calBlocks
		if dt >= calibrateWindow {
			if db > 0 {
				s.cfg.Calibrator.Observe(rd.Model, int(db)*s.cfg.BlockSize, int(dt))
			}
			st.calTokens, st.calBlocks = rd.PromptTokens, blocks
		}
	}
	st.prev, st.havePrev = rd, true

	sig := sched.EngineSignals{
		Running: int32(rd.Running), Waiting: int32(rd.Waiting),
		KVUsage: float32(rd.KVUsage), At: now.UnixMilli(),
		Source: rd.Source, Model: rd.Model,
		PromptTokens: int64(rd.PromptTokens), PrefixQueries: int64(rd.PrefixQueries), PrefixHits: int64(rd.PrefixHits),
		EngineHitRate: -1, PredictedHitRate: -1,
		StartTime: rd.StartTime, Restarts: st.restarts,
		Status: StatusOn, Queue: rd.HasWaiting,
	}
	if len(rd.Malformed) > 0 {
		sig.Err = "malformed: " + strings.Join(rd.Malformed, ", ")
	}
	if rd.HasCapacity {
		sig.CapacityTokens = rd.CapacityTokens
	}
	if rd.HasRunning || rd.HasWaiting {
		ra, _ := b.RemoteLoad()
		foreign := rd.Running + rd.Waiting - b.Active() - int64(ra)
		sig.Foreign = int32(max(foreign, 0))
		sig.ForeignWaiting = int32(min(rd.Waiting, int64(sig.Foreign)))
	}
	if q := rd.PrefixQueries - st.baseQ; rd.HasPrefix && q > 0 {
		sig.EngineHitRate = (rd.PrefixHits - st.baseH) / q
	}
	if n := blocks - st.baseBlocks; n > 0 {
		sig.PredictedHitRate = float64(cached-st.baseHits) / float64(n)
	}
	b.SetEngine(sig)
	return restarted, started
}

// restartedBetween reports whether the engine restarted between two
// readings: its start time moved forward, or a counter went backwards or
// vanished. A live process never drops a counter it exported, but one
// that creates its labelled counters on first use (llm-d's vLLM
// simulator, which exports no process_start_time_seconds either) exports
// none of them again until its first request after a restart.
func restartedBetween(prev, cur Reading) bool {
	if prev.HasStartTime && cur.HasStartTime && cur.StartTime > prev.StartTime+0.001 {
		return true
	}
	back := func(hp, hc bool, p, c float64) bool { return hp && hc && c < p }
	gone := func(hp, exported bool) bool { return hp && !exported }
	return back(prev.HasPrefix, cur.HasPrefix, prev.PrefixQueries, cur.PrefixQueries) ||
		back(prev.HasPrompt, cur.HasPrompt, prev.PromptTokens, cur.PromptTokens) ||
		gone(prev.HasPrefix, cur.prefixExported) || gone(prev.HasPrompt, cur.promptExported)
}

// restartInstant places a restart, revealed by the reading cur after
// prev, on the scraper's clock. The new process started after the old one
// answered prev and before cur arrived (before); the window is taken to
// start once prev was done with (after: a moment later, and after any
// reset prev caused, which must not count for this restart). A
// process_start_time_seconds that moved forward says when, on the
// engine's clock; it is kept within that window, so a clock that is off
// by more cannot place the restart before the reading that showed the old
// process or after the one that showed the new. Without one (counters
// went backwards or vanished), the restart is placed at the window's
// start: a backend reset inside the window (the health check re-admitting
// the backend) is then taken for this restart, which merges two restarts
// only if both fall within one window of an engine that exports no start
// time.
func restartInstant(prev, cur Reading, after, before time.Time) time.Time {
	if !prev.HasStartTime || !cur.HasStartTime || cur.StartTime <= prev.StartTime+0.001 {
		return after
	}
	sec, frac := math.Modf(cur.StartTime)
	t := time.Unix(int64(sec), int64(frac*1e9))
	switch {
	case t.Before(after):
		return after
	case t.After(before):
		return before
	}
	return t
}

// applyCapacity sets backend i's capacity in the table from the engine's
// reading, else from the configured tokens.
func (s *Scraper) applyCapacity(i int, rd Reading) {
	if s.cfg.Table == nil || s.cfg.BlockSize <= 0 {
		return
	}
	tokens := int64(0)
	if i < len(s.cfg.CacheTokens) {
		tokens = s.cfg.CacheTokens[i]
	}
	if rd.HasCapacity {
		tokens = rd.CapacityTokens
	}
	blocks := s.cfg.Calibrator.Blocks(rd.Model, tokens, s.cfg.BlockSize)
	st := s.per[i]
	st.mu.Lock()
	changed := st.capBlocks != blocks
	st.capBlocks = blocks
	st.mu.Unlock()
	if changed {
		s.cfg.Table.SetBackendCapacity(s.backends[i].Index, blocks)
	}
}

// fetch GETs one /metrics and parses it; the status says what a failure
// means for the backend.
func (s *Scraper) fetch(ctx context.Context, url string) (Reading, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Reading{}, StatusOff, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return Reading{}, StatusError, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return Reading{}, StatusOff, fmt.Errorf("GET %s answered 404", url)
	case resp.StatusCode != http.StatusOK:
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return Reading{}, StatusError, fmt.Errorf("GET %s answered %d", url, resp.StatusCode)
	}
	rd, err := Parse(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return Reading{}, statusUnparsable, fmt.Errorf("GET %s: unparsable exposition: %v", url, err)
	}
	if rd.Source == "" {
		return Reading{}, StatusOff, fmt.Errorf("GET %s: no vLLM, SGLang, TGI or llama.cpp metrics in it", url)
	}
	return rd, StatusOn, nil
}

// report logs a backend's telemetry problem when it changes (so a
// persisting one is logged once), and its end. Called with st.mu held.
func (s *Scraper) report(st *backend, b *sched.Backend, msg string, err error) {
	key := ""
	if err != nil {
		key = msg + ": " + err.Error()
	}
	if key == st.logged {
		return
	}
	switch {
	case err != nil:
		s.log.Warn(msg, "backend", b.Name, "err", err)
	case st.logged != "":
		s.log.Info("engine metrics read again", "backend", b.Name)
	}
	st.logged = key
}
