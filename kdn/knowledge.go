package kdn

import "slices"

// KnowledgeDescriptor describes a knowledge item and its revision (§5).
// RegisterKnowledgeRequest and UpdateKnowledgeRequest share its shape.
type KnowledgeDescriptor struct {
	Envelope
	KnowledgeID      string
	Revision         string
	ContentReference Opt[string]
}

func decodeKnowledgeDescriptor(d *decoder, v jvalue, path string) (KnowledgeDescriptor, *ValidationError) {
	o := d.object(v, path, append(envelopeKeys(), "knowledge_id", "revision", "content_reference")...)
	k := KnowledgeDescriptor{
		Envelope:         decodeEnvelope(o),
		KnowledgeID:      o.str("knowledge_id"),
		Revision:         o.strDef("revision", "1"),
		ContentReference: o.strOpt("content_reference"),
	}
	return k, o.err
}

func (k KnowledgeDescriptor) validate(path string) *ValidationError {
	c := checker{base: path}
	k.Envelope.check(&c)
	c.min1("knowledge_id", k.KnowledgeID)
	c.min1("revision", k.Revision)
	return c.err
}

func (k KnowledgeDescriptor) write(w *jw) {
	w.objStart()
	k.Envelope.write(w)
	w.key("knowledge_id")
	w.str(k.KnowledgeID)
	w.key("revision")
	w.str(k.Revision)
	w.key("content_reference")
	w.optStr(k.ContentReference)
	w.objEnd()
}

// KnowledgeRequest names one knowledge item; ResolveKnowledgeRequest and
// ListCompatibleArtifactsRequest share its shape.
type KnowledgeRequest struct {
	Envelope
	KnowledgeID string
}

func decodeKnowledgeRequest(d *decoder, v jvalue, path string) (KnowledgeRequest, *ValidationError) {
	o := d.object(v, path, append(envelopeKeys(), "knowledge_id")...)
	k := KnowledgeRequest{Envelope: decodeEnvelope(o), KnowledgeID: o.str("knowledge_id")}
	return k, o.err
}

func (k KnowledgeRequest) validate(path string) *ValidationError {
	c := checker{base: path}
	k.Envelope.check(&c)
	c.min1("knowledge_id", k.KnowledgeID)
	return c.err
}

func (k KnowledgeRequest) write(w *jw) {
	w.objStart()
	k.Envelope.write(w)
	w.key("knowledge_id")
	w.str(k.KnowledgeID)
	w.objEnd()
}

// QueryArtifactCompatibilityRequest asks whether an artifact is usable.
type QueryArtifactCompatibilityRequest struct {
	Envelope
	Artifact CacheArtifact
}

func decodeQueryCompat(d *decoder, v jvalue, path string) (QueryArtifactCompatibilityRequest, *ValidationError) {
	o := d.object(v, path, append(envelopeKeys(), "artifact")...)
	q := QueryArtifactCompatibilityRequest{Envelope: decodeEnvelope(o), Artifact: nested(o, "artifact", decodeArtifact)}
	return q, o.err
}

func (q QueryArtifactCompatibilityRequest) validate(path string) *ValidationError {
	c := checker{base: path}
	q.Envelope.check(&c)
	c.sub(q.Artifact.validate(c.at("artifact")))
	return c.err
}

func (q QueryArtifactCompatibilityRequest) write(w *jw) {
	w.objStart()
	q.Envelope.write(w)
	w.key("artifact")
	q.Artifact.write(w)
	w.objEnd()
}

// ReportRequestOutcomeRequest reports how a request that used knowledge went.
type ReportRequestOutcomeRequest struct {
	Envelope
	KnowledgeID string
	Outcome     OutcomeCode
	OperationID Opt[string] // free text: no pattern on this field
}

func decodeReportOutcome(d *decoder, v jvalue, path string) (ReportRequestOutcomeRequest, *ValidationError) {
	o := d.object(v, path, append(envelopeKeys(), "knowledge_id", "outcome", "operation_id")...)
	r := ReportRequestOutcomeRequest{
		Envelope:    decodeEnvelope(o),
		KnowledgeID: o.str("knowledge_id"),
		Outcome:     OutcomeCode(o.str("outcome")),
		OperationID: o.strOpt("operation_id"),
	}
	return r, o.err
}

func (r ReportRequestOutcomeRequest) validate(path string) *ValidationError {
	c := checker{base: path}
	r.Envelope.check(&c)
	c.min1("knowledge_id", r.KnowledgeID)
	c.enum(r.Outcome.valid(), "outcome")
	return c.err
}

func (r ReportRequestOutcomeRequest) write(w *jw) {
	w.objStart()
	r.Envelope.write(w)
	w.key("knowledge_id")
	w.str(r.KnowledgeID)
	w.key("outcome")
	w.str(string(r.Outcome))
	w.key("operation_id")
	w.optStr(r.OperationID)
	w.objEnd()
}

// KnowledgeResponse answers every knowledge-service request; the six
// *Response names are aliases of it (§5). Only O1–O3 apply: nested
// artifacts are not checked against the envelope.
type KnowledgeResponse struct {
	Envelope
	Outcome     OutcomeCode
	KnowledgeID Opt[string]
	Artifact    Opt[CacheArtifact]
	Artifacts   []CacheArtifact
	Compatible  Opt[bool]
	Error       Opt[ContractErrorDetail]
}

// Aliases of KnowledgeResponse, one per knowledge operation.
type (
	RegisterKnowledgeResponse          = KnowledgeResponse
	UpdateKnowledgeResponse            = KnowledgeResponse
	ResolveKnowledgeResponse           = KnowledgeResponse
	ListCompatibleArtifactsResponse    = KnowledgeResponse
	QueryArtifactCompatibilityResponse = KnowledgeResponse
	ReportRequestOutcomeResponse       = KnowledgeResponse
)

// Clone returns a copy that shares no slices with k.
func (k KnowledgeResponse) Clone() KnowledgeResponse {
	k.Artifacts = slices.Clone(k.Artifacts)
	for i := range k.Artifacts {
		k.Artifacts[i] = k.Artifacts[i].Clone()
	}
	if a, ok := k.Artifact.Get(); ok {
		k.Artifact = Some(a.Clone())
	}
	return k
}

func decodeKnowledgeResponse(d *decoder, v jvalue, path string) (KnowledgeResponse, *ValidationError) {
	o := d.object(v, path, append(envelopeKeys(), "outcome", "knowledge_id", "artifact", "artifacts", "compatible", "error")...)
	k := KnowledgeResponse{
		Envelope:    decodeEnvelope(o),
		Outcome:     OutcomeCode(o.strDef("outcome", string(OutcomeSuccess))),
		KnowledgeID: o.strOpt("knowledge_id"),
		Artifact:    nestedOpt(o, "artifact", decodeArtifact),
		Artifacts:   listDef(o, "artifacts", decodeArtifact),
		Compatible:  o.boolOpt("compatible"),
		Error:       nestedOpt(o, "error", decodeErrorDetail),
	}
	return k, o.err
}

func (k KnowledgeResponse) validate(path string) *ValidationError {
	c := checker{base: path}
	k.Envelope.check(&c)
	if a, ok := k.Artifact.Get(); ok {
		c.sub(a.validate(c.at("artifact")))
	}
	for i, a := range k.Artifacts {
		c.sub(a.validate(c.at(indexPath("artifacts", i))))
	}
	if e, ok := k.Error.Get(); ok {
		c.sub(e.validate(c.at("error")))
	}
	checkOutcome(&c, k.Outcome, k.Error)
	return c.err
}

func (k KnowledgeResponse) write(w *jw) {
	w.objStart()
	k.Envelope.write(w)
	w.key("outcome")
	w.str(string(k.Outcome))
	w.key("knowledge_id")
	w.optStr(k.KnowledgeID)
	w.key("artifact")
	optObj(w, k.Artifact, CacheArtifact.write)
	w.key("artifacts")
	w.arrStart()
	for _, a := range k.Artifacts {
		a.write(w)
	}
	w.arrEnd()
	w.key("compatible")
	w.optBool(k.Compatible)
	w.key("error")
	optObj(w, k.Error, ContractErrorDetail.write)
	w.objEnd()
}
