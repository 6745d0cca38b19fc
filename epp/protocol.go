package epp

// The names the endpoint picker protocol gives its headers and metadata.
// They are the protocol's, not kvca's: gateways look for exactly these.
const (
	// DestinationHeader carries the pick to the gateway as a request
	// header: the primary endpoint then the fallbacks, comma-separated.
	DestinationHeader = "x-gateway-destination-endpoint"
	// DestinationNamespace is the dynamic metadata namespace of the
	// pick; its key DestinationHeader holds the same value as the header.
	DestinationNamespace = "envoy.lb"
	// ServedKey is the key, in DestinationNamespace of the response's
	// filter metadata, of the endpoint that served the request.
	ServedKey = "x-gateway-destination-endpoint-served"
	// SubsetNamespace and SubsetKey locate the subset hint in the
	// request's filter metadata: the endpoints the pick must come from.
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
	// PrefillerHeader names, in a disaggregated fleet, the prefill worker
	// (host:port) of a request picked to a decode endpoint: llm-d's
	// convention, read by the routing sidecar beside the decode worker,
	// which runs the prefill leg there first. A client's own value never
	// reaches the sidecar.
	PrefillerHeader = "x-prefiller-host-port"

	// ExtProcService is the gRPC service name of the external processor,
	// also a health check service name.
	ExtProcService = "envoy.service.ext_proc.v3.ExternalProcessor"
	// LivenessService and ReadinessService are the health check service
	// names the protocol defines.
	LivenessService  = "liveness"
	ReadinessService = "readiness"
)

// chunkLimit bounds a streamed body mutation: Envoy recommends at most
// 64 KiB per StreamedBodyResponse and some builds reject more, so a
// longer chunk goes back as several (sub-slices: no copy), with margin.
const chunkLimit = 62000
