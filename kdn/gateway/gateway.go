// Package gateway implements KDN v1 gateway negotiation (docs/kdn.md,
// "Capability discovery"), the deterministic Mock gateway, the read-only
// Legacy adapter and the factory that builds them from a capability
// snapshot.
//
// A gateway is anything that implements Gateway. kvca's own live gateway
// (backed by its block table) implements the same interface, reuses
// Negotiate / NewTargetedReply / Refuse to answer exactly like the Mock, and
// is served by the same HTTP layer through Call.
package gateway

import (
	"context"

	"github.com/kvca/kvca/kdn"
)

// Gateway is the cache-service family: one method per operation, taking the
// request model and returning its dedicated response model. Every failure is
// expressed in the response (outcome + safe ContractErrorDetail), never as a
// Go error, so implementations must not leak back-end detail into messages.
// Responses must copy runtime_profile, request_id, correlation_id and (for
// targeted calls) the target from the request; NewTargetedReply does that.
type Gateway interface {
	// Snapshot returns the capabilities the gateway negotiates against.
	Snapshot() kdn.CapabilitySnapshot

	LookupArtifact(context.Context, kdn.LookupArtifactRequest) kdn.LookupArtifactResponse
	GetCacheObservation(context.Context, kdn.GetCacheObservationRequest) kdn.GetCacheObservationResponse
	LookupTokens(context.Context, kdn.LookupTokensRequest) kdn.LookupTokensResponse
	CreatePrefetchIntent(context.Context, kdn.CreatePrefetchIntentRequest) kdn.CreatePrefetchIntentResponse
	CreatePinIntent(context.Context, kdn.CreatePinIntentRequest) kdn.CreatePinIntentResponse
	CreateUnpinIntent(context.Context, kdn.CreateUnpinIntentRequest) kdn.CreateUnpinIntentResponse
	CreateClearIntent(context.Context, kdn.CreateClearIntentRequest) kdn.CreateClearIntentResponse
	CreateRebuildIntent(context.Context, kdn.CreateRebuildIntentRequest) kdn.CreateRebuildIntentResponse
	GetOperationStatus(context.Context, kdn.GetOperationStatusRequest) kdn.GetOperationStatusResponse
	CancelOperation(context.Context, kdn.CancelOperationRequest) kdn.CancelOperationResponse
	GetLMCacheEndpoints(context.Context, kdn.GetLMCacheEndpointsRequest) kdn.GetLMCacheEndpointsResponse
	GetTierAndAdapterSummary(context.Context, kdn.GetTierAndAdapterSummaryRequest) kdn.GetTierAndAdapterSummaryResponse
	GetMaintenanceStatus(context.Context, kdn.GetMaintenanceStatusRequest) kdn.GetMaintenanceStatusResponse
}

// KnowledgeService is the knowledge-service family (§5). The reference's
// Mock and Legacy gateways do not implement it; kvca's live service does.
type KnowledgeService interface {
	RegisterKnowledge(context.Context, kdn.RegisterKnowledgeRequest) kdn.RegisterKnowledgeResponse
	UpdateKnowledge(context.Context, kdn.UpdateKnowledgeRequest) kdn.UpdateKnowledgeResponse
	ResolveKnowledge(context.Context, kdn.ResolveKnowledgeRequest) kdn.ResolveKnowledgeResponse
	ListCompatibleArtifacts(context.Context, kdn.ListCompatibleArtifactsRequest) kdn.ListCompatibleArtifactsResponse
	QueryArtifactCompatibility(context.Context, kdn.QueryArtifactCompatibilityRequest) kdn.QueryArtifactCompatibilityResponse
	ReportRequestOutcome(context.Context, kdn.ReportRequestOutcomeRequest) kdn.ReportRequestOutcomeResponse
}

// Error is this package's error type; a string type so that the sentinel
// errors below are constants.
type Error string

func (e Error) Error() string { return string(e) }

// Construction and routing errors.
const (
	ErrTransportNotBound = Error("gateway: transport kind is not bound in the capability snapshot")
	ErrNotImplemented    = Error("gateway: production transports are not implemented")
	ErrInvalidSnapshot   = Error("gateway: capability snapshot is invalid")
	ErrInvalidFixture    = Error("gateway: fixture is invalid")
	ErrNoRoute           = Error("gateway: message is not a request this service answers")
	ErrUnknownTask       = Error("gateway: unknown task id")
)
