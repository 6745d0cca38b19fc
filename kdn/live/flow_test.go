package live_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestLiveFlow is the scenario end to end over HTTP: register a
// long shared prefix, prefetch it to two endpoints, observe coverage, pin
// it on one, let the TTL pass and see it survive there (and expire on the
// other), unpin and see it expire, restart a backend and see stale for the
// old generation.
func TestLiveFlow(t *testing.T) {
	h := newHarness(t, setup{})
	ts := h.targets()
	if len(ts) != 2 || ts[0].gen != 1 || ts[1].gen != 1 {
		t.Fatalf("endpoints %v", ts)
	}
	a, b := ts[0], ts[1]
	art := h.registerPrefix("handbook", longPrefix())

	r := h.call("resolve_knowledge", map[string]any{"runtime_profile": "v1", "knowledge_id": "handbook"})
	mustOutcome(t, r, "success")
	if r["artifact"].(map[string]any)["artifact_id"] != art {
		t.Fatalf("resolve: %v", r)
	}

	// Nothing is cached yet.
	if st, _ := h.observe(a, art); st != "unavailable" {
		t.Fatalf("before prefetch: %s", st)
	}
	r = h.call("lookup_artifact", req(a, map[string]any{"artifact_id": art}))
	mustOutcome(t, r, "stale")

	// Prefetch to both endpoints; a replay of a key answers the same task,
	// the same key for another target is a conflict.
	pa := h.call("create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pf-a"}))
	mustOutcome(t, pa, "success")
	pb := h.call("create_prefetch_intent", req(b, map[string]any{"artifact_id": art, "idempotency_key": "pf-b"}))
	mustOutcome(t, pb, "success")
	again := h.call("create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pf-a"}))
	if task(t, again)["task_id"] != task(t, pa)["task_id"] {
		t.Fatal("replay made a new task")
	}
	mustOutcome(t, h.call("create_prefetch_intent", req(b, map[string]any{"artifact_id": art, "idempotency_key": "pf-a"})), "idempotency_conflict")
	for _, x := range []struct {
		tg target
		r  map[string]any
	}{{a, pa}, {b, pb}} {
		done := h.waitTask(x.tg, task(t, x.r)["task_id"].(string))
		if done["state"] != "succeeded" || done["attempt"].(float64) < 1 {
			t.Fatalf("prefetch ended %v", done)
		}
	}
	// Each engine got the prefix once, asking for one unstreamed token.
	for i, e := range h.engines {
		bodies := e.Bodies()
		if len(bodies) != 1 {
			t.Fatalf("engine %d got %d requests", i, len(bodies))
		}
		var m map[string]any
		json.Unmarshal(bodies[0], &m)
		if m["max_tokens"] != 1.0 || m["stream"] != false {
			t.Fatalf("warm-up body %s", bodies[0])
		}
	}

	// Coverage: both endpoints hold the whole prefix, until a TTL from now.
	for _, tg := range []target{a, b} {
		st, o := h.observe(tg, art)
		if st != "available" || o["endpoint_generation"].(float64) != 1 {
			t.Fatalf("after prefetch: %v", o)
		}
		seen, _ := time.Parse(time.RFC3339Nano, o["source_observed_at"].(string))
		until, _ := time.Parse(time.RFC3339Nano, o["expires_at"].(string))
		if d := until.Sub(seen); d <= 0 || d > time.Second {
			t.Fatalf("observation window %v", d)
		}
		mustOutcome(t, h.call("lookup_artifact", req(tg, map[string]any{"artifact_id": art})), "success")
	}

	// Pin on a only; the task is done on the spot.
	pin := h.call("create_pin_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pin-a"}))
	mustOutcome(t, pin, "success")
	if task(t, pin)["state"] != "succeeded" {
		t.Fatalf("pin %v", pin)
	}

	// Let the TTL pass: b's copy expires, a's pinned one survives.
	waitFor(t, "b's locations expire", func() bool { st, _ := h.observe(b, art); return st == "unavailable" })
	time.Sleep(2 * h.srv.Table().TTL())
	if st, _ := h.observe(a, art); st != "available" {
		t.Fatalf("pinned copy did not survive the TTL: %s", st)
	}
	mustOutcome(t, h.call("lookup_artifact", req(b, map[string]any{"artifact_id": art})), "stale")
	// The pin is not just reported: a client continuing the prefix is still
	// routed to a, the only endpoint that kvca knows holds it.
	before := len(h.engines[0].Bodies())
	for i := 0; i < 3; i++ {
		h.chat(followUp(i))
	}
	if got := len(h.engines[0].Bodies()) - before; got != 3 {
		t.Fatalf("%d of 3 follow-ups went to the pinned endpoint", got)
	}

	// Unpin: a's locations were last used more than a TTL ago.
	un := h.call("create_unpin_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "unpin-a"}))
	mustOutcome(t, un, "success")
	waitFor(t, "a's locations expire after unpin", func() bool { st, _ := h.observe(a, art); return st == "unavailable" })

	// Restart b: down, cache gone, up; the health check re-admits it with a
	// new generation, and the old one is stale.
	if err := h.engines[1].Down(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b ejected", func() bool { return !h.srv.Scheduler().Backends[1].Healthy() })
	h.engines[1].Restart()
	if err := h.engines[1].Up(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b re-admitted", func() bool { return h.srv.Scheduler().Backends[1].Healthy() })
	nb := h.targets()[1]
	if nb.gen <= b.gen || nb.id != b.id {
		t.Fatalf("generation after restart: %v → %v", b, nb)
	}
	old := h.call("get_cache_observation", req(b, map[string]any{"artifact_id": art}))
	mustOutcome(t, old, "stale")
	if e := old["error"].(map[string]any); e["retryable"] != true || e["message"] != "request endpoint generation is stale" {
		t.Fatalf("old generation: %v", old)
	}
	mustOutcome(t, h.call("create_prefetch_intent", req(b, map[string]any{"artifact_id": art, "idempotency_key": "pf-b2"})), "stale")
	// The new generation works, and a prefetch there warms the restarted engine.
	pb2 := h.call("create_prefetch_intent", req(nb, map[string]any{"artifact_id": art, "idempotency_key": "pf-b2"}))
	mustOutcome(t, pb2, "success")
	if done := h.waitTask(nb, task(t, pb2)["task_id"].(string)); done["state"] != "succeeded" {
		t.Fatalf("prefetch after restart %v", done)
	}
	if st, _ := h.observe(nb, art); st != "available" {
		t.Fatalf("after re-prefetch: %s", st)
	}
	// The old generation's task is not shown under the new target.
	mustOutcome(t, h.call("get_operation_status", req(nb, map[string]any{"task_id": task(t, pb)["task_id"]})), "stale")
}

// TestClearForgets: a clear releases the pins and succeeds once the table
// no longer routes the prefix to the endpoint.
func TestClearForgets(t *testing.T) {
	// A long TTL: the prefetched locations must not expire before the pin.
	h := newHarness(t, setup{engines: 1, ttl: time.Minute})
	a := h.targets()[0]
	art := h.registerPrefix("faq", longPrefix())
	pf := h.call("create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pf"}))
	h.waitTask(a, task(t, pf)["task_id"].(string))
	mustOutcome(t, h.call("create_pin_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pin"})), "success")
	cl := h.call("create_clear_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "clear"}))
	mustOutcome(t, cl, "success")
	if done := h.waitTask(a, task(t, cl)["task_id"].(string)); done["state"] != "succeeded" {
		t.Fatalf("clear %v", done)
	}
	if st, _ := h.observe(a, art); st != "unavailable" {
		t.Fatalf("after clear: %s", st)
	}
}

// TestPinLimit: a pin beyond --max-pinned-blocks is refused (failed, no
// task), and so is a pin of something the endpoint does not hold.
func TestPinLimit(t *testing.T) {
	h := newHarness(t, setup{engines: 1, maxPins: 3, ttl: time.Minute})
	a := h.targets()[0]
	art := h.registerPrefix("big", longPrefix())
	r := h.call("create_pin_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "p0"}))
	mustOutcome(t, r, "failed")
	if errMessage(r) != "artifact is not cached on the endpoint; prefetch it first" || r["operation"] != nil {
		t.Fatalf("pin of nothing: %v", r)
	}
	pf := h.call("create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pf"}))
	h.waitTask(a, task(t, pf)["task_id"].(string))
	r = h.call("create_pin_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "p1"}))
	mustOutcome(t, r, "failed")
	if errMessage(r) != "pin would exceed the pinned block limit" {
		t.Fatalf("pin over the limit: %v", r)
	}
	m := h.call("get_maintenance_status", req(a, nil))
	mustOutcome(t, m, "success")
	if d := m["maintenance_summary"].(map[string]any)["detail"].(string); !bytes.Contains([]byte(d), []byte("pinned blocks=0/3")) {
		t.Fatalf("detail %q", d)
	}
}

// TestCancelPrefetch: a prefetch stuck on a slow backend is cancelled;
// cancelling it again is a success no-op.
func TestCancelPrefetch(t *testing.T) {
	h := newHarness(t, setup{engines: 1})
	h.engines[0].SetFaults(mockSlow())
	a := h.targets()[0]
	art := h.registerPrefix("slow", longPrefix())
	pf := h.call("create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "pf"}))
	id := task(t, pf)["task_id"].(string)
	waitFor(t, "prefetch running", func() bool {
		return task(t, h.call("get_operation_status", req(a, map[string]any{"task_id": id})))["state"] == "running"
	})
	c := h.call("cancel_operation", req(a, map[string]any{"task_id": id}))
	mustOutcome(t, c, "cancelled")
	if task(t, c)["state"] != "cancelled" {
		t.Fatalf("cancel %v", c)
	}
	c = h.call("cancel_operation", req(a, map[string]any{"task_id": id}))
	mustOutcome(t, c, "success")
	if task(t, c)["state"] != "cancelled" {
		t.Fatalf("second cancel %v", c)
	}
	mustOutcome(t, h.call("cancel_operation", req(a, map[string]any{"task_id": "cacheop_0123456789abcdef0123456789abcdef"})), "stale")
}
