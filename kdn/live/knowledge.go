package live

import (
	"context"
	"errors"
	"strings"

	"github.com/kvca/kvca/kdn"
)

// msgKnowledgeIncompatible answers a knowledge request of another runtime.
const msgKnowledgeIncompatible = "knowledge runtime profile is incompatible"

// knowledgeReply starts the answer to a knowledge request: envelope copied
// from the request, fresh timestamp, success; refused=true when the
// request is for another runtime than v1.
func (g *Gateway) knowledgeReply(env kdn.Envelope, id string) (kdn.KnowledgeResponse, bool) {
	r := kdn.KnowledgeResponse{
		Envelope: kdn.Envelope{
			ContractVersion: kdn.KDNContractVersion,
			RuntimeProfile:  env.RuntimeProfile,
			RequestID:       env.RequestID,
			CorrelationID:   env.CorrelationID,
			Timestamp:       g.now(),
		},
		Outcome:     kdn.OutcomeSuccess,
		KnowledgeID: kdn.Some(id),
		Artifacts:   []kdn.CacheArtifact{},
	}
	if env.RuntimeProfile != kdn.ProfileV1 {
		return knowledgeFail(r, kdn.OutcomeIncompatible, msgKnowledgeIncompatible), false
	}
	return r, true
}

func knowledgeFail(r kdn.KnowledgeResponse, o kdn.OutcomeCode, msg string) kdn.KnowledgeResponse {
	r.Outcome = o
	r.Error = kdn.Some(kdn.NewErrorDetail(o, msg))
	return r
}

// knowledgeErr maps a catalog error to its outcome; the messages are
// fixed texts, safe for the wire.
func knowledgeErr(r kdn.KnowledgeResponse, err error) kdn.KnowledgeResponse {
	switch {
	case errors.Is(err, errUnknownKnowledge), errors.Is(err, errUnknownRevision):
		return knowledgeFail(r, kdn.OutcomeStale, err.Error())
	case errors.Is(err, errRegistered):
		return knowledgeFail(r, kdn.OutcomeIdempotencyConflict, err.Error())
	}
	f := knowledgeFail(r, kdn.OutcomeFailed, errPersist.Error())
	e := f.Error.Value()
	e.Retryable = true
	f.Error = kdn.Some(e)
	return f
}

// withArtifacts fills the current revision's artifact(s) and a list.
func withArtifacts(r kdn.KnowledgeResponse, current, list []*prefixInfo) kdn.KnowledgeResponse {
	if len(current) > 0 {
		r.Artifact = kdn.Some(current[0].artifact.Clone())
	}
	for _, p := range list {
		r.Artifacts = append(r.Artifacts, p.artifact.Clone())
	}
	return r
}

// RegisterKnowledge implements gateway.KnowledgeService. Registering the
// same descriptor again succeeds (clients may retry); another revision of
// a registered item is an idempotency conflict (use update).
func (g *Gateway) RegisterKnowledge(_ context.Context, req kdn.RegisterKnowledgeRequest) kdn.RegisterKnowledgeResponse {
	r, ok := g.knowledgeReply(req.Envelope, req.KnowledgeID)
	if !ok {
		return r
	}
	if _, err := g.cat.register(req.KnowledgeID, req.Revision, req.ContentReference, r.Timestamp); err != nil {
		return knowledgeErr(r, err)
	}
	cur, _, _ := g.cat.resolve(req.KnowledgeID)
	return withArtifacts(r, cur, cur)
}

// UpdateKnowledge implements gateway.KnowledgeService: the revision
// becomes current; a new one needs its prefix uploaded before it has an
// artifact.
func (g *Gateway) UpdateKnowledge(_ context.Context, req kdn.UpdateKnowledgeRequest) kdn.UpdateKnowledgeResponse {
	r, ok := g.knowledgeReply(req.Envelope, req.KnowledgeID)
	if !ok {
		return r
	}
	if _, err := g.cat.update(req.KnowledgeID, req.Revision, req.ContentReference, r.Timestamp); err != nil {
		return knowledgeErr(r, err)
	}
	cur, _, _ := g.cat.resolve(req.KnowledgeID)
	return withArtifacts(r, cur, cur)
}

// ResolveKnowledge implements gateway.KnowledgeService: the current
// revision's artifact (none until its prefix is uploaded).
func (g *Gateway) ResolveKnowledge(_ context.Context, req kdn.ResolveKnowledgeRequest) kdn.ResolveKnowledgeResponse {
	r, ok := g.knowledgeReply(req.Envelope, req.KnowledgeID)
	if !ok {
		return r
	}
	cur, _, err := g.cat.resolve(req.KnowledgeID)
	if err != nil {
		return knowledgeErr(r, err)
	}
	return withArtifacts(r, cur, cur)
}

// ListCompatibleArtifacts implements gateway.KnowledgeService: the
// artifacts of every revision that has a prefix, oldest revision first;
// all of them belong to this deployment's profile.
func (g *Gateway) ListCompatibleArtifacts(_ context.Context, req kdn.ListCompatibleArtifactsRequest) kdn.ListCompatibleArtifactsResponse {
	r, ok := g.knowledgeReply(req.Envelope, req.KnowledgeID)
	if !ok {
		return r
	}
	cur, all, err := g.cat.resolve(req.KnowledgeID)
	if err != nil {
		return knowledgeErr(r, err)
	}
	return withArtifacts(r, cur, all)
}

// QueryArtifactCompatibility implements gateway.KnowledgeService: an
// artifact is compatible when it is one this deployment derived from a
// registered prefix (same identity, hence same profiles and block size).
func (g *Gateway) QueryArtifactCompatibility(_ context.Context, req kdn.QueryArtifactCompatibilityRequest) kdn.QueryArtifactCompatibilityResponse {
	r, ok := g.knowledgeReply(req.Envelope, req.Artifact.KnowledgeID)
	if !ok {
		return r
	}
	p, known := g.cat.artifact(req.Artifact.ID())
	r.Compatible = kdn.Some(known)
	if known {
		r.Artifact = kdn.Some(p.artifact.Clone())
	}
	return r
}

// ReportRequestOutcome implements gateway.KnowledgeService: the report is
// counted per knowledge item and outcome (see the prefix admin route).
func (g *Gateway) ReportRequestOutcome(_ context.Context, req kdn.ReportRequestOutcomeRequest) kdn.ReportRequestOutcomeResponse {
	r, ok := g.knowledgeReply(req.Envelope, req.KnowledgeID)
	if !ok {
		return r
	}
	if err := g.cat.report(req.KnowledgeID, req.Outcome); err != nil {
		return knowledgeErr(r, err)
	}
	g.log.Debug("kdn: request outcome reported", "knowledge_id", strings.ToValidUTF8(req.KnowledgeID, "?"), "outcome", string(req.Outcome))
	return r
}
