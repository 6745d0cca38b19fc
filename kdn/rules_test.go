package kdn

import (
	"strings"
	"testing"
	"time"
)

// These cases cover the contracts' rules beyond the golden vectors (the
// models of package kdn, docs/kdn.md), so held-out messages are judged by
// the rules rather than by the 72 public examples.

const (
	testEndpoint = "endpoint_0123456789abcdef0123456789abcdef"
	testArtifact = "artifact_75628ef21b2c5734ba29825f053358a1"
	testTask     = "cacheop_a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
)

func TestWorkedArtifactID(t *testing.T) {
	a := CacheArtifact{KnowledgeID: "k", ArtifactVersion: "1", ModelProfile: "m", TokenizerProfile: "t",
		Adapters: []string{}, CacheDataProfile: "l", CompatibilityProfileID: "c", RuntimeProfile: ProfileV1, SchemaVersion: "v1"}
	if got, want := a.CanonicalID(), "artifact_7e96788f0b7a54e8bc120d98216cf1a8"; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

func TestEndpointIDForName(t *testing.T) {
	if got, want := EndpointIDForName("mock-node-a"), "endpoint_07283b717d9356a9aad19ba158c1cdbb"; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

func envelopeJSON(extra string) string {
	return `{"runtime_profile":"v1","request_id":"r","timestamp":"2025-06-01T12:00:00Z","knowledge_id":"k"` + extra + `}`
}

type ruleCase struct {
	name, model, in string
	valid           bool
	want            string // canonical output substring (valid) or error code (invalid)
}

func runRuleCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := Canonical(c.model, []byte(c.in))
			if c.valid {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				if !strings.Contains(string(out), c.want) {
					t.Fatalf("output %s does not contain %s", out, c.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted: %s", out)
			}
			if ve := err.(*ValidationError); c.want != "" && ve.Code != c.want {
				t.Fatalf("code %s (%v), want %s", ve.Code, ve, c.want)
			}
		})
	}
}

func TestEnvelopeRules(t *testing.T) {
	p := func(v string) string {
		return `{"runtime_profile":` + v + `,"request_id":"r","timestamp":"2025-06-01T12:00:00Z","knowledge_id":"k"}`
	}
	ts := func(v string) string {
		return `{"runtime_profile":"v1","request_id":"r","timestamp":` + v + `,"knowledge_id":"k"}`
	}
	runRuleCases(t, []ruleCase{
		{"alias old", "ResolveKnowledgeRequest", p(`" OLD "`), true, `"runtime_profile":"legacy"`},
		{"alias v0", "ResolveKnowledgeRequest", p(`"v0"`), true, `"runtime_profile":"legacy"`},
		{"alias new", "ResolveKnowledgeRequest", p(`"NEW"`), true, `"runtime_profile":"v1"`},
		{"alias current", "ResolveKnowledgeRequest", p(`"current"`), true, `"runtime_profile":"v1"`},
		{"alias mock", "ResolveKnowledgeRequest", p(`"mock"`), true, `"runtime_profile":"test/mock"`},
		{"alias test", "ResolveKnowledgeRequest", p(`"Test"`), true, `"runtime_profile":"test/mock"`},
		{"upper TEST/MOCK", "ResolveKnowledgeRequest", p(`"TEST/MOCK"`), true, `"runtime_profile":"test/mock"`},
		{"separator whitespace trimmed", "ResolveKnowledgeRequest", p(`"\u001flegacy\t"`), true, `"runtime_profile":"legacy"`},
		{"empty profile", "ResolveKnowledgeRequest", p(`""`), false, CodeInvalidProfile},
		{"spaced test / mock", "ResolveKnowledgeRequest", p(`"test / mock"`), false, CodeInvalidProfile},
		{"v2", "ResolveKnowledgeRequest", p(`"v2"`), false, CodeInvalidProfile},
		{"AUTO", "ResolveKnowledgeRequest", p(`" AUTO "`), false, CodeInvalidProfile},
		{"number profile", "ResolveKnowledgeRequest", p(`0`), false, CodeInvalidProfile},
		{"false profile", "ResolveKnowledgeRequest", p(`false`), false, CodeInvalidProfile},
		{"missing profile", "ResolveKnowledgeRequest", `{"knowledge_id":"k"}`, false, CodeMissingField},
		{"minus zero offset", "ResolveKnowledgeRequest", ts(`"2025-06-01T12:00:00-00:00"`), true, `"timestamp":"2025-06-01T12:00:00Z"`},
		{"fraction truncated", "ResolveKnowledgeRequest", ts(`"2025-06-01T12:00:00.1234569Z"`), true, `"timestamp":"2025-06-01T12:00:00.123456Z"`},
		{"zero fraction dropped", "ResolveKnowledgeRequest", ts(`"2025-06-01T12:00:00.000000Z"`), true, `"timestamp":"2025-06-01T12:00:00Z"`},
		{"one fraction digit", "ResolveKnowledgeRequest", ts(`"2025-06-01T12:00:00.5Z"`), true, `"timestamp":"2025-06-01T12:00:00.500000Z"`},
		{"bad day", "ResolveKnowledgeRequest", ts(`"2025-02-29T12:00:00Z"`), false, CodeInvalidDatetime},
		{"leap day", "ResolveKnowledgeRequest", ts(`"2024-02-29T12:00:00Z"`), true, `2024-02-29`},
		{"numeric timestamp", "ResolveKnowledgeRequest", ts(`1717243200`), false, CodeInvalidType},
		{"null timestamp", "ResolveKnowledgeRequest", ts(`null`), false, CodeNullNotAllowed},
		{"null request_id", "ResolveKnowledgeRequest", `{"runtime_profile":"v1","request_id":null,"knowledge_id":"k"}`, false, CodeNullNotAllowed},
		{"empty request_id", "ResolveKnowledgeRequest", `{"runtime_profile":"v1","request_id":"","knowledge_id":"k"}`, false, CodeTooShort},
		{"null contract_version", "ResolveKnowledgeRequest", envelopeJSON(`,"contract_version":null`), false, CodeNullNotAllowed},
		{"empty correlation_id", "ResolveKnowledgeRequest", envelopeJSON(`,"correlation_id":""`), true, `"correlation_id":""`},
		{"whitespace knowledge_id passes min 1", "ResolveKnowledgeRequest", `{"runtime_profile":"v1","request_id":"r","timestamp":"2025-06-01T12:00:00Z","knowledge_id":" "}`, true, `"knowledge_id":" "`},
		{"empty knowledge_id", "ResolveKnowledgeRequest", `{"runtime_profile":"v1","knowledge_id":""}`, false, CodeTooShort},
		{"duplicate key", "ResolveKnowledgeRequest", envelopeJSON(`,"knowledge_id":"k2"`), false, CodeDuplicateKey},
		{"trailing bytes", "ResolveKnowledgeRequest", envelopeJSON(``) + `x`, false, CodeMalformedJSON},
		{"top-level array", "ResolveKnowledgeRequest", `[]`, false, CodeInvalidType},
		{"non-string knowledge_id", "ResolveKnowledgeRequest", `{"runtime_profile":"v1","knowledge_id":5}`, false, CodeInvalidType},
		{"escaped output", "RegisterKnowledgeRequest", envelopeJSON(`,"content_reference":"a\"b\\c\u0001<>&\u2028é"`), true, `"content_reference":"a\"b\\c\u0001<>&` + "\u2028é\""},
		{"lone surrogate", "RegisterKnowledgeRequest", envelopeJSON(`,"content_reference":"\ud800"`), false, CodeMalformedJSON},
		{"null revision", "RegisterKnowledgeRequest", envelopeJSON(`,"revision":null`), false, CodeNullNotAllowed},
		{"float for int", "GetMaintenanceStatusRequest", `{"runtime_profile":"v1","compatibility_profile_id":"c","endpoint_id":"` + testEndpoint + `","endpoint_generation":1.0}`, false, CodeInvalidType},
		{"bool for int", "GetMaintenanceStatusRequest", `{"runtime_profile":"v1","compatibility_profile_id":"c","endpoint_id":"` + testEndpoint + `","endpoint_generation":true}`, false, CodeInvalidType},
		{"string for int", "GetMaintenanceStatusRequest", `{"runtime_profile":"v1","compatibility_profile_id":"c","endpoint_id":"` + testEndpoint + `","endpoint_generation":"1"}`, false, CodeInvalidType},
		{"endpoint trailing newline", "GetMaintenanceStatusRequest", `{"runtime_profile":"v1","compatibility_profile_id":"c","endpoint_id":"` + testEndpoint + `\n","endpoint_generation":1}`, false, CodePattern},
		{"negative generation legacy", "GetMaintenanceStatusRequest", `{"runtime_profile":"legacy","compatibility_profile_id":"c","endpoint_id":"` + testEndpoint + `","endpoint_generation":-1}`, false, CodeOutOfRange},
		{"discovery with target field", "GetLMCacheEndpointsRequest", `{"runtime_profile":"v1","endpoint_id":"` + testEndpoint + `"}`, false, CodeUnknownField},
		{"empty idempotency key", "CreateClearIntentRequest", `{"runtime_profile":"v1","compatibility_profile_id":"c","endpoint_id":"` + testEndpoint + `","endpoint_generation":1,"artifact_id":"` + testArtifact + `","idempotency_key":""}`, false, CodeTooShort},
		{"report outcome bad enum", "ReportRequestOutcomeRequest", envelopeJSON(`,"outcome":"Success"`), false, CodeInvalidEnum},
		{"report outcome free operation_id", "ReportRequestOutcomeRequest", envelopeJSON(`,"outcome":"success","operation_id":"anything"`), true, `"operation_id":"anything"`},
		{"token_count negative", "TokenReference", `{"reference_id":"r","token_count":-1}`, false, CodeOutOfRange},
		{"token ref nested unknown", "TokenInput", `{"token_reference":{"reference_id":"r","kv_bytes":"x"}}`, false, CodeUnknownField},
		{"token id zero", "TokenInput", `{"token_ids":[0]}`, true, `"token_ids":[0]`},
		{"token ids null and ref", "TokenInput", `{"token_ids":null,"token_reference":{"reference_id":"r"}}`, true, `"token_count":null`},
		{"range three elements", "TokenCoverage", `{"whole_request_hit":true,"covered_ranges":[[0,1,2]],"total_tokens":5}`, false, CodeInvalidType},
		{"empty range", "TokenCoverage", `{"whole_request_hit":true,"covered_ranges":[[1,1]],"total_tokens":5}`, false, CodeRule},
		{"hit with no ranges", "TokenCoverage", `{"whole_request_hit":true,"total_tokens":0}`, true, `"covered_ranges":[]`},
		{"null covered_ranges", "TokenCoverage", `{"whole_request_hit":true,"covered_ranges":null,"total_tokens":0}`, false, CodeNullNotAllowed},
		{"error detail success code", "ContractErrorDetail", `{"code":"success","message":"m"}`, true, `"retryable":false`},
		{"error detail empty message", "ContractErrorDetail", `{"code":"failed","message":""}`, false, CodeTooShort},
		{"error alias model", "ContractError", `{"code":"failed","message":"x","retryable":true}`, true, `"retryable":true`},
	})
}

func TestDomainRules(t *testing.T) {
	art := func(extra string) string {
		return `{"knowledge_id":"kb","model_profile":"m","tokenizer_profile":"t","cache_data_profile":"c","compatibility_profile_id":"p","created_at":"2025-06-01T12:00:00Z"` + extra + `}`
	}
	obs := func(extra string) string {
		return `{"artifact_id":"` + testArtifact + `","state":"available","source":"mock","endpoint_id":"` + testEndpoint +
			`","runtime_profile":"test/mock","gateway_profile":"mock","compatibility_profile_id":"cpu-test","projected_at":"2025-06-01T11:59:30Z"` + extra + `}`
	}
	task := func(extra string) string {
		return `{"task_id":"` + testTask + `","idempotency_key":"k","operation":"prefetch","artifact_id":"` + testArtifact +
			`","runtime_profile":"v1","compatibility_profile_id":"p","gateway_profile":"mp_http_api","created_at":"2025-06-01T12:00:00Z","updated_at":"2025-06-01T12:00:00Z"` + extra + `}`
	}
	sum := func(extra string) string {
		return `{"source":"s","observed_at":"2025-06-01T12:00:00Z","runtime_profile":"test/mock","compatibility_profile_id":"p","endpoint_id":"` + testEndpoint + `","endpoint_generation":1` + extra + `}`
	}
	runRuleCases(t, []ruleCase{
		{"artifact defaults", "CacheArtifact", art(``), true, `"artifact_version":"1","model_profile":"m","tokenizer_profile":"t","adapters":[],"cache_data_profile":"c","compatibility_profile_id":"p","runtime_profile":"v1","schema_version":"v1"`},
		{"artifact null id derived", "CacheArtifact", art(`,"artifact_id":null`), true, `"artifact_id":"artifact_`},
		{"artifact duplicate adapters", "CacheArtifact", art(`,"adapters":["a","a"]`), false, CodeDuplicateItem},
		{"artifact blank adapter", "CacheArtifact", art(`,"adapters":["\u3000"]`), false, CodeBlank},
		{"artifact auto", "CacheArtifact", art(`,"runtime_profile":"auto"`), false, CodeInvalidProfile},
		{"artifact null profile", "CacheArtifact", art(`,"runtime_profile":null`), false, CodeInvalidProfile},
		{"artifact created_at naive", "CacheArtifact", `{"knowledge_id":"kb","model_profile":"m","tokenizer_profile":"t","cache_data_profile":"c","compatibility_profile_id":"p","created_at":"2025-06-01T12:00:00"}`, false, CodeNaiveDatetime},
		{"artifact negative offset kept", "CacheArtifact", `{"knowledge_id":"kb","model_profile":"m","tokenizer_profile":"t","cache_data_profile":"c","compatibility_profile_id":"p","created_at":"2025-06-01T12:00:00.5-05:30"}`, true, `"created_at":"2025-06-01T12:00:00.500000-05:30"`},
		{"observation needs expiry", "CacheReplicaObservation", obs(`,"endpoint_generation":1,"source_observed_at":"2025-06-01T11:59:00Z"`), false, CodeRule},
		{"observation expiry equal", "CacheReplicaObservation", obs(`,"endpoint_generation":1,"source_observed_at":"2025-06-01T11:59:00Z","expires_at":"2025-06-01T11:59:00Z"`), false, CodeRule},
		{"observation source after projected", "CacheReplicaObservation", obs(`,"endpoint_generation":1,"source_observed_at":"2025-06-01T11:59:31Z","expires_at":"2025-06-01T12:09:00Z"`), false, CodeRule},
		{"observation generation zero", "CacheReplicaObservation", obs(`,"endpoint_generation":0,"source_observed_at":"2025-06-01T11:59:00Z","expires_at":"2025-06-01T12:09:00Z"`), false, CodeRule},
		{"observation legacy fields", "CacheReplicaObservation", obs(`,"endpoint_generation":1,"source_observed_at":"2025-06-01T11:59:00Z","expires_at":"2025-06-01T12:09:00Z","legacy_kv_rel_dir":"x"`), false, CodeRule},
		{"observation non-utc", "CacheReplicaObservation", obs(`,"endpoint_generation":1,"source_observed_at":"2025-06-01T13:59:00+02:00","expires_at":"2025-06-01T12:09:00Z"`), false, CodeNonUTCDatetime},
		{"observation legacy source", "CacheReplicaObservation", `{"artifact_id":"` + testArtifact + `","state":"available","source":"legacy_projection","endpoint_id":"` + testEndpoint + `","endpoint_generation":1,"gateway_profile":"mock","compatibility_profile_id":"c","source_observed_at":"2025-06-01T11:00:00Z","projected_at":"2025-06-01T11:59:30Z","expires_at":"2025-06-01T12:09:00Z"}`, false, CodeRule},
		{"observation expires without source", "CacheReplicaObservation", `{"artifact_id":"` + testArtifact + `","state":"unknown","source":"legacy_projection","endpoint_id":"` + testEndpoint + `","endpoint_generation":0,"runtime_profile":"old","gateway_profile":"legacy_gateway","compatibility_profile_id":"c","projected_at":"2025-06-01T11:59:30Z","expires_at":"2025-06-01T12:09:00Z","legacy_projection":true,"compatibility_uncertain":true}`, true, `"runtime_profile":"legacy"`},
		{"task defaults", "CacheOperationTask", task(``), true, `"endpoint_id":null,"endpoint_generation":null,"state":"pending","attempt":0`},
		{"task generation zero", "CacheOperationTask", task(`,"endpoint_id":"` + testEndpoint + `","endpoint_generation":0`), false, CodeOutOfRange},
		{"task updated before created", "CacheOperationTask", strings.Replace(task(``), `"updated_at":"2025-06-01T12:00:00Z"`, `"updated_at":"2025-06-01T11:00:00Z"`, 1), false, CodeRule},
		{"task blank key", "CacheOperationTask", strings.Replace(task(``), `"idempotency_key":"k"`, `"idempotency_key":" "`, 1), false, CodeBlank},
		{"task v1 lookup on legacy gateway", "CacheOperationTask", strings.Replace(strings.Replace(task(``), `"prefetch"`, `"lookup"`, 1), `"mp_http_api"`, `"legacy_gateway"`, 1), true, `"operation":"lookup"`},
		{"task mock write on legacy gateway", "CacheOperationTask", strings.Replace(strings.Replace(task(``), `"v1"`, `"test/mock"`, 1), `"mp_http_api"`, `"legacy_gateway"`, 1), true, `"gateway_profile":"legacy_gateway"`},
		{"endpoint derived", "LMCacheEndpoint", `{"name":"mock-node-a","gateway_profile":"mock","compatibility_profile_id":"c"}`, true, `"endpoint_id":"endpoint_07283b717d9356a9aad19ba158c1cdbb","name":"mock-node-a","runtime_profile":"v1","gateway_profile":"mock","compatibility_profile_id":"c","generation":1,"adapter":null,"tier":null`},
		{"endpoint generation zero", "LMCacheEndpoint", `{"name":"n","runtime_profile":"legacy","gateway_profile":"legacy_gateway","compatibility_profile_id":"c","generation":0}`, false, CodeOutOfRange},
		{"summary alias rejected", "MaintenanceSummary", strings.Replace(sum(`,"support":"supported"`), `"test/mock"`, `"mock"`, 1), false, CodeInvalidEnum},
		{"summary auto accepted", "MaintenanceSummary", strings.Replace(sum(`,"support":"unknown","detail":"d"`), `"test/mock"`, `"auto"`, 1), true, `"runtime_profile":"auto"`},
		{"capacity over", "CapacityUsageObservation", sum(`,"support":"supported","tier_name":"cpu","tier_level":"l1","capacity_bytes":1,"used_bytes":2`), false, CodeRule},
		{"capacity unsupported measured", "CapacityUsageObservation", sum(`,"support":"unsupported","tier_name":"cpu","tier_level":"l1","used_bytes":2`), false, CodeRule},
		{"adapter unsupported listed", "AdapterSummary", sum(`,"support":"unknown","loaded_adapters":["a"]`), false, CodeRule},
		{"tier same name both levels", "TierSummary", sum(`,"support":"supported","l1_tiers":["x"],"l2_tiers":["x"]`), true, `"l1_tiers":["x"],"l2_tiers":["x"],"capacity":[]`},
		{"tier capacity provenance", "TierSummary", sum(`,"support":"supported","l1_tiers":["cpu"],"capacity":[` + strings.Replace(sum(`,"support":"unknown","tier_name":"cpu","tier_level":"l1"`), `"endpoint_generation":1`, `"endpoint_generation":2`, 1) + `]`), false, CodeRule},
		{"compat chunk zero", "LMCacheCompatibilityProfile", `{"compatibility_profile_id":"c","chunk_size":0}`, false, CodeOutOfRange},
		{"binding empty id", "GatewayAdapterBinding", `{"transport_kind":"mock","binding_id":""}`, false, CodeTooShort},
	})
}

func TestSnapshotRules(t *testing.T) {
	snap := func(profile, bindings, extra string) string {
		return `{"runtime_profile":"` + profile + `","adapter_bindings":` + bindings + `,"compatibility_profile":{"compatibility_profile_id":"c"},"endpoint_id":"` + testEndpoint + `","endpoint_generation":1,"observed_at":"2025-06-01T12:00:00Z","source":"s"` + extra + `}`
	}
	runRuleCases(t, []ruleCase{
		{"defaults", "CapabilitySnapshot", snap("v1", `[{"transport_kind":"mp_http_api","binding_id":"b"}]`, ``), true, `"runtime_mode":null,"observed_at":"2025-06-01T12:00:00Z","source":"s","loaded_adapters":[],"l1_tiers":[],"l2_tiers":[],"token_lookup":"unknown"`},
		{"v1 several bindings", "CapabilitySnapshot", snap("modern", `[{"transport_kind":"mp_sdk","binding_id":"b"},{"transport_kind":"unknown_future","binding_id":"b"}]`, ``), true, `"runtime_profile":"v1"`},
		{"duplicate transport", "CapabilitySnapshot", snap("v1", `[{"transport_kind":"mp_sdk","binding_id":"a"},{"transport_kind":"mp_sdk","binding_id":"b"}]`, ``), false, CodeDuplicateItem},
		{"empty bindings", "CapabilitySnapshot", snap("v1", `[]`, ``), false, CodeTooShort},
		{"legacy needs legacy_redis", "CapabilitySnapshot", snap("legacy", `[{"transport_kind":"mp_sdk","binding_id":"b"}]`, ``), false, CodeRule},
		{"legacy extra binding", "CapabilitySnapshot", snap("legacy", `[{"transport_kind":"legacy_redis","binding_id":"b"},{"transport_kind":"mock","binding_id":"m"}]`, ``), false, CodeRule},
		{"mock with v1 binding", "CapabilitySnapshot", snap("test/mock", `[{"transport_kind":"mock","binding_id":"b"},{"transport_kind":"mp_sdk","binding_id":"m"}]`, ``), false, CodeRule},
		{"v1 legacy_redis", "CapabilitySnapshot", snap("v1", `[{"transport_kind":"legacy_redis","binding_id":"b"}]`, ``), false, CodeRule},
		{"flag bad", "CapabilitySnapshot", snap("v1", `[{"transport_kind":"mp_sdk","binding_id":"b"}]`, `,"batching":"yes"`), false, CodeInvalidEnum},
		{"flag null", "CapabilitySnapshot", snap("v1", `[{"transport_kind":"mp_sdk","binding_id":"b"}]`, `,"batching":null`), false, CodeNullNotAllowed},
		{"missing bindings", "CapabilitySnapshot", `{"runtime_profile":"v1","compatibility_profile":{"compatibility_profile_id":"c"},"endpoint_id":"` + testEndpoint + `","endpoint_generation":1,"source":"s"}`, false, CodeMissingField},
		{"compat unknown key", "CapabilitySnapshot", strings.Replace(snap("v1", `[{"transport_kind":"mp_sdk","binding_id":"b"}]`, ``), `{"compatibility_profile_id":"c"}`, `{"compatibility_profile_id":"c","redis_key":"k"}`, 1), false, CodeUnknownField},
	})
}

func TestResponseRules(t *testing.T) {
	target := `"runtime_profile":"test/mock","request_id":"r","timestamp":"2025-06-01T12:00:00Z","compatibility_profile_id":"cpu-test","endpoint_id":"` + testEndpoint + `","endpoint_generation":1`
	op := func(state, kind string) string {
		return `"operation":{"task_id":"` + testTask + `","idempotency_key":"k","operation":"` + kind + `","artifact_id":"` + testArtifact +
			`","runtime_profile":"test/mock","compatibility_profile_id":"cpu-test","gateway_profile":"mock","endpoint_id":"` + testEndpoint +
			`","endpoint_generation":1,"state":"` + state + `","created_at":"2025-06-01T12:00:00Z","updated_at":"2025-06-01T12:00:00Z"}`
	}
	errJSON := func(code string) string { return `"error":{"code":"` + code + `","message":"m"}` }
	runRuleCases(t, []ruleCase{
		{"clear failed with prefetch task", "CreateClearIntentResponse", `{` + target + `,"outcome":"failed",` + errJSON("failed") + `,` + op("failed", "prefetch") + `}`, true, `"outcome":"failed"`},
		{"status success any state", "GetOperationStatusResponse", `{` + target + `,` + op("retry_wait", "observe") + `}`, true, `"state":"retry_wait"`},
		{"status success without op", "GetOperationStatusResponse", `{` + target + `}`, false, CodeRule},
		{"operation response", "OperationResponse", `{` + target + `,` + op("running", "pin") + `}`, true, `"operation":"pin"`},
		{"cancelled outcome on status", "GetOperationStatusResponse", `{` + target + `,"outcome":"cancelled",` + errJSON("cancelled") + `,` + op("cancelled", "pin") + `}`, true, `"outcome":"cancelled"`},
		{"cancelled outcome without op", "CacheServiceResponse", `{` + target + `,"outcome":"cancelled",` + errJSON("cancelled") + `}`, false, CodeRule},
		{"cancel success failed task", "CancelOperationResponse", `{` + target + `,` + op("failed", "clear") + `}`, true, `"state":"failed"`},
		{"legacy response generation zero without op", "LookupArtifactResponse", `{"runtime_profile":"legacy","compatibility_profile_id":"c","endpoint_id":"` + testEndpoint + `","endpoint_generation":0,"outcome":"unsupported",` + errJSON("unsupported") + `}`, true, `"endpoint_generation":0`},
		{"v1 response generation zero", "LookupArtifactResponse", `{"runtime_profile":"v1","compatibility_profile_id":"c","endpoint_id":"` + testEndpoint + `","endpoint_generation":0,"outcome":"unsupported",` + errJSON("unsupported") + `}`, false, CodeRule},
		{"base response payload without target", "CacheServiceResponse", `{"runtime_profile":"v1","token_coverage":{"whole_request_hit":true,"total_tokens":1}}`, false, CodeRule},
		{"base response loose target", "CacheServiceResponse", `{"runtime_profile":"v1","compatibility_profile_id":"","endpoint_id":"anything"}`, true, `"endpoint_id":"anything"`},
		{"discovery empty list", "GetLMCacheEndpointsResponse", `{"runtime_profile":"v1","endpoints":[]}`, true, `"endpoints":[]`},
		{"discovery success null list", "GetLMCacheEndpointsResponse", `{"runtime_profile":"v1"}`, false, CodeRule},
		{"targeted null target", "GatewayTargetedResponse", `{"runtime_profile":"v1","compatibility_profile_id":null,"endpoint_id":"` + testEndpoint + `","endpoint_generation":1}`, false, CodeMissingField},
		{"partial outcome", "LookupTokensResponse", `{` + target + `,"outcome":"partial",` + errJSON("partial") + `,"token_coverage":{"whole_request_hit":false,"covered_ranges":[[0,1]],"total_tokens":3}}`, true, `"outcome":"partial"`},
		{"artifact provenance", "LookupArtifactResponse", `{` + target + `,"artifact":{"knowledge_id":"k","model_profile":"m","tokenizer_profile":"t","cache_data_profile":"c","compatibility_profile_id":"cpu-test","runtime_profile":"v1","created_at":"2025-06-01T12:00:00Z"}}`, false, CodeRule},
		{"knowledge response foreign artifact ok", "KnowledgeResponse", `{"runtime_profile":"v1","artifact":{"knowledge_id":"k","model_profile":"m","tokenizer_profile":"t","cache_data_profile":"c","compatibility_profile_id":"x","runtime_profile":"legacy","created_at":"2025-06-01T12:00:00Z"}}`, true, `"runtime_profile":"legacy"`},
		{"knowledge response cancelled without op", "ResolveKnowledgeResponse", `{"runtime_profile":"v1","outcome":"cancelled",` + errJSON("cancelled") + `}`, true, `"outcome":"cancelled"`},
		{"knowledge empty knowledge_id", "KnowledgeResponse", `{"runtime_profile":"v1","knowledge_id":""}`, true, `"knowledge_id":""`},
	})
}

func TestEncodeRevalidates(t *testing.T) {
	m, err := Decode("LookupArtifactRequest", []byte(`{"runtime_profile":"v1","compatibility_profile_id":"c","endpoint_id":"`+testEndpoint+`","endpoint_generation":1,"artifact_id":"`+testArtifact+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	req := m.(LookupArtifactRequest)
	req.EndpointGeneration = 0 // a copy: the decoded value is unaffected
	if _, err := Encode(req); err == nil {
		t.Fatal("Encode accepted a value broken after decoding")
	}
	if _, err := Encode(m); err != nil {
		t.Fatalf("original value changed: %v", err)
	}
}

func TestGeneratedDefaults(t *testing.T) {
	fixed := time.Date(2025, 6, 1, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	c := Codec{Now: func() time.Time { return fixed }, Rand: strings.NewReader(strings.Repeat("\xff", 64))}
	m, err := c.Decode("ResolveKnowledgeRequest", []byte(`{"runtime_profile":"test/mock","knowledge_id":"kb-faq"}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := Encode(m)
	want := `{"contract_version":"kdn.v1","runtime_profile":"test/mock","request_id":"req_ffffffffffff4fffbfffffffffffffff","correlation_id":null,"timestamp":"2025-06-01T11:00:00.123456Z","knowledge_id":"kb-faq"}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

func TestTaskAdvance(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	task := CacheOperationTask{State: StatePending, CreatedAt: t0, UpdatedAt: t0}
	steps := []struct {
		to      CacheOperationState
		ok      bool
		attempt int64
	}{
		{StateSucceeded, false, 0}, {StateRunning, true, 1}, {StateRunning, true, 1}, {StateRetryWait, true, 1},
		{StateRunning, true, 2}, {StateSucceeded, true, 2}, {StateCancelled, false, 2},
	}
	for i, s := range steps {
		next, err := task.Advance(s.to, t0.Add(-time.Hour))
		if (err == nil) != s.ok {
			t.Fatalf("step %d to %s: err %v", i, s.to, err)
		}
		if err == nil {
			task = next
		}
		if task.Attempt != s.attempt || task.UpdatedAt.Before(t0) {
			t.Fatalf("step %d: attempt %d updated %v", i, task.Attempt, task.UpdatedAt)
		}
	}
}

func TestErrorLineIsSafe(t *testing.T) {
	_, err := Decode("ResolveKnowledgeRequest", []byte(`{"runtime_profile":"v1","knowledge_id":"k","pass\nword secret":"hunter2"}`))
	line := err.(*ValidationError).Line()
	if strings.ContainsAny(line, "\n\r") || strings.Contains(line, "hunter2") {
		t.Fatalf("unsafe line %q", line)
	}
}

func TestModelNamesDecode(t *testing.T) {
	for _, name := range ModelNames() {
		if decoderFor(name) == nil {
			t.Errorf("%s listed but not decodable", name)
		}
		// Every model has at least one required field.
		if _, err := Decode(name, []byte(`{}`)); err == nil {
			t.Errorf("%s accepts {}", name)
		}
	}
}
