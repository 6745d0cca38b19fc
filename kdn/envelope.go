package kdn

import "time"

// Envelope holds the VersionedMessage fields every KDN message starts with
// (§3.1).
type Envelope struct {
	ContractVersion string // always KDNContractVersion
	RuntimeProfile  RuntimeProfile
	RequestID       string
	CorrelationID   Opt[string]
	Timestamp       time.Time // UTC
}

// NewEnvelope returns an envelope with the contract version and a fresh
// request id filled in, stamped at now.
func NewEnvelope(profile RuntimeProfile, now time.Time) Envelope {
	return Envelope{
		ContractVersion: KDNContractVersion,
		RuntimeProfile:  profile,
		RequestID:       NewRequestID(),
		Timestamp:       wireTime(now.UTC()),
	}
}

func envelopeKeys() []string {
	return []string{"contract_version", "runtime_profile", "request_id", "correlation_id", "timestamp"}
}

func decodeEnvelope(o *obj) Envelope {
	var e Envelope
	e.ContractVersion = o.strDef("contract_version", KDNContractVersion)
	e.RuntimeProfile = o.profile("runtime_profile", true)
	if v, ok := o.withDefault("request_id"); ok {
		e.RequestID = o.asString("request_id", v)
	} else if o.err == nil {
		e.RequestID = o.d.randomID("req_")
	}
	e.CorrelationID = o.strOpt("correlation_id")
	e.Timestamp = o.timeNow("timestamp")
	return e
}

func (e Envelope) check(c *checker) {
	if e.ContractVersion != KDNContractVersion {
		c.fail(CodeContractVersion, "contract_version", "const:kdn.v1", "contract_version must be exactly kdn.v1")
	}
	c.profile("runtime_profile", e.RuntimeProfile)
	c.min1("request_id", e.RequestID)
	c.utc("timestamp", e.Timestamp)
}

func (e Envelope) write(w *jw) {
	w.key("contract_version")
	w.str(e.ContractVersion)
	w.key("runtime_profile")
	w.str(string(e.RuntimeProfile))
	w.key("request_id")
	w.str(e.RequestID)
	w.key("correlation_id")
	w.optStr(e.CorrelationID)
	w.key("timestamp")
	w.time(e.Timestamp)
}

// Target holds the gateway-target fields of GatewayTargetedRequest (§3.3).
type Target struct {
	CompatibilityProfileID string
	EndpointID             string
	EndpointGeneration     int64
}

func targetKeys() []string {
	return []string{"compatibility_profile_id", "endpoint_id", "endpoint_generation"}
}

func decodeTarget(o *obj) Target {
	return Target{
		CompatibilityProfileID: o.str("compatibility_profile_id"),
		EndpointID:             o.str("endpoint_id"),
		EndpointGeneration:     o.int("endpoint_generation"),
	}
}

func (t Target) check(c *checker, p RuntimeProfile) {
	c.min1("compatibility_profile_id", t.CompatibilityProfileID)
	c.pattern("endpoint_id", t.EndpointID, prefixEndpoint)
	c.generation("endpoint_generation", t.EndpointGeneration, p)
}

func (t Target) write(w *jw) {
	w.key("compatibility_profile_id")
	w.str(t.CompatibilityProfileID)
	w.key("endpoint_id")
	w.str(t.EndpointID)
	w.key("endpoint_generation")
	w.int(t.EndpointGeneration)
}

func keys(groups ...[]string) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}
