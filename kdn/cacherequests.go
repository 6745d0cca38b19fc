package kdn

// VersionedMessage is a bare envelope. GetLMCacheEndpointsRequest has this
// shape: discovery is untargeted, so target fields are unknown keys there.
type VersionedMessage struct {
	Envelope
}

func decodeVersioned(d *decoder, v jvalue, path string) (VersionedMessage, *ValidationError) {
	o := d.object(v, path, envelopeKeys()...)
	m := VersionedMessage{Envelope: decodeEnvelope(o)}
	return m, o.err
}

func (m VersionedMessage) validate(path string) *ValidationError {
	c := checker{base: path}
	m.Envelope.check(&c)
	return c.err
}

func (m VersionedMessage) write(w *jw) {
	w.objStart()
	m.Envelope.write(w)
	w.objEnd()
}

// GatewayTargetedRequest is an envelope plus a gateway target (§3.3).
// GetTierAndAdapterSummaryRequest and GetMaintenanceStatusRequest have this
// shape.
type GatewayTargetedRequest struct {
	Envelope
	Target
}

func decodeTargeted(d *decoder, v jvalue, path string) (GatewayTargetedRequest, *ValidationError) {
	o := d.object(v, path, keys(envelopeKeys(), targetKeys())...)
	m := GatewayTargetedRequest{Envelope: decodeEnvelope(o), Target: decodeTarget(o)}
	return m, o.err
}

func (m GatewayTargetedRequest) validate(path string) *ValidationError {
	c := checker{base: path}
	m.Envelope.check(&c)
	m.Target.check(&c, m.RuntimeProfile)
	return c.err
}

func (m GatewayTargetedRequest) write(w *jw) {
	w.objStart()
	m.Envelope.write(w)
	m.Target.write(w)
	w.objEnd()
}

// ArtifactRequest targets one artifact on a gateway. LookupArtifactRequest
// and GetCacheObservationRequest have this shape.
type ArtifactRequest struct {
	Envelope
	Target
	ArtifactID string
}

func decodeArtifactRequest(d *decoder, v jvalue, path string) (ArtifactRequest, *ValidationError) {
	o := d.object(v, path, keys(envelopeKeys(), targetKeys(), []string{"artifact_id"})...)
	m := ArtifactRequest{Envelope: decodeEnvelope(o), Target: decodeTarget(o), ArtifactID: o.str("artifact_id")}
	return m, o.err
}

func (m ArtifactRequest) validate(path string) *ValidationError {
	c := checker{base: path}
	m.Envelope.check(&c)
	m.Target.check(&c, m.RuntimeProfile)
	c.pattern("artifact_id", m.ArtifactID, prefixArtifact)
	return c.err
}

func (m ArtifactRequest) write(w *jw) {
	w.objStart()
	m.Envelope.write(w)
	m.Target.write(w)
	w.key("artifact_id")
	w.str(m.ArtifactID)
	w.objEnd()
}

// LookupTokensRequest asks how much of a token sequence is cached.
type LookupTokensRequest struct {
	Envelope
	Target
	Tokens TokenInput
}

func decodeLookupTokens(d *decoder, v jvalue, path string) (LookupTokensRequest, *ValidationError) {
	o := d.object(v, path, keys(envelopeKeys(), targetKeys(), []string{"tokens"})...)
	m := LookupTokensRequest{Envelope: decodeEnvelope(o), Target: decodeTarget(o), Tokens: nested(o, "tokens", decodeTokenInput)}
	return m, o.err
}

func (m LookupTokensRequest) validate(path string) *ValidationError {
	c := checker{base: path}
	m.Envelope.check(&c)
	m.Target.check(&c, m.RuntimeProfile)
	c.sub(m.Tokens.validate(c.at("tokens")))
	return c.err
}

func (m LookupTokensRequest) write(w *jw) {
	w.objStart()
	m.Envelope.write(w)
	m.Target.write(w)
	w.key("tokens")
	m.Tokens.write(w)
	w.objEnd()
}

// OperationIntentRequest asks for a write operation on an artifact. The
// five Create*IntentRequest types have this shape; the operation kind is
// carried only by the type.
type OperationIntentRequest struct {
	Envelope
	Target
	ArtifactID     string
	IdempotencyKey string
}

func decodeIntent(d *decoder, v jvalue, path string) (OperationIntentRequest, *ValidationError) {
	o := d.object(v, path, keys(envelopeKeys(), targetKeys(), []string{"artifact_id", "idempotency_key"})...)
	m := OperationIntentRequest{
		Envelope:       decodeEnvelope(o),
		Target:         decodeTarget(o),
		ArtifactID:     o.str("artifact_id"),
		IdempotencyKey: o.str("idempotency_key"),
	}
	return m, o.err
}

func (m OperationIntentRequest) validate(path string) *ValidationError {
	c := checker{base: path}
	m.Envelope.check(&c)
	m.Target.check(&c, m.RuntimeProfile)
	c.pattern("artifact_id", m.ArtifactID, prefixArtifact)
	c.min1("idempotency_key", m.IdempotencyKey)
	return c.err
}

func (m OperationIntentRequest) write(w *jw) {
	w.objStart()
	m.Envelope.write(w)
	m.Target.write(w)
	w.key("artifact_id")
	w.str(m.ArtifactID)
	w.key("idempotency_key")
	w.str(m.IdempotencyKey)
	w.objEnd()
}

// TaskRequest names one operation; GetOperationStatusRequest and
// CancelOperationRequest have this shape.
type TaskRequest struct {
	Envelope
	Target
	TaskID string
}

func decodeTaskRequest(d *decoder, v jvalue, path string) (TaskRequest, *ValidationError) {
	o := d.object(v, path, keys(envelopeKeys(), targetKeys(), []string{"task_id"})...)
	m := TaskRequest{Envelope: decodeEnvelope(o), Target: decodeTarget(o), TaskID: o.str("task_id")}
	return m, o.err
}

func (m TaskRequest) validate(path string) *ValidationError {
	c := checker{base: path}
	m.Envelope.check(&c)
	m.Target.check(&c, m.RuntimeProfile)
	c.pattern("task_id", m.TaskID, prefixOperation)
	return c.err
}

func (m TaskRequest) write(w *jw) {
	w.objStart()
	m.Envelope.write(w)
	m.Target.write(w)
	w.key("task_id")
	w.str(m.TaskID)
	w.objEnd()
}
