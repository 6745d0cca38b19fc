package admit

import "github.com/kvca/kvca/sched"

// AdaptToEngine follows b's engine's own queue (Config.EngineAware, with
// a limit set; otherwise it does nothing). Telemetry calls it after each
// read of b's signals, fresh reporting whether they are within the
// staleness bound (sched.Backend.Engine).
//
// While the engine reports requests waiting in its own queue, kvca's
// requests there are more than it runs at once: b's limit drops at once
// to kvca's in-flight requests on b minus that queue (at least 1), so
// further requests wait in kvca, where priority and fairness apply,
// rather than in the engine. While it reports no queue, or its signals
// are stale, the limit grows back by one per reading up to
// --max-inflight-per-backend, and the waiters that the new room fits are
// granted at once.
func (a *Admitter) AdaptToEngine(b int, sig sched.EngineSignals, fresh bool) {
	if !a.limited || !a.cfg.EngineAware || b < 0 || b >= len(a.slots) {
		return
	}
	s := &a.slots[b]
	cur, top := s.limit.Load(), int32(a.cfg.MaxInflight)
	next := min(top, cur+1)
	if fresh && sig.Waiting > 0 {
		next = min(cur, max(1, s.inflight.Load()-sig.Waiting))
	}
	if next == cur {
		return
	}
	s.limit.Store(next)
	if next > cur && a.waiting.Load() > 0 {
		a.fill(b)
	}
}
