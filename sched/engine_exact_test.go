package sched

import (
	"testing"
	"time"
)

func TestEngineLatest(t *testing.T) {
	t.Parallel()
	b := NewBackend(0, "http://b", "b")
	if _, ok := b.EngineLatest(); ok {
		t.Fatal("signals before any were set")
	}
	b.SetEngine(EngineSignals{Running: 3, At: 5})
	// However old.
	if got, ok := b.EngineLatest(); !ok || got.Running != 3 || got.At != 5 {
		t.Fatalf("%+v %v", got, ok)
	}
}

// TestEngineLoadAndNearFullAtTheirBounds: signals exactly maxAge old are
// still fresh, and a cache used exactly KVFull is near full.
func TestEngineLoadAndNearFullAtTheirBounds(t *testing.T) {
	t.Parallel()
	const at, maxAge = 10_000, 500
	for _, tc := range []struct {
		name     string
		sig      EngineSignals
		now      int64
		wantLoad uint64
		wantFull bool
	}{
		{name: "fresh", sig: EngineSignals{Foreign: 2, KVUsage: 0.95}, now: at, wantLoad: 8, wantFull: true},
		{name: "exactly maxAge old", sig: EngineSignals{Foreign: 2, KVUsage: 0.95}, now: at + maxAge, wantLoad: 8, wantFull: true},
		{name: "a millisecond older", sig: EngineSignals{Foreign: 2, KVUsage: 0.95}, now: at + maxAge + 1},
		{name: "just below KVFull", sig: EngineSignals{Foreign: 1, KVUsage: 0.94}, now: at, wantLoad: 4},
		{name: "nothing foreign", sig: EngineSignals{Running: 5, KVUsage: 1}, now: at, wantFull: true},
		// 1×4 + 1 waiting × 6 mean novel blocks.
		{name: "foreign and waiting", sig: EngineSignals{Running: 3, Waiting: 1, Foreign: 1, ForeignWaiting: 1}, now: at, wantLoad: 4 + 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(t, 1, "cost")
			s.SetEngineMaxAge(maxAge * time.Millisecond)
			b := s.Backends[0]
			b.countRouted(10, 4)
			tc.sig.At = at
			b.SetEngine(tc.sig)
			if got := s.engineLoad(b, tc.now); got != tc.wantLoad {
				t.Errorf("engine load %d, want %d", got, tc.wantLoad)
			}
			if got := s.nearFull(b, tc.now); got != tc.wantFull {
				t.Errorf("near full %v, want %v", got, tc.wantFull)
			}
		})
	}
}

// TestNearFullAtLongPrefixBlocks: exactly LongPrefixBlocks novel blocks is
// a long prefill; what counts is what the backend would compute, not the
// whole chain.
func TestNearFullAtLongPrefixBlocks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		n, cached  int
		wantHolder bool
	}{
		{name: "16 novel blocks avoid the full holder", n: 16 + 4, cached: 4},
		{name: "15 do not", n: 15 + 10, cached: 10, wantHolder: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(t, 2, "cost")
			s.SetEngineMaxAge(time.Hour)
			c := chainOf(0, tc.n)
			s.Table.Touch(c[:tc.cached], 0, s.Table.Now())
			fresh(s.Backends[0], EngineSignals{KVUsage: 0.99})
			fresh(s.Backends[1], EngineSignals{})
			d, res := route(t, s, &Request{Chain: c, Followup: true})
			if got := d.Backend.Index == 0; got != tc.wantHolder {
				t.Fatalf("%+v on %d", d, d.Backend.Index)
			}
			res.ReleaseActive()
		})
	}
}
