package gateway

import (
	"context"
	"time"

	"github.com/kvca/kvca/kdn"
)

// workflowStart is the fixed instant the workflows run at, so their output
// is reproducible.
func workflowStart() time.Time { return time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC) }

// MockSnapshot returns the §10.1 snapshot: test/mock, one mock binding,
// compatibility profile cpu-test, generation 1, the workflow's flags
// supported (maintenance left unknown, as in the golden vectors).
func MockSnapshot() kdn.CapabilitySnapshot {
	flags := kdn.AllFlags(kdn.Supported)
	flags[kdn.CapObjectListing] = kdn.Unsupported
	flags[kdn.CapMetricsEvents] = kdn.Unsupported
	flags[kdn.CapBatching] = kdn.Unknown
	flags[kdn.CapLockLease] = kdn.Unknown
	return kdn.CapabilitySnapshot{
		ContractVersion:      kdn.GatewayContractVersion,
		RuntimeProfile:       kdn.ProfileMock,
		AdapterBindings:      []kdn.GatewayAdapterBinding{{TransportKind: kdn.TransportMock, BindingID: "local-fixture"}},
		CompatibilityProfile: kdn.LMCacheCompatibilityProfile{CompatibilityProfileID: "cpu-test", ChunkSize: kdn.Some[int64](256), KeyHashProfile: kdn.Some("sha256-v1")},
		EndpointID:           kdn.EndpointIDForName("mock-node-a"),
		EndpointGeneration:   1,
		RuntimeMode:          kdn.Some("cpu-only"),
		ObservedAt:           workflowStart().Add(-2 * time.Minute),
		Source:               "cpu-test",
		LoadedAdapters:       []string{},
		L1Tiers:              []string{"cpu"},
		L2Tiers:              []string{"disk"},
		Flags:                flags,
	}
}

// MockFixtures returns fixtures matching MockSnapshot: one artifact with a
// fresh observation, one token sequence, one endpoint and all summaries.
func MockFixtures() Fixtures {
	s := MockSnapshot()
	start := workflowStart()
	art := kdn.CacheArtifact{
		KnowledgeID: "kb-faq", ArtifactVersion: "1", ModelProfile: "llama-3-8b", TokenizerProfile: "llama-3",
		Adapters: []string{}, CacheDataProfile: "kv-fp16", CompatibilityProfileID: "cpu-test",
		RuntimeProfile: kdn.ProfileMock, SchemaVersion: "v1", CreatedAt: start.Add(-time.Hour),
	}
	obs := kdn.CacheReplicaObservation{
		ArtifactID: art.ID(), State: kdn.ObsAvailable, Source: kdn.SourceMock,
		EndpointID: s.EndpointID, EndpointGeneration: 1, RuntimeProfile: kdn.ProfileMock,
		GatewayProfile: kdn.GatewayMock, CompatibilityProfileID: "cpu-test",
		SourceObservedAt: kdn.Some(start.Add(-time.Minute)), ProjectedAt: start.Add(-30 * time.Second),
		ExpiresAt: kdn.Some(start.Add(9 * time.Minute)), Confidence: kdn.ConfidenceHigh,
	}
	base := kdn.SummaryBase{
		Source: "mock-fixture", ObservedAt: start.Add(-10 * time.Second), RuntimeProfile: kdn.ProfileMock,
		CompatibilityProfileID: "cpu-test", EndpointID: s.EndpointID, EndpointGeneration: 1, Support: kdn.Supported,
	}
	return Fixtures{
		Artifacts:    []kdn.CacheArtifact{art},
		Observations: []kdn.CacheReplicaObservation{obs},
		Tokens: []TokenFixture{{
			Tokens:   kdn.TokenInput{TokenIDs: kdn.Some([]int64{11, 12, 13})},
			Coverage: kdn.TokenCoverage{WholeRequestHit: false, CoveredRanges: []kdn.TokenRange{{Start: 0, End: 2}}, TotalTokens: 3},
		}},
		Endpoints: []kdn.LMCacheEndpoint{{
			Name: "mock-node-a", RuntimeProfile: kdn.ProfileMock, GatewayProfile: kdn.GatewayMock,
			CompatibilityProfileID: "cpu-test", Generation: 1, Tier: kdn.Some("cpu"),
		}},
		AdapterSummary: kdn.Some(kdn.AdapterSummary{SummaryBase: base, LoadedAdapters: []string{}}),
		TierSummary: kdn.Some(kdn.TierSummary{SummaryBase: base, L1Tiers: []string{"cpu"}, L2Tiers: []string{"disk"},
			Capacity: []kdn.CapacityUsageObservation{{SummaryBase: base, TierName: "cpu", TierLevel: kdn.TierL1,
				CapacityBytes: kdn.Some[int64](1 << 30), UsedBytes: kdn.Some[int64](1 << 28)}}}),
		MaintenanceSummary: kdn.Some(kdn.MaintenanceSummary{SummaryBase: base, Active: kdn.Some(false), EvictionObservable: kdn.Some(true)}),
	}
}

// MockWorkflow runs the CPU-only Mock sequence of §10.1 against a fresh
// Mock on a fixed clock and reports every step.
func MockWorkflow() []Step {
	ctx := context.Background()
	rec := &recorder{}
	now := workflowStart()
	opts := Options{Clock: func() time.Time { return now }}

	// 1–2: the compatibility profile and the snapshot validate on their own.
	snap := MockSnapshot()
	rec.add("10.1/1 build compatibility profile", "valid", errText(kdn.Validate(snap.CompatibilityProfile)), kdn.Validate(snap.CompatibilityProfile) == nil)
	rec.add("10.1/2 build snapshot", "valid", errText(kdn.Validate(snap)), kdn.Validate(snap) == nil)
	bad := snap.Clone()
	bad.RuntimeProfile = kdn.ProfileV1
	rec.add("10.1/2 v1 snapshot with a mock binding", "invalid", errText(kdn.Validate(bad)), kdn.Validate(bad) != nil)

	// 3: the factory builds the Mock.
	fx := MockFixtures()
	g, err := New(snap, kdn.TransportMock, fx, opts)
	rec.add("10.1/3 factory builds the Mock", "ok", errText(err), err == nil)
	if err != nil {
		return rec.steps
	}
	mock := g.(*Mock)
	artID := fx.Artifacts[0].ID()
	env := func(id string) kdn.Envelope {
		return kdn.Envelope{ContractVersion: kdn.KDNContractVersion, RuntimeProfile: kdn.ProfileMock, RequestID: id, Timestamp: now}
	}
	tgt := kdn.Target{CompatibilityProfileID: "cpu-test", EndpointID: snap.EndpointID, EndpointGeneration: 1}

	// 4: discovery echoes ids and lists the fixtures.
	disc := kdn.GetLMCacheEndpointsRequest{Envelope: env("wf-disc")}
	disc.CorrelationID = kdn.Some("wf-corr")
	rec.request("10.1/4", disc)
	d := g.GetLMCacheEndpoints(ctx, disc)
	rec.response("10.1/4 endpoint discovery", kdn.OutcomeSuccess, d, kdn.CacheServiceResponse(d),
		len(d.Endpoints.Value()) == 1 && d.RequestID == "wf-disc" && d.CorrelationID == kdn.Some("wf-corr"))

	// 5: artifact lookup.
	look := kdn.LookupArtifactRequest{Envelope: env("wf-5"), Target: tgt, ArtifactID: artID}
	rec.request("10.1/5", look)
	la := g.LookupArtifact(ctx, look)
	rec.response("10.1/5 lookup fixture artifact", kdn.OutcomeSuccess, la, kdn.CacheServiceResponse(la),
		la.Artifact.IsSet() && la.Artifact.Value().ID() == artID)

	// 6: observation, fresh now, stale at expires_at (half-open window).
	obsReq := kdn.GetCacheObservationRequest{Envelope: env("wf-6"), Target: tgt, ArtifactID: artID}
	rec.request("10.1/6", obsReq)
	o := g.GetCacheObservation(ctx, obsReq)
	rec.response("10.1/6 observation while fresh", kdn.OutcomeSuccess, o, kdn.CacheServiceResponse(o), o.Observation.IsSet())
	now = fx.Observations[0].ExpiresAt.Value()
	o = g.GetCacheObservation(ctx, obsReq)
	rec.response("10.1/6 observation at expires_at", kdn.OutcomeStale, o, kdn.CacheServiceResponse(o), o.Observation.IsSet())
	now = workflowStart()

	// 7: tokens with ranges, without range_coverage, without token_lookup, unknown.
	tokReq := kdn.LookupTokensRequest{Envelope: env("wf-7"), Target: tgt, Tokens: fx.Tokens[0].Tokens}
	rec.request("10.1/7", tokReq)
	t := g.LookupTokens(ctx, tokReq)
	rec.response("10.1/7 token lookup (range_coverage)", kdn.OutcomeSuccess, t, kdn.CacheServiceResponse(t),
		len(t.TokenCoverage.Value().CoveredRanges) == 1)
	noRanges := snap.Clone()
	noRanges.Flags[kdn.CapRangeCoverage] = kdn.Unknown
	if g2, err := New(noRanges, kdn.TransportMock, fx, opts); err == nil {
		t = g2.LookupTokens(ctx, tokReq)
		c := t.TokenCoverage.Value()
		rec.response("10.1/7 token lookup (no range_coverage)", kdn.OutcomeSuccess, t, kdn.CacheServiceResponse(t),
			len(c.CoveredRanges) == 0 && c.TotalTokens == 3)
	}
	noTokens := snap.Clone()
	noTokens.Flags[kdn.CapTokenLookup] = kdn.Unsupported
	if g3, err := New(noTokens, kdn.TransportMock, fx, opts); err == nil {
		t = g3.LookupTokens(ctx, tokReq)
		rec.response("10.1/7 token lookup (token_lookup unsupported)", kdn.OutcomeUnsupported, t, kdn.CacheServiceResponse(t),
			!t.TokenCoverage.IsSet())
	}
	unknown := tokReq
	unknown.Tokens = kdn.TokenInput{TokenReference: kdn.Some(kdn.TokenReference{ReferenceID: "never-seen"})}
	t = g.LookupTokens(ctx, unknown)
	rec.response("10.1/7 unknown tokens", kdn.OutcomeTextFallback, t, kdn.CacheServiceResponse(t),
		t.Error.Value().FallbackEligible)

	// 8–10: idempotent prefetch intents.
	pre := kdn.CreatePrefetchIntentRequest{Envelope: env("wf-8"), Target: tgt, ArtifactID: artID, IdempotencyKey: "same"}
	rec.request("10.1/8", pre)
	p1 := g.CreatePrefetchIntent(ctx, pre)
	task := p1.Operation.Value()
	rec.response("10.1/8 prefetch intent", kdn.OutcomeSuccess, p1, kdn.CacheServiceResponse(p1),
		task.Operation == kdn.OpPrefetch && task.State == kdn.StatePending && task.Attempt == 0)
	p2 := g.CreatePrefetchIntent(ctx, pre)
	rec.response("10.1/9 same intent again", kdn.OutcomeSuccess, p2, kdn.CacheServiceResponse(p2),
		p2.Operation.Value().TaskID == task.TaskID)
	other := pre
	other.ArtifactID = "artifact_" + "2222222222222222" + "2222222222222222"
	p3 := g.CreatePrefetchIntent(ctx, other)
	rec.response("10.1/10 same key, other artifact", kdn.OutcomeIdempotencyConflict, p3, kdn.CacheServiceResponse(p3), !p3.Operation.IsSet())
	pin := g.CreatePinIntent(ctx, kdn.CreatePinIntentRequest(pre))
	rec.response("10.1/10 same key, other operation type", kdn.OutcomeIdempotencyConflict, pin, kdn.CacheServiceResponse(pin), true)

	// 11: test hooks drive the lifecycle; status shows each state.
	status := kdn.GetOperationStatusRequest{Envelope: env("wf-11"), Target: tgt, TaskID: task.TaskID}
	rec.request("10.1/11", status)
	s := g.GetOperationStatus(ctx, status)
	rec.response("10.1/11 status pending", kdn.OutcomeSuccess, s, kdn.CacheServiceResponse(s), s.Operation.Value().State == kdn.StatePending)
	now = now.Add(time.Second)
	rec.add("10.1/11 start hook", "ok", errText(mock.Start(task.TaskID)), true)
	s = g.GetOperationStatus(ctx, status)
	rec.response("10.1/11 status running", kdn.OutcomeSuccess, s, kdn.CacheServiceResponse(s),
		s.Operation.Value().State == kdn.StateRunning && s.Operation.Value().Attempt == 1)
	now = now.Add(time.Second)
	rec.add("10.1/11 complete hook", "ok", errText(mock.Complete(task.TaskID, false)), true)
	s = g.GetOperationStatus(ctx, status)
	rec.response("10.1/11 status succeeded", kdn.OutcomeSuccess, s, kdn.CacheServiceResponse(s), s.Operation.Value().State == kdn.StateSucceeded)

	// 12–13: cancel live work, then terminal no-ops.
	live := g.CreatePinIntent(ctx, kdn.CreatePinIntentRequest{Envelope: env("wf-12"), Target: tgt, ArtifactID: artID, IdempotencyKey: "pin-1"})
	cancel := kdn.CancelOperationRequest{Envelope: env("wf-12"), Target: tgt, TaskID: live.Operation.Value().TaskID}
	rec.request("10.1/12", cancel)
	c := g.CancelOperation(ctx, cancel)
	rec.response("10.1/12 cancel pending task", kdn.OutcomeCancelled, c, kdn.CacheServiceResponse(c), c.Operation.Value().State == kdn.StateCancelled)
	c = g.CancelOperation(ctx, cancel)
	rec.response("10.1/13 cancel already-cancelled task", kdn.OutcomeSuccess, c, kdn.CacheServiceResponse(c), c.Operation.Value().State == kdn.StateCancelled)
	cancel.TaskID = task.TaskID
	c = g.CancelOperation(ctx, cancel)
	rec.response("10.1/13 cancel succeeded task", kdn.OutcomeSuccess, c, kdn.CacheServiceResponse(c), c.Operation.Value().State == kdn.StateSucceeded)

	// 14–15: negotiation order.
	stale := look
	stale.EndpointGeneration = 2
	la = g.LookupArtifact(ctx, stale)
	rec.response("10.1/14 generation 2", kdn.OutcomeStale, la, kdn.CacheServiceResponse(la), la.Error.Value().Retryable)
	foreign := look
	foreign.CompatibilityProfileID = "other-profile"
	la = g.LookupArtifact(ctx, foreign)
	rec.response("10.1/15 other compatibility profile", kdn.OutcomeIncompatible, la, kdn.CacheServiceResponse(la), !la.Error.Value().Retryable)
	legacyRT := look
	legacyRT.RuntimeProfile = kdn.ProfileLegacy
	legacyRT.EndpointGeneration = 2 // runtime is checked before generation
	la = g.LookupArtifact(ctx, legacyRT)
	rec.response("10.1/15 legacy runtime", kdn.OutcomeIncompatible, la, kdn.CacheServiceResponse(la), true)

	// 16–17: the Legacy adapter refuses writes and v1 work.
	lg, err := New(LegacySnapshot(), kdn.TransportLegacyRedis, Fixtures{}, opts)
	if err == nil {
		lpre := kdn.CreatePrefetchIntentRequest{Envelope: env("wf-16"), Target: legacyTarget(), ArtifactID: artID, IdempotencyKey: "same"}
		lpre.RuntimeProfile = kdn.ProfileLegacy
		lr := lg.CreatePrefetchIntent(ctx, lpre)
		rec.response("10.1/16 write to Legacy", kdn.OutcomeUnsupported, lr, kdn.CacheServiceResponse(lr), true)
		v1 := lpre
		v1.RuntimeProfile = kdn.ProfileV1
		v1.EndpointGeneration = 1
		lr = lg.CreatePrefetchIntent(ctx, v1)
		rec.response("10.1/17 v1 work to Legacy", kdn.OutcomeIncompatible, lr, kdn.CacheServiceResponse(lr), true)
	}

	// 18: smuggled keys never pass the decoder.
	wire, _ := kdn.Encode(look)
	for _, key := range []string{"password", "api_key", "redis_key", "kv_bytes", "tensor", "device_pointer", "chunk_index", "block_index"} {
		smuggled := append(append([]byte{}, wire[:len(wire)-1]...), []byte(`,"`+key+`":"x"}`)...)
		_, err := kdn.Decode("LookupArtifactRequest", smuggled)
		rec.add("10.1/18 extra key "+key, "rejected", errText(err), err != nil)
	}

	// 19: production transports are not built here.
	prod := snap.Clone()
	prod.RuntimeProfile = kdn.ProfileV1
	prod.AdapterBindings = []kdn.GatewayAdapterBinding{{TransportKind: kdn.TransportMPHTTPAPI, BindingID: "lmcache-mp"}}
	_, err = New(prod, kdn.TransportMPHTTPAPI, Fixtures{}, opts)
	rec.add("10.1/19 build mp_http_api", "not implemented", errText(err), err == ErrNotImplemented)
	return rec.steps
}
