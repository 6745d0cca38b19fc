package sched

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/chain"
)

// fakeMono puts every backend of s on one latency clock the test moves.
func fakeMono(s *Scheduler) *int64 {
	now := new(int64)
	for _, b := range s.Backends {
		b.model.clock = func() int64 { return *now }
	}
	return now
}

// TestFirstByteLearnsTheLatency: the time from dispatch to first byte
// (and to the end, for the service time) is what the model learns, with
// the load the request found counted as ahead of it.
func TestFirstByteLearnsTheLatency(t *testing.T) {
	t.Parallel()
	s := newFixed(t, 1, "ttft")
	b := s.Backends[0]
	now := fakeMono(s)
	*now = 5 * ms
	b.state.Store(pack(2, 3)) // two in flight, three blocks to prefill
	d, res := route(t, s, &Request{Chain: chainOf(0, 5)})
	// Prior: 20ms + (3 pending + 5 novel) × 1ms, below any capacity.
	if d.Predicted != 28*time.Millisecond {
		t.Fatalf("predicted %v", d.Predicted)
	}
	*now += 36 * ms
	res.FirstByte()
	m := &b.model
	// One answer of 8 blocks teaches no slope: base = 36ms - 8 × 1ms.
	if m.base.Load() != 28*ms || m.block.Load() != int64(priorBlock) || m.seen[2] != 1 || m.obs != 1 {
		t.Fatalf("base %d block %d seen[2] %d obs %d", m.base.Load(), m.block.Load(), m.seen[2], m.obs)
	}
	*now += 64 * ms
	res.ReleaseActive()
	if m.service.Load() != 100*ms {
		t.Fatalf("service %d, want %d", m.service.Load(), 100*ms)
	}
	snap := s.TTFTSnapshot().Backends[0]
	if snap.ObservedOverPredicted != 36.0/28 || snap.ServiceMs != 100 || snap.BaseMs != 28 || snap.BlockMs != 1 {
		t.Fatalf("%+v", snap)
	}
}

func TestObserveService(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		obs  []int64
		want int64
	}{
		{"the first answer is taken as it is", []int64{100 * ms}, 100 * ms},
		{"later ones move it by 1/16 of their difference", []int64{100 * ms, 260 * ms}, 110 * ms},
		{"down as well", []int64{100 * ms, 260 * ms, 30 * ms}, 110*ms - 5*ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m predictor
			for _, d := range tc.obs {
				m.observeService(d)
			}
			if got := m.service.Load(); got != tc.want {
				t.Fatalf("service %d, want %d", got, tc.want)
			}
		})
	}
}

// TestSlotWaitJudgement: an answer is read as a wait for a batch slot
// when it took more than twice the expected time plus a millisecond, once
// at least 8 answers shaped the model; with a known capacity, whenever
// the batch was full.
func TestSlotWaitJudgement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		capacity int
		fast     int   // answers at the prior's 20ms first
		ttft     int64 // then one of this, blocks 0
		inflight int
		want     uint64 // waits
	}{
		{name: "seven answers are too few to judge", fast: 7, ttft: 100 * ms, want: 0},
		{name: "eight are enough", fast: 8, ttft: 100 * ms, want: 1},
		{name: "twice plus a millisecond is no wait", fast: 8, ttft: 41 * ms, want: 0},
		{name: "a nanosecond more is", fast: 8, ttft: 41*ms + 1, want: 1},
		{name: "twice is no wait", fast: 8, ttft: 40 * ms, want: 0},
		{name: "a full batch of known capacity waits", capacity: 2, ttft: 20 * ms, inflight: 2, want: 1},
		{name: "a fuller one too", capacity: 2, ttft: 20 * ms, inflight: 3, want: 1},
		{name: "one with room does not", capacity: 2, ttft: 20 * ms, inflight: 1, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFixed(t, 1, "ttft")
			if err := s.SetTTFT(TTFTConfig{Capacity: tc.capacity}); err != nil {
				t.Fatal(err)
			}
			m := &s.Backends[0].model
			for range tc.fast {
				m.learn(0, 0, 20*ms, 0)
			}
			m.learn(0, tc.inflight, tc.ttft, 0)
			if m.waits.Load() != tc.want {
				t.Fatalf("waits %d, want %d", m.waits.Load(), tc.want)
			}
			// The judged answer is its level's first unless fast ones came.
			if lv := tc.inflight; tc.fast == 0 && m.ev[lv] != float32(tc.want) {
				t.Fatalf("ev[%d] %v, want %v", lv, m.ev[lv], tc.want)
			}
			// A wait is kept out of the rate fit.
			if wantObs := uint64(tc.fast) + 1 - tc.want; m.obs != wantObs {
				t.Fatalf("obs %d, want %d", m.obs, wantObs)
			}
		})
	}
}

// TestWaitShares: each level of in-flight requests keeps a share of
// answers that waited, the first answer setting it and later ones moving
// it by a quarter; levels beyond the last count as the last.
func TestWaitShares(t *testing.T) {
	t.Parallel()
	s := newFixed(t, 1, "ttft")
	m := &s.Backends[0].model
	for range 8 {
		m.learn(0, 0, 20*ms, 0)
	}
	slow, fast := int64(100*ms), int64(20*ms)
	for i, step := range []struct {
		level int
		ttft  int64
		ev    float32
		seen  uint8
	}{
		{5, slow, 1, 1},
		{5, fast, 0.75, 2},
		{5, slow, 0.75*0.75 + 0.25, 3},
		{6, fast, 0, 1},
		{6, slow, 0.25, 2},
		{100, slow, 1, 1},
		{capLevels - 1, fast, 0.75, 2},
	} {
		m.learn(0, step.level, step.ttft, 0)
		lv := min(step.level, capLevels-1)
		if m.ev[lv] != step.ev || m.seen[lv] != step.seen {
			t.Fatalf("step %d: level %d ev %v seen %d, want %v %d", i, lv, m.ev[lv], m.seen[lv], step.ev, step.seen)
		}
	}
	// The count stops at 255.
	for range 300 {
		m.learn(0, 2, fast, 0)
	}
	if m.seen[2] != 255 {
		t.Fatalf("seen %d after 300", m.seen[2])
	}
}

func TestCapacityAtTheLowestLevels(t *testing.T) {
	t.Parallel()
	t.Run("one slot", func(t *testing.T) {
		s := newFixed(t, 1, "ttft")
		m := &s.Backends[0].model
		teach(m, 2*ms, 300_000, 0)
		for range minSeen {
			for a := 1; a < 4; a++ {
				m.learn(2, a, 2*ms+600_000+30*ms, 0)
			}
		}
		if got := m.capacity.Load(); got != 1 {
			t.Fatalf("capacity %d, want 1", got)
		}
	})
	// A few slow answers at the upper levels, as a busy host gives when
	// its CPU is shared by the requests in flight, teach no capacity: a
	// full batch makes every arrival past it wait, again and again.
	t.Run("fewer answers than a judgement needs", func(t *testing.T) {
		s := newFixed(t, 1, "ttft")
		m := &s.Backends[0].model
		teach(m, 2*ms, 300_000, 0)
		slowFrom(m, minSeen-1, 8, 5)
		if got := m.capacity.Load(); got != 0 {
			t.Fatalf("capacity %d from %d answers a level", got, minSeen-1)
		}
		for a := 5; a < 8; a++ {
			m.learn(2, a, 2*ms+600_000+30*ms, 0)
		}
		if got := m.capacity.Load(); got != 5 {
			t.Fatalf("capacity %d, want 5 once the levels are seen %d times", got, minSeen)
		}
	})
	t.Run("half the answers waiting is not most", func(t *testing.T) {
		s := newFixed(t, 1, "ttft")
		m := &s.Backends[0].model
		teach(m, 2*ms, 300_000, 0)
		// Decayed shares rarely land on exactly one half: set it.
		m.ev[2], m.seen[2] = 0.5, minSeen
		for range minSeen {
			m.learn(2, 3, 2*ms+600_000+30*ms, 0)
		}
		if got := m.capacity.Load(); got != 3 {
			t.Fatalf("capacity %d, want 3", got)
		}
	})
}

// TestSolve: the rates refitted from the decayed sums.
func TestSolve(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                 string
		fixBase, fixBlock    int64
		sw, sm, sy, smm, smy float64
		wantBase, wantBlock  int64
	}{
		{name: "both fixed", fixBase: 3 * ms, fixBlock: 400_000, sw: 2, sm: 1, sy: 44 * float64(ms), smm: 2, smy: 25 * float64(ms),
			wantBase: int64(priorBase), wantBlock: int64(priorBlock)},
		{name: "fixed base, answers with nothing to prefill", fixBase: 3 * ms, sw: 4, sm: 0, sy: 12 * float64(ms),
			wantBase: 3 * ms, wantBlock: int64(priorBlock)},
		// block = (smy - base·sm)/smm = (10ms - 3ms·2)/4.
		{name: "fixed base", fixBase: 3 * ms, sw: 2, sm: 2, sy: 10 * float64(ms), smm: 4, smy: 10 * float64(ms),
			wantBase: 3 * ms, wantBlock: 1 * ms},
		// base = (sy - block·sm)/sw = (10ms - 0.5ms·4)/2.
		{name: "fixed block", fixBlock: 500_000, sw: 2, sm: 4, sy: 10 * float64(ms), smm: 8, smy: 20 * float64(ms),
			wantBase: 4 * ms, wantBlock: 500_000},
		// den = sw·smm - sm² = 3 > sw²/4 = 1: block = (2·25ms - 44ms)/3.
		{name: "spread enough", sw: 2, sm: 1, sy: 44 * float64(ms), smm: 2, smy: 25 * float64(ms),
			wantBase: 21 * ms, wantBlock: 2 * ms},
		// den = 1 = sw²/4: the prior's block, base = (44ms - 1ms)/2.
		{name: "a spread of exactly half a block", sw: 2, sm: 1, sy: 44 * float64(ms), smm: 1, smy: 25 * float64(ms),
			wantBase: 21*ms + 500_000, wantBlock: int64(priorBlock)},
		// den = 0.5 < sw²/4 = 1.
		{name: "too little spread", sw: 2, sm: 1, sy: 44 * float64(ms), smm: 0.75, smy: 25 * float64(ms),
			wantBase: 21*ms + 500_000, wantBlock: int64(priorBlock)},
		// A falling line: the block time is 0, not negative.
		{name: "no negative block time", sw: 2, sm: 1, sy: 44 * float64(ms), smm: 2, smy: 10 * float64(ms),
			wantBase: 22 * ms, wantBlock: 0},
		{name: "no negative base", fixBlock: 500_000, sw: 2, sm: 8, sy: 2 * float64(ms), smm: 64,
			wantBase: 0, wantBlock: 500_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFixed(t, 1, "ttft")
			m := &s.Backends[0].model
			m.fixBase, m.fixBlock = tc.fixBase, tc.fixBlock
			m.sw, m.sm, m.sy, m.smm, m.smy = tc.sw, tc.sm, tc.sy, tc.smm, tc.smy
			m.solve()
			if m.base.Load() != tc.wantBase || m.block.Load() != tc.wantBlock {
				t.Fatalf("base %d block %d, want %d %d", m.base.Load(), m.block.Load(), tc.wantBase, tc.wantBlock)
			}
		})
	}
}

// TestObservedOverPredicted: the ratio of observed to predicted first-token
// times, as a decayed mean (the snapshot) and a histogram (the metrics),
// over the answers that had a prediction.
func TestObservedOverPredicted(t *testing.T) {
	t.Parallel()
	s := newFixed(t, 1, "ttft")
	m := &s.Backends[0].model
	ratio := func() float64 { return s.TTFTSnapshot().Backends[0].ObservedOverPredicted }
	metric := func(suffix string) string {
		var buf bytes.Buffer
		s.WriteTTFTMetrics(&buf)
		for _, l := range strings.Split(buf.String(), "\n") {
			if name, v, ok := strings.Cut(l, " "); ok && name == "kvca_ttft_observed_over_predicted_"+suffix+`{backend="b"}` {
				return v
			}
		}
		return ""
	}
	if ratio() != 0 || metric("count") != "" {
		t.Fatalf("before any answer: ratio %v count %q", ratio(), metric("count"))
	}
	m.learn(0, 0, 30*ms, 0) // no prediction
	if ratio() != 0 || metric("count") != "" {
		t.Fatalf("after an answer without prediction: ratio %v count %q", ratio(), metric("count"))
	}
	m.learn(0, 0, 30*ms, 20*ms)
	if ratio() != 1.5 || metric("count") != "1" || metric("sum") != "1.5" {
		t.Fatalf("after 30ms on 20ms: ratio %v count %q sum %q", ratio(), metric("count"), metric("sum"))
	}
	m.learn(0, 0, 10*ms, 20*ms)
	first, second, d := 1.5, 0.5, float64(decay)
	if want := (first*d + second) / (d + 1); ratio() != want || metric("count") != "2" || metric("sum") != "2" {
		t.Fatalf("after 10ms on 20ms: ratio %v want %v, count %q sum %q", ratio(), want, metric("count"), metric("sum"))
	}
	if m.observed.Load() != 3 {
		t.Fatalf("observed %d", m.observed.Load())
	}
}

// TestLearnWithoutMetrics: a predictor built outside New has no histogram
// and learns all the same.
func TestLearnWithoutMetrics(t *testing.T) {
	t.Parallel()
	var m predictor
	m.learn(0, 0, 30*ms, 20*ms)
	if m.observed.Load() != 1 || m.ratio != 1.5 || m.ratioW != 1 {
		t.Fatalf("observed %d ratio %v/%v", m.observed.Load(), m.ratio, m.ratioW)
	}
}

func TestSetTTFT(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		cfg                 TTFTConfig
		wantAge             int64
		wantBase, wantBlock int64
		wantCap             int32
		wantWindow          int64
	}{
		{name: "all learned", wantAge: 5000, wantBase: int64(priorBase), wantBlock: int64(priorBlock)},
		{name: "fixed", cfg: TTFTConfig{Capacity: 4, BlockTime: 400 * time.Microsecond, Base: 3 * time.Millisecond,
			ResidentEpsilon: 0.5, ResidentWindow: 2 * time.Second, EngineMaxAge: 2 * time.Second},
			wantAge: 2000, wantBase: 3 * ms, wantBlock: 400_000, wantCap: 4, wantWindow: 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFixed(t, 2, "ttft")
			if err := s.SetTTFT(tc.cfg); err != nil {
				t.Fatal(err)
			}
			if s.ttft.engineAge != tc.wantAge || s.ttft.eps != tc.cfg.ResidentEpsilon || s.ttft.window != tc.wantWindow {
				t.Fatalf("engine age %d eps %v window %d", s.ttft.engineAge, s.ttft.eps, s.ttft.window)
			}
			for _, b := range s.Backends {
				m := &b.model
				if m.base.Load() != tc.wantBase || m.block.Load() != tc.wantBlock || m.cap() != tc.wantCap {
					t.Fatalf("backend %d: base %d block %d capacity %d", b.Index, m.base.Load(), m.block.Load(), m.cap())
				}
			}
		})
	}
	// A learned capacity is used until the operator fixes one.
	s := newFixed(t, 1, "ttft")
	m := &s.Backends[0].model
	m.capacity.Store(6)
	if m.cap() != 6 {
		t.Fatalf("learned capacity %d", m.cap())
	}
	if err := s.SetTTFT(TTFTConfig{Capacity: 3}); err != nil || m.cap() != 3 {
		t.Fatalf("fixed capacity %d (%v)", m.cap(), err)
	}
}

func TestTTFTConfigCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  TTFTConfig
		flag string // in the error; "": valid
	}{
		{TTFTConfig{}, ""},
		{TTFTConfig{ResidentEpsilon: -1}, ""},
		{TTFTConfig{Capacity: -1}, "--batch-capacity"},
		{TTFTConfig{BlockTime: -1}, "--prefill-block-time"},
		{TTFTConfig{Base: -1}, "--first-token-base"},
		{TTFTConfig{ResidentWindow: -1}, "--resident-window"},
		{TTFTConfig{EngineMaxAge: -1}, "engine signal age"},
		{TTFTConfig{ResidentEpsilon: math.NaN()}, "--resident-epsilon"},
		{TTFTConfig{ResidentEpsilon: math.Inf(1)}, "--resident-epsilon"},
		{TTFTConfig{ResidentEpsilon: math.Inf(-1)}, "--resident-epsilon"},
	} {
		err := tc.cfg.Check()
		if (tc.flag == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.flag)) {
			t.Errorf("Check(%+v) = %v, want %q", tc.cfg, err, tc.flag)
		}
	}
}

// TestTTFTMetricsAndSnapshot: what the model has learned, in the units the
// metrics and the admin state use.
func TestTTFTMetricsAndSnapshot(t *testing.T) {
	t.Parallel()
	s := newFixed(t, 2, "ttft")
	if err := s.SetTTFT(TTFTConfig{Capacity: 0, ResidentEpsilon: 0.25, ResidentWindow: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	s.Backends[1].Name = "c"
	m := &s.Backends[0].model
	m.base.Store(3 * ms)
	m.block.Store(250_000)
	m.capacity.Store(5)
	m.service.Store(1500 * ms)
	m.observed.Store(7)
	m.waits.Store(2)
	setResident(s.Backends[0], 3, s.Table.Now())
	setGap(s, 250, 4)
	s.ttft.moves.Store(9)
	s.Backends[1].model.fixCap = 2

	snap := s.TTFTSnapshot()
	want := TTFTState{ResidentWindowMs: 2000, TurnGapMs: 250, ResidentEpsilon: 0.25, Moves: 9, Backends: []TTFTBackend{
		{Backend: "b", BaseMs: 3, BlockMs: 0.25, Capacity: 5, CapacitySource: "learned", ServiceMs: 1500,
			Observations: 7, SlotWaits: 2, Resident: 3},
		{Backend: "c", BaseMs: 20, BlockMs: 1, Capacity: 2, CapacitySource: "flag"},
	}}
	if len(snap.Backends) != 2 || snap.ResidentWindowMs != want.ResidentWindowMs || snap.TurnGapMs != want.TurnGapMs ||
		snap.ResidentEpsilon != want.ResidentEpsilon || snap.Moves != want.Moves ||
		snap.Backends[0] != want.Backends[0] || snap.Backends[1] != want.Backends[1] {
		t.Fatalf("snapshot\n%+v\nwant\n%+v", snap, want)
	}
	s.Backends[1].model.fixCap = 0
	if got := s.TTFTSnapshot().Backends[1]; got.CapacitySource != "unknown" || got.Capacity != 0 {
		t.Fatalf("%+v", got)
	}

	var buf bytes.Buffer
	s.WriteTTFTMetrics(&buf)
	for _, line := range []string{
		`kvca_ttft_first_token_base_seconds{backend="b"} 0.003`,
		`kvca_ttft_prefill_block_seconds{backend="b"} 0.00025`,
		`kvca_ttft_batch_capacity{backend="b"} 5`,
		`kvca_ttft_service_seconds{backend="b"} 1.5`,
		`kvca_ttft_observations_total{backend="b"} 7`,
		`kvca_ttft_slot_waits_total{backend="b"} 2`,
		`kvca_backend_resident{backend="b"} 3`,
		`kvca_ttft_moves_total 9`,
		`kvca_resident_window_seconds 2`,
	} {
		if !strings.Contains(buf.String(), line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, buf.String())
		}
	}
}

// Rebuild gives a model to the backends that have none, and keeps a live
// backend's learned one, even a learned base of 0.
func TestRebuildKeepsLearnedModels(t *testing.T) {
	bs := []*Backend{NewBackend(0, "http://a", "a"), NewBackend(1, "http://b", "b")}
	s, err := New(bs, chain.NewTable(chain.Config{TTL: time.Minute, MaxBlocks: 1 << 10}), 4, "ttft")
	if err != nil {
		t.Fatal(err)
	}
	bs[0].model.base.Store(0)
	bs[0].model.block.Store(7)
	added := NewBackend(2, "http://c", "c")
	n, err := s.Rebuild(append(bs[:2:2], added), "", -1)
	if err != nil {
		t.Fatal(err)
	}
	if b := n.Backends[0]; b.model.base.Load() != 0 || b.model.block.Load() != 7 {
		t.Fatalf("the live backend's model was reset: base %d block %d", b.model.base.Load(), b.model.block.Load())
	}
	if added.model.fleet == nil || added.model.base.Load() != int64(priorBase) {
		t.Fatal("the new backend has no model")
	}
}
