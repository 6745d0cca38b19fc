package live

import (
	"context"

	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
)

// Wire messages of the read calls.
const (
	msgArtifactUnknown = "artifact is not registered"
	msgNotCached       = "artifact is not cached on the endpoint"
	msgPartlyCached    = "artifact is only partly cached on the endpoint"
	msgObsStale        = "observation is stale"
)

// LookupArtifact implements gateway.Gateway: the artifact when the endpoint
// holds all of its blocks, partial (with the artifact) when it holds a
// leading part, stale when it holds none, the artifact is unknown, or the
// endpoint is unhealthy.
func (g *Gateway) LookupArtifact(_ context.Context, req kdn.LookupArtifactRequest) kdn.LookupArtifactResponse {
	r, b, ok := g.begin(req.Envelope, req.Target, kdn.CapArtifactLookup)
	if !ok {
		return kdn.LookupArtifactResponse(r)
	}
	p, known := g.cat.artifact(req.ArtifactID)
	if !known {
		return kdn.LookupArtifactResponse(refuse(r, kdn.OutcomeStale, msgArtifactUnknown))
	}
	gen := req.EndpointGeneration
	if f, bad := g.vouch(b, gen, kdn.OutcomeStale); bad {
		return kdn.LookupArtifactResponse(gateway.Refuse(r, f))
	}
	_, h := g.observe(p, b, gen, r.Timestamp)
	if f, bad := g.vouch(b, gen, kdn.OutcomeStale); bad {
		return kdn.LookupArtifactResponse(gateway.Refuse(r, f))
	}
	switch {
	case h.blocks == 0:
		return kdn.LookupArtifactResponse(refuse(r, kdn.OutcomeStale, msgNotCached))
	case !h.complete():
		r.Artifact = kdn.Some(p.artifact.Clone())
		return kdn.LookupArtifactResponse(refuse(r, kdn.OutcomePartial, msgPartlyCached))
	}
	r.Artifact = kdn.Some(p.artifact.Clone())
	return kdn.LookupArtifactResponse(r)
}

// GetCacheObservation implements gateway.Gateway: what the block table
// says about the artifact on the endpoint, observed at the response's own
// timestamp. An unregistered artifact or an unhealthy endpoint is stale
// with no observation.
func (g *Gateway) GetCacheObservation(_ context.Context, req kdn.GetCacheObservationRequest) kdn.GetCacheObservationResponse {
	r, b, ok := g.begin(req.Envelope, req.Target, kdn.CapCacheObservation)
	if !ok {
		return kdn.GetCacheObservationResponse(r)
	}
	p, known := g.cat.artifact(req.ArtifactID)
	if !known {
		return kdn.GetCacheObservationResponse(refuse(r, kdn.OutcomeStale, msgArtifactUnknown))
	}
	// An ejected endpoint gets no observation at all: the table still
	// lists its locations (they are dropped when it is re-admitted), and
	// shown as an observation they would claim a cache kvca cannot reach.
	gen := req.EndpointGeneration
	if f, bad := g.vouch(b, gen, kdn.OutcomeStale); bad {
		return kdn.GetCacheObservationResponse(gateway.Refuse(r, f))
	}
	o, _ := g.observe(p, b, gen, r.Timestamp)
	if f, bad := g.vouch(b, gen, kdn.OutcomeStale); bad {
		return kdn.GetCacheObservationResponse(gateway.Refuse(r, f))
	}
	r.Observation = kdn.Some(o)
	if !o.FreshAt(r.Timestamp) {
		return kdn.GetCacheObservationResponse(refuse(r, kdn.OutcomeStale, msgObsStale))
	}
	return kdn.GetCacheObservationResponse(r)
}

// LookupTokens implements gateway.Gateway. kvca hashes request bytes, never
// tokens, so token_lookup is unsupported in every snapshot and negotiation
// always refuses here; the fallback keeps the answer well-formed should
// the gate ever pass.
func (g *Gateway) LookupTokens(_ context.Context, req kdn.LookupTokensRequest) kdn.LookupTokensResponse {
	r, _, ok := g.begin(req.Envelope, req.Target, kdn.CapTokenLookup)
	if ok {
		r = gateway.Refuse(r, gateway.Refusal{Outcome: kdn.OutcomeUnsupported, Message: gateway.MsgUnsupported})
	}
	return kdn.LookupTokensResponse(r)
}
