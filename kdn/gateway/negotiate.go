package gateway

import (
	"strings"
	"time"

	"github.com/kvca/kvca/kdn"
)

// Ungated marks a call that skips the capability gate (§9 step 3), like the
// Legacy adapter's read-only answers and endpoint discovery.
const Ungated kdn.Capability = -1

// Refusal is a non-success answer: outcome plus the safe error fields.
type Refusal struct {
	Outcome          kdn.OutcomeCode
	Message          string // empty: the outcome with '_' replaced by ' '
	Retryable        bool
	FallbackEligible bool
}

// Fixed negotiation messages (§9); clients may match on them.
const (
	MsgIncompatible          = "request target is incompatible with gateway capabilities"
	MsgStaleGeneration       = "request endpoint generation is stale"
	MsgUnsupported           = "gateway capability is unsupported or unknown"
	MsgDiscoveryIncompatible = "discovery runtime profile is incompatible"
)

// Negotiate applies §9 to a targeted request, in order: target mismatch →
// incompatible; generation mismatch (older or newer) → stale, retryable;
// gate not exactly supported → unsupported. refused=false means the
// adapter-specific logic may run.
func Negotiate(s kdn.CapabilitySnapshot, env kdn.Envelope, t kdn.Target, gate kdn.Capability) (r Refusal, refused bool) {
	switch {
	case env.RuntimeProfile != s.RuntimeProfile ||
		t.CompatibilityProfileID != s.CompatibilityProfile.CompatibilityProfileID ||
		t.EndpointID != s.EndpointID:
		return Refusal{Outcome: kdn.OutcomeIncompatible, Message: MsgIncompatible}, true
	case t.EndpointGeneration != s.EndpointGeneration:
		return Refusal{Outcome: kdn.OutcomeStale, Message: MsgStaleGeneration, Retryable: true}, true
	case gate != Ungated && !s.Supports(gate):
		return Refusal{Outcome: kdn.OutcomeUnsupported, Message: MsgUnsupported}, true
	}
	return Refusal{}, false
}

// NegotiateDiscovery applies the runtime-only negotiation of endpoint
// discovery.
func NegotiateDiscovery(s kdn.CapabilitySnapshot, env kdn.Envelope) (Refusal, bool) {
	if env.RuntimeProfile != s.RuntimeProfile {
		return Refusal{Outcome: kdn.OutcomeIncompatible, Message: MsgDiscoveryIncompatible}, true
	}
	return Refusal{}, false
}

// NewTargetedReply starts the answer to a targeted request: envelope and
// target copied from the request (even where they disagree with the
// gateway), contract version kdn.v1, a fresh timestamp, outcome success and
// no payload.
func NewTargetedReply(env kdn.Envelope, t kdn.Target, now time.Time) kdn.CacheServiceResponse {
	r := NewDiscoveryReply(env, now)
	r.CompatibilityProfileID = kdn.Some(t.CompatibilityProfileID)
	r.EndpointID = kdn.Some(t.EndpointID)
	r.EndpointGeneration = kdn.Some(t.EndpointGeneration)
	return r
}

// NewDiscoveryReply starts the answer to an untargeted request.
func NewDiscoveryReply(env kdn.Envelope, now time.Time) kdn.CacheServiceResponse {
	return kdn.CacheServiceResponse{
		Envelope: kdn.Envelope{
			ContractVersion: kdn.KDNContractVersion,
			RuntimeProfile:  env.RuntimeProfile,
			RequestID:       env.RequestID,
			CorrelationID:   env.CorrelationID,
			Timestamp:       now.UTC().Truncate(time.Microsecond),
		},
		Outcome: kdn.OutcomeSuccess,
	}
}

// Refuse turns r into the non-success answer f, with its matching error.
func Refuse(r kdn.CacheServiceResponse, f Refusal) kdn.CacheServiceResponse {
	msg := f.Message
	if msg == "" {
		msg = strings.ReplaceAll(string(f.Outcome), "_", " ")
	}
	e := kdn.NewErrorDetail(f.Outcome, msg)
	e.Retryable = f.Retryable
	e.FallbackEligible = f.FallbackEligible
	r.Outcome = f.Outcome
	r.Error = kdn.Some(e)
	return r
}
