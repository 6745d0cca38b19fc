package gateway

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvca/kvca/kdn"
)

func fixedClock() func() time.Time { return func() time.Time { return workflowStart() } }

func newMock(t *testing.T, s kdn.CapabilitySnapshot, f Fixtures) *Mock {
	t.Helper()
	m, err := NewMock(s, f, Options{Clock: fixedClock()})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mockEnv() kdn.Envelope {
	return kdn.Envelope{ContractVersion: kdn.KDNContractVersion, RuntimeProfile: kdn.ProfileMock, RequestID: "r", Timestamp: workflowStart()}
}

func mockTarget() kdn.Target {
	return kdn.Target{CompatibilityProfileID: "cpu-test", EndpointID: kdn.EndpointIDForName("mock-node-a"), EndpointGeneration: 1}
}

func mustValid(t *testing.T, m kdn.Message) {
	t.Helper()
	if _, err := kdn.Encode(m); err != nil {
		t.Fatalf("%s is invalid: %v", m.ModelName(), err)
	}
}

func TestNegotiationOrder(t *testing.T) {
	s := MockSnapshot()
	s.Flags[kdn.CapArtifactLookup] = kdn.Unknown
	env, tgt := mockEnv(), mockTarget()
	cases := []struct {
		name string
		mut  func(*kdn.Envelope, *kdn.Target)
		want kdn.OutcomeCode
	}{
		{"runtime beats generation", func(e *kdn.Envelope, t *kdn.Target) { e.RuntimeProfile = kdn.ProfileV1; t.EndpointGeneration = 9 }, kdn.OutcomeIncompatible},
		{"endpoint beats generation", func(_ *kdn.Envelope, t *kdn.Target) {
			t.EndpointID = kdn.EndpointIDForName("x")
			t.EndpointGeneration = 9
		}, kdn.OutcomeIncompatible},
		{"newer generation is stale", func(_ *kdn.Envelope, t *kdn.Target) { t.EndpointGeneration = 2 }, kdn.OutcomeStale},
		{"unknown flag is unsupported", func(*kdn.Envelope, *kdn.Target) {}, kdn.OutcomeUnsupported},
	}
	for _, c := range cases {
		e, tg := env, tgt
		c.mut(&e, &tg)
		f, refused := Negotiate(s, e, tg, kdn.CapArtifactLookup)
		if !refused || f.Outcome != c.want {
			t.Errorf("%s: got %v %v, want %s", c.name, refused, f.Outcome, c.want)
		}
		if f.Retryable != (c.want == kdn.OutcomeStale) {
			t.Errorf("%s: retryable %v", c.name, f.Retryable)
		}
	}
	if _, refused := Negotiate(s, env, tgt, kdn.CapCacheObservation); refused {
		t.Error("supported capability refused")
	}
}

func TestFactory(t *testing.T) {
	if _, err := New(MockSnapshot(), kdn.TransportLegacyRedis, Fixtures{}, Options{}); err != ErrTransportNotBound {
		t.Errorf("unbound transport: %v", err)
	}
	bad := MockSnapshot()
	bad.EndpointGeneration = 0
	if _, err := New(bad, kdn.TransportMock, Fixtures{}, Options{}); err != ErrInvalidSnapshot {
		t.Errorf("invalid snapshot: %v", err)
	}
	fx := MockFixtures()
	fx.Artifacts[0].ModelProfile = " "
	if g, err := New(MockSnapshot(), kdn.TransportMock, fx, Options{}); err != ErrInvalidFixture || g != nil {
		t.Errorf("invalid fixture: %v %v", g, err)
	}
	v1 := MockSnapshot()
	v1.RuntimeProfile = kdn.ProfileV1
	v1.AdapterBindings = []kdn.GatewayAdapterBinding{{TransportKind: kdn.TransportUnknownFuture, BindingID: "b"}}
	if _, err := New(v1, kdn.TransportUnknownFuture, Fixtures{}, Options{}); err != ErrNotImplemented {
		t.Errorf("production transport: %v", err)
	}
}

func TestMockProvenanceAnswers(t *testing.T) {
	ctx := context.Background()
	fx := MockFixtures()
	art := fx.Artifacts[0]

	// Artifact fixture from another compatibility profile.
	foreign := art
	foreign.ArtifactID = kdn.None[string]()
	foreign.CompatibilityProfileID = "other"
	m := newMock(t, MockSnapshot(), Fixtures{Artifacts: []kdn.CacheArtifact{foreign}})
	r := m.LookupArtifact(ctx, kdn.LookupArtifactRequest{Envelope: mockEnv(), Target: mockTarget(), ArtifactID: foreign.ID()})
	mustValid(t, r)
	if r.Outcome != kdn.OutcomeIncompatible || r.Error.Value().Message != "artifact provenance mismatch" {
		t.Errorf("artifact provenance: %s %q", r.Outcome, r.Error.Value().Message)
	}
	r = m.LookupArtifact(ctx, kdn.LookupArtifactRequest{Envelope: mockEnv(), Target: mockTarget(), ArtifactID: art.ID()})
	if r.Outcome != kdn.OutcomeStale || r.Error.Value().Message != "artifact not observed" {
		t.Errorf("absent artifact: %s", r.Outcome)
	}

	// Observation fixture at another generation.
	obs := fx.Observations[0]
	obs.ObservationID = kdn.None[string]()
	obs.EndpointGeneration = 3
	m = newMock(t, MockSnapshot(), Fixtures{Observations: []kdn.CacheReplicaObservation{obs}})
	o := m.GetCacheObservation(ctx, kdn.GetCacheObservationRequest{Envelope: mockEnv(), Target: mockTarget(), ArtifactID: obs.ArtifactID})
	mustValid(t, o)
	if o.Outcome != kdn.OutcomeStale || o.Error.Value().Message != "observation generation mismatch" || o.Observation.IsSet() {
		t.Errorf("observation generation: %s %q", o.Outcome, o.Error.Value().Message)
	}

	// Endpoint fixture whose name does not derive the snapshot's id.
	ep := fx.Endpoints[0]
	ep.Name = "mock-node-b"
	m = newMock(t, MockSnapshot(), Fixtures{Endpoints: []kdn.LMCacheEndpoint{ep}})
	d := m.GetLMCacheEndpoints(ctx, kdn.GetLMCacheEndpointsRequest{Envelope: mockEnv()})
	mustValid(t, d)
	if d.Outcome != kdn.OutcomeIncompatible {
		t.Errorf("endpoint provenance: %s", d.Outcome)
	}
	d = newMock(t, MockSnapshot(), Fixtures{}).GetLMCacheEndpoints(ctx, kdn.GetLMCacheEndpointsRequest{Envelope: mockEnv()})
	if d.Outcome != kdn.OutcomeSuccess || d.Endpoints.Value() == nil || len(d.Endpoints.Value()) != 0 {
		t.Errorf("no endpoint fixtures: %s %v", d.Outcome, d.Endpoints)
	}

	// Summaries: absent, then from another generation.
	s := MockSnapshot()
	s.Flags[kdn.CapMaintenanceEviction] = kdn.Supported
	m = newMock(t, s, Fixtures{})
	ta := m.GetTierAndAdapterSummary(ctx, kdn.GetTierAndAdapterSummaryRequest{Envelope: mockEnv(), Target: mockTarget()})
	ms := m.GetMaintenanceStatus(ctx, kdn.GetMaintenanceStatusRequest{Envelope: mockEnv(), Target: mockTarget()})
	mustValid(t, ta)
	mustValid(t, ms)
	if ta.Outcome != kdn.OutcomeStale || ms.Outcome != kdn.OutcomeStale {
		t.Errorf("absent summaries: %s %s", ta.Outcome, ms.Outcome)
	}
	mf := fx.MaintenanceSummary.Value()
	mf.EndpointGeneration = 5
	m = newMock(t, s, Fixtures{MaintenanceSummary: kdn.Some(mf), AdapterSummary: fx.AdapterSummary, TierSummary: fx.TierSummary})
	ms = m.GetMaintenanceStatus(ctx, kdn.GetMaintenanceStatusRequest{Envelope: mockEnv(), Target: mockTarget()})
	ta = m.GetTierAndAdapterSummary(ctx, kdn.GetTierAndAdapterSummaryRequest{Envelope: mockEnv(), Target: mockTarget()})
	mustValid(t, ms)
	mustValid(t, ta)
	if ms.Outcome != kdn.OutcomeIncompatible || ta.Outcome != kdn.OutcomeSuccess {
		t.Errorf("summaries: maintenance %s, tier/adapter %s", ms.Outcome, ta.Outcome)
	}
}

func TestMockCancelUnknownAndStatus(t *testing.T) {
	ctx := context.Background()
	m := newMock(t, MockSnapshot(), MockFixtures())
	req := kdn.CancelOperationRequest{Envelope: mockEnv(), Target: mockTarget(), TaskID: "cacheop_ffffffffffffffffffffffffffffffff"}
	c := m.CancelOperation(ctx, req)
	st := m.GetOperationStatus(ctx, kdn.GetOperationStatusRequest(req))
	mustValid(t, c)
	mustValid(t, st)
	if c.Outcome != kdn.OutcomeStale || st.Outcome != kdn.OutcomeStale {
		t.Errorf("unknown task: cancel %s status %s", c.Outcome, st.Outcome)
	}
	if err := m.Start("cacheop_ffffffffffffffffffffffffffffffff"); err != ErrUnknownTask {
		t.Errorf("start unknown: %v", err)
	}
	// Running work is cancellable too, and a failed task is terminal.
	p := m.CreateRebuildIntent(ctx, kdn.CreateRebuildIntentRequest{Envelope: mockEnv(), Target: mockTarget(), ArtifactID: MockFixtures().Artifacts[0].ID(), IdempotencyKey: "rb"})
	id := p.Operation.Value().TaskID
	if err := m.Start(id); err != nil {
		t.Fatal(err)
	}
	req.TaskID = id
	if c = m.CancelOperation(ctx, req); c.Outcome != kdn.OutcomeCancelled {
		t.Errorf("cancel running: %s", c.Outcome)
	}
	if err := m.Complete(id, true); err != kdn.ErrIllegalTransition {
		t.Errorf("complete cancelled: %v", err)
	}
}

// TestMockConcurrentIntents: the task table is idempotent under
// concurrency: one key yields one task however many callers race.
func TestMockConcurrentIntents(t *testing.T) {
	ctx := context.Background()
	m := newMock(t, MockSnapshot(), MockFixtures())
	req := kdn.CreatePrefetchIntentRequest{Envelope: mockEnv(), Target: mockTarget(), ArtifactID: MockFixtures().Artifacts[0].ID(), IdempotencyKey: "race"}
	var wg sync.WaitGroup
	ids := make([]string, 32)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = m.CreatePrefetchIntent(ctx, req).Operation.Value().TaskID
			_ = m.Start(ids[i])
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("different tasks for one key: %s %s", id, ids[0])
		}
	}
}

func TestLegacyIgnoresFlags(t *testing.T) {
	ctx := context.Background()
	l, err := NewLegacy(LegacySnapshot(), LegacyFixtures(), Options{Clock: fixedClock()})
	if err != nil {
		t.Fatal(err)
	}
	env := mockEnv()
	env.RuntimeProfile = kdn.ProfileLegacy
	tgt := legacyTarget()
	answers := []kdn.Message{
		l.LookupTokens(ctx, kdn.LookupTokensRequest{Envelope: env, Target: tgt, Tokens: kdn.TokenInput{TokenIDs: kdn.Some([]int64{1})}}),
		l.CreatePinIntent(ctx, kdn.CreatePinIntentRequest{Envelope: env, Target: tgt, ArtifactID: legacyFreshArtifact, IdempotencyKey: "k"}),
		l.CreateUnpinIntent(ctx, kdn.CreateUnpinIntentRequest{Envelope: env, Target: tgt, ArtifactID: legacyFreshArtifact, IdempotencyKey: "k"}),
		l.CreateClearIntent(ctx, kdn.CreateClearIntentRequest{Envelope: env, Target: tgt, ArtifactID: legacyFreshArtifact, IdempotencyKey: "k"}),
		l.CreateRebuildIntent(ctx, kdn.CreateRebuildIntentRequest{Envelope: env, Target: tgt, ArtifactID: legacyFreshArtifact, IdempotencyKey: "k"}),
		l.GetOperationStatus(ctx, kdn.GetOperationStatusRequest{Envelope: env, Target: tgt, TaskID: "cacheop_ffffffffffffffffffffffffffffffff"}),
		l.CancelOperation(ctx, kdn.CancelOperationRequest{Envelope: env, Target: tgt, TaskID: "cacheop_ffffffffffffffffffffffffffffffff"}),
		l.GetTierAndAdapterSummary(ctx, kdn.GetTierAndAdapterSummaryRequest{Envelope: env, Target: tgt}),
		l.GetMaintenanceStatus(ctx, kdn.GetMaintenanceStatusRequest{Envelope: env, Target: tgt}),
	}
	for _, a := range answers {
		mustValid(t, a)
		out, _ := kdn.Encode(a)
		if want := `"outcome":"unsupported"`; !strings.Contains(string(out), want) {
			t.Errorf("%s: %s", a.ModelName(), out)
		}
	}
	s := LegacySnapshot()
	s.Flags[kdn.CapArtifactLookup] = kdn.Unknown
	l, _ = NewLegacy(s, Fixtures{}, Options{Clock: fixedClock()})
	r := l.LookupArtifact(ctx, kdn.LookupArtifactRequest{Envelope: env, Target: tgt, ArtifactID: legacyFreshArtifact})
	if r.Error.Value().Message != MsgUnsupported {
		t.Errorf("lookup is gated: %q", r.Error.Value().Message)
	}
}

// TestCallRoutesEveryOperation decodes a minimal request for every
// operation and checks the answer's model is the route's response model.
func TestCallRoutesEveryOperation(t *testing.T) {
	ctx := context.Background()
	g := newMock(t, MockSnapshot(), MockFixtures())
	target := `,"compatibility_profile_id":"cpu-test","endpoint_id":"` + kdn.EndpointIDForName("mock-node-a") + `","endpoint_generation":1`
	extra := map[string]string{
		"LookupArtifactRequest":           target + `,"artifact_id":"artifact_00000000000000000000000000000000"`,
		"GetCacheObservationRequest":      target + `,"artifact_id":"artifact_00000000000000000000000000000000"`,
		"LookupTokensRequest":             target + `,"tokens":{"token_ids":[1]}`,
		"CreatePrefetchIntentRequest":     target + `,"artifact_id":"artifact_00000000000000000000000000000000","idempotency_key":"a"`,
		"CreatePinIntentRequest":          target + `,"artifact_id":"artifact_00000000000000000000000000000000","idempotency_key":"b"`,
		"CreateUnpinIntentRequest":        target + `,"artifact_id":"artifact_00000000000000000000000000000000","idempotency_key":"c"`,
		"CreateClearIntentRequest":        target + `,"artifact_id":"artifact_00000000000000000000000000000000","idempotency_key":"d"`,
		"CreateRebuildIntentRequest":      target + `,"artifact_id":"artifact_00000000000000000000000000000000","idempotency_key":"e"`,
		"GetOperationStatusRequest":       target + `,"task_id":"cacheop_00000000000000000000000000000001"`,
		"CancelOperationRequest":          target + `,"task_id":"cacheop_00000000000000000000000000000001"`,
		"GetLMCacheEndpointsRequest":      ``,
		"GetTierAndAdapterSummaryRequest": target,
		"GetMaintenanceStatusRequest":     target,
		"QueryArtifactCompatibilityRequest": `,"artifact":{"knowledge_id":"k","model_profile":"m","tokenizer_profile":"t",` +
			`"cache_data_profile":"c","compatibility_profile_id":"p","created_at":"2025-06-01T12:00:00Z"}`,
		"ReportRequestOutcomeRequest": `,"knowledge_id":"k","outcome":"success"`,
	}
	for _, op := range Operations() {
		body, ok := extra[op.RequestModel]
		if !ok {
			body = `,"knowledge_id":"k"`
		}
		req, err := kdn.Decode(op.RequestModel, []byte(`{"runtime_profile":"test/mock"`+body+`}`))
		if err != nil {
			t.Fatalf("%s: %v", op.RequestModel, err)
		}
		resp, err := Call(ctx, g, nil, req)
		if op.Knowledge {
			if err != ErrNoRoute {
				t.Errorf("%s: want ErrNoRoute without a knowledge service, got %v", op.Name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", op.Name, err)
		}
		if resp.ModelName() != op.ResponseModel {
			t.Errorf("%s answered %s, want %s", op.Name, resp.ModelName(), op.ResponseModel)
		}
		mustValid(t, resp)
	}
}
