package kdn

import "time"

// CacheOperationTask is the provenance and state of one asynchronous cache
// operation (§7.4). Endpoint fields are both set or both null.
type CacheOperationTask struct {
	TaskID                 string
	IdempotencyKey         string
	Operation              CacheOperationType
	ArtifactID             string
	RuntimeProfile         RuntimeProfile
	CompatibilityProfileID string
	GatewayProfile         GatewayProfile
	EndpointID             Opt[string]
	EndpointGeneration     Opt[int64]
	State                  CacheOperationState
	Attempt                int64
	CreatedAt              time.Time
	UpdatedAt              time.Time
}

func decodeTask(d *decoder, v jvalue, path string) (CacheOperationTask, *ValidationError) {
	o := d.object(v, path, "task_id", "idempotency_key", "operation", "artifact_id", "runtime_profile",
		"compatibility_profile_id", "gateway_profile", "endpoint_id", "endpoint_generation", "state",
		"attempt", "created_at", "updated_at")
	t := CacheOperationTask{}
	if v, ok := o.withDefault("task_id"); ok {
		t.TaskID = o.asString("task_id", v)
	} else if o.err == nil {
		t.TaskID = d.randomID(prefixOperation)
	}
	t.IdempotencyKey = o.str("idempotency_key")
	t.Operation = CacheOperationType(o.str("operation"))
	t.ArtifactID = o.str("artifact_id")
	t.RuntimeProfile = o.profile("runtime_profile", false)
	t.CompatibilityProfileID = o.str("compatibility_profile_id")
	t.GatewayProfile = GatewayProfile(o.str("gateway_profile"))
	t.EndpointID = o.strOpt("endpoint_id")
	t.EndpointGeneration = o.intOpt("endpoint_generation")
	t.State = CacheOperationState(o.strDef("state", string(StatePending)))
	t.Attempt = o.intDef("attempt", 0)
	t.CreatedAt = o.timeNow("created_at")
	t.UpdatedAt = o.timeNow("updated_at")
	return t, o.err
}

func (t CacheOperationTask) validate(path string) *ValidationError {
	c := checker{base: path}
	c.pattern("task_id", t.TaskID, prefixOperation)
	c.nonBlank("idempotency_key", t.IdempotencyKey)
	c.enum(t.Operation.valid(), "operation")
	c.pattern("artifact_id", t.ArtifactID, prefixArtifact)
	c.profile("runtime_profile", t.RuntimeProfile)
	c.nonBlank("compatibility_profile_id", t.CompatibilityProfileID)
	c.enum(t.GatewayProfile.valid(), "gateway_profile")
	if id, ok := t.EndpointID.Get(); ok {
		c.pattern("endpoint_id", id, prefixEndpoint)
	}
	if g, ok := t.EndpointGeneration.Get(); ok {
		c.atLeast("endpoint_generation", g, 1)
	}
	c.enum(t.State.valid(), "state")
	c.atLeast("attempt", t.Attempt, 0)
	c.utc("created_at", t.CreatedAt)
	c.utc("updated_at", t.UpdatedAt)
	if !c.ok() {
		return c.err
	}
	c.rule(!t.UpdatedAt.Before(t.CreatedAt), "updated_at", "task:updated_after_created",
		"updated_at must not be earlier than created_at")
	c.rule(t.EndpointID.IsSet() == t.EndpointGeneration.IsSet(), "endpoint_generation", "task:endpoint_pair",
		"endpoint_id and endpoint_generation must be both present or both null")
	c.rule(!(t.RuntimeProfile == ProfileV1 && t.Operation.IsWrite() && t.GatewayProfile == GatewayLegacy),
		"gateway_profile", "task:v1_write_on_legacy", "v1 write operations cannot target legacy_gateway")
	return c.err
}

func (t CacheOperationTask) write(w *jw) {
	w.objStart()
	w.key("task_id")
	w.str(t.TaskID)
	w.key("idempotency_key")
	w.str(t.IdempotencyKey)
	w.key("operation")
	w.str(string(t.Operation))
	w.key("artifact_id")
	w.str(t.ArtifactID)
	w.key("runtime_profile")
	w.str(string(t.RuntimeProfile))
	w.key("compatibility_profile_id")
	w.str(t.CompatibilityProfileID)
	w.key("gateway_profile")
	w.str(string(t.GatewayProfile))
	w.key("endpoint_id")
	w.optStr(t.EndpointID)
	w.key("endpoint_generation")
	w.optInt(t.EndpointGeneration)
	w.key("state")
	w.str(string(t.State))
	w.key("attempt")
	w.int(t.Attempt)
	w.key("created_at")
	w.time(t.CreatedAt)
	w.key("updated_at")
	w.time(t.UpdatedAt)
	w.objEnd()
}

// TransitionError is the error type of Advance. It is a constant string type
// so the sentinel below is immutable.
type TransitionError string

func (e TransitionError) Error() string { return string(e) }

// ErrIllegalTransition is returned by Advance for a move the §7.4 lifecycle
// does not allow.
const ErrIllegalTransition = TransitionError("kdn: illegal task state transition")

// Advance returns the task moved to state `to` at `now`, following the §7.4
// lifecycle: pending → running|cancelled; running → succeeded|retry_wait|
// failed|cancelled; retry_wait → running|failed|cancelled; terminal states
// have no exits. Asking for the current state is a no-op; entering running
// counts an attempt; updated_at never moves backwards.
func (t CacheOperationTask) Advance(to CacheOperationState, now time.Time) (CacheOperationTask, error) {
	if to == t.State {
		return t, nil
	}
	allowed := false
	switch t.State {
	case StatePending:
		allowed = to == StateRunning || to == StateCancelled
	case StateRunning:
		allowed = to == StateSucceeded || to == StateRetryWait || to == StateFailed || to == StateCancelled
	case StateRetryWait:
		allowed = to == StateRunning || to == StateFailed || to == StateCancelled
	}
	if !allowed {
		return t, ErrIllegalTransition
	}
	if to == StateRunning {
		t.Attempt++
	}
	t.State = to
	if now = wireTime(now.UTC()); now.After(t.UpdatedAt) {
		t.UpdatedAt = now
	}
	return t, nil
}
