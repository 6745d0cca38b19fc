package gateway

import (
	"context"

	"github.com/kvca/kvca/kdn"
)

// Operation is one route of the KDN HTTP surface: POST /kdn/v1/<Name>
// carries a RequestModel and answers a ResponseModel.
type Operation struct {
	Name          string
	RequestModel  string
	ResponseModel string
	Knowledge     bool // knowledge-service family rather than cache-service
}

// Operations lists every KDN operation in contract order, for routers and docs.
func Operations() []Operation {
	return []Operation{
		{"register_knowledge", "RegisterKnowledgeRequest", "RegisterKnowledgeResponse", true},
		{"update_knowledge", "UpdateKnowledgeRequest", "UpdateKnowledgeResponse", true},
		{"resolve_knowledge", "ResolveKnowledgeRequest", "ResolveKnowledgeResponse", true},
		{"list_compatible_artifacts", "ListCompatibleArtifactsRequest", "ListCompatibleArtifactsResponse", true},
		{"query_artifact_compatibility", "QueryArtifactCompatibilityRequest", "QueryArtifactCompatibilityResponse", true},
		{"report_request_outcome", "ReportRequestOutcomeRequest", "ReportRequestOutcomeResponse", true},
		{"lookup_artifact", "LookupArtifactRequest", "LookupArtifactResponse", false},
		{"get_cache_observation", "GetCacheObservationRequest", "GetCacheObservationResponse", false},
		{"lookup_tokens", "LookupTokensRequest", "LookupTokensResponse", false},
		{"create_prefetch_intent", "CreatePrefetchIntentRequest", "CreatePrefetchIntentResponse", false},
		{"create_pin_intent", "CreatePinIntentRequest", "CreatePinIntentResponse", false},
		{"create_unpin_intent", "CreateUnpinIntentRequest", "CreateUnpinIntentResponse", false},
		{"create_clear_intent", "CreateClearIntentRequest", "CreateClearIntentResponse", false},
		{"create_rebuild_intent", "CreateRebuildIntentRequest", "CreateRebuildIntentResponse", false},
		{"get_operation_status", "GetOperationStatusRequest", "GetOperationStatusResponse", false},
		{"cancel_operation", "CancelOperationRequest", "CancelOperationResponse", false},
		{"get_lmcache_endpoints", "GetLMCacheEndpointsRequest", "GetLMCacheEndpointsResponse", false},
		{"get_tier_and_adapter_summary", "GetTierAndAdapterSummaryRequest", "GetTierAndAdapterSummaryResponse", false},
		{"get_maintenance_status", "GetMaintenanceStatusRequest", "GetMaintenanceStatusResponse", false},
	}
}

// Call routes a decoded request to the matching method. It is the whole
// glue an HTTP handler needs:
//
//	req, err := kdn.Decode(op.RequestModel, body) // invalid → 400 + ValidationError
//	resp, err := gateway.Call(ctx, gw, ks, req)   // ErrNoRoute → 404
//	out, err := kdn.Encode(resp)                  // error here is a gateway bug → 500
//
// g or k may be nil when a service does not offer that family.
func Call(ctx context.Context, g Gateway, k KnowledgeService, req kdn.Message) (kdn.Message, error) {
	if resp, ok := callCache(ctx, g, req); ok {
		return resp, nil
	}
	if resp, ok := callKnowledge(ctx, k, req); ok {
		return resp, nil
	}
	return nil, ErrNoRoute
}

func callCache(ctx context.Context, g Gateway, req kdn.Message) (kdn.Message, bool) {
	if g == nil {
		return nil, false
	}
	switch r := req.(type) {
	case kdn.LookupArtifactRequest:
		return g.LookupArtifact(ctx, r), true
	case kdn.GetCacheObservationRequest:
		return g.GetCacheObservation(ctx, r), true
	case kdn.LookupTokensRequest:
		return g.LookupTokens(ctx, r), true
	case kdn.CreatePrefetchIntentRequest:
		return g.CreatePrefetchIntent(ctx, r), true
	case kdn.CreatePinIntentRequest:
		return g.CreatePinIntent(ctx, r), true
	case kdn.CreateUnpinIntentRequest:
		return g.CreateUnpinIntent(ctx, r), true
	case kdn.CreateClearIntentRequest:
		return g.CreateClearIntent(ctx, r), true
	case kdn.CreateRebuildIntentRequest:
		return g.CreateRebuildIntent(ctx, r), true
	case kdn.GetOperationStatusRequest:
		return g.GetOperationStatus(ctx, r), true
	case kdn.CancelOperationRequest:
		return g.CancelOperation(ctx, r), true
	case kdn.GetLMCacheEndpointsRequest:
		return g.GetLMCacheEndpoints(ctx, r), true
	case kdn.GetTierAndAdapterSummaryRequest:
		return g.GetTierAndAdapterSummary(ctx, r), true
	case kdn.GetMaintenanceStatusRequest:
		return g.GetMaintenanceStatus(ctx, r), true
	}
	return nil, false
}

func callKnowledge(ctx context.Context, k KnowledgeService, req kdn.Message) (kdn.Message, bool) {
	if k == nil {
		return nil, false
	}
	switch r := req.(type) {
	case kdn.RegisterKnowledgeRequest:
		return k.RegisterKnowledge(ctx, r), true
	case kdn.UpdateKnowledgeRequest:
		return k.UpdateKnowledge(ctx, r), true
	case kdn.ResolveKnowledgeRequest:
		return k.ResolveKnowledge(ctx, r), true
	case kdn.ListCompatibleArtifactsRequest:
		return k.ListCompatibleArtifacts(ctx, r), true
	case kdn.QueryArtifactCompatibilityRequest:
		return k.QueryArtifactCompatibility(ctx, r), true
	case kdn.ReportRequestOutcomeRequest:
		return k.ReportRequestOutcome(ctx, r), true
	}
	return nil, false
}
