package gateway

import (
	"context"
	"time"

	"github.com/kvca/kvca/kdn"
)

// LegacySnapshot returns the §11.1 snapshot: legacy runtime, exactly the
// legacy_redis binding, generation 0 (unknown). Its flags claim support
// for everything to show that the read-only answers ignore them.
func LegacySnapshot() kdn.CapabilitySnapshot {
	return kdn.CapabilitySnapshot{
		ContractVersion:      kdn.GatewayContractVersion,
		RuntimeProfile:       kdn.ProfileLegacy,
		AdapterBindings:      []kdn.GatewayAdapterBinding{{TransportKind: kdn.TransportLegacyRedis, BindingID: "legacy-redis"}},
		CompatibilityProfile: kdn.LMCacheCompatibilityProfile{CompatibilityProfileID: "legacy-unknown"},
		EndpointID:           kdn.EndpointIDForName("legacy-node"),
		EndpointGeneration:   0,
		ObservedAt:           workflowStart().Add(-time.Minute),
		Source:               "legacy-redis",
		LoadedAdapters:       []string{},
		L1Tiers:              []string{},
		L2Tiers:              []string{},
		Flags:                kdn.AllFlags(kdn.Supported),
	}
}

func legacyTarget() kdn.Target {
	s := LegacySnapshot()
	return kdn.Target{CompatibilityProfileID: s.CompatibilityProfile.CompatibilityProfileID, EndpointID: s.EndpointID, EndpointGeneration: 0}
}

// legacyArtifactIDs are the three records of the Legacy workflow: fresh,
// expired, and without an update time.
const (
	legacyFreshArtifact   = "artifact_11111111111111111111111111111111"
	legacyExpiredArtifact = "artifact_22222222222222222222222222222222"
	legacyUndatedArtifact = "artifact_33333333333333333333333333333333"
)

// LegacyFixtures projects three legacy records as of the workflow start.
func LegacyFixtures() Fixtures {
	start := workflowStart()
	t := legacyTarget()
	rec := func(id string, updated kdn.Opt[time.Time]) kdn.CacheReplicaObservation {
		return ProjectLegacy(LegacyRecord{
			ArtifactID: id, EndpointID: t.EndpointID, CompatibilityProfileID: t.CompatibilityProfileID,
			State: kdn.ObsAvailable, UpdatedAt: updated, KVRelDir: kdn.Some("kv/kb-faq"), DumpedKeys: kdn.Some[int64](12),
		}, start, 0)
	}
	return Fixtures{Observations: []kdn.CacheReplicaObservation{
		rec(legacyFreshArtifact, kdn.Some(start.Add(-time.Minute))),
		rec(legacyExpiredArtifact, kdn.Some(start.Add(-10*time.Minute))),
		rec(legacyUndatedArtifact, kdn.None[time.Time]()),
	}}
}

// LegacyWorkflow runs the §11.1 sequence against a Legacy adapter built by
// the factory, on a fixed clock.
func LegacyWorkflow() []Step {
	ctx := context.Background()
	rec := &recorder{}
	now := workflowStart()
	opts := Options{Clock: func() time.Time { return now }}

	// 1: snapshot and factory.
	snap := LegacySnapshot()
	rec.add("11.1/1 legacy snapshot", "valid", errText(kdn.Validate(snap)), kdn.Validate(snap) == nil)
	g, err := New(snap, kdn.TransportLegacyRedis, LegacyFixtures(), opts)
	rec.add("11.1/1 factory builds the Legacy adapter", "ok", errText(err), err == nil)
	if err != nil {
		return rec.steps
	}
	tgt := legacyTarget()
	env := func(id string) kdn.Envelope {
		return kdn.Envelope{ContractVersion: kdn.KDNContractVersion, RuntimeProfile: kdn.ProfileLegacy, RequestID: id, Timestamp: now}
	}

	// 2: observations of projected records.
	for _, c := range []struct {
		name string
		id   string
		want kdn.OutcomeCode
	}{
		{"11.1/2 fresh projection", legacyFreshArtifact, kdn.OutcomeSuccess},
		{"11.1/2 expired projection", legacyExpiredArtifact, kdn.OutcomeStale},
		{"11.1/2 projection without source time", legacyUndatedArtifact, kdn.OutcomeStale},
	} {
		req := kdn.GetCacheObservationRequest{Envelope: env("wf-l2"), Target: tgt, ArtifactID: c.id}
		rec.request(c.name, req)
		o := g.GetCacheObservation(ctx, req)
		rec.response(c.name, c.want, o, kdn.CacheServiceResponse(o), o.Observation.IsSet())
	}

	// 3–4: writes are unsupported; v1 work is incompatible (runtime first).
	pre := kdn.CreatePrefetchIntentRequest{Envelope: env("wf-l3"), Target: tgt, ArtifactID: legacyFreshArtifact, IdempotencyKey: "same"}
	rec.request("11.1/3", pre)
	p := g.CreatePrefetchIntent(ctx, pre)
	rec.response("11.1/3 legacy prefetch intent", kdn.OutcomeUnsupported, p, kdn.CacheServiceResponse(p),
		p.Error.Value().Message == MsgLegacyReadOnly)
	v1 := pre
	v1.RuntimeProfile = kdn.ProfileV1
	v1.EndpointGeneration = 1
	rec.request("11.1/4", v1)
	p = g.CreatePrefetchIntent(ctx, v1)
	rec.response("11.1/4 same intent as v1", kdn.OutcomeIncompatible, p, kdn.CacheServiceResponse(p), true)

	// 5: generation 1 against the unknown-generation snapshot.
	gen1 := kdn.GetCacheObservationRequest{Envelope: env("wf-l5"), Target: tgt, ArtifactID: legacyFreshArtifact}
	gen1.EndpointGeneration = 1
	o := g.GetCacheObservation(ctx, gen1)
	rec.response("11.1/5 legacy request with generation 1", kdn.OutcomeStale, o, kdn.CacheServiceResponse(o), o.Error.Value().Retryable)

	// 6: discovery is unavailable, ids echoed; v1 discovery is incompatible.
	disc := kdn.GetLMCacheEndpointsRequest{Envelope: env("r")}
	disc.CorrelationID = kdn.Some("c")
	rec.request("11.1/6", disc)
	d := g.GetLMCacheEndpoints(ctx, disc)
	rec.response("11.1/6 legacy discovery", kdn.OutcomeUnsupported, d, kdn.CacheServiceResponse(d),
		d.RequestID == "r" && d.CorrelationID == kdn.Some("c"))
	disc.RuntimeProfile = kdn.ProfileV1
	d = g.GetLMCacheEndpoints(ctx, disc)
	rec.response("11.1/6 v1 discovery", kdn.OutcomeIncompatible, d, kdn.CacheServiceResponse(d), true)
	return rec.steps
}
