package live

import (
	"context"
	"sync"
	"time"

	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
)

// maxTasks bounds the task table; beyond it the oldest finished tasks are
// forgotten (their ids then answer "operation was not found").
const maxTasks = 4096

// logicalTarget is what makes two intents "the same request" (§10):
// replaying an idempotency key with it returns the stored task, with
// anything else is a conflict.
type logicalTarget struct {
	op         kdn.CacheOperationType
	artifactID string
	endpointID string
	generation int64
	runtime    kdn.RuntimeProfile
	compat     string
}

type taskEntry struct {
	key    string // idempotency key; bound in byKey unless the entry is a refusal
	target logicalTarget
	task   kdn.CacheOperationTask
	cancel context.CancelFunc // stops the work; nil for synchronous tasks
}

// taskTable is the idempotent task table, keyed by idempotency key (global
// across operation types, as in the Mock) and by task id.
type taskTable struct {
	mu    sync.Mutex
	byKey map[string]*taskEntry
	byID  map[string]*taskEntry
	order []*taskEntry // oldest first
}

func newTaskTable() *taskTable {
	return &taskTable{byKey: map[string]*taskEntry{}, byID: map[string]*taskEntry{}}
}

type createResult int

const (
	created createResult = iota
	replayed
	conflict
	refused
)

// newEntry is what an intent builds when its key is new: the task, how to
// stop its work, or a refusal. A refusal may carry a task that already
// failed (nothing was attempted): it can be looked up by its id, but it
// does not bind the key, so the client may retry the same idempotency key
// once the cause is gone.
type newEntry struct {
	task    kdn.CacheOperationTask
	cancel  context.CancelFunc
	refusal gateway.Refusal
	refused bool
}

// create returns the task for key: the stored one on a replay of the same
// logical target, or the one build makes. build runs under the table lock
// so that two concurrent first uses of a key create one task.
func (tt *taskTable) create(key string, want logicalTarget, build func() newEntry) (kdn.CacheOperationTask, gateway.Refusal, createResult) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if e, seen := tt.byKey[key]; seen {
		if e.target != want {
			return kdn.CacheOperationTask{}, gateway.Refusal{}, conflict
		}
		return e.task, gateway.Refusal{}, replayed
	}
	n := build()
	if n.refused {
		if n.task.TaskID != "" {
			tt.add(&taskEntry{key: key, target: want, task: n.task}, false)
		}
		return n.task, n.refusal, refused
	}
	tt.add(&taskEntry{key: key, target: want, task: n.task, cancel: n.cancel}, true)
	return n.task, gateway.Refusal{}, created
}

func (tt *taskTable) add(e *taskEntry, bindKey bool) {
	if bindKey {
		tt.byKey[e.key] = e
	}
	tt.byID[e.task.TaskID] = e
	tt.order = append(tt.order, e)
	tt.trim()
}

// trim forgets the oldest finished tasks once the table is over its bound;
// live tasks are never forgotten.
func (tt *taskTable) trim() {
	if len(tt.byID) <= maxTasks {
		return
	}
	kept := tt.order[:0]
	for _, e := range tt.order {
		if len(tt.byID) > maxTasks*3/4 && e.task.State.Terminal() {
			delete(tt.byID, e.task.TaskID)
			if tt.byKey[e.key] == e {
				delete(tt.byKey, e.key)
			}
			continue
		}
		kept = append(kept, e)
	}
	clear(tt.order[len(kept):])
	tt.order = kept
}

func (tt *taskTable) get(id string) (kdn.CacheOperationTask, logicalTarget, bool) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	e, ok := tt.byID[id]
	if !ok {
		return kdn.CacheOperationTask{}, logicalTarget{}, false
	}
	return e.task, e.target, true
}

// advance moves a live task to state to; it reports false when the task
// already finished (typically: it was cancelled), so the worker stops.
func (tt *taskTable) advance(id string, to kdn.CacheOperationState, now time.Time) bool {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	e, ok := tt.byID[id]
	if !ok || e.task.State.Terminal() {
		return false
	}
	next, err := e.task.Advance(to, now)
	if err != nil {
		return false
	}
	e.task = next
	if next.State.Terminal() {
		e.cancel = nil
	}
	return true
}

// cancel stops a live task and marks it cancelled; a finished task is
// returned unchanged with live=false.
func (tt *taskTable) cancel(id string, now time.Time) (task kdn.CacheOperationTask, live, found bool) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	e, ok := tt.byID[id]
	if !ok {
		return kdn.CacheOperationTask{}, false, false
	}
	if e.task.State.Terminal() {
		return e.task, false, true
	}
	next, err := e.task.Advance(kdn.StateCancelled, now)
	if err != nil { // unreachable: every live state may be cancelled
		return e.task, false, true
	}
	if e.cancel != nil {
		e.cancel()
		e.cancel = nil
	}
	e.task = next
	return next, true, true
}
