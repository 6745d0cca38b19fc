package live_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
	"github.com/kvca/kvca/kdn/live"
)

const capsPath = live.APIPrefix + live.CapabilitiesOp

func (h *harness) snapshot(method, query string, body []byte) kdn.CapabilitySnapshot {
	h.t.Helper()
	status, out := h.do(method, capsPath+query, body)
	if status != 200 {
		h.t.Fatalf("%s %s%s: HTTP %d %s", method, capsPath, query, status, out)
	}
	m, err := kdn.Decode("CapabilitySnapshot", out)
	if err != nil {
		h.t.Fatalf("not a valid CapabilitySnapshot: %v\n%s", err, out)
	}
	return m.(kdn.CapabilitySnapshot)
}

// TestCapabilityDiscovery: the discovery route answers each endpoint's
// snapshot, by query or body, with its current generation.
func TestCapabilityDiscovery(t *testing.T) {
	h := newHarness(t, setup{})
	ts := h.targets()
	first := h.snapshot("GET", "", nil)
	if first.EndpointID != ts[0].id || first.EndpointGeneration != ts[0].gen ||
		first.ContractVersion != kdn.GatewayContractVersion || first.RuntimeProfile != kdn.ProfileV1 ||
		first.CompatibilityProfile.CompatibilityProfileID != compat {
		t.Fatalf("default snapshot %+v", first)
	}
	if s := h.snapshot("GET", "?endpoint_id="+ts[1].id, nil); s.EndpointID != ts[1].id {
		t.Fatalf("by query: %s", s.EndpointID)
	}
	if s := h.snapshot("POST", "", []byte(`{"endpoint_id":"`+ts[1].id+`"}`)); s.EndpointID != ts[1].id {
		t.Fatalf("by body: %s", s.EndpointID)
	}
	if s := h.snapshot("POST", "", nil); s.EndpointID != ts[0].id {
		t.Fatalf("POST without a body: %s", s.EndpointID)
	}
	if g := h.srv.ResetBackend(1); h.snapshot("GET", "?endpoint_id="+ts[1].id, nil).EndpointGeneration != int64(g) {
		t.Fatalf("snapshot does not follow the reset to generation %d", g)
	}

	status, out := h.do("GET", capsPath+"?endpoint_id="+kdn.EndpointIDForName("http://elsewhere:1"), nil)
	mustDetail(t, status, out, 404, "incompatible")
	status, out = h.do("POST", capsPath, []byte(`{"endpoint_id":"`+ts[1].id+`","password":"x"}`))
	mustDetail(t, status, out, 400, "failed")
	status, out = h.do("POST", capsPath+"?endpoint_id="+ts[0].id, []byte(`{"endpoint_id":"`+ts[1].id+`"}`))
	mustDetail(t, status, out, 400, "failed")
	status, out = h.do("PUT", capsPath, nil)
	mustDetail(t, status, out, 405, "unsupported")
}

// TestCapabilitiesAreWhatIsAnswered: every flag the snapshot declares is
// what the operation behind it does: an unsupported flag is answered
// unsupported by negotiation, a supported one never is.
func TestCapabilitiesAreWhatIsAnswered(t *testing.T) {
	h := newHarness(t, setup{engines: 1})
	a := h.targets()[0]
	s := h.snapshot("GET", "", nil)
	art := h.registerPrefix("caps", longPrefix())
	calls := []struct {
		flag kdn.Capability
		op   string
		req  map[string]any
	}{
		{kdn.CapArtifactLookup, "lookup_artifact", req(a, map[string]any{"artifact_id": art})},
		{kdn.CapCacheObservation, "get_cache_observation", req(a, map[string]any{"artifact_id": art})},
		{kdn.CapTokenLookup, "lookup_tokens", req(a, map[string]any{"tokens": map[string]any{"token_ids": []int{1}}})},
		{kdn.CapWarmPrefetch, "create_prefetch_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "p"})},
		{kdn.CapWarmPrefetch, "create_rebuild_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "r"})},
		{kdn.CapPinUnpin, "create_unpin_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "u"})},
		{kdn.CapObjectDeletion, "create_clear_intent", req(a, map[string]any{"artifact_id": art, "idempotency_key": "c"})},
		{kdn.CapOperationStatus, "get_operation_status", req(a, map[string]any{"task_id": "cacheop_0123456789abcdef0123456789abcdef"})},
		{kdn.CapCancellation, "cancel_operation", req(a, map[string]any{"task_id": "cacheop_0123456789abcdef0123456789abcdef"})},
		{kdn.CapTierCapacityUsage, "get_tier_and_adapter_summary", req(a, nil)},
		{kdn.CapMaintenanceEviction, "get_maintenance_status", req(a, nil)},
	}
	for _, c := range calls {
		r := h.call(c.op, c.req)
		if answered := r["outcome"] != "unsupported"; answered != s.Supports(c.flag) {
			t.Errorf("%s is %s in the snapshot, but %s answers %v", c.flag, s.Flags[c.flag], c.op, r["outcome"])
		}
	}
}

// TestCapabilityDiscoveryOfTheMock: under --runtime-profile test/mock the
// same route answers the Mock's snapshot.
func TestCapabilityDiscoveryOfTheMock(t *testing.T) {
	snap := gateway.MockSnapshot()
	m, err := gateway.New(snap, kdn.TransportMock, gateway.MockFixtures(), gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := live.APIHandler(m, nil, time.Now, nil)
	for _, q := range []string{"", "?endpoint_id=" + snap.EndpointID} {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(capsPath + q)
		ctx.Request.Header.SetMethod("GET")
		h(&ctx)
		if ctx.Response.StatusCode() != 200 {
			t.Fatalf("%q: HTTP %d %s", q, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		got, err := kdn.Canonical("CapabilitySnapshot", ctx.Response.Body())
		if err != nil {
			t.Fatal(err)
		}
		want, _ := kdn.Encode(snap)
		var g, w map[string]any
		json.Unmarshal(got, &g)
		json.Unmarshal(want, &w)
		delete(g, "observed_at")
		delete(w, "observed_at")
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		if string(gb) != string(wb) {
			t.Fatalf("%q:\n got %s\nwant %s", q, gb, wb)
		}
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI(capsPath + "?endpoint_id=" + kdn.EndpointIDForName("other"))
	h(&ctx)
	if ctx.Response.StatusCode() != 404 {
		t.Fatalf("unknown endpoint: HTTP %d", ctx.Response.StatusCode())
	}
}
