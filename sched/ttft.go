package sched

import (
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// TTFTConfig sets the ttft policy's model where the operator knows it;
// every zero value is learned from first-byte latencies instead.
type TTFTConfig struct {
	// Capacity is how many sequences a backend runs at once (vLLM's
	// --max-num-seqs); 0: learned, or read from the engine's own queue
	// when telemetry reports it.
	Capacity int
	// BlockTime is the prefill time of one novel block of the chain's
	// block size; 0: learned.
	BlockTime time.Duration
	// Base is the first-token time of a request with nothing to compute
	// and nothing ahead of it; 0: learned.
	Base time.Duration
	// ResidentEpsilon bounds resident work: a new conversation is not
	// placed where it would lift a backend above (1+ε)× the mean;
	// negative: no bound.
	ResidentEpsilon float64
	// ResidentWindow is the time constant over which a backend's recent
	// turns count as resident; 0: three times the observed gap between a
	// conversation's turns, at most the TTL.
	ResidentWindow time.Duration
	// EngineMaxAge is how old engine signals may be to be used; default 5s.
	EngineMaxAge time.Duration
}

// DefaultResidentEpsilon is the bound's default; see docs/placement.md
// for the measurement that chose it.
const DefaultResidentEpsilon = 0.25

// Priors used until a backend has answered enough requests to learn its
// own: a mid-sized model on one GPU, deliberately round numbers.
const (
	priorBase    = 20 * time.Millisecond
	priorBlock   = time.Millisecond
	priorService = time.Second
)

const (
	capLevels = 64
	// decay is each observation's weight loss: about the last 256
	// answers of a backend shape its model, so it follows a backend that
	// changes (another model, a slower GPU) within minutes at high rates.
	decay = 1 - 1.0/256
	// nearDiv makes predictions within 1/nearDiv of the best equivalent:
	// learned rates carry noise, and within it load decides.
	nearDiv = 4
)

// monoEpoch anchors monoNow; set once at start, never written again.
var monoEpoch = time.Now()

// monoNow is monotonic nanoseconds since the process started.
func monoNow() int64 { return int64(time.Since(monoEpoch)) }

// monoAt is t on monoNow's scale; zero t is now.
func monoAt(t time.Time) int64 {
	if t.IsZero() {
		return monoNow()
	}
	return int64(t.Sub(monoEpoch))
}

// ttftState is the scheduler's part of the ttft policy.
type ttftState struct {
	eps       float64
	window    int64 // ms, 0: derived from gap
	engineAge int64 // ms
	// gap is the decayed mean (ms, float64 bits) of the time between a
	// conversation's turns, as the age of its prefix's location shows.
	gap  atomic.Uint64
	gaps atomic.Uint64
	// moves counts follow-ups sent away from their prefix's holders.
	moves atomic.Uint64
	fleet fleetFit
	set   *metrics.Set
	// fixed is what SetTTFT set, for backends added later.
	fixed TTFTConfig
}

// predictor is one backend's learned first-token latency, capacity and
// resident work. Learning takes mu (once per answer); routing reads the
// published atomics only.
type predictor struct {
	mu sync.Mutex
	// Decayed least-squares sums of TTFT y (ns) against m, the blocks the
	// engine had to prefill before answering (this request's novel blocks
	// plus those reserved on it and not yet answered), over answers that
	// did not wait for a batch slot.
	sw, sm, sy, smm, smy float64
	obs                  uint64
	// fleet pools the sums of every backend of the scheduler.
	fleet *fleetFit
	// ev[a] is the decayed share of answers dispatched with a requests
	// already in flight that waited for a batch slot; seen[a] counts them.
	ev   [capLevels]float32
	seen [capLevels]uint8
	// ratio is the decayed mean of observed/predicted TTFT.
	ratio, ratioW float64

	fixBase, fixBlock int64
	fixCap            int32

	base     atomic.Int64 // ns
	block    atomic.Int64 // ns per block
	capacity atomic.Int32 // learned; 0: unknown
	// queueTold is set while the engine's telemetry reports its queue
	// (EngineSignals.Queue): its batch is then judged by that queue, and
	// the capacity learned from latencies is not used (cap).
	queueTold atomic.Bool
	// served is the highest number of requests already in flight at
	// which most answers were seen not to wait for a batch slot: the
	// capacity is above it. 0: none seen.
	served   atomic.Int32
	service  atomic.Int64 // ns, dispatch to end; 0: unknown
	observed atomic.Uint64
	waits    atomic.Uint64
	// resident packs a decayed turn count (float32, high half) and the
	// table millisecond it was computed at (low half, wrapping).
	resident atomic.Uint64

	mRatio *metrics.Histogram
	series string // the label set of b's series
	// clock replaces the request's instant for this backend's
	// reservations when set, so tests can give every answer an exact
	// latency.
	clock func() int64
}

// at is t on monoNow's scale (zero t: now), or the test's clock.
func (m *predictor) at(t time.Time) int64 {
	if m.clock != nil {
		return m.clock()
	}
	return monoAt(t)
}

func (s *Scheduler) initTTFT() {
	s.ttft.eps = DefaultResidentEpsilon
	s.ttft.engineAge = 5000
	s.ttft.set = metrics.NewSet()
	set := s.ttft.set
	for _, b := range s.Backends {
		s.initModel(b)
	}
	set.GetOrCreateGauge("kvca_ttft_moves_total", func() float64 { return float64(s.ttft.moves.Load()) })
	set.GetOrCreateGauge("kvca_resident_window_seconds", func() float64 { return float64(s.residentWindow()) / 1e3 })
}

// initModel gives b's predictor its priors, the operator's fixed values
// and its series. A removed backend's series stay until its slot is
// reused (the metrics set has no removal by prefix); its gauges read 0 load.
func (s *Scheduler) initModel(b *Backend) {
	set := s.ttft.set
	m := &b.model
	m.fleet = &s.ttft.fleet
	m.base.Store(int64(priorBase))
	m.block.Store(int64(priorBlock))
	m.fix(s.ttft.fixed)
	l := fmt.Sprintf("{backend=%q}", b.Name)
	m.mRatio = set.GetOrCreateHistogram("kvca_ttft_observed_over_predicted" + l)
	m.series = l
	set.GetOrCreateGauge("kvca_ttft_first_token_base_seconds"+l, func() float64 { base, _ := m.rates(); return float64(base) / 1e9 })
	set.GetOrCreateGauge("kvca_ttft_prefill_block_seconds"+l, func() float64 { return float64(m.blockTime()) / 1e9 })
	set.GetOrCreateGauge("kvca_ttft_batch_capacity"+l, func() float64 { return float64(m.cap()) })
	set.GetOrCreateGauge("kvca_ttft_service_seconds"+l, func() float64 { return float64(m.service.Load()) / 1e9 })
	set.GetOrCreateGauge("kvca_ttft_observations_total"+l, func() float64 { return float64(m.observed.Load()) })
	set.GetOrCreateGauge("kvca_ttft_slot_waits_total"+l, func() float64 { return float64(m.waits.Load()) })
	set.GetOrCreateGauge("kvca_backend_resident"+l, func() float64 {
		return m.residentAt(s.Table.Now(), float64(s.residentWindow()))
	})
}

// ttftSeries are the per-backend series initModel registers.
var ttftSeries = []string{"kvca_ttft_observed_over_predicted", "kvca_ttft_first_token_base_seconds",
	"kvca_ttft_prefill_block_seconds", "kvca_ttft_batch_capacity", "kvca_ttft_service_seconds",
	"kvca_ttft_observations_total", "kvca_ttft_slot_waits_total", "kvca_backend_resident"}

// DropSeries removes a removed backend's series from the scheduler's
// metrics.
func (s *Scheduler) DropSeries(b *Backend) {
	if b.model.series == "" {
		return
	}
	for _, n := range ttftSeries {
		s.ttft.set.UnregisterMetric(n + b.model.series)
	}
}

// SetTTFT applies the operator's settings; call it before routing starts.
func (s *Scheduler) SetTTFT(c TTFTConfig) error {
	if err := c.Check(); err != nil {
		return err
	}
	s.ttft.fixed = c
	s.ttft.eps = c.ResidentEpsilon
	s.ttft.window = c.ResidentWindow.Milliseconds()
	if c.EngineMaxAge > 0 {
		s.ttft.engineAge = c.EngineMaxAge.Milliseconds()
	}
	for _, b := range s.Backends {
		b.model.fix(c)
	}
	return nil
}

func (m *predictor) fix(c TTFTConfig) {
	m.mu.Lock()
	m.fixBase, m.fixBlock, m.fixCap = int64(c.Base), int64(c.BlockTime), int32(c.Capacity)
	if c.Base > 0 {
		m.base.Store(int64(c.Base))
	}
	if c.BlockTime > 0 {
		m.block.Store(int64(c.BlockTime))
	}
	m.mu.Unlock()
}

// Check reports the first invalid setting, named by its serve flag.
func (c TTFTConfig) Check() error {
	switch {
	case c.Capacity < 0:
		return fmt.Errorf("--batch-capacity must not be negative (0: learned)")
	case c.BlockTime < 0:
		return fmt.Errorf("--prefill-block-time must not be negative (0: learned)")
	case c.Base < 0:
		return fmt.Errorf("--first-token-base must not be negative (0: learned)")
	case c.ResidentWindow < 0:
		return fmt.Errorf("--resident-window must not be negative (0: from the gaps between turns)")
	case c.EngineMaxAge < 0:
		return fmt.Errorf("engine signal age must not be negative")
	case math.IsNaN(c.ResidentEpsilon) || math.IsInf(c.ResidentEpsilon, 0):
		return fmt.Errorf("--resident-epsilon must be a number (negative: no bound)")
	}
	return nil
}

// cap is the batch capacity known without the engine's word: the flag's,
// else the one learned from first-byte latencies while the engine does
// not report its queue. An engine that reports it is believed: a wait
// for a slot shows there as a queue, while slow answers at some
// concurrency are as often the host's noise (on a loaded 2-core host,
// answers of an engine with 64 slots and at most 12 requests in flight
// read as slot waits and moved follow-ups off an idle fleet). Its capacity while it queues
// comes from the queue (engineBatch); learning goes on, for when its
// telemetry stops.
func (m *predictor) cap() int32 {
	if m.fixCap > 0 {
		return m.fixCap
	}
	if m.queueTold.Load() {
		return 0
	}
	return m.capacity.Load()
}

// FirstByte records that the first body byte of a streamed answer arrived:
// the backend has prefilled. The first call per reservation teaches the
// backend's model; later calls do nothing, so the edge may call it on
// every body read.
func (r *Reservation) FirstByte() { r.FirstByteAt(time.Time{}) }

// FirstByteAt is FirstByte at instant t (zero: now).
func (r *Reservation) FirstByteAt(t time.Time) {
	if r.b == nil || r.done.Load()&4 != 0 || r.done.Or(4)&4 != 0 {
		return
	}
	r.b.model.observe(r, r.b.model.at(t)-r.at)
}

// observe learns from one answer that took ttft ns to its first byte.
func (m *predictor) observe(r *Reservation, ttft int64) {
	inflight := int(r.before >> 32)
	blocks := int64(r.novel) + int64(uint32(r.before))
	m.learn(blocks, inflight, ttft, r.pred)
}

// minSeen is how many answers at an in-flight level learning needs
// before it judges the level. A full batch makes every arrival past it
// wait, so under real overload the levels above the capacity fill within
// a few dozen answers; a few slow answers at a level, as a busy host gives
// when concurrency competes for its CPU, are not enough.
const minSeen = 8

// learn is observe with the reservation taken apart (tests call it).
func (m *predictor) learn(blocks int64, inflight int, ttft, pred int64) {
	m.observed.Add(1)
	if pred > 0 && m.mRatio != nil {
		m.mRatio.Update(float64(ttft) / float64(pred))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if pred > 0 {
		m.ratio = m.ratio*decay + float64(ttft)/float64(pred)
		m.ratioW = m.ratioW*decay + 1
	}
	expect := m.base.Load() + m.block.Load()*blocks
	// A wait for a batch slot is at least as long as a sequence takes to
	// free one, far longer than prefill noise: twice the expected time
	// plus a millisecond is read as one. Before a few answers the model
	// is still the prior, and nothing is judged.
	c := int(m.cap())
	waited := m.obs >= 8 && ttft > 2*expect+int64(time.Millisecond)
	if m.fixCap > 0 && inflight >= c {
		waited = true // the slot wait was known in advance
	}
	lv := min(inflight, capLevels-1)
	w := float32(0)
	if waited {
		w = 1
		m.waits.Add(1)
	}
	if m.seen[lv] == 0 {
		m.ev[lv] = w
	} else {
		m.ev[lv] = m.ev[lv]*0.75 + w*0.25
	}
	if m.seen[lv] < 255 {
		m.seen[lv]++
	}
	// The topmost level seen often enough where most answers did not
	// wait: the capacity is above it (served). Above it, the levels where
	// most answers waited: the capacity is where waiting starts and never
	// stops again, the lowest level of that topmost run, skipping levels
	// seen too rarely to judge. An isolated level of slow answers below
	// levels that did not wait is noise. And a capacity is a transition: if
	// no level below the run answered without waiting, the backend is slow
	// at any load (or the host is), and nothing is learned.
	top, learned := -1, int32(0)
	for a := capLevels - 1; a >= 0; a-- {
		if m.seen[a] < minSeen {
			continue
		}
		if m.ev[a] <= 0.5 {
			top = a
			break
		}
		learned = int32(a)
	}
	m.served.Store(int32(max(top, 0)))
	if m.fixCap == 0 {
		if top < 0 {
			learned = 0
		}
		m.capacity.Store(learned)
	}
	if waited {
		return
	}
	x, y := float64(blocks), float64(ttft)
	m.sw = m.sw*decay + 1
	m.sm = m.sm*decay + x
	m.sy = m.sy*decay + y
	m.smm = m.smm*decay + x*x
	m.smy = m.smy*decay + x*y
	m.obs++
	if m.fleet != nil {
		m.fleet.add(x, y)
	}
	m.solve()
}

// fleetWeight is how many observations the fleet's pooled fit counts for
// in each backend's own: a backend that has answered a handful of
// requests leans on the fleet (one model on like hardware, as a fleet
// usually is), instead of fitting a slope to its noise; one with the
// last few hundred answers of its own is barely moved by it.
const fleetWeight = 16

// fleetFit is the decayed least-squares sums over every backend's answers.
type fleetFit struct {
	mu                   sync.Mutex
	sw, sm, sy, smm, smy float64
	// base and block are the fleet's own fit (ns; 0: no answer yet),
	// what a backend that has not answered yet is predicted with.
	base, block atomic.Int64
}

func (f *fleetFit) add(x, y float64) {
	f.mu.Lock()
	f.sw = f.sw*decay + 1
	f.sm = f.sm*decay + x
	f.sy = f.sy*decay + y
	f.smm = f.smm*decay + x*x
	f.smy = f.smy*decay + x*y
	base, blk := float64(f.base.Load()), float64(f.block.Load())
	if blk == 0 {
		base, blk = float64(priorBase), float64(priorBlock)
	}
	base, blk = fit(base, blk, f.sw, f.sm, f.sy, f.smm, f.smy)
	f.mu.Unlock()
	f.base.Store(int64(math.Round(base)))
	f.block.Store(int64(max(1, math.Round(blk))))
}

// blockTime is rates' prefill time per block.
func (m *predictor) blockTime() int64 { _, b := m.rates(); return b }

// rates are b's first-token base and prefill time per block: its own fit,
// or, until it has answered, the fleet's. A backend that joins, or has
// not been chosen yet, is then weighed like its peers rather than by
// the priors, which would make it look slower or faster than the
// backends already learned, and send a first turn away from the holder
// of its prompt, or to an engine that is not actually faster.
func (m *predictor) rates() (base, block int64) {
	base, block = m.base.Load(), m.block.Load()
	if m.observed.Load() > 0 || m.fleet == nil || (m.fixBase > 0 && m.fixBlock > 0) {
		return base, block
	}
	if fb := m.fleet.block.Load(); fb > 0 {
		if m.fixBase == 0 {
			base = m.fleet.base.Load()
		}
		if m.fixBlock == 0 {
			block = fb
		}
	}
	return base, block
}

// sums are m's own sums plus the fleet's, scaled to fleetWeight
// observations at most.
func (m *predictor) sums() (sw, sm, sy, smm, smy float64) {
	sw, sm, sy, smm, smy = m.sw, m.sm, m.sy, m.smm, m.smy
	f := m.fleet
	if f == nil {
		return
	}
	f.mu.Lock()
	fw, fm, fy, fmm, fmy := f.sw, f.sm, f.sy, f.smm, f.smy
	f.mu.Unlock()
	if fw <= 0 {
		return
	}
	k := min(1, fleetWeight/fw)
	return sw + k*fw, sm + k*fm, sy + k*fy, smm + k*fmm, smy + k*fmy
}

// solve refits base and block time from the sums, honouring fixed values.
func (m *predictor) solve() {
	base, blk := float64(m.base.Load()), float64(m.block.Load())
	sw, sm, sy, smm, smy := m.sums()
	switch {
	case m.fixBase > 0 && m.fixBlock > 0:
		return
	case m.fixBlock > 0:
		blk = float64(m.fixBlock)
		base = (sy - blk*sm) / sw
	case m.fixBase > 0:
		base = float64(m.fixBase)
		if smm > 0 {
			blk = (smy - base*sm) / smm
		}
	default:
		base, blk = fit(base, blk, sw, sm, sy, smm, smy)
	}
	m.base.Store(int64(math.Round(max(base, 0))))
	m.block.Store(int64(math.Round(max(blk, 0))))
}

// fit is the least-squares base and block time of the sums, starting
// from base and blk. A slope needs answers of different sizes: a spread
// of more than half a block (variance over 1/4) before the block time
// moves.
func fit(base, blk, sw, sm, sy, smm, smy float64) (float64, float64) {
	den := sw*smm - sm*sm
	if den > 0.25*sw*sw {
		blk = (sw*smy - sm*sy) / den
	}
	blk = max(blk, 0)
	return max((sy-blk*sm)/sw, 0), blk
}

// observeService learns how long a request holds its batch slot.
func (m *predictor) observeService(d int64) {
	for {
		old := m.service.Load()
		nw := d
		if old > 0 {
			nw = old + (d-old)/16
		}
		if m.service.CompareAndSwap(old, nw) {
			return
		}
	}
}

// predict is b's expected time to first token, in ns, for a request with
// novel blocks to compute, b's load word being st: its base, the prefill
// of every block ahead of and in the request, and, when the backend's
// batch is full, the wait for a slot (each of the requests beyond its
// capacity frees one in service/capacity on average). unix is the wall
// clock in ms for engine signals, 0 to ignore them.
func (s *Scheduler) predict(b *Backend, st uint64, novel int, unix int64) int64 {
	m := &b.model
	ra, rp := b.RemoteLoad()
	inflight := int64(st>>32) + int64(ra)
	pending := int64(uint32(st)) + int64(rp)
	base, block := m.rates()
	t := base + block*(pending+int64(novel))
	inflight, c, _ := s.engineBatch(b, inflight, unix)
	if c > 0 && inflight >= c {
		svc := m.service.Load()
		if svc <= 0 {
			svc = int64(priorService)
		}
		t += (inflight - c + 1) * svc / c
	}
	return t
}

// engineBatch is b's batch as routing judges it: inflight, the requests
// kvca counts on b, and the capacity known (cap), read against b's fresh
// engine signals (unix: the wall clock in ms, 0 to ignore them). The
// engine counts other clients too, and kvca what it sent since the
// engine was read, so the larger count holds; a queue beside running
// requests means a full batch at the running count, unless the flag
// fixes the capacity. full reports a KV cache near full (the engine
// preempts or queues).
func (s *Scheduler) engineBatch(b *Backend, inflight, unix int64) (n, c int64, full bool) {
	m := &b.model
	n, c = inflight, int64(m.cap())
	if unix == 0 {
		return n, c, false
	}
	e, ok := b.Engine(unix, s.ttft.engineAge)
	if !ok {
		return n, c, false
	}
	n = max(n, int64(e.Running)+int64(e.Waiting))
	if e.Waiting > 0 && e.Running > 0 && m.fixCap == 0 {
		c = int64(e.Running)
	}
	return n, c, e.KVUsage >= s.KVFull
}

// unixNow is r's instant on the wall clock when some backend has engine
// signals, else 0.
func (s *Scheduler) unixNow(r *Request) int64 {
	for _, b := range s.Backends {
		if b.engine.Load() != nil {
			return s.Table.TimeOf(r.Now).UnixMilli()
		}
	}
	return 0
}

// WriteTTFTMetrics writes the model's series in Prometheus text: register
// it with the edge's metrics.
func (s *Scheduler) WriteTTFTMetrics(w io.Writer) { s.ttft.set.WritePrometheus(w) }

// TTFTBackend is one backend's learned model, for /admin/state.
type TTFTBackend struct {
	Backend               string  `json:"backend"`
	BaseMs                float64 `json:"first_token_base_ms"`
	BlockMs               float64 `json:"prefill_block_ms"`
	Capacity              int     `json:"batch_capacity"`
	CapacitySource        string  `json:"batch_capacity_source"` // flag, learned or unknown
	ServedLevel           int     `json:"served_without_wait"`   // most already in flight at answers that did not wait
	ServiceMs             float64 `json:"service_ms"`
	Observations          uint64  `json:"observations"`
	SlotWaits             uint64  `json:"slot_waits"`
	ObservedOverPredicted float64 `json:"observed_over_predicted"`
	Resident              float64 `json:"resident"`
}

// TTFTState is the model's snapshot.
type TTFTState struct {
	ResidentWindowMs int64         `json:"resident_window_ms"`
	TurnGapMs        float64       `json:"turn_gap_ms"`
	ResidentEpsilon  float64       `json:"resident_epsilon"`
	Moves            uint64        `json:"moves"`
	Backends         []TTFTBackend `json:"backends"`
}

// TTFTSnapshot reports what the model has learned.
func (s *Scheduler) TTFTSnapshot() TTFTState {
	now := s.Table.Now()
	st := TTFTState{ResidentWindowMs: s.residentWindow(), ResidentEpsilon: s.ttft.eps, Moves: s.ttft.moves.Load()}
	if s.ttft.gaps.Load() > 0 {
		st.TurnGapMs = math.Float64frombits(s.ttft.gap.Load())
	}
	for _, b := range s.Backends {
		if b.Retired() {
			continue
		}
		m := &b.model
		src := "learned"
		switch {
		case m.fixCap > 0:
			src = "flag"
		case m.queueTold.Load():
			src = "engine"
		case m.capacity.Load() == 0:
			src = "unknown"
		}
		m.mu.Lock()
		ratio := 0.0
		if m.ratioW > 0 {
			ratio = m.ratio / m.ratioW
		}
		m.mu.Unlock()
		base, block := m.rates()
		st.Backends = append(st.Backends, TTFTBackend{
			Backend: b.Name, BaseMs: float64(base) / 1e6, BlockMs: float64(block) / 1e6,
			Capacity: int(m.cap()), CapacitySource: src, ServedLevel: int(m.served.Load()), ServiceMs: float64(m.service.Load()) / 1e6,
			Observations: m.observed.Load(), SlotWaits: m.waits.Load(), ObservedOverPredicted: ratio,
			Resident: m.residentAt(now, float64(s.residentWindow())),
		})
	}
	return st
}
