package gateway

import (
	"context"
	"time"

	"github.com/kvca/kvca/kdn"
)

// MsgLegacyReadOnly answers every write, token, status and summary call on
// the Legacy adapter, whatever the snapshot's flags say (§11).
const MsgLegacyReadOnly = "Legacy adapter is read-only and does not provide this capability"

// DefaultLegacyFreshness is how long a legacy record's update time counts
// as a fresh sighting (§11).
const DefaultLegacyFreshness = 5 * time.Minute

// Legacy is the read-only adapter for the legacy runtime (§11). It performs
// no I/O: it answers from projected observations and artifact fixtures.
type Legacy struct {
	snap  kdn.CapabilitySnapshot
	fx    fixtureIndex
	clock func() time.Time
}

// NewLegacy builds a Legacy adapter directly; most callers go through New.
func NewLegacy(s kdn.CapabilitySnapshot, f Fixtures, o Options) (*Legacy, error) {
	if kdn.Validate(s) != nil || !s.HasTransport(kdn.TransportLegacyRedis) {
		return nil, ErrInvalidSnapshot
	}
	fx, err := indexFixtures(f)
	if err != nil {
		return nil, err
	}
	return &Legacy{snap: s.Clone(), fx: fx, clock: o.withDefaults().Clock}, nil
}

// Snapshot implements Gateway.
func (l *Legacy) Snapshot() kdn.CapabilitySnapshot { return l.snap.Clone() }

func (l *Legacy) begin(env kdn.Envelope, t kdn.Target, gate kdn.Capability) (kdn.CacheServiceResponse, bool) {
	r := NewTargetedReply(env, t, l.clock())
	if f, refused := Negotiate(l.snap, env, t, gate); refused {
		return Refuse(r, f), false
	}
	return r, true
}

// readOnly answers a call the legacy runtime cannot serve: §9 steps 1–2,
// then unsupported.
func (l *Legacy) readOnly(env kdn.Envelope, t kdn.Target) kdn.CacheServiceResponse {
	r, ok := l.begin(env, t, Ungated)
	if ok {
		r = Refuse(r, Refusal{Outcome: kdn.OutcomeUnsupported, Message: MsgLegacyReadOnly})
	}
	return r
}

// LookupArtifact implements Gateway.
func (l *Legacy) LookupArtifact(_ context.Context, req kdn.LookupArtifactRequest) kdn.LookupArtifactResponse {
	r, ok := l.begin(req.Envelope, req.Target, kdn.CapArtifactLookup)
	if ok {
		r = l.fx.lookupArtifact(r, kdn.ArtifactRequest(req))
	}
	return kdn.LookupArtifactResponse(r)
}

// GetCacheObservation implements Gateway.
func (l *Legacy) GetCacheObservation(_ context.Context, req kdn.GetCacheObservationRequest) kdn.GetCacheObservationResponse {
	r, ok := l.begin(req.Envelope, req.Target, kdn.CapCacheObservation)
	if ok {
		r = l.fx.observe(r, kdn.ArtifactRequest(req), observationMessages{
			absent:     "Legacy observation is absent",
			provenance: "Legacy observation provenance mismatch",
			generation: "Legacy observation generation mismatch",
			stale:      "Legacy observation is stale",
		})
	}
	return kdn.GetCacheObservationResponse(r)
}

// LookupTokens implements Gateway (read-only refusal).
func (l *Legacy) LookupTokens(_ context.Context, req kdn.LookupTokensRequest) kdn.LookupTokensResponse {
	return kdn.LookupTokensResponse(l.readOnly(req.Envelope, req.Target))
}

// CreatePrefetchIntent implements Gateway (read-only refusal).
func (l *Legacy) CreatePrefetchIntent(_ context.Context, req kdn.CreatePrefetchIntentRequest) kdn.CreatePrefetchIntentResponse {
	return kdn.CreatePrefetchIntentResponse(l.readOnly(req.Envelope, req.Target))
}

// CreatePinIntent implements Gateway (read-only refusal).
func (l *Legacy) CreatePinIntent(_ context.Context, req kdn.CreatePinIntentRequest) kdn.CreatePinIntentResponse {
	return kdn.CreatePinIntentResponse(l.readOnly(req.Envelope, req.Target))
}

// CreateUnpinIntent implements Gateway (read-only refusal).
func (l *Legacy) CreateUnpinIntent(_ context.Context, req kdn.CreateUnpinIntentRequest) kdn.CreateUnpinIntentResponse {
	return kdn.CreateUnpinIntentResponse(l.readOnly(req.Envelope, req.Target))
}

// CreateClearIntent implements Gateway (read-only refusal).
func (l *Legacy) CreateClearIntent(_ context.Context, req kdn.CreateClearIntentRequest) kdn.CreateClearIntentResponse {
	return kdn.CreateClearIntentResponse(l.readOnly(req.Envelope, req.Target))
}

// CreateRebuildIntent implements Gateway (read-only refusal).
func (l *Legacy) CreateRebuildIntent(_ context.Context, req kdn.CreateRebuildIntentRequest) kdn.CreateRebuildIntentResponse {
	return kdn.CreateRebuildIntentResponse(l.readOnly(req.Envelope, req.Target))
}

// GetOperationStatus implements Gateway (read-only refusal).
func (l *Legacy) GetOperationStatus(_ context.Context, req kdn.GetOperationStatusRequest) kdn.GetOperationStatusResponse {
	return kdn.GetOperationStatusResponse(l.readOnly(req.Envelope, req.Target))
}

// CancelOperation implements Gateway (read-only refusal).
func (l *Legacy) CancelOperation(_ context.Context, req kdn.CancelOperationRequest) kdn.CancelOperationResponse {
	return kdn.CancelOperationResponse(l.readOnly(req.Envelope, req.Target))
}

// GetTierAndAdapterSummary implements Gateway (read-only refusal).
func (l *Legacy) GetTierAndAdapterSummary(_ context.Context, req kdn.GetTierAndAdapterSummaryRequest) kdn.GetTierAndAdapterSummaryResponse {
	return kdn.GetTierAndAdapterSummaryResponse(l.readOnly(req.Envelope, req.Target))
}

// GetMaintenanceStatus implements Gateway (read-only refusal).
func (l *Legacy) GetMaintenanceStatus(_ context.Context, req kdn.GetMaintenanceStatusRequest) kdn.GetMaintenanceStatusResponse {
	return kdn.GetMaintenanceStatusResponse(l.readOnly(req.Envelope, req.Target))
}

// GetLMCacheEndpoints implements Gateway: the legacy runtime cannot list
// endpoints.
func (l *Legacy) GetLMCacheEndpoints(_ context.Context, req kdn.GetLMCacheEndpointsRequest) kdn.GetLMCacheEndpointsResponse {
	r := NewDiscoveryReply(req.Envelope, l.clock())
	if f, refused := NegotiateDiscovery(l.snap, req.Envelope); refused {
		return kdn.GetLMCacheEndpointsResponse(Refuse(r, f))
	}
	return kdn.GetLMCacheEndpointsResponse(Refuse(r, Refusal{Outcome: kdn.OutcomeUnsupported,
		Message: "Legacy endpoint discovery is unavailable"}))
}

// LegacyRecord is what a legacy (Redis-era) store knows about an artifact.
type LegacyRecord struct {
	ArtifactID             string
	EndpointID             string
	CompatibilityProfileID string
	State                  kdn.ObservationState
	UpdatedAt              kdn.Opt[time.Time] // null: the record has no update time
	Adapter, Tier          kdn.Opt[string]
	KVRelDir               kdn.Opt[string]
	DumpedKeys             kdn.Opt[int64]
}

// ProjectLegacy turns a legacy record into an observation (§7.3, §11):
// runtime legacy, gateway legacy_gateway, generation 0, compatibility
// uncertain, low confidence. With an update time the sighting is fresh for
// window (DefaultLegacyFreshness when 0); without one it is always stale.
func ProjectLegacy(rec LegacyRecord, projectedAt time.Time, window time.Duration) kdn.CacheReplicaObservation {
	if window <= 0 {
		window = DefaultLegacyFreshness
	}
	projectedAt = projectedAt.UTC().Truncate(time.Microsecond)
	o := kdn.CacheReplicaObservation{
		ArtifactID:             rec.ArtifactID,
		State:                  rec.State,
		Source:                 kdn.SourceLegacyProjection,
		EndpointID:             rec.EndpointID,
		EndpointGeneration:     0,
		RuntimeProfile:         kdn.ProfileLegacy,
		GatewayProfile:         kdn.GatewayLegacy,
		CompatibilityProfileID: rec.CompatibilityProfileID,
		Adapter:                rec.Adapter,
		Tier:                   rec.Tier,
		ProjectedAt:            projectedAt,
		Confidence:             kdn.ConfidenceLow,
		LegacyProjection:       true,
		CompatibilityUncertain: true,
		LegacyKVRelDir:         rec.KVRelDir,
		LegacyKVDumpedKeys:     rec.DumpedKeys,
	}
	if u, ok := rec.UpdatedAt.Get(); ok {
		u = u.UTC().Truncate(time.Microsecond)
		if u.After(projectedAt) { // a projection cannot predate its source
			o.ProjectedAt = u
		}
		o.SourceObservedAt = kdn.Some(u)
		o.ExpiresAt = kdn.Some(u.Add(window))
	}
	return o
}
