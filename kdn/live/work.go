package live

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/kvca/kvca/kdn"
)

// warmAttempts is how often a warm-up is tried before its task fails; the
// task shows retry_wait in between.
const warmAttempts = 3

// opError is why an operation failed. Tasks carry no message on the wire,
// so it goes to the log; retry says whether another attempt may help.
type opError struct {
	msg   string
	retry bool
}

func (e *opError) Error() string { return e.msg }

func permanent(msg string) error { return &opError{msg: msg} }

// start begins an operation whose key is new. It runs under the task
// table's lock, so a worker it launches blocks on its first state change
// until the task is in the table.
func (g *Gateway) start(op kdn.CacheOperationType, p *prefixInfo, b int, task kdn.CacheOperationTask) newEntry {
	gen := task.EndpointGeneration.Value()
	if needsHealthy(op) {
		// An unhealthy endpoint fails the operation on the spot, and the
		// failed task is kept for status calls; a reset since negotiation
		// is just stale, as negotiation would have said.
		if f, bad := g.vouch(b, gen, kdn.OutcomeFailed); bad {
			n := newEntry{refusal: f, refused: true}
			if f.Outcome == kdn.OutcomeFailed {
				n.task = failedUnattempted(task)
			}
			return n
		}
	}
	switch op {
	case kdn.OpPin, kdn.OpUnpin:
		if op == kdn.OpPin {
			if f, bad := g.pin(p, b, gen); bad {
				return newEntry{refusal: f, refused: true}
			}
		} else {
			g.unpin(p, b)
		}
		return newEntry{task: finished(task, task.CreatedAt)}
	case kdn.OpClear:
		tick := pollInterval(g.srv.Table().TTL())
		return g.launch(task, g.srv.Table().TTL()+2*tick+time.Second, 1, g.clearWork(p, b, gen, tick))
	default: // prefetch, rebuild
		return g.launch(task, g.opTTL, warmAttempts, g.warmWork(p, b, gen, op == kdn.OpRebuild))
	}
}

// needsHealthy says which operations need the endpoint to be serving:
// a warm-up sends it a request, a pin vouches that it holds the prefix.
// Unpin and clear only make kvca forget, which is true whatever the
// endpoint's state.
func needsHealthy(op kdn.CacheOperationType) bool {
	return op == kdn.OpPrefetch || op == kdn.OpRebuild || op == kdn.OpPin
}

// failedUnattempted is a task refused before any attempt: failed with
// attempt 0, so it cannot be mistaken for work that ran.
func failedUnattempted(t kdn.CacheOperationTask) kdn.CacheOperationTask {
	t.State = kdn.StateFailed
	t.Attempt = 0
	t.UpdatedAt = t.CreatedAt
	return t
}

// finished is a synchronous task that ran at now: pending → running →
// succeeded, as the lifecycle requires.
func finished(t kdn.CacheOperationTask, now time.Time) kdn.CacheOperationTask {
	t, _ = t.Advance(kdn.StateRunning, now)
	t, _ = t.Advance(kdn.StateSucceeded, now)
	return t
}

func (g *Gateway) launch(task kdn.CacheOperationTask, timeout time.Duration, attempts int, work func(context.Context) error) newEntry {
	ctx, cancel := context.WithTimeout(g.ctx, timeout)
	g.ops.Add(1)
	go g.run(ctx, cancel, task, attempts, work)
	return newEntry{task: task, cancel: cancel}
}

// run drives one task through the lifecycle: running for each attempt,
// retry_wait between attempts, then succeeded or failed. A cancel (or
// Close) stops the work through ctx; the task's state is then already
// final and the worker just leaves.
func (g *Gateway) run(ctx context.Context, cancel context.CancelFunc, task kdn.CacheOperationTask, attempts int, work func(context.Context) error) {
	defer g.ops.Done()
	defer cancel()
	id := task.TaskID
	for attempt := 1; ; attempt++ {
		if !g.tasks.advance(id, kdn.StateRunning, g.now()) {
			return
		}
		err := work(ctx)
		if err == nil {
			g.tasks.advance(id, kdn.StateSucceeded, g.now())
			return
		}
		var oe *opError
		retry := errors.As(err, &oe) && oe.retry
		if ctx.Err() != nil || !retry || attempt >= attempts {
			if g.tasks.advance(id, kdn.StateFailed, g.now()) {
				g.log.Info("kdn: operation failed", "task_id", id, "operation", string(task.Operation),
					"artifact_id", task.ArtifactID, "attempt", attempt, "reason", err.Error())
			}
			return
		}
		if !g.tasks.advance(id, kdn.StateRetryWait, g.now()) {
			return
		}
		select {
		case <-ctx.Done():
			g.tasks.advance(id, kdn.StateFailed, g.now())
			return
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}

// warmWork sends the prefix to backend b with one output token and, on a
// 2xx answer, lets the server learn its chain there. A prefetch of a
// prefix the table already shows complete sends nothing.
func (g *Gateway) warmWork(p *prefixInfo, b int, gen int64, rebuild bool) func(context.Context) error {
	return func(ctx context.Context) error {
		t := g.srv.Table()
		// Health first: the table keeps an ejected backend's locations
		// until it is re-admitted, so "complete" below says nothing about
		// a backend that is down.
		if !g.healthy(b) {
			return permanent(msgUnhealthy)
		}
		if g.generation(b) != gen {
			return permanent("endpoint generation changed before the warm-up")
		}
		if !rebuild && holdingOf(t, p.chain, b, t.Now()).complete() {
			return nil
		}
		learned, err := g.srv.Warm(ctx, b, p.api, p.path(), p.warm)
		if err != nil {
			return &opError{msg: "warm-up failed: " + err.Error(), retry: true}
		}
		// An answer that arrived after kvca ejected the backend warms a
		// cache kvca will presume lost when it re-admits it.
		if !g.healthy(b) {
			return permanent("endpoint became unhealthy during the warm-up")
		}
		if g.generation(b) != gen {
			return permanent("endpoint was reset during the warm-up")
		}
		if !slices.Equal(learned, p.chain) {
			return permanent("warm-up learned a chain other than the prefix's")
		}
		return nil
	}
}

// clearWork forgets backend b's locations of the prefix: it releases the
// pins and drops the locations at once. Traffic may relearn the prefix
// right after (the backend really holds it); the task still succeeds once
// the table has forgotten it, and fails only if requests keep re-learning
// it for one TTL.
func (g *Gateway) clearWork(p *prefixInfo, b int, gen int64, tick time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		t := g.srv.Table()
		t.Unpin(p.chain, b)
		g.dropPin(p.artifact.ID(), b)
		t.Forget(p.chain, b)
		for {
			if g.generation(b) != gen || holdingOf(t, p.chain, b, t.Now()).blocks == 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return permanent("locations still refreshed by traffic after one TTL")
			case <-time.After(tick):
			}
		}
	}
}

func pollInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 10*time.Millisecond), time.Second)
}
