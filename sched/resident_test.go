package sched

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvca/kvca/chain"
)

// setResident gives b exactly x resident turns as of table time now.
func setResident(b *Backend, x float32, now int64) {
	b.model.resident.Store(uint64(math.Float32bits(x))<<32 | uint64(uint32(now)))
}

// setGap makes the scheduler have seen n gaps between turns, the mean
// being g ms.
func setGap(s *Scheduler, g float64, n uint64) {
	s.ttft.gap.Store(math.Float64bits(g))
	s.ttft.gaps.Store(n)
}

func TestResidentWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ttl    time.Duration
		window int64 // the operator's, ms
		gap    float64
		gaps   uint64
		want   int64
	}{
		{name: "the operator's window", ttl: time.Minute, window: 1500, gap: 100, gaps: 100, want: 1500},
		{name: "no gap seen: a tenth of the TTL", ttl: time.Minute, want: 6000},
		{name: "a tenth of a tiny TTL is at least 1ms", ttl: 5 * time.Millisecond, want: 1},
		{name: "15 gaps are too few to judge", ttl: time.Minute, gap: 100, gaps: 15, want: 6000},
		{name: "16 gaps: three gaps", ttl: time.Minute, gap: 100, gaps: 16, want: 300},
		{name: "at most the TTL", ttl: time.Minute, gap: 30_000, gaps: 16, want: 60_000},
		{name: "at least 1ms", ttl: time.Minute, gap: 0.1, gaps: 16, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New([]*Backend{NewBackend(0, "http://b", "b")}, chain.NewTable(chain.Config{TTL: tc.ttl, MaxBlocks: 1024}), 1, "ttft")
			if err != nil {
				t.Fatal(err)
			}
			s.ttft.window = tc.window
			setGap(s, tc.gap, tc.gaps)
			if got := s.residentWindow(); got != tc.want {
				t.Fatalf("window %d ms, want %d", got, tc.want)
			}
		})
	}
}

// TestNoteGap: the gap between a conversation's turns is the age of its
// known prefix's last block on its first holder; the first gap is taken
// as it is, later ones move the mean by 1/32 of their difference.
func TestNoteGap(t *testing.T) {
	t.Parallel()
	const ttl = 60_000 // ms, newFixed's
	type turn struct {
		holder   int   // the holder whose location is read
		touched  int64 // when the prefix was last touched there
		pin      bool
		now      int64
		wantGap  float64
		wantSeen uint64
	}
	for _, tc := range []struct {
		name  string
		turns []turn
	}{
		{"first gap, then the mean moves by 1/32", []turn{
			{holder: 0, touched: 1000, now: 4000, wantGap: 3000, wantSeen: 1},
			{holder: 0, touched: 5000, now: 6000, wantGap: 3000 + (1000-3000)/32.0, wantSeen: 2},
		}},
		{"a holder in the second word of the set", []turn{
			{holder: 70, touched: 1000, now: 3500, wantGap: 2500, wantSeen: 1},
		}},
		{"a turn in the same millisecond is a gap of 0", []turn{
			{holder: 0, touched: 2000, now: 2000, wantGap: 0, wantSeen: 1},
			{holder: 0, touched: 2000, now: 2000 + 32*64, wantGap: 64, wantSeen: 2},
		}},
		{"a location newer than the turn is no gap", []turn{
			{holder: 0, touched: 5000, now: 4000, wantGap: 0, wantSeen: 0},
		}},
		{"a pinned prefix exactly a TTL old still counts", []turn{
			{holder: 1, touched: 1000, pin: true, now: 1000 + ttl, wantGap: ttl, wantSeen: 1},
		}},
		{"a pinned prefix older than the TTL does not", []turn{
			{holder: 1, touched: 1000, pin: true, now: 1000 + ttl + 1, wantGap: 0, wantSeen: 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFixed(t, 1, "ttft")
			c := chainOf(0, 6)
			for i, tu := range tc.turns {
				// The prefix is the first 4 blocks; the 5th is held
				// elsewhere, and later, so only the right block gives
				// the right age.
				if tu.pin {
					s.Table.Pin(c[:4], tu.holder, tu.touched)
				} else {
					s.Table.TouchAt(c[:4], tu.holder, tu.touched)
				}
				s.Table.TouchAt(c[4:5], tu.holder+1, tu.now)
				var holders chain.Set
				holders.Add(tu.holder)
				holders.Add(tu.holder + 3)
				s.noteGap(&Request{Chain: c, Followup: true, Now: tu.now}, &holders, 4)
				got := 0.0
				if s.ttft.gaps.Load() > 0 {
					got = math.Float64frombits(s.ttft.gap.Load())
				}
				if got != tu.wantGap || s.ttft.gaps.Load() != tu.wantSeen {
					t.Fatalf("turn %d: gap %v after %d, want %v after %d", i, got, s.ttft.gaps.Load(), tu.wantGap, tu.wantSeen)
				}
			}
		})
	}
}

// TestFollowupLearnsTheGap: routing a follow-up by its prefix is what
// teaches the gap, under every policy whose placement reads the resident
// window (kvca-cost's prompt holders, ttft's bound), and kvca's Phase 2
// that kvca-cost shares.
func TestFollowupLearnsTheGap(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"ttft", "kvca-cost", "kvca"} {
		s := newFixed(t, 2, policy)
		c := chainOf(0, 8)
		s.Table.TouchAt(c[:6], 0, 100)
		var d Decision
		var res Reservation
		if !s.Route(&Request{Chain: c, Followup: true, Now: 2100}, &d, &res) {
			t.Fatal("no backend")
		}
		if d.Backend.Index != 0 || d.Phase != PhaseFollowup || d.Cached != 6 {
			t.Fatalf("%s: %+v", policy, d)
		}
		if s.ttft.gaps.Load() != 1 || math.Float64frombits(s.ttft.gap.Load()) != 2000 {
			t.Fatalf("%s: gap %v after %d", policy, math.Float64frombits(s.ttft.gap.Load()), s.ttft.gaps.Load())
		}
		if snap := s.TTFTSnapshot(); snap.TurnGapMs != 2000 {
			t.Fatalf("%s: snapshot gap %v", policy, snap.TurnGapMs)
		}
		res.ReleaseActive()
	}
}

// TestResidentBoundLimits: a new conversation may go where it leaves at
// most (1+ε)× the mean resident work, counting itself, and always where
// the least resident backend is.
func TestResidentBoundLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		eps       float64
		slack     float64
		res       []float32 // per backend; -1: not eligible
		wantOpen  []int
		wantState []float32
	}{
		// The limit is max((1+ε)·m, m+slack, least+1), m being the mean
		// with one more turn.
		// m = 6/4: max(3, 2) = 3: 2+1 fits exactly.
		{name: "ε 1 lets a busier backend in", eps: 1, res: []float32{2, 1, 1, 1}, wantOpen: []int{0, 1, 2, 3}},
		// m = 9/4: max(2.8125, 2) = 2.8125.
		{name: "far above the mean", eps: 0.25, res: []float32{5, 1, 1, 1}, wantOpen: []int{1, 2, 3}},
		// m = 7/4: max(2.1875, 2): 3+1 does not fit.
		{name: "just above the mean", eps: 0.25, res: []float32{3, 1, 1, 1}, wantOpen: []int{1, 2, 3}},
		// m = 7/4 with slack: max(2.1875, 3.75, 2) = 3.75, still not.
		{name: "just above the mean with slack", eps: 0.25, slack: residentSlack, res: []float32{3, 1, 1, 1}, wantOpen: []int{1, 2, 3}},
		// m = 2/4: max(0.625, 1) = 1: the strict bound spreads.
		{name: "a turn above the mean at small counts", eps: 0.25, res: []float32{1, 0, 0, 0}, wantOpen: []int{1, 2, 3}},
		// m = 2/4 with slack: max(0.625, 2.5, 1) = 2.5: a prompt's
		// second conversation may join its first.
		{name: "a turn above the mean at small counts with slack", eps: 0.25, slack: residentSlack, res: []float32{1, 0, 0, 0}, wantOpen: []int{0, 1, 2, 3}},
		// m = 5/3: max(5/3, 0+1): only the idle backend.
		{name: "ε 0 bounds too", eps: 0, res: []float32{0, 2, 2}, wantOpen: []int{0}},
		// m = 5/2: max(2.5, 2+1) = 3: even work is never out of bounds.
		{name: "the least resident of the eligible", eps: 0, res: []float32{2, -1, 2}, wantOpen: []int{0, 2}},
		{name: "negative ε: no bound", eps: -1, res: []float32{9, 0, 1}, wantOpen: []int{0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFixed(t, len(tc.res), "ttft")
			s.ttft.eps = tc.eps
			const now = 7000
			var r Request
			for i, x := range tc.res {
				if x < 0 {
					r.Exclude.Add(i)
					continue
				}
				setResident(s.Backends[i], x, now)
			}
			elig := s.Eligible(&r)
			var res [chain.MaxBackends]float32
			open := s.residentBound(&elig, now, &res, tc.slack)
			var got []int
			open.Each(func(i int) { got = append(got, i) })
			if !slices.Equal(got, tc.wantOpen) {
				t.Fatalf("open %v, want %v", got, tc.wantOpen)
			}
			for i, x := range tc.res {
				if x >= 0 && res[i] != x {
					t.Fatalf("resident of %d: %v, want %v", i, res[i], x)
				}
			}
		})
	}
}

// kvca-cost sends a new conversation whose prefix no backend holds to the
// least resident of the backends tied on cost, so the first sights of
// different prompts spread over the fleet instead of going in turns to
// backends that already hold conversations; cost keeps its turns.
func TestKvcaCostFirstSightToTheLeastResidentOfTheTied(t *testing.T) {
	s := newFixed(t, 4, "kvca-cost")
	now := s.Table.Now()
	for i, x := range []float32{3, 2, 0.5, 2} {
		setResident(s.Backends[i], x, now)
	}
	// Each conversation placed counts one resident turn where it went
	// (the clock stands still, so nothing decays): 0.5 → 1.5 → 2.5, and
	// the first of equals wins.
	for n, want := range []int{2, 2, 1, 3} {
		d, res := route(t, s, &Request{Chain: chainOf(100*n, 10)})
		if d.Backend.Index != want || d.Cached != 0 || d.Phase != PhaseBootstrap {
			t.Fatalf("request %d: %+v, want backend %d, the least resident idle one", n, d, want)
		}
		res.ReleaseActive()
		res.ReleasePrefill()
	}
	// Resident work is now 3, 3, 2.5, 3. A backend busier than the
	// others is not tied, however little it holds: load comes first.
	s.Backends[2].state.Add(activeUnit)
	if d, _ := route(t, s, &Request{Chain: chainOf(900, 10)}); d.Backend.Index != 0 {
		t.Fatalf("%+v, want backend 0, the first of the least resident of the least loaded", d)
	}

	c := newFixed(t, 4, "cost")
	for i, x := range []float32{3, 2, 0.5, 2} {
		setResident(c.Backends[i], x, now)
	}
	seen := map[int]bool{}
	for n := 0; n < 4; n++ {
		d, res := route(t, c, &Request{Chain: chainOf(100*n, 10)})
		seen[d.Backend.Index] = true
		res.ReleaseActive()
		res.ReleasePrefill()
	}
	if len(seen) != 4 {
		t.Fatalf("cost went to %v, want its ties taken in turns", seen)
	}
}
