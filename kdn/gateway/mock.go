package gateway

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/kvca/kvca/kdn"
)

// Mock is the deterministic, CPU-only test/mock gateway (§10). It answers
// from fixtures and keeps an idempotent task table; it is safe for
// concurrent use.
type Mock struct {
	snap      kdn.CapabilitySnapshot
	fx        fixtureIndex
	clock     func() time.Time
	newTaskID func() string

	mu    sync.Mutex
	tasks map[string]*mockTask // by idempotency key (global across operation types)
	byID  map[string]string    // task id → idempotency key
}

// logicalTarget is what makes two intents "the same request" (§10).
type logicalTarget struct {
	op         kdn.CacheOperationType
	artifactID string
	endpointID string
	generation int64
	runtime    kdn.RuntimeProfile
	compat     string
}

type mockTask struct {
	target logicalTarget
	task   kdn.CacheOperationTask
}

// NewMock builds a Mock directly; most callers go through New.
func NewMock(s kdn.CapabilitySnapshot, f Fixtures, o Options) (*Mock, error) {
	if kdn.Validate(s) != nil || !s.HasTransport(kdn.TransportMock) {
		return nil, ErrInvalidSnapshot
	}
	fx, err := indexFixtures(f)
	if err != nil {
		return nil, err
	}
	o = o.withDefaults()
	return &Mock{
		snap: s.Clone(), fx: fx, clock: o.Clock, newTaskID: o.NewTaskID,
		tasks: map[string]*mockTask{}, byID: map[string]string{},
	}, nil
}

// Snapshot implements Gateway.
func (m *Mock) Snapshot() kdn.CapabilitySnapshot { return m.snap.Clone() }

// begin stamps the reply and runs §9 steps 1–3.
func (m *Mock) begin(env kdn.Envelope, t kdn.Target, gate kdn.Capability) (kdn.CacheServiceResponse, bool) {
	r := NewTargetedReply(env, t, m.clock())
	if f, refused := Negotiate(m.snap, env, t, gate); refused {
		return Refuse(r, f), false
	}
	return r, true
}

// LookupArtifact implements Gateway.
func (m *Mock) LookupArtifact(_ context.Context, req kdn.LookupArtifactRequest) kdn.LookupArtifactResponse {
	r, ok := m.begin(req.Envelope, req.Target, kdn.CapArtifactLookup)
	if ok {
		r = m.fx.lookupArtifact(r, kdn.ArtifactRequest(req))
	}
	return kdn.LookupArtifactResponse(r)
}

// GetCacheObservation implements Gateway.
func (m *Mock) GetCacheObservation(_ context.Context, req kdn.GetCacheObservationRequest) kdn.GetCacheObservationResponse {
	r, ok := m.begin(req.Envelope, req.Target, kdn.CapCacheObservation)
	if ok {
		r = m.fx.observe(r, kdn.ArtifactRequest(req), observationMessages{
			absent:     "observation is absent or stale",
			provenance: "observation provenance mismatch",
			generation: "observation generation mismatch",
			stale:      "observation is stale",
		})
	}
	return kdn.GetCacheObservationResponse(r)
}

// LookupTokens implements Gateway. Exact ranges are only exposed when the
// snapshot supports range_coverage; the whole-request hit and total stay.
func (m *Mock) LookupTokens(_ context.Context, req kdn.LookupTokensRequest) kdn.LookupTokensResponse {
	r, ok := m.begin(req.Envelope, req.Target, kdn.CapTokenLookup)
	if !ok {
		return kdn.LookupTokensResponse(r)
	}
	cov, found := m.fx.tokens[tokenKey(req.Tokens)]
	if !found {
		return kdn.LookupTokensResponse(Refuse(r, Refusal{
			Outcome: kdn.OutcomeTextFallback, Message: "tokens are not cached", FallbackEligible: true,
		}))
	}
	if m.snap.Supports(kdn.CapRangeCoverage) {
		cov.CoveredRanges = slices.Clone(cov.CoveredRanges)
	} else {
		cov.CoveredRanges = []kdn.TokenRange{}
	}
	r.TokenCoverage = kdn.Some(cov)
	return kdn.LookupTokensResponse(r)
}

// CreatePrefetchIntent implements Gateway.
func (m *Mock) CreatePrefetchIntent(_ context.Context, req kdn.CreatePrefetchIntentRequest) kdn.CreatePrefetchIntentResponse {
	return kdn.CreatePrefetchIntentResponse(m.intent(kdn.OperationIntentRequest(req), kdn.OpPrefetch, kdn.CapWarmPrefetch))
}

// CreatePinIntent implements Gateway.
func (m *Mock) CreatePinIntent(_ context.Context, req kdn.CreatePinIntentRequest) kdn.CreatePinIntentResponse {
	return kdn.CreatePinIntentResponse(m.intent(kdn.OperationIntentRequest(req), kdn.OpPin, kdn.CapPinUnpin))
}

// CreateUnpinIntent implements Gateway.
func (m *Mock) CreateUnpinIntent(_ context.Context, req kdn.CreateUnpinIntentRequest) kdn.CreateUnpinIntentResponse {
	return kdn.CreateUnpinIntentResponse(m.intent(kdn.OperationIntentRequest(req), kdn.OpUnpin, kdn.CapPinUnpin))
}

// CreateClearIntent implements Gateway.
func (m *Mock) CreateClearIntent(_ context.Context, req kdn.CreateClearIntentRequest) kdn.CreateClearIntentResponse {
	return kdn.CreateClearIntentResponse(m.intent(kdn.OperationIntentRequest(req), kdn.OpClear, kdn.CapObjectDeletion))
}

// CreateRebuildIntent implements Gateway.
func (m *Mock) CreateRebuildIntent(_ context.Context, req kdn.CreateRebuildIntentRequest) kdn.CreateRebuildIntentResponse {
	return kdn.CreateRebuildIntentResponse(m.intent(kdn.OperationIntentRequest(req), kdn.OpRebuild, kdn.CapWarmPrefetch))
}

// intent is the idempotent task-table logic shared by the five intents.
func (m *Mock) intent(req kdn.OperationIntentRequest, op kdn.CacheOperationType, gate kdn.Capability) kdn.CacheServiceResponse {
	r, ok := m.begin(req.Envelope, req.Target, gate)
	if !ok {
		return r
	}
	want := logicalTarget{
		op: op, artifactID: req.ArtifactID, endpointID: req.EndpointID,
		generation: req.EndpointGeneration, runtime: req.RuntimeProfile, compat: req.CompatibilityProfileID,
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, seen := m.tasks[req.IdempotencyKey]; seen {
		if t.target != want {
			return Refuse(r, Refusal{Outcome: kdn.OutcomeIdempotencyConflict,
				Message: "idempotency key was used for a different logical request"})
		}
		r.Operation = kdn.Some(t.task)
		return r
	}
	task := kdn.CacheOperationTask{
		TaskID:                 m.newTaskID(),
		IdempotencyKey:         req.IdempotencyKey,
		Operation:              op,
		ArtifactID:             req.ArtifactID,
		RuntimeProfile:         req.RuntimeProfile,
		CompatibilityProfileID: req.CompatibilityProfileID,
		GatewayProfile:         kdn.GatewayMock,
		EndpointID:             kdn.Some(req.EndpointID),
		EndpointGeneration:     kdn.Some(req.EndpointGeneration),
		State:                  kdn.StatePending,
		CreatedAt:              r.Timestamp,
		UpdatedAt:              r.Timestamp,
	}
	m.tasks[req.IdempotencyKey] = &mockTask{target: want, task: task}
	m.byID[task.TaskID] = req.IdempotencyKey
	r.Operation = kdn.Some(task)
	return r
}

// GetOperationStatus implements Gateway.
func (m *Mock) GetOperationStatus(_ context.Context, req kdn.GetOperationStatusRequest) kdn.GetOperationStatusResponse {
	r, ok := m.begin(req.Envelope, req.Target, kdn.CapOperationStatus)
	if !ok {
		return kdn.GetOperationStatusResponse(r)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.lookupTask(req.TaskID)
	if t == nil {
		return kdn.GetOperationStatusResponse(Refuse(r, Refusal{Outcome: kdn.OutcomeStale, Message: "operation was not found"}))
	}
	r.Operation = kdn.Some(t.task)
	return kdn.GetOperationStatusResponse(r)
}

// CancelOperation implements Gateway: live work is cancelled (outcome
// cancelled), terminal work is a success no-op.
func (m *Mock) CancelOperation(_ context.Context, req kdn.CancelOperationRequest) kdn.CancelOperationResponse {
	r, ok := m.begin(req.Envelope, req.Target, kdn.CapCancellation)
	if !ok {
		return kdn.CancelOperationResponse(r)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.lookupTask(req.TaskID)
	if t == nil {
		return kdn.CancelOperationResponse(Refuse(r, Refusal{Outcome: kdn.OutcomeStale, Message: "operation was not found"}))
	}
	if t.task.State.Terminal() {
		r.Operation = kdn.Some(t.task)
		return kdn.CancelOperationResponse(r)
	}
	next, err := t.task.Advance(kdn.StateCancelled, r.Timestamp)
	if err != nil { // unreachable: every live state may be cancelled
		return kdn.CancelOperationResponse(Refuse(r, Refusal{Outcome: kdn.OutcomeFailed}))
	}
	t.task = next
	r.Operation = kdn.Some(next)
	return kdn.CancelOperationResponse(Refuse(r, Refusal{Outcome: kdn.OutcomeCancelled, Message: "operation cancelled"}))
}

func (m *Mock) lookupTask(id string) *mockTask {
	key, ok := m.byID[id]
	if !ok {
		return nil
	}
	return m.tasks[key]
}

// GetLMCacheEndpoints implements Gateway (runtime-only negotiation).
func (m *Mock) GetLMCacheEndpoints(_ context.Context, req kdn.GetLMCacheEndpointsRequest) kdn.GetLMCacheEndpointsResponse {
	r := NewDiscoveryReply(req.Envelope, m.clock())
	if f, refused := NegotiateDiscovery(m.snap, req.Envelope); refused {
		return kdn.GetLMCacheEndpointsResponse(Refuse(r, f))
	}
	for _, e := range m.fx.endpoints {
		if e.RuntimeProfile != m.snap.RuntimeProfile ||
			e.CompatibilityProfileID != m.snap.CompatibilityProfile.CompatibilityProfileID ||
			e.ID() != m.snap.EndpointID || e.Generation != m.snap.EndpointGeneration {
			return kdn.GetLMCacheEndpointsResponse(Refuse(r, Refusal{Outcome: kdn.OutcomeIncompatible,
				Message: "endpoint fixture provenance mismatch"}))
		}
	}
	r.Endpoints = kdn.Some(slices.Clone(m.fx.endpoints))
	return kdn.GetLMCacheEndpointsResponse(r)
}

// GetTierAndAdapterSummary implements Gateway.
func (m *Mock) GetTierAndAdapterSummary(_ context.Context, req kdn.GetTierAndAdapterSummaryRequest) kdn.GetTierAndAdapterSummaryResponse {
	r, ok := m.begin(req.Envelope, req.Target, kdn.CapTierCapacityUsage)
	if !ok {
		return kdn.GetTierAndAdapterSummaryResponse(r)
	}
	as, hasA := m.fx.adapter.Get()
	ts, hasT := m.fx.tier.Get()
	switch {
	case !hasA || !hasT:
		r = Refuse(r, Refusal{Outcome: kdn.OutcomeStale, Message: "tier or adapter summary fixture is absent"})
	case !sameTarget(as.SummaryBase, req.Envelope, req.Target) || !sameTarget(ts.SummaryBase, req.Envelope, req.Target):
		r = Refuse(r, Refusal{Outcome: kdn.OutcomeIncompatible, Message: "tier or adapter summary provenance mismatch"})
	default:
		r.AdapterSummary = kdn.Some(as.Clone())
		r.TierSummary = kdn.Some(ts.Clone())
	}
	return kdn.GetTierAndAdapterSummaryResponse(r)
}

// GetMaintenanceStatus implements Gateway.
func (m *Mock) GetMaintenanceStatus(_ context.Context, req kdn.GetMaintenanceStatusRequest) kdn.GetMaintenanceStatusResponse {
	r, ok := m.begin(req.Envelope, req.Target, kdn.CapMaintenanceEviction)
	if !ok {
		return kdn.GetMaintenanceStatusResponse(r)
	}
	ms, has := m.fx.maintenance.Get()
	switch {
	case !has:
		r = Refuse(r, Refusal{Outcome: kdn.OutcomeStale, Message: "maintenance summary fixture is absent"})
	case !sameTarget(ms.SummaryBase, req.Envelope, req.Target):
		r = Refuse(r, Refusal{Outcome: kdn.OutcomeIncompatible, Message: "maintenance summary provenance mismatch"})
	default:
		r.MaintenanceSummary = kdn.Some(ms)
	}
	return kdn.GetMaintenanceStatusResponse(r)
}

func sameTarget(s kdn.SummaryBase, env kdn.Envelope, t kdn.Target) bool {
	return s.RuntimeProfile == env.RuntimeProfile && s.CompatibilityProfileID == t.CompatibilityProfileID &&
		s.EndpointID == t.EndpointID && s.EndpointGeneration == t.EndpointGeneration
}

// Start is a test hook (not a wire call): the task moves to running and
// its attempt count goes up.
func (m *Mock) Start(taskID string) error {
	return m.advance(taskID, func(t kdn.CacheOperationTask, now time.Time) (kdn.CacheOperationTask, error) {
		return t.Advance(kdn.StateRunning, now)
	})
}

// Complete is a test hook: the task finishes as succeeded, or failed when
// failed is true, passing through running first if it was pending.
func (m *Mock) Complete(taskID string, failed bool) error {
	return m.advance(taskID, func(t kdn.CacheOperationTask, now time.Time) (kdn.CacheOperationTask, error) {
		if t.State == kdn.StatePending {
			var err error
			if t, err = t.Advance(kdn.StateRunning, now); err != nil {
				return t, err
			}
		}
		to := kdn.StateSucceeded
		if failed {
			to = kdn.StateFailed
		}
		return t.Advance(to, now)
	})
}

func (m *Mock) advance(taskID string, step func(kdn.CacheOperationTask, time.Time) (kdn.CacheOperationTask, error)) error {
	now := m.clock()
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.lookupTask(taskID)
	if t == nil {
		return ErrUnknownTask
	}
	next, err := step(t.task, now)
	if err != nil {
		return err
	}
	t.task = next
	return nil
}
