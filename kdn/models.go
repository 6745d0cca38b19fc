package kdn

// This file binds each reference model name to its Go type, its decoder
// and its rules. Models that share a JSON shape are distinct Go types
// defined on the shared struct, so the Gateway interface is statically
// typed and conversions between them are free.

// ModelName, check and writeJSON for types that are models in their own right.
func (VersionedMessage) ModelName() string               { return "VersionedMessage" }
func (m VersionedMessage) check() *ValidationError       { return m.validate("") }
func (m VersionedMessage) writeJSON(w *jw)               { m.write(w) }
func (GatewayTargetedRequest) ModelName() string         { return "GatewayTargetedRequest" }
func (m GatewayTargetedRequest) check() *ValidationError { return m.validate("") }
func (m GatewayTargetedRequest) writeJSON(w *jw)         { m.write(w) }
func (ArtifactRequest) ModelName() string                { return "ArtifactRequest" }
func (m ArtifactRequest) check() *ValidationError        { return m.validate("") }
func (m ArtifactRequest) writeJSON(w *jw)                { m.write(w) }
func (LookupTokensRequest) ModelName() string            { return "LookupTokensRequest" }
func (m LookupTokensRequest) check() *ValidationError    { return m.validate("") }
func (m LookupTokensRequest) writeJSON(w *jw)            { m.write(w) }
func (OperationIntentRequest) ModelName() string         { return "OperationIntentRequest" }
func (m OperationIntentRequest) check() *ValidationError { return m.validate("") }
func (m OperationIntentRequest) writeJSON(w *jw)         { m.write(w) }
func (KnowledgeDescriptor) ModelName() string            { return "KnowledgeDescriptor" }
func (m KnowledgeDescriptor) check() *ValidationError    { return m.validate("") }
func (m KnowledgeDescriptor) writeJSON(w *jw)            { m.write(w) }
func (QueryArtifactCompatibilityRequest) ModelName() string {
	return "QueryArtifactCompatibilityRequest"
}
func (m QueryArtifactCompatibilityRequest) check() *ValidationError { return m.validate("") }
func (m QueryArtifactCompatibilityRequest) writeJSON(w *jw)         { m.write(w) }
func (ReportRequestOutcomeRequest) ModelName() string               { return "ReportRequestOutcomeRequest" }
func (m ReportRequestOutcomeRequest) check() *ValidationError       { return m.validate("") }
func (m ReportRequestOutcomeRequest) writeJSON(w *jw)               { m.write(w) }
func (KnowledgeResponse) ModelName() string                         { return "KnowledgeResponse" }
func (m KnowledgeResponse) check() *ValidationError                 { return m.validate("") }
func (m KnowledgeResponse) writeJSON(w *jw)                         { m.write(w) }
func (ContractErrorDetail) ModelName() string                       { return "ContractErrorDetail" }
func (m ContractErrorDetail) check() *ValidationError               { return m.validate("") }
func (m ContractErrorDetail) writeJSON(w *jw)                       { m.write(w) }
func (TokenReference) ModelName() string                            { return "TokenReference" }
func (m TokenReference) check() *ValidationError                    { return m.validate("") }
func (m TokenReference) writeJSON(w *jw)                            { m.write(w) }
func (TokenInput) ModelName() string                                { return "TokenInput" }
func (m TokenInput) check() *ValidationError                        { return m.validate("") }
func (m TokenInput) writeJSON(w *jw)                                { m.write(w) }
func (TokenCoverage) ModelName() string                             { return "TokenCoverage" }
func (m TokenCoverage) check() *ValidationError                     { return m.validate("") }
func (m TokenCoverage) writeJSON(w *jw)                             { m.write(w) }
func (CacheArtifact) ModelName() string                             { return "CacheArtifact" }
func (m CacheArtifact) check() *ValidationError                     { return m.validate("") }
func (m CacheArtifact) writeJSON(w *jw)                             { m.write(w) }
func (CacheReplicaObservation) ModelName() string                   { return "CacheReplicaObservation" }
func (m CacheReplicaObservation) check() *ValidationError           { return m.validate("") }
func (m CacheReplicaObservation) writeJSON(w *jw)                   { m.write(w) }
func (CacheOperationTask) ModelName() string                        { return "CacheOperationTask" }
func (m CacheOperationTask) check() *ValidationError                { return m.validate("") }
func (m CacheOperationTask) writeJSON(w *jw)                        { m.write(w) }
func (LMCacheEndpoint) ModelName() string                           { return "LMCacheEndpoint" }
func (m LMCacheEndpoint) check() *ValidationError                   { return m.validate("") }
func (m LMCacheEndpoint) writeJSON(w *jw)                           { m.write(w) }
func (SummaryBase) ModelName() string                               { return "SummaryBase" }
func (m SummaryBase) check() *ValidationError                       { return m.validate("") }
func (m SummaryBase) writeJSON(w *jw)                               { m.writeObj(w) }
func (AdapterSummary) ModelName() string                            { return "AdapterSummary" }
func (m AdapterSummary) check() *ValidationError                    { return m.validate("") }
func (m AdapterSummary) writeJSON(w *jw)                            { m.writeObj(w) }
func (CapacityUsageObservation) ModelName() string                  { return "CapacityUsageObservation" }
func (m CapacityUsageObservation) check() *ValidationError          { return m.validate("") }
func (m CapacityUsageObservation) writeJSON(w *jw)                  { m.writeObj(w) }
func (TierSummary) ModelName() string                               { return "TierSummary" }
func (m TierSummary) check() *ValidationError                       { return m.validate("") }
func (m TierSummary) writeJSON(w *jw)                               { m.writeObj(w) }
func (MaintenanceSummary) ModelName() string                        { return "MaintenanceSummary" }
func (m MaintenanceSummary) check() *ValidationError                { return m.validate("") }
func (m MaintenanceSummary) writeJSON(w *jw)                        { m.writeObj(w) }
func (GatewayAdapterBinding) ModelName() string                     { return "GatewayAdapterBinding" }
func (m GatewayAdapterBinding) check() *ValidationError             { return m.validate("") }
func (m GatewayAdapterBinding) writeJSON(w *jw)                     { m.write(w) }
func (LMCacheCompatibilityProfile) ModelName() string               { return "LMCacheCompatibilityProfile" }
func (m LMCacheCompatibilityProfile) check() *ValidationError       { return m.validate("") }
func (m LMCacheCompatibilityProfile) writeJSON(w *jw)               { m.write(w) }
func (CapabilitySnapshot) ModelName() string                        { return "CapabilitySnapshot" }
func (m CapabilitySnapshot) check() *ValidationError                { return m.validate("") }
func (m CapabilitySnapshot) writeJSON(w *jw)                        { m.write(w) }

// CacheServiceResponse is the untargeted base response model.
func (CacheServiceResponse) ModelName() string { return "CacheServiceResponse" }
func (m CacheServiceResponse) check() *ValidationError {
	return m.validate("", respRules{kind: respBase})
}
func (m CacheServiceResponse) writeJSON(w *jw) { m.write(w) }

// RegisterKnowledgeRequest is the RegisterKnowledgeRequest model (shape KnowledgeDescriptor).
type RegisterKnowledgeRequest KnowledgeDescriptor

func (RegisterKnowledgeRequest) ModelName() string { return "RegisterKnowledgeRequest" }
func (m RegisterKnowledgeRequest) check() *ValidationError {
	return KnowledgeDescriptor(m).validate("")
}
func (m RegisterKnowledgeRequest) writeJSON(w *jw) { KnowledgeDescriptor(m).write(w) }

// UpdateKnowledgeRequest is the UpdateKnowledgeRequest model (shape KnowledgeDescriptor).
type UpdateKnowledgeRequest KnowledgeDescriptor

func (UpdateKnowledgeRequest) ModelName() string         { return "UpdateKnowledgeRequest" }
func (m UpdateKnowledgeRequest) check() *ValidationError { return KnowledgeDescriptor(m).validate("") }
func (m UpdateKnowledgeRequest) writeJSON(w *jw)         { KnowledgeDescriptor(m).write(w) }

// ResolveKnowledgeRequest is the ResolveKnowledgeRequest model (shape KnowledgeRequest).
type ResolveKnowledgeRequest KnowledgeRequest

func (ResolveKnowledgeRequest) ModelName() string         { return "ResolveKnowledgeRequest" }
func (m ResolveKnowledgeRequest) check() *ValidationError { return KnowledgeRequest(m).validate("") }
func (m ResolveKnowledgeRequest) writeJSON(w *jw)         { KnowledgeRequest(m).write(w) }

// ListCompatibleArtifactsRequest is the ListCompatibleArtifactsRequest model (shape KnowledgeRequest).
type ListCompatibleArtifactsRequest KnowledgeRequest

func (ListCompatibleArtifactsRequest) ModelName() string { return "ListCompatibleArtifactsRequest" }
func (m ListCompatibleArtifactsRequest) check() *ValidationError {
	return KnowledgeRequest(m).validate("")
}
func (m ListCompatibleArtifactsRequest) writeJSON(w *jw) { KnowledgeRequest(m).write(w) }

// GetLMCacheEndpointsRequest is the GetLMCacheEndpointsRequest model (shape VersionedMessage).
type GetLMCacheEndpointsRequest VersionedMessage

func (GetLMCacheEndpointsRequest) ModelName() string         { return "GetLMCacheEndpointsRequest" }
func (m GetLMCacheEndpointsRequest) check() *ValidationError { return VersionedMessage(m).validate("") }
func (m GetLMCacheEndpointsRequest) writeJSON(w *jw)         { VersionedMessage(m).write(w) }

// GetTierAndAdapterSummaryRequest is the GetTierAndAdapterSummaryRequest model (shape GatewayTargetedRequest).
type GetTierAndAdapterSummaryRequest GatewayTargetedRequest

func (GetTierAndAdapterSummaryRequest) ModelName() string { return "GetTierAndAdapterSummaryRequest" }
func (m GetTierAndAdapterSummaryRequest) check() *ValidationError {
	return GatewayTargetedRequest(m).validate("")
}
func (m GetTierAndAdapterSummaryRequest) writeJSON(w *jw) { GatewayTargetedRequest(m).write(w) }

// GetMaintenanceStatusRequest is the GetMaintenanceStatusRequest model (shape GatewayTargetedRequest).
type GetMaintenanceStatusRequest GatewayTargetedRequest

func (GetMaintenanceStatusRequest) ModelName() string { return "GetMaintenanceStatusRequest" }
func (m GetMaintenanceStatusRequest) check() *ValidationError {
	return GatewayTargetedRequest(m).validate("")
}
func (m GetMaintenanceStatusRequest) writeJSON(w *jw) { GatewayTargetedRequest(m).write(w) }

// LookupArtifactRequest is the LookupArtifactRequest model (shape ArtifactRequest).
type LookupArtifactRequest ArtifactRequest

func (LookupArtifactRequest) ModelName() string         { return "LookupArtifactRequest" }
func (m LookupArtifactRequest) check() *ValidationError { return ArtifactRequest(m).validate("") }
func (m LookupArtifactRequest) writeJSON(w *jw)         { ArtifactRequest(m).write(w) }

// GetCacheObservationRequest is the GetCacheObservationRequest model (shape ArtifactRequest).
type GetCacheObservationRequest ArtifactRequest

func (GetCacheObservationRequest) ModelName() string         { return "GetCacheObservationRequest" }
func (m GetCacheObservationRequest) check() *ValidationError { return ArtifactRequest(m).validate("") }
func (m GetCacheObservationRequest) writeJSON(w *jw)         { ArtifactRequest(m).write(w) }

// CreatePrefetchIntentRequest is the CreatePrefetchIntentRequest model (shape OperationIntentRequest).
type CreatePrefetchIntentRequest OperationIntentRequest

func (CreatePrefetchIntentRequest) ModelName() string { return "CreatePrefetchIntentRequest" }
func (m CreatePrefetchIntentRequest) check() *ValidationError {
	return OperationIntentRequest(m).validate("")
}
func (m CreatePrefetchIntentRequest) writeJSON(w *jw) { OperationIntentRequest(m).write(w) }

// CreatePinIntentRequest is the CreatePinIntentRequest model (shape OperationIntentRequest).
type CreatePinIntentRequest OperationIntentRequest

func (CreatePinIntentRequest) ModelName() string { return "CreatePinIntentRequest" }
func (m CreatePinIntentRequest) check() *ValidationError {
	return OperationIntentRequest(m).validate("")
}
func (m CreatePinIntentRequest) writeJSON(w *jw) { OperationIntentRequest(m).write(w) }

// CreateUnpinIntentRequest is the CreateUnpinIntentRequest model (shape OperationIntentRequest).
type CreateUnpinIntentRequest OperationIntentRequest

func (CreateUnpinIntentRequest) ModelName() string { return "CreateUnpinIntentRequest" }
func (m CreateUnpinIntentRequest) check() *ValidationError {
	return OperationIntentRequest(m).validate("")
}
func (m CreateUnpinIntentRequest) writeJSON(w *jw) { OperationIntentRequest(m).write(w) }

// CreateClearIntentRequest is the CreateClearIntentRequest model (shape OperationIntentRequest).
type CreateClearIntentRequest OperationIntentRequest

func (CreateClearIntentRequest) ModelName() string { return "CreateClearIntentRequest" }
func (m CreateClearIntentRequest) check() *ValidationError {
	return OperationIntentRequest(m).validate("")
}
func (m CreateClearIntentRequest) writeJSON(w *jw) { OperationIntentRequest(m).write(w) }

// CreateRebuildIntentRequest is the CreateRebuildIntentRequest model (shape OperationIntentRequest).
type CreateRebuildIntentRequest OperationIntentRequest

func (CreateRebuildIntentRequest) ModelName() string { return "CreateRebuildIntentRequest" }
func (m CreateRebuildIntentRequest) check() *ValidationError {
	return OperationIntentRequest(m).validate("")
}
func (m CreateRebuildIntentRequest) writeJSON(w *jw) { OperationIntentRequest(m).write(w) }

// GetOperationStatusRequest is the GetOperationStatusRequest model (shape TaskRequest).
type GetOperationStatusRequest TaskRequest

func (GetOperationStatusRequest) ModelName() string         { return "GetOperationStatusRequest" }
func (m GetOperationStatusRequest) check() *ValidationError { return TaskRequest(m).validate("") }
func (m GetOperationStatusRequest) writeJSON(w *jw)         { TaskRequest(m).write(w) }

// CancelOperationRequest is the CancelOperationRequest model (shape TaskRequest).
type CancelOperationRequest TaskRequest

func (CancelOperationRequest) ModelName() string         { return "CancelOperationRequest" }
func (m CancelOperationRequest) check() *ValidationError { return TaskRequest(m).validate("") }
func (m CancelOperationRequest) writeJSON(w *jw)         { TaskRequest(m).write(w) }

// GatewayTargetedResponse is the GatewayTargetedResponse model (shape CacheServiceResponse).
type GatewayTargetedResponse CacheServiceResponse

func (GatewayTargetedResponse) ModelName() string { return "GatewayTargetedResponse" }
func (m GatewayTargetedResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respTargeted})
}
func (m GatewayTargetedResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// LookupArtifactResponse is the LookupArtifactResponse model (shape CacheServiceResponse).
type LookupArtifactResponse CacheServiceResponse

func (LookupArtifactResponse) ModelName() string { return "LookupArtifactResponse" }
func (m LookupArtifactResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respLookupArtifact})
}
func (m LookupArtifactResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// GetCacheObservationResponse is the GetCacheObservationResponse model (shape CacheServiceResponse).
type GetCacheObservationResponse CacheServiceResponse

func (GetCacheObservationResponse) ModelName() string { return "GetCacheObservationResponse" }
func (m GetCacheObservationResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respObservation})
}
func (m GetCacheObservationResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// LookupTokensResponse is the LookupTokensResponse model (shape CacheServiceResponse).
type LookupTokensResponse CacheServiceResponse

func (LookupTokensResponse) ModelName() string { return "LookupTokensResponse" }
func (m LookupTokensResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respTokens})
}
func (m LookupTokensResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// OperationResponse is the OperationResponse model (shape CacheServiceResponse).
type OperationResponse CacheServiceResponse

func (OperationResponse) ModelName() string { return "OperationResponse" }
func (m OperationResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respOperation})
}
func (m OperationResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// CreatePrefetchIntentResponse is the CreatePrefetchIntentResponse model (shape CacheServiceResponse).
type CreatePrefetchIntentResponse CacheServiceResponse

func (CreatePrefetchIntentResponse) ModelName() string { return "CreatePrefetchIntentResponse" }
func (m CreatePrefetchIntentResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respIntent, intent: OpPrefetch})
}
func (m CreatePrefetchIntentResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// CreatePinIntentResponse is the CreatePinIntentResponse model (shape CacheServiceResponse).
type CreatePinIntentResponse CacheServiceResponse

func (CreatePinIntentResponse) ModelName() string { return "CreatePinIntentResponse" }
func (m CreatePinIntentResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respIntent, intent: OpPin})
}
func (m CreatePinIntentResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// CreateUnpinIntentResponse is the CreateUnpinIntentResponse model (shape CacheServiceResponse).
type CreateUnpinIntentResponse CacheServiceResponse

func (CreateUnpinIntentResponse) ModelName() string { return "CreateUnpinIntentResponse" }
func (m CreateUnpinIntentResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respIntent, intent: OpUnpin})
}
func (m CreateUnpinIntentResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// CreateClearIntentResponse is the CreateClearIntentResponse model (shape CacheServiceResponse).
type CreateClearIntentResponse CacheServiceResponse

func (CreateClearIntentResponse) ModelName() string { return "CreateClearIntentResponse" }
func (m CreateClearIntentResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respIntent, intent: OpClear})
}
func (m CreateClearIntentResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// CreateRebuildIntentResponse is the CreateRebuildIntentResponse model (shape CacheServiceResponse).
type CreateRebuildIntentResponse CacheServiceResponse

func (CreateRebuildIntentResponse) ModelName() string { return "CreateRebuildIntentResponse" }
func (m CreateRebuildIntentResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respIntent, intent: OpRebuild})
}
func (m CreateRebuildIntentResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// GetOperationStatusResponse is the GetOperationStatusResponse model (shape CacheServiceResponse).
type GetOperationStatusResponse CacheServiceResponse

func (GetOperationStatusResponse) ModelName() string { return "GetOperationStatusResponse" }
func (m GetOperationStatusResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respOperation})
}
func (m GetOperationStatusResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// CancelOperationResponse is the CancelOperationResponse model (shape CacheServiceResponse).
type CancelOperationResponse CacheServiceResponse

func (CancelOperationResponse) ModelName() string { return "CancelOperationResponse" }
func (m CancelOperationResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respCancel})
}
func (m CancelOperationResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// GetLMCacheEndpointsResponse is the GetLMCacheEndpointsResponse model (shape CacheServiceResponse).
type GetLMCacheEndpointsResponse CacheServiceResponse

func (GetLMCacheEndpointsResponse) ModelName() string { return "GetLMCacheEndpointsResponse" }
func (m GetLMCacheEndpointsResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respEndpoints})
}
func (m GetLMCacheEndpointsResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// GetTierAndAdapterSummaryResponse is the GetTierAndAdapterSummaryResponse model (shape CacheServiceResponse).
type GetTierAndAdapterSummaryResponse CacheServiceResponse

func (GetTierAndAdapterSummaryResponse) ModelName() string { return "GetTierAndAdapterSummaryResponse" }
func (m GetTierAndAdapterSummaryResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respTierAdapter})
}
func (m GetTierAndAdapterSummaryResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

// GetMaintenanceStatusResponse is the GetMaintenanceStatusResponse model (shape CacheServiceResponse).
type GetMaintenanceStatusResponse CacheServiceResponse

func (GetMaintenanceStatusResponse) ModelName() string { return "GetMaintenanceStatusResponse" }
func (m GetMaintenanceStatusResponse) check() *ValidationError {
	return CacheServiceResponse(m).validate("", respRules{kind: respMaintenance})
}
func (m GetMaintenanceStatusResponse) writeJSON(w *jw) { CacheServiceResponse(m).write(w) }

type decodeFn func(d *decoder, v jvalue) (Message, *ValidationError)

func as[S any, M Message](dec elemDecoder[S], conv func(S) M) decodeFn {
	return func(d *decoder, v jvalue) (Message, *ValidationError) {
		s, e := dec(d, v, "")
		if e != nil {
			return nil, e
		}
		return conv(s), nil
	}
}

func same[S Message](s S) S { return s }

// decoderFor maps a model name to its decoder; nil for unknown names. A
// switch rather than a map keeps the package free of mutable state.
func decoderFor(model string) decodeFn {
	switch model {
	case "VersionedMessage":
		return as(decodeVersioned, same[VersionedMessage])
	case "GatewayTargetedRequest":
		return as(decodeTargeted, same[GatewayTargetedRequest])
	case "ArtifactRequest":
		return as(decodeArtifactRequest, same[ArtifactRequest])
	case "LookupTokensRequest":
		return as(decodeLookupTokens, same[LookupTokensRequest])
	case "OperationIntentRequest":
		return as(decodeIntent, same[OperationIntentRequest])
	case "KnowledgeDescriptor":
		return as(decodeKnowledgeDescriptor, same[KnowledgeDescriptor])
	case "QueryArtifactCompatibilityRequest":
		return as(decodeQueryCompat, same[QueryArtifactCompatibilityRequest])
	case "ReportRequestOutcomeRequest":
		return as(decodeReportOutcome, same[ReportRequestOutcomeRequest])
	case "KnowledgeResponse":
		return as(decodeKnowledgeResponse, same[KnowledgeResponse])
	case "ContractErrorDetail":
		return as(decodeErrorDetail, same[ContractErrorDetail])
	case "TokenReference":
		return as(decodeTokenReference, same[TokenReference])
	case "TokenInput":
		return as(decodeTokenInput, same[TokenInput])
	case "TokenCoverage":
		return as(decodeTokenCoverage, same[TokenCoverage])
	case "CacheArtifact":
		return as(decodeArtifact, same[CacheArtifact])
	case "CacheReplicaObservation":
		return as(decodeObservation, same[CacheReplicaObservation])
	case "CacheOperationTask":
		return as(decodeTask, same[CacheOperationTask])
	case "LMCacheEndpoint":
		return as(decodeEndpoint, same[LMCacheEndpoint])
	case "SummaryBase":
		return as(decodeSummaryBaseModel, same[SummaryBase])
	case "AdapterSummary":
		return as(decodeAdapterSummary, same[AdapterSummary])
	case "CapacityUsageObservation":
		return as(decodeCapacity, same[CapacityUsageObservation])
	case "TierSummary":
		return as(decodeTierSummary, same[TierSummary])
	case "MaintenanceSummary":
		return as(decodeMaintenanceSummary, same[MaintenanceSummary])
	case "GatewayAdapterBinding":
		return as(decodeBinding, same[GatewayAdapterBinding])
	case "LMCacheCompatibilityProfile":
		return as(decodeCompatProfile, same[LMCacheCompatibilityProfile])
	case "CapabilitySnapshot":
		return as(decodeSnapshot, same[CapabilitySnapshot])
	case "CacheServiceResponse":
		return as(decodeCacheResponse, same[CacheServiceResponse])
	case "RegisterKnowledgeRequest":
		return as(decodeKnowledgeDescriptor, func(s KnowledgeDescriptor) Message { return RegisterKnowledgeRequest(s) })
	case "UpdateKnowledgeRequest":
		return as(decodeKnowledgeDescriptor, func(s KnowledgeDescriptor) Message { return UpdateKnowledgeRequest(s) })
	case "ResolveKnowledgeRequest":
		return as(decodeKnowledgeRequest, func(s KnowledgeRequest) Message { return ResolveKnowledgeRequest(s) })
	case "ListCompatibleArtifactsRequest":
		return as(decodeKnowledgeRequest, func(s KnowledgeRequest) Message { return ListCompatibleArtifactsRequest(s) })
	case "GetLMCacheEndpointsRequest":
		return as(decodeVersioned, func(s VersionedMessage) Message { return GetLMCacheEndpointsRequest(s) })
	case "GetTierAndAdapterSummaryRequest":
		return as(decodeTargeted, func(s GatewayTargetedRequest) Message { return GetTierAndAdapterSummaryRequest(s) })
	case "GetMaintenanceStatusRequest":
		return as(decodeTargeted, func(s GatewayTargetedRequest) Message { return GetMaintenanceStatusRequest(s) })
	case "LookupArtifactRequest":
		return as(decodeArtifactRequest, func(s ArtifactRequest) Message { return LookupArtifactRequest(s) })
	case "GetCacheObservationRequest":
		return as(decodeArtifactRequest, func(s ArtifactRequest) Message { return GetCacheObservationRequest(s) })
	case "CreatePrefetchIntentRequest":
		return as(decodeIntent, func(s OperationIntentRequest) Message { return CreatePrefetchIntentRequest(s) })
	case "CreatePinIntentRequest":
		return as(decodeIntent, func(s OperationIntentRequest) Message { return CreatePinIntentRequest(s) })
	case "CreateUnpinIntentRequest":
		return as(decodeIntent, func(s OperationIntentRequest) Message { return CreateUnpinIntentRequest(s) })
	case "CreateClearIntentRequest":
		return as(decodeIntent, func(s OperationIntentRequest) Message { return CreateClearIntentRequest(s) })
	case "CreateRebuildIntentRequest":
		return as(decodeIntent, func(s OperationIntentRequest) Message { return CreateRebuildIntentRequest(s) })
	case "GetOperationStatusRequest":
		return as(decodeTaskRequest, func(s TaskRequest) Message { return GetOperationStatusRequest(s) })
	case "CancelOperationRequest":
		return as(decodeTaskRequest, func(s TaskRequest) Message { return CancelOperationRequest(s) })
	case "GatewayTargetedResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return GatewayTargetedResponse(s) })
	case "LookupArtifactResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return LookupArtifactResponse(s) })
	case "GetCacheObservationResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return GetCacheObservationResponse(s) })
	case "LookupTokensResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return LookupTokensResponse(s) })
	case "OperationResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return OperationResponse(s) })
	case "CreatePrefetchIntentResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return CreatePrefetchIntentResponse(s) })
	case "CreatePinIntentResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return CreatePinIntentResponse(s) })
	case "CreateUnpinIntentResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return CreateUnpinIntentResponse(s) })
	case "CreateClearIntentResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return CreateClearIntentResponse(s) })
	case "CreateRebuildIntentResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return CreateRebuildIntentResponse(s) })
	case "GetOperationStatusResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return GetOperationStatusResponse(s) })
	case "CancelOperationResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return CancelOperationResponse(s) })
	case "GetLMCacheEndpointsResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return GetLMCacheEndpointsResponse(s) })
	case "GetTierAndAdapterSummaryResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return GetTierAndAdapterSummaryResponse(s) })
	case "GetMaintenanceStatusResponse":
		return as(decodeCacheResponse, func(s CacheServiceResponse) Message { return GetMaintenanceStatusResponse(s) })
	case "RegisterKnowledgeResponse":
		return as(decodeKnowledgeResponse, same[KnowledgeResponse])
	case "UpdateKnowledgeResponse":
		return as(decodeKnowledgeResponse, same[KnowledgeResponse])
	case "ResolveKnowledgeResponse":
		return as(decodeKnowledgeResponse, same[KnowledgeResponse])
	case "ListCompatibleArtifactsResponse":
		return as(decodeKnowledgeResponse, same[KnowledgeResponse])
	case "QueryArtifactCompatibilityResponse":
		return as(decodeKnowledgeResponse, same[KnowledgeResponse])
	case "ReportRequestOutcomeResponse":
		return as(decodeKnowledgeResponse, same[KnowledgeResponse])
	case "ContractError":
		return as(decodeErrorDetail, same[ContractErrorDetail])
	}
	return nil
}

// ModelNames lists every model name Decode accepts, sorted.
func ModelNames() []string {
	return []string{
		"AdapterSummary",
		"ArtifactRequest",
		"CacheArtifact",
		"CacheOperationTask",
		"CacheReplicaObservation",
		"CacheServiceResponse",
		"CancelOperationRequest",
		"CancelOperationResponse",
		"CapabilitySnapshot",
		"CapacityUsageObservation",
		"ContractError",
		"ContractErrorDetail",
		"CreateClearIntentRequest",
		"CreateClearIntentResponse",
		"CreatePinIntentRequest",
		"CreatePinIntentResponse",
		"CreatePrefetchIntentRequest",
		"CreatePrefetchIntentResponse",
		"CreateRebuildIntentRequest",
		"CreateRebuildIntentResponse",
		"CreateUnpinIntentRequest",
		"CreateUnpinIntentResponse",
		"GatewayAdapterBinding",
		"GatewayTargetedRequest",
		"GatewayTargetedResponse",
		"GetCacheObservationRequest",
		"GetCacheObservationResponse",
		"GetLMCacheEndpointsRequest",
		"GetLMCacheEndpointsResponse",
		"GetMaintenanceStatusRequest",
		"GetMaintenanceStatusResponse",
		"GetOperationStatusRequest",
		"GetOperationStatusResponse",
		"GetTierAndAdapterSummaryRequest",
		"GetTierAndAdapterSummaryResponse",
		"KnowledgeDescriptor",
		"KnowledgeResponse",
		"LMCacheCompatibilityProfile",
		"LMCacheEndpoint",
		"ListCompatibleArtifactsRequest",
		"ListCompatibleArtifactsResponse",
		"LookupArtifactRequest",
		"LookupArtifactResponse",
		"LookupTokensRequest",
		"LookupTokensResponse",
		"MaintenanceSummary",
		"OperationIntentRequest",
		"OperationResponse",
		"QueryArtifactCompatibilityRequest",
		"QueryArtifactCompatibilityResponse",
		"RegisterKnowledgeRequest",
		"RegisterKnowledgeResponse",
		"ReportRequestOutcomeRequest",
		"ReportRequestOutcomeResponse",
		"ResolveKnowledgeRequest",
		"ResolveKnowledgeResponse",
		"SummaryBase",
		"TierSummary",
		"TokenCoverage",
		"TokenInput",
		"TokenReference",
		"UpdateKnowledgeRequest",
		"UpdateKnowledgeResponse",
		"VersionedMessage",
	}
}
