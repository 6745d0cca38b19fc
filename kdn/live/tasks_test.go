package live

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
)

func testTask(id string, st kdn.CacheOperationState) kdn.CacheOperationTask {
	return kdn.CacheOperationTask{TaskID: id, State: st, CreatedAt: time.Unix(0, 0), UpdatedAt: time.Unix(0, 0)}
}

// TestTaskTableRefusalsBindNoKey: a refusal's failed task is found by id
// but leaves its key free; the bound keeps live tasks and trims the oldest
// finished ones, refusals included, without unbinding a key another entry
// holds.
func TestTaskTableRefusalsBindNoKey(t *testing.T) {
	tt := newTaskTable()
	want := logicalTarget{op: kdn.OpPrefetch, artifactID: "a"}
	refusal := func(id string) func() newEntry {
		return func() newEntry {
			return newEntry{task: testTask(id, kdn.StateFailed), refusal: gateway.Refusal{Outcome: kdn.OutcomeFailed}, refused: true}
		}
	}
	if _, _, res := tt.create("k", want, refusal("cacheop_r1")); res != refused {
		t.Fatalf("result %d", res)
	}
	if _, _, ok := tt.get("cacheop_r1"); !ok {
		t.Fatal("refused task not found by id")
	}
	task, _, res := tt.create("k", want, func() newEntry { return newEntry{task: testTask("cacheop_ok", kdn.StatePending)} })
	if res != created || task.TaskID != "cacheop_ok" {
		t.Fatalf("key after a refusal: %d %s", res, task.TaskID)
	}
	if task, _, res := tt.create("k", want, refusal("cacheop_r2")); res != replayed || task.TaskID != "cacheop_ok" {
		t.Fatalf("replay: %d %s", res, task.TaskID)
	}
	for i := 0; i < maxTasks; i++ {
		tt.create(fmt.Sprintf("f%d", i), want, refusal(fmt.Sprintf("cacheop_f%d", i)))
	}
	if len(tt.byID) > maxTasks {
		t.Fatalf("%d tasks kept, bound %d", len(tt.byID), maxTasks)
	}
	if _, _, ok := tt.get("cacheop_ok"); !ok {
		t.Fatal("the live task was trimmed")
	}
	if _, _, ok := tt.get("cacheop_r1"); ok {
		t.Fatal("the oldest refusal was kept")
	}
	if e := tt.byKey["k"]; e == nil || e.task.TaskID != "cacheop_ok" {
		t.Fatal("trimming a refusal unbound the key of the live task")
	}
	if len(tt.order) != len(tt.byID) {
		t.Fatalf("order %d, byID %d", len(tt.order), len(tt.byID))
	}
}
