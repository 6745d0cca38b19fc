package sched

import (
	"time"

	"github.com/kvca/kvca/chain"
)

// EngineSignals is what a backend's own metrics endpoint last said about
// its queue and its KV cache (engine telemetry). Policies may weigh it in;
// a signal older than the telemetry's staleness bound is ignored.
type EngineSignals struct {
	Running int32 // requests the engine is running (vllm:num_requests_running)
	Waiting int32 // requests queued in the engine (vllm:num_requests_waiting)
	// Foreign is how many of Running+Waiting kvca did not send (other
	// clients or proxies): Running+Waiting minus this replica's and its
	// peers' in-flight requests at the time of the scrape, at least 0.
	Foreign int32
	// ForeignWaiting is the part of Foreign still queued: min(Waiting, Foreign).
	ForeignWaiting int32
	// KVUsage is the fraction of the engine's KV cache in use, 0..1.
	KVUsage float32
	// Queue reports that the engine exports its waiting queue and the
	// last scrape read it: its batch is then judged by its own queue, not
	// by kvca's reading of its latencies (saturated).
	Queue bool
	// CapacityTokens is how many tokens the engine's KV cache holds; 0
	// when the engine does not say.
	CapacityTokens int64
	// At is when the signals were read (unix ms); 0: never.
	At int64

	// What the admin API and the bench report beside kvca's own figures;
	// policies do not read them.
	Source        string // "vllm" or "sglang"
	Model         string // the model the series are labelled with
	PromptTokens  int64  // prompt tokens since the engine started
	PrefixQueries int64  // prefix-cache queries (tokens) since it started
	PrefixHits    int64  // of which hits
	// EngineHitRate is the engine's prefix-cache hit rate (hits/queries)
	// since telemetry first read it or the engine last restarted; -1 when
	// the engine exports no prefix-cache counters or nothing was queried.
	EngineHitRate float64
	// PredictedHitRate is, over the same window, the share of the CBR
	// blocks kvca routed to the backend that it believed cached there.
	PredictedHitRate float64
	StartTime        float64 // process_start_time_seconds; 0 if absent
	Restarts         uint32  // restarts telemetry detected
	// Status is the telemetry's state for the backend ("on", "off",
	// "error"), Err its last problem; a failed scrape keeps the earlier
	// signals and their At, so they age out.
	Status, Err string
}

// SetEngine records the latest engine signals of b. Telemetry calls it
// about once a second, so it may allocate.
func (b *Backend) SetEngine(s EngineSignals) {
	v := s
	b.engine.Store(&v)
	b.model.queueTold.Store(s.Queue)
}

// Engine returns b's engine signals if they were read at most maxAge ms
// before now (unix ms); false when there are none that fresh.
func (b *Backend) Engine(now, maxAge int64) (EngineSignals, bool) {
	p := b.engine.Load()
	if p == nil || p.At == 0 || now-p.At > maxAge {
		return EngineSignals{}, false
	}
	return *p, true
}

// EngineLatest returns b's last engine signals, however old (admin API).
func (b *Backend) EngineLatest() (EngineSignals, bool) {
	p := b.engine.Load()
	if p == nil {
		return EngineSignals{}, false
	}
	return *p, true
}

// Routed returns what the scheduler routed to b so far: requests, CBR
// blocks, and of those the blocks it believed cached there (the hit rate
// kvca predicts is cached/blocks).
func (b *Backend) Routed() (requests, blocks, cached uint64) {
	return b.routedReqs.Load(), b.routedBlocks.Load(), b.routedCached.Load()
}

func (b *Backend) countRouted(blocks, cached int) {
	b.routedReqs.Add(1)
	b.routedBlocks.Add(uint64(blocks))
	b.routedCached.Add(uint64(cached))
}

// meanNovel is the mean novel blocks of the requests routed to b: the
// prefill a request queued in the engine that kvca did not send is
// presumed to need.
func (b *Backend) meanNovel() uint64 {
	r := b.routedReqs.Load()
	if r == 0 {
		return 0
	}
	return (b.routedBlocks.Load() - b.routedCached.Load()) / r
}

// SetEngineMaxAge turns the engine signals on in routing, trusting those
// read at most maxAge before; 0 (the default) ignores them.
func (s *Scheduler) SetEngineMaxAge(maxAge time.Duration) { s.engineMaxAge = maxAge.Milliseconds() }

// Defaults of the near-full rule (see avoidFull).
const (
	DefaultKVFull           = 0.95
	DefaultLongPrefixBlocks = 16
)

// engineNow is the wall clock (unix ms) engine signals are compared with:
// the request's instant when the caller gave it (Request.T), else read
// now; 0 when engine signals are off.
func (s *Scheduler) engineNow(d *Decision) int64 {
	switch {
	case s.engineMaxAge <= 0:
		return 0
	case d.unix != 0:
		return d.unix
	}
	return time.Now().UnixMilli()
}

// engineLoad is the load, in blocks, that b's engine reports beyond what
// kvca knows of (load(b) already holds kvca's own reservations):
//
//	engine_load(b) = foreign(b) × active_weight + foreign_waiting(b) × mean_novel(b)
//
// foreign(b) are the requests the engine runs or queues that no kvca
// replica sent, and foreign_waiting(b) those of them not yet admitted,
// each presumed to need as much prefill as kvca's own requests to b do on
// average. 0 without fresh signals.
func (s *Scheduler) engineLoad(b *Backend, now int64) uint64 {
	if now == 0 {
		return 0
	}
	p := b.engine.Load()
	if p == nil || p.At == 0 || now-p.At > s.engineMaxAge || p.Foreign <= 0 {
		return 0
	}
	return uint64(p.Foreign)*s.ActiveWeight + uint64(max(p.ForeignWaiting, 0))*b.meanNovel()
}

// nearFull reports whether b's engine, by fresh signals, has its KV cache
// at least KVFull used.
func (s *Scheduler) nearFull(b *Backend, now int64) bool {
	if now == 0 {
		return false
	}
	p := b.engine.Load()
	return p != nil && p.At != 0 && now-p.At <= s.engineMaxAge && p.KVUsage >= s.KVFull
}

// avoidFull removes from cand the backends whose KV cache is near full
// when the request would prefill at least LongPrefixBlocks novel blocks
// there (novel(i)), provided another candidate remains: a long new prefix
// on a full engine waits for memory or preempts running requests, and
// evicts what others will ask for next.
func (s *Scheduler) avoidFull(cand *chain.Set, d *Decision, novel func(i int) int) {
	now := s.engineNow(d)
	if now == 0 {
		return
	}
	var full chain.Set
	n := 0
	cand.Each(func(i int) {
		if novel(i) >= s.LongPrefixBlocks && s.nearFull(s.Backends[i], now) {
			full.Add(i)
			n++
		}
	})
	if n == 0 || n == cand.Len() {
		return
	}
	for w := range cand {
		cand[w] &^= full[w]
	}
}
