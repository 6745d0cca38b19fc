package live_test

import (
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
)

const (
	wantUnhealthy = "endpoint is unhealthy: kvca sends it nothing and cannot vouch for its cache"
	wantStaleGen  = "request endpoint generation is stale"
)

// mustRefusal checks a non-success answer: outcome, message and retryable.
func mustRefusal(t *testing.T, r map[string]any, outcome, msg string, retryable bool) {
	t.Helper()
	mustOutcome(t, r, outcome)
	e, _ := r["error"].(map[string]any)
	if e["message"] != msg || e["retryable"] != retryable {
		t.Fatalf("error %v, want %q retryable=%t", e, msg, retryable)
	}
}

// stopped takes engine i down and waits until kvca has ejected it.
func (h *harness) stopped(i int) {
	h.t.Helper()
	if err := h.engines[i].Down(); err != nil {
		h.t.Fatal(err)
	}
	waitFor(h.t, "backend ejected", func() bool { return !h.srv.Scheduler().Backends[i].Healthy() })
}

// started brings engine i back and waits until kvca has re-admitted it.
func (h *harness) started(i int) {
	h.t.Helper()
	if err := h.engines[i].Up(); err != nil {
		h.t.Fatal(err)
	}
	waitFor(h.t, "backend re-admitted", func() bool { return h.srv.Scheduler().Backends[i].Healthy() })
}

// TestEjectedEndpointIsNotVouchedFor: a backend kvca has ejected still has
// its locations in the table (they are dropped only when it comes back),
// which must not turn into success: a prefetch fails on the spot without
// sending anything, a pin or rebuild too, and lookups and observations are
// stale with nothing claimed. The healthy endpoint is unaffected.
func TestEjectedEndpointIsNotVouchedFor(t *testing.T) {
	h := newHarness(t, setup{ttl: time.Minute})
	ts := h.targets()
	a, b := ts[0], ts[1]
	art := h.registerPrefix("handbook", longPrefix())
	pf := h.call("create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pf-a"}))
	if done := h.waitTask(a, task(t, pf)["task_id"].(string)); done["state"] != "succeeded" {
		t.Fatalf("prefetch while healthy: %v", done)
	}
	if st, _ := h.observe(a, art); st != "available" {
		t.Fatalf("after prefetch: %s", st)
	}
	h.stopped(0)
	sent := h.engines[0].Stats().Requests

	r := h.call("create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pf-down"}))
	mustRefusal(t, r, "failed", wantUnhealthy, true)
	op := task(t, r)
	if op["state"] != "failed" || op["attempt"] != 0.0 || op["operation"] != "prefetch" || op["endpoint_generation"] != 1.0 {
		t.Fatalf("refused prefetch task %v", op)
	}
	st := h.call("get_operation_status", req(a, map[string]any{"task_id": op["task_id"]}))
	mustOutcome(t, st, "success")
	if task(t, st)["state"] != "failed" {
		t.Fatalf("status of the refused prefetch %v", st)
	}
	// The refusal did not bind the key: the same key is refused again as
	// a new attempt, not replayed as the first answer.
	again := h.call("create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pf-down"}))
	mustRefusal(t, again, "failed", wantUnhealthy, true)
	if task(t, again)["task_id"] == op["task_id"] {
		t.Fatal("a refused key was bound to its failed task")
	}
	// A replay of a key used while healthy still answers its stored task.
	if rp := h.call("create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pf-a"})); task(t, rp)["task_id"] != task(t, pf)["task_id"] {
		t.Fatalf("replay %v", rp)
	}
	for _, name := range []string{"create_rebuild_intent", "create_pin_intent"} {
		r := h.call(name, req(a, map[string]any{"artifact_id": art, "idempotency_key": name}))
		mustRefusal(t, r, "failed", wantUnhealthy, true)
		if task(t, r)["state"] != "failed" {
			t.Fatalf("%s: %v", name, r)
		}
	}
	lk := h.call("lookup_artifact", req(a, map[string]any{"artifact_id": art}))
	mustRefusal(t, lk, "stale", wantUnhealthy, true)
	if lk["artifact"] != nil {
		t.Fatalf("lookup on an ejected endpoint carries the artifact: %v", lk)
	}
	ob := h.call("get_cache_observation", req(a, map[string]any{"artifact_id": art}))
	mustRefusal(t, ob, "stale", wantUnhealthy, true)
	if ob["observation"] != nil {
		t.Fatalf("observation on an ejected endpoint: %v", ob)
	}
	if got := h.engines[0].Stats().Requests; got != sent {
		t.Fatalf("the stopped engine was sent %d requests", got-sent)
	}

	// The healthy endpoint answers as before, and a prefetch there works.
	if st, _ := h.observe(b, art); st != "unavailable" {
		t.Fatalf("b before its prefetch: %s", st)
	}
	pb := h.call("create_prefetch_intent", req(b, map[string]any{"artifact_id": art, "idempotency_key": "pf-b"}))
	mustOutcome(t, pb, "success")
	if done := h.waitTask(b, task(t, pb)["task_id"].(string)); done["state"] != "succeeded" || done["attempt"] != 1.0 {
		t.Fatalf("prefetch on b %v", done)
	}
	if st, _ := h.observe(b, art); st != "available" {
		t.Fatalf("b after its prefetch: %s", st)
	}
}

// TestPrefetchFailsWhenEngineStopsMidWay: a warm-up already running when
// its engine goes down ends failed, never succeeded.
func TestPrefetchFailsWhenEngineStopsMidWay(t *testing.T) {
	h := newHarness(t, setup{engines: 1, ttl: time.Minute})
	h.engines[0].SetFaults(mockSlow())
	a := h.targets()[0]
	art := h.registerPrefix("slow", longPrefix())
	pf := h.call("create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pf"}))
	mustOutcome(t, pf, "success")
	id := task(t, pf)["task_id"].(string)
	// The engine holds a warm-up 1.5 s before answering; the task is
	// running from just before it is sent, so whether it reached the
	// engine yet or not, stopping now makes it fail.
	waitFor(t, "prefetch running", func() bool {
		return task(t, h.call("get_operation_status", req(a, map[string]any{"task_id": id})))["state"] == "running"
	})
	h.stopped(0)
	if done := h.waitTask(a, id); done["state"] != "failed" {
		t.Fatalf("prefetch onto a stopped engine ended %v", done)
	}
	mustRefusal(t, h.call("get_cache_observation", req(a, map[string]any{"artifact_id": art})), "stale", wantUnhealthy, true)
}

// TestEngineRestart: an engine that restarts (down, cache emptied, up) is
// re-admitted under a new generation. The old generation is stale, the new
// one shows nothing cached, matching the engine's own (empty) cache, until
// a prefetch warms it again.
func TestEngineRestart(t *testing.T) {
	h := newHarness(t, setup{engines: 1, ttl: time.Minute})
	a := h.targets()[0]
	art := h.registerPrefix("handbook", longPrefix())
	pf := h.call("create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pf"}))
	h.waitTask(a, task(t, pf)["task_id"].(string))
	if h.engines[0].Stats().CachedBlocks == 0 {
		t.Fatal("the engine cached nothing from the warm-up")
	}
	h.stopped(0)
	h.engines[0].Restart()
	if n := h.engines[0].Stats().CachedBlocks; n != 0 {
		t.Fatalf("restarted engine holds %d blocks", n)
	}
	h.started(0)
	na := h.targets()[0]
	if na.id != a.id || na.gen != a.gen+1 {
		t.Fatalf("after restart %v, before %v", na, a)
	}
	for _, op := range []string{"lookup_artifact", "get_cache_observation"} {
		mustRefusal(t, h.call(op, req(a, map[string]any{"artifact_id": art})), "stale", wantStaleGen, true)
	}
	mustRefusal(t, h.call("create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pf2"})), "stale", wantStaleGen, true)
	if st, o := h.observe(na, art); st != "unavailable" || o["endpoint_generation"] != float64(na.gen) {
		t.Fatalf("new generation before a prefetch: %v", o)
	}
	mustOutcome(t, h.call("lookup_artifact", req(na, map[string]any{"artifact_id": art})), "stale")
	sent := h.engines[0].Stats().Requests
	pf2 := h.call("create_prefetch_intent", req(na, map[string]any{"artifact_id": art, "idempotency_key": "pf2"}))
	if done := h.waitTask(na, task(t, pf2)["task_id"].(string)); done["state"] != "succeeded" {
		t.Fatalf("prefetch after restart %v", done)
	}
	if got := h.engines[0].Stats().Requests - sent; got != 1 {
		t.Fatalf("prefetch after restart sent %d requests, want 1", got)
	}
	if h.engines[0].Stats().CachedBlocks == 0 {
		t.Fatal("the engine cached nothing from the second warm-up")
	}
	if st, _ := h.observe(na, art); st != "available" {
		t.Fatalf("after the second prefetch: %s", st)
	}
}

// TestKvcaRestartAdvancesGenerations: kvca restarted on the same state dir
// cannot vouch for any engine (its block table is gone), so every endpoint
// comes back one generation past the highest it had, even though the
// engines kept their caches; a generation held from before is stale.
func TestKvcaRestartAdvancesGenerations(t *testing.T) {
	dir := t.TempDir()
	engines := startEngines(t, 2, mock.Faults{})
	h1 := newHarness(t, setup{reuse: engines, stateDir: dir, ttl: time.Minute})
	ts := h1.targets()
	if ts[0].gen != 1 || ts[1].gen != 1 {
		t.Fatalf("first start: %v", ts)
	}
	art := h1.registerPrefix("handbook", longPrefix())
	pf := h1.call("create_prefetch_intent", req(ts[0], map[string]any{"artifact_id": art, "idempotency_key": "pf"}))
	h1.waitTask(ts[0], task(t, pf)["task_id"].(string))
	if g := h1.srv.ResetBackend(1); g != 2 {
		t.Fatalf("reset: generation %d", g)
	}
	before := h1.targets()
	if before[0].gen != 1 || before[1].gen != 2 {
		t.Fatalf("before the restart: %v", before)
	}
	h1.close()

	h2 := newHarness(t, setup{reuse: engines, stateDir: dir, ttl: time.Minute})
	after := h2.targets()
	for i := range after {
		if after[i].id != before[i].id || after[i].gen != before[i].gen+1 {
			t.Fatalf("endpoint %d: %v before the restart, %v after", i, before[i], after[i])
		}
	}
	mustRefusal(t, h2.call("get_cache_observation", req(before[0], map[string]any{"artifact_id": art})), "stale", wantStaleGen, true)
	// The engine still holds the prefix; kvca no longer knows it.
	if engines[0].Stats().CachedBlocks == 0 {
		t.Fatal("engine 0 lost its cache")
	}
	if st, _ := h2.observe(after[0], art); st != "unavailable" {
		t.Fatalf("after the restart: %s", st)
	}
	if g := h2.srv.ResetBackend(0); g != uint32(after[0].gen)+1 {
		t.Fatalf("reset after the restart: generation %d", g)
	}
	h2.close()

	h3 := newHarness(t, setup{reuse: engines, stateDir: dir, ttl: time.Minute})
	if third := h3.targets(); third[0].gen != after[0].gen+2 || third[1].gen != after[1].gen+1 {
		t.Fatalf("third start %v after %v and a reset of endpoint 0", third, after)
	}
	h3.close()

	// Without a state dir nothing is kept: generations start at 1.
	h4 := newHarness(t, setup{reuse: engines})
	if ts := h4.targets(); ts[0].gen != 1 || ts[1].gen != 1 {
		t.Fatalf("no state dir: %v", ts)
	}
}
