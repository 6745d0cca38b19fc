package admit

import "github.com/kvca/kvca/sched"

// The engine_aware rule (Config.EngineAware, --queue-engine-aware)
// changes no ticket's decision: it moves a backend's limit, which the
// limit rule then applies.

// engineLimit is a backend's next limit, from cur, at most top: while its
// engine reports waiting requests of its own (in fresh signals), kvca's
// inflight requests there are more than it runs at once, so the limit
// drops at once to inflight minus that queue (at least 1, never up);
// otherwise it grows back by one per reading.
func engineLimit(cur, top, inflight, waiting int32, fresh bool) int32 {
	if fresh && waiting > 0 {
		return min(cur, max(1, inflight-waiting))
	}
	return min(top, cur+1)
}

// AdaptToEngine follows b's engine's own queue (Config.EngineAware, with
// a limit set; otherwise it does nothing). Telemetry calls it after each
// read of b's signals, fresh reporting whether they are within the
// staleness bound (sched.Backend.Engine).
//
// While the engine reports requests waiting in its own queue, further
// requests wait in kvca, where priority and fairness apply, rather than
// in the engine (engineLimit); once the limit grows, the waiters that the
// new room fits are granted at once.
func (a *Admitter) AdaptToEngine(b int, sig sched.EngineSignals, fresh bool) {
	if !a.limited || !a.cfg.EngineAware || b < 0 || b >= len(a.slots) {
		return
	}
	s := &a.slots[b]
	cur := s.limit.Load()
	next := engineLimit(cur, int32(a.cfg.MaxInflight), s.inflight.Load(), sig.Waiting, fresh)
	if next == cur {
		return
	}
	s.limit.Store(next)
	if next > cur && a.waiting.Load() > 0 {
		a.fill(b)
	}
}
