package kdn

// Contract version strings (docs/kdn.md: kdn.v1, and lmcache-gateway.v1 for
// capability discovery).
const (
	KDNContractVersion     = "kdn.v1"
	GatewayContractVersion = "lmcache-gateway.v1"
)

// RuntimeProfile is the runtime a message belongs to. On the wire most
// models normalise it (see normaliseProfile); summaries take it verbatim.
type RuntimeProfile string

const (
	ProfileV1     RuntimeProfile = "v1"
	ProfileLegacy RuntimeProfile = "legacy"
	ProfileMock   RuntimeProfile = "test/mock"
	ProfileAuto   RuntimeProfile = "auto" // start-up only; never valid on an envelope
)

// resolved reports whether p is a profile a message may carry (auto excluded).
func (p RuntimeProfile) resolved() bool {
	return p == ProfileV1 || p == ProfileLegacy || p == ProfileMock
}

// OutcomeCode is the result vocabulary shared by all responses and errors.
type OutcomeCode string

const (
	OutcomeSuccess             OutcomeCode = "success"
	OutcomeUnsupported         OutcomeCode = "unsupported"
	OutcomeIncompatible        OutcomeCode = "incompatible"
	OutcomeStale               OutcomeCode = "stale"
	OutcomePartial             OutcomeCode = "partial"
	OutcomeFailed              OutcomeCode = "failed"
	OutcomeCancelled           OutcomeCode = "cancelled"
	OutcomeTextFallback        OutcomeCode = "text_fallback"
	OutcomeIdempotencyConflict OutcomeCode = "idempotency_conflict"
)

func (c OutcomeCode) valid() bool {
	switch c {
	case OutcomeSuccess, OutcomeUnsupported, OutcomeIncompatible, OutcomeStale, OutcomePartial,
		OutcomeFailed, OutcomeCancelled, OutcomeTextFallback, OutcomeIdempotencyConflict:
		return true
	}
	return false
}

// SupportState is a tri-state capability answer; only Supported means yes.
type SupportState string

const (
	Supported   SupportState = "supported"
	Unsupported SupportState = "unsupported"
	Unknown     SupportState = "unknown"
)

func (s SupportState) valid() bool { return s == Supported || s == Unsupported || s == Unknown }

// TierLevel names a cache tier level.
type TierLevel string

const (
	TierL1 TierLevel = "l1"
	TierL2 TierLevel = "l2"
)

func (t TierLevel) valid() bool { return t == TierL1 || t == TierL2 }

// CacheOperationType is what a cache task does.
type CacheOperationType string

const (
	OpLookup   CacheOperationType = "lookup"
	OpPrefetch CacheOperationType = "prefetch"
	OpPin      CacheOperationType = "pin"
	OpUnpin    CacheOperationType = "unpin"
	OpClear    CacheOperationType = "clear"
	OpRebuild  CacheOperationType = "rebuild"
	OpObserve  CacheOperationType = "observe"
)

func (o CacheOperationType) valid() bool {
	switch o {
	case OpLookup, OpPrefetch, OpPin, OpUnpin, OpClear, OpRebuild, OpObserve:
		return true
	}
	return false
}

// IsWrite reports whether o changes cache state (§2 "write operations").
func (o CacheOperationType) IsWrite() bool {
	switch o {
	case OpPrefetch, OpPin, OpUnpin, OpClear, OpRebuild:
		return true
	}
	return false
}

// CacheOperationState is a task's lifecycle state.
type CacheOperationState string

const (
	StatePending   CacheOperationState = "pending"
	StateRunning   CacheOperationState = "running"
	StateRetryWait CacheOperationState = "retry_wait"
	StateSucceeded CacheOperationState = "succeeded"
	StateFailed    CacheOperationState = "failed"
	StateCancelled CacheOperationState = "cancelled"
)

func (s CacheOperationState) valid() bool {
	switch s {
	case StatePending, StateRunning, StateRetryWait, StateSucceeded, StateFailed, StateCancelled:
		return true
	}
	return false
}

// Terminal reports whether no further transition is possible.
func (s CacheOperationState) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled
}

// ObservationState describes what an observation saw.
type ObservationState string

const (
	ObsPending     ObservationState = "pending"
	ObsAvailable   ObservationState = "available"
	ObsUnavailable ObservationState = "unavailable"
	ObsUnknown     ObservationState = "unknown"
	ObsPartial     ObservationState = "partial"
)

func (s ObservationState) valid() bool {
	switch s {
	case ObsPending, ObsAvailable, ObsUnavailable, ObsUnknown, ObsPartial:
		return true
	}
	return false
}

// ObservationSource names where an observation came from.
type ObservationSource string

const (
	SourceHTTPAPI          ObservationSource = "http_api"
	SourceCoordinator      ObservationSource = "coordinator"
	SourceSDK              ObservationSource = "sdk"
	SourceMetricsEvent     ObservationSource = "metrics_event"
	SourceLegacyProjection ObservationSource = "legacy_projection"
	SourceMock             ObservationSource = "mock"
)

func (s ObservationSource) valid() bool {
	switch s {
	case SourceHTTPAPI, SourceCoordinator, SourceSDK, SourceMetricsEvent, SourceLegacyProjection, SourceMock:
		return true
	}
	return false
}

// ObservationConfidence grades an observation.
type ObservationConfidence string

const (
	ConfidenceLow    ObservationConfidence = "low"
	ConfidenceMedium ObservationConfidence = "medium"
	ConfidenceHigh   ObservationConfidence = "high"
)

func (c ObservationConfidence) valid() bool {
	return c == ConfidenceLow || c == ConfidenceMedium || c == ConfidenceHigh
}

// GatewayProfile is the LMCacheGatewayProfile enum.
type GatewayProfile string

const (
	GatewayMPHTTPAPI       GatewayProfile = "mp_http_api"
	GatewayMPCoordinator   GatewayProfile = "mp_coordinator"
	GatewayMPSDK           GatewayProfile = "mp_sdk"
	GatewayMPMetricsEvents GatewayProfile = "mp_metrics_events"
	GatewayLegacy          GatewayProfile = "legacy_gateway"
	GatewayMock            GatewayProfile = "mock"
	GatewayUnknownFuture   GatewayProfile = "unknown_future"
)

func (g GatewayProfile) valid() bool {
	switch g {
	case GatewayMPHTTPAPI, GatewayMPCoordinator, GatewayMPSDK, GatewayMPMetricsEvents,
		GatewayLegacy, GatewayMock, GatewayUnknownFuture:
		return true
	}
	return false
}

// TransportKind is the GatewayTransportKind enum used by adapter bindings.
type TransportKind string

const (
	TransportMPHTTPAPI       TransportKind = "mp_http_api"
	TransportMPCoordinator   TransportKind = "mp_coordinator"
	TransportMPSDK           TransportKind = "mp_sdk"
	TransportMPMetricsEvents TransportKind = "mp_metrics_events"
	TransportMPL2Plugin      TransportKind = "mp_l2_plugin"
	TransportLegacyRedis     TransportKind = "legacy_redis"
	TransportMock            TransportKind = "mock"
	TransportUnknownFuture   TransportKind = "unknown_future"
)

func (k TransportKind) valid() bool {
	switch k {
	case TransportMPHTTPAPI, TransportMPCoordinator, TransportMPSDK, TransportMPMetricsEvents,
		TransportMPL2Plugin, TransportLegacyRedis, TransportMock, TransportUnknownFuture:
		return true
	}
	return false
}

// allowedFor implements the runtime isolation of bindings (§7.7).
func (k TransportKind) allowedFor(p RuntimeProfile) bool {
	switch p {
	case ProfileLegacy:
		return k == TransportLegacyRedis
	case ProfileMock:
		return k == TransportMock
	case ProfileV1:
		return k != TransportLegacyRedis && k != TransportMock
	}
	return false
}

// Capability identifies one of the 16 CapabilitySnapshot flags, in wire order.
type Capability int

const (
	CapTokenLookup Capability = iota
	CapRangeCoverage
	CapObjectListing
	CapObjectDeletion
	CapWarmPrefetch
	CapOperationStatus
	CapPinUnpin
	CapTierCapacityUsage
	CapMaintenanceEviction
	CapMetricsEvents
	CapBatching
	CapLockLease
	CapAsyncCompletion
	CapCancellation
	CapArtifactLookup
	CapCacheObservation
	NumCapabilities int = iota
)

// String returns the flag's wire name.
func (c Capability) String() string {
	switch c {
	case CapTokenLookup:
		return "token_lookup"
	case CapRangeCoverage:
		return "range_coverage"
	case CapObjectListing:
		return "object_listing"
	case CapObjectDeletion:
		return "object_deletion"
	case CapWarmPrefetch:
		return "warm_prefetch"
	case CapOperationStatus:
		return "operation_status"
	case CapPinUnpin:
		return "pin_unpin"
	case CapTierCapacityUsage:
		return "tier_capacity_usage"
	case CapMaintenanceEviction:
		return "maintenance_eviction"
	case CapMetricsEvents:
		return "metrics_events"
	case CapBatching:
		return "batching"
	case CapLockLease:
		return "lock_lease"
	case CapAsyncCompletion:
		return "async_completion"
	case CapCancellation:
		return "cancellation"
	case CapArtifactLookup:
		return "artifact_lookup"
	case CapCacheObservation:
		return "cache_observation"
	}
	return "invalid_capability"
}
