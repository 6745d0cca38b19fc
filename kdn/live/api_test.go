package live_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/live"
)

func mockSlow() mock.Faults { return mock.Faults{SlowStart: 1500 * time.Millisecond} }

// mustDetail checks an HTTP error answer: status and a valid
// ContractErrorDetail with the given code.
func mustDetail(t *testing.T, status int, out []byte, wantStatus int, wantCode string) string {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("HTTP %d, want %d: %s", status, wantStatus, out)
	}
	m, err := kdn.Decode("ContractErrorDetail", out)
	if err != nil {
		t.Fatalf("not a ContractErrorDetail: %v %s", err, out)
	}
	d := m.(kdn.ContractErrorDetail)
	if string(d.Code) != wantCode {
		t.Fatalf("code %s, want %s: %s", d.Code, wantCode, out)
	}
	return d.Message
}

func TestInvalidRequestIs400(t *testing.T) {
	h := newHarness(t, setup{engines: 1})
	a := h.targets()[0]
	cases := []struct {
		name, op, body, code, says string
	}{
		{"unknown field", "lookup_artifact", `{"runtime_profile":"v1","compatibility_profile_id":"` + compat + `","endpoint_id":"` + a.id +
			`","endpoint_generation":1,"artifact_id":"artifact_00000000000000000000000000000000","password":"x"}`, "failed", "unknown_field"},
		{"missing target", "create_pin_intent", `{"runtime_profile":"v1","artifact_id":"artifact_00000000000000000000000000000000","idempotency_key":"k"}`, "failed", "missing_field"},
		{"auto on the wire", "get_lmcache_endpoints", `{"runtime_profile":"auto"}`, "incompatible", "invalid_runtime_profile"},
		{"contract version", "get_lmcache_endpoints", `{"runtime_profile":"v1","contract_version":"kdn.v2"}`, "incompatible", "contract_version_mismatch"},
		{"malformed", "resolve_knowledge", `{"runtime_profile":`, "failed", "malformed_json"},
		{"target on discovery", "get_lmcache_endpoints", `{"runtime_profile":"v1","endpoint_id":"` + a.id + `"}`, "failed", "unknown_field"},
		{"bad task id", "get_operation_status", `{"runtime_profile":"v1","compatibility_profile_id":"c","endpoint_id":"` + a.id +
			`","endpoint_generation":1,"task_id":"task-1"}`, "failed", "pattern_mismatch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, out := h.do("POST", live.APIPrefix+c.op, []byte(c.body))
			if msg := mustDetail(t, status, out, 400, c.code); !strings.Contains(msg, c.says) || strings.Contains(msg, "password\":") {
				t.Fatalf("message %q", msg)
			}
		})
	}
	status, out := h.do("GET", live.APIPrefix+"lookup_artifact", nil)
	mustDetail(t, status, out, 405, "unsupported")
	status, out = h.do("POST", live.APIPrefix+"lookup_everything", []byte(`{}`))
	mustDetail(t, status, out, 404, "unsupported")
}

// TestUnsupportedIsDeclaredAndAnswered: what kvca cannot honour is
// unsupported in the snapshot and on the wire.
func TestUnsupportedIsDeclaredAndAnswered(t *testing.T) {
	h := newHarness(t, setup{engines: 1})
	s := h.gw.Snapshots()[0]
	if err := kdn.Validate(s); err != nil {
		t.Fatal(err)
	}
	for _, c := range []kdn.Capability{kdn.CapTokenLookup, kdn.CapRangeCoverage, kdn.CapMetricsEvents, kdn.CapLockLease, kdn.CapBatching, kdn.CapObjectListing} {
		if s.Flags[c] != kdn.Unsupported {
			t.Errorf("%s is %s", c, s.Flags[c])
		}
	}
	if s.AdapterBindings[0].TransportKind != kdn.TransportUnknownFuture || s.RuntimeProfile != kdn.ProfileV1 {
		t.Fatalf("snapshot %+v", s)
	}
	a := h.targets()[0]
	r := h.call("lookup_tokens", req(a, map[string]any{"tokens": map[string]any{"token_ids": []int{1, 2, 3}}}))
	mustOutcome(t, r, "unsupported")
	if r["token_coverage"] != nil || errMessage(r) != "gateway capability is unsupported or unknown" {
		t.Fatalf("lookup_tokens %v", r)
	}
}

func TestNegotiation(t *testing.T) {
	h := newHarness(t, setup{engines: 1})
	a := h.targets()[0]
	wrongCompat := req(a, map[string]any{"artifact_id": "artifact_00000000000000000000000000000000"})
	wrongCompat["compatibility_profile_id"] = "other"
	mustOutcome(t, h.call("lookup_artifact", wrongCompat), "incompatible")
	unknownEndpoint := req(target{kdn.EndpointIDForName("http://elsewhere:1"), 1}, map[string]any{"artifact_id": "artifact_00000000000000000000000000000000"})
	mustOutcome(t, h.call("lookup_artifact", unknownEndpoint), "incompatible")
	legacy := req(target{a.id, 0}, nil)
	legacy["runtime_profile"] = "legacy"
	mustOutcome(t, h.call("get_maintenance_status", legacy), "incompatible")
	mustOutcome(t, h.call("get_lmcache_endpoints", map[string]any{"runtime_profile": "mock"}), "incompatible")
	mustOutcome(t, h.call("get_maintenance_status", req(target{a.id, 2}, nil)), "stale")
	mustOutcome(t, h.call("lookup_artifact", req(a, map[string]any{"artifact_id": "artifact_00000000000000000000000000000000"})), "stale")
}

func TestSummaries(t *testing.T) {
	h := newHarness(t, setup{})
	for _, tg := range h.targets() {
		r := h.call("get_tier_and_adapter_summary", req(tg, nil))
		mustOutcome(t, r, "success")
		tier := r["tier_summary"].(map[string]any)
		c := tier["capacity"].([]any)[0].(map[string]any)
		if c["tier_name"] != "kvca-block-table" || c["capacity_bytes"].(float64) <= 0 {
			t.Fatalf("tier %v", tier)
		}
		if r["adapter_summary"].(map[string]any)["support"] != "unsupported" {
			t.Fatalf("adapters %v", r)
		}
		m := h.call("get_maintenance_status", req(tg, nil))
		mustOutcome(t, m, "success")
		ms := m["maintenance_summary"].(map[string]any)
		if ms["eviction_observable"] != true || !strings.Contains(ms["detail"].(string), "vacuum runs=") {
			t.Fatalf("maintenance %v", ms)
		}
	}
}

// TestKnowledgeLifecycle covers register (idempotent), update to a new
// revision, per-revision artifacts and the persisted store: a second
// gateway over the same state dir resolves what the first registered.
func TestKnowledgeLifecycle(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, setup{engines: 1, stateDir: dir})
	art1 := h.registerPrefix("manual", longPrefix())
	again := h.call("register_knowledge", map[string]any{"runtime_profile": "v1", "knowledge_id": "manual"})
	mustOutcome(t, again, "success")
	mustOutcome(t, h.call("register_knowledge", map[string]any{"runtime_profile": "v1", "knowledge_id": "manual", "revision": "9"}), "idempotency_conflict")
	mustOutcome(t, h.call("update_knowledge", map[string]any{"runtime_profile": "v1", "knowledge_id": "nope", "revision": "2"}), "stale")
	mustOutcome(t, h.call("resolve_knowledge", map[string]any{"runtime_profile": "v1", "knowledge_id": "nope"}), "stale")
	mustOutcome(t, h.call("resolve_knowledge", map[string]any{"runtime_profile": "legacy", "knowledge_id": "manual"}), "incompatible")

	u := h.call("update_knowledge", map[string]any{"runtime_profile": "v1", "knowledge_id": "manual", "revision": "2", "content_reference": "docs@v2"})
	mustOutcome(t, u, "success")
	if u["artifact"] != nil {
		t.Fatalf("revision 2 has no prefix yet: %v", u)
	}
	body2 := []byte(strings.Replace(string(longPrefix()), "Rule 0:", "Rule zero:", 1))
	status, out := h.do("PUT", live.PrefixPrefix+"manual", body2)
	if status != 200 {
		t.Fatalf("%d %s", status, out)
	}
	var pa live.PrefixAnswer
	json.Unmarshal(out, &pa)
	if pa.Revision != "2" || pa.ArtifactID == art1 {
		t.Fatalf("upload for revision 2: %+v", pa)
	}
	list := h.call("list_compatible_artifacts", map[string]any{"runtime_profile": "v1", "knowledge_id": "manual"})
	if n := len(list["artifacts"].([]any)); n != 2 {
		t.Fatalf("%d artifacts", n)
	}
	art := list["artifacts"].([]any)[0].(map[string]any)
	q := h.call("query_artifact_compatibility", map[string]any{"runtime_profile": "v1", "artifact": art})
	if q["compatible"] != true {
		t.Fatalf("query %v", q)
	}
	art["compatibility_profile_id"] = "elsewhere"
	delete(art, "artifact_id")
	if q := h.call("query_artifact_compatibility", map[string]any{"runtime_profile": "v1", "artifact": art}); q["compatible"] != false {
		t.Fatalf("foreign artifact %v", q)
	}
	mustOutcome(t, h.call("report_request_outcome", map[string]any{"runtime_profile": "v1", "knowledge_id": "manual", "outcome": "success"}), "success")

	// Bad uploads are refused with a reason, not stored.
	status, out = h.do("PUT", live.PrefixPrefix+"manual", []byte(`{"model":"mock","messages":[{"role":"user","content":"hi"}]}`))
	if status != 400 || !strings.Contains(string(out), "shorter than one cache block") {
		t.Fatalf("short prefix: %d %s", status, out)
	}
	status, _ = h.do("PUT", live.PrefixPrefix+"unknown", longPrefix())
	if status != 404 {
		t.Fatalf("prefix for unregistered knowledge: %d", status)
	}
	status, got := h.do("GET", live.PrefixPrefix+"manual?revision=1", nil)
	if status != 200 || string(got) != string(longPrefix()) {
		t.Fatalf("stored body: %d %s", status, got)
	}

	// Atomic writes leave no temp files behind.
	files, _ := filepath.Glob(filepath.Join(dir, "knowledge", "*"))
	if len(files) != 1 || !strings.HasSuffix(files[0], ".json") {
		t.Fatalf("state files %v", files)
	}

	// A second kvca over the same state dir (same key and block size)
	// resolves the same knowledge to the same artifacts.
	h2 := newHarness(t, setup{engines: 1, stateDir: dir})
	r := h2.call("resolve_knowledge", map[string]any{"runtime_profile": "v1", "knowledge_id": "manual"})
	mustOutcome(t, r, "success")
	if r["artifact"].(map[string]any)["artifact_id"] != pa.ArtifactID {
		t.Fatalf("after restart: %v", r)
	}
	l2 := h2.call("list_compatible_artifacts", map[string]any{"runtime_profile": "v1", "knowledge_id": "manual"})
	if l2["artifacts"].([]any)[0].(map[string]any)["artifact_id"] != art1 {
		t.Fatalf("revision 1 lost: %v", l2)
	}
	status, out = h2.do("GET", live.KnowledgePrefix+"manual", nil)
	if status != 200 || !strings.Contains(string(out), `"current_revision":"2"`) {
		t.Fatalf("describe: %d %s", status, out)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}
