package live

import (
	"context"
	"time"

	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
)

// Wire messages of the operation calls.
const (
	msgConflict      = "idempotency key was used for a different logical request"
	msgTaskNotFound  = "operation was not found"
	msgTaskOtherGen  = "operation belongs to an earlier endpoint generation"
	msgTaskOtherDest = "operation belongs to another endpoint"
	msgCancelled     = "operation cancelled"
)

// CreatePrefetchIntent implements gateway.Gateway: warm the prefix on the
// endpoint unless it already holds all of it.
func (g *Gateway) CreatePrefetchIntent(_ context.Context, req kdn.CreatePrefetchIntentRequest) kdn.CreatePrefetchIntentResponse {
	return kdn.CreatePrefetchIntentResponse(g.intent(kdn.OperationIntentRequest(req), kdn.OpPrefetch, kdn.CapWarmPrefetch))
}

// CreateRebuildIntent implements gateway.Gateway: warm the prefix again
// even if the table says the endpoint holds it (it may have evicted it).
func (g *Gateway) CreateRebuildIntent(_ context.Context, req kdn.CreateRebuildIntentRequest) kdn.CreateRebuildIntentResponse {
	return kdn.CreateRebuildIntentResponse(g.intent(kdn.OperationIntentRequest(req), kdn.OpRebuild, kdn.CapWarmPrefetch))
}

// CreatePinIntent implements gateway.Gateway: keep the endpoint's
// locations of the prefix from expiring, within --max-pinned-blocks.
func (g *Gateway) CreatePinIntent(_ context.Context, req kdn.CreatePinIntentRequest) kdn.CreatePinIntentResponse {
	return kdn.CreatePinIntentResponse(g.intent(kdn.OperationIntentRequest(req), kdn.OpPin, kdn.CapPinUnpin))
}

// CreateUnpinIntent implements gateway.Gateway: the locations age from
// their last access again.
func (g *Gateway) CreateUnpinIntent(_ context.Context, req kdn.CreateUnpinIntentRequest) kdn.CreateUnpinIntentResponse {
	return kdn.CreateUnpinIntentResponse(g.intent(kdn.OperationIntentRequest(req), kdn.OpUnpin, kdn.CapPinUnpin))
}

// CreateClearIntent implements gateway.Gateway: forget the endpoint's
// locations of the prefix (see clearWork for how, and why it can wait).
func (g *Gateway) CreateClearIntent(_ context.Context, req kdn.CreateClearIntentRequest) kdn.CreateClearIntentResponse {
	return kdn.CreateClearIntentResponse(g.intent(kdn.OperationIntentRequest(req), kdn.OpClear, kdn.CapObjectDeletion))
}

// intent is the idempotent create logic shared by the five intents. Pin
// and unpin are table updates done on the spot, so their task is already
// finished; the others start background work and answer a pending task.
func (g *Gateway) intent(req kdn.OperationIntentRequest, op kdn.CacheOperationType, gate kdn.Capability) kdn.CacheServiceResponse {
	r, b, ok := g.begin(req.Envelope, req.Target, gate)
	if !ok {
		return r
	}
	p, known := g.cat.artifact(req.ArtifactID)
	if !known {
		return refuse(r, kdn.OutcomeStale, msgArtifactUnknown)
	}
	want := logicalTarget{
		op: op, artifactID: req.ArtifactID, endpointID: req.EndpointID,
		generation: req.EndpointGeneration, runtime: req.RuntimeProfile, compat: req.CompatibilityProfileID,
	}
	task, f, res := g.tasks.create(req.IdempotencyKey, want, func() newEntry {
		return g.start(op, p, b, newTask(req, op, r.Timestamp))
	})
	switch res {
	case conflict:
		return refuse(r, kdn.OutcomeIdempotencyConflict, msgConflict)
	case refused:
		r = gateway.Refuse(r, f)
		if task.TaskID != "" {
			r.Operation = kdn.Some(task)
		}
		return r
	}
	r.Operation = kdn.Some(task)
	return r
}

func newTask(req kdn.OperationIntentRequest, op kdn.CacheOperationType, now time.Time) kdn.CacheOperationTask {
	return kdn.CacheOperationTask{
		TaskID:                 kdn.NewTaskID(),
		IdempotencyKey:         req.IdempotencyKey,
		Operation:              op,
		ArtifactID:             req.ArtifactID,
		RuntimeProfile:         req.RuntimeProfile,
		CompatibilityProfileID: req.CompatibilityProfileID,
		GatewayProfile:         kdn.GatewayUnknownFuture,
		EndpointID:             kdn.Some(req.EndpointID),
		EndpointGeneration:     kdn.Some(req.EndpointGeneration),
		State:                  kdn.StatePending,
		CreatedAt:              now,
		UpdatedAt:              now,
	}
}

// GetOperationStatus implements gateway.Gateway.
func (g *Gateway) GetOperationStatus(_ context.Context, req kdn.GetOperationStatusRequest) kdn.GetOperationStatusResponse {
	r, _, ok := g.begin(req.Envelope, req.Target, kdn.CapOperationStatus)
	if !ok {
		return kdn.GetOperationStatusResponse(r)
	}
	task, tgt, found := g.tasks.get(req.TaskID)
	if f, bad := taskRefusal(found, tgt, kdn.TaskRequest(req)); bad {
		return kdn.GetOperationStatusResponse(gateway.Refuse(r, f))
	}
	r.Operation = kdn.Some(task)
	return kdn.GetOperationStatusResponse(r)
}

// CancelOperation implements gateway.Gateway: live work is stopped and the
// task cancelled (outcome cancelled); finished work is a success no-op.
func (g *Gateway) CancelOperation(_ context.Context, req kdn.CancelOperationRequest) kdn.CancelOperationResponse {
	r, _, ok := g.begin(req.Envelope, req.Target, kdn.CapCancellation)
	if !ok {
		return kdn.CancelOperationResponse(r)
	}
	_, tgt, found := g.tasks.get(req.TaskID)
	if f, bad := taskRefusal(found, tgt, kdn.TaskRequest(req)); bad {
		return kdn.CancelOperationResponse(gateway.Refuse(r, f))
	}
	task, live, _ := g.tasks.cancel(req.TaskID, r.Timestamp)
	r.Operation = kdn.Some(task)
	if live {
		r = refuse(r, kdn.OutcomeCancelled, msgCancelled)
	}
	return kdn.CancelOperationResponse(r)
}

// taskRefusal keeps a task from being shown under another target: a
// response's operation must carry the response's own target (R12).
func taskRefusal(found bool, tgt logicalTarget, req kdn.TaskRequest) (gateway.Refusal, bool) {
	switch {
	case !found:
		return gateway.Refusal{Outcome: kdn.OutcomeStale, Message: msgTaskNotFound}, true
	case tgt.endpointID != req.EndpointID || tgt.compat != req.CompatibilityProfileID || tgt.runtime != req.RuntimeProfile:
		return gateway.Refusal{Outcome: kdn.OutcomeIncompatible, Message: msgTaskOtherDest}, true
	case tgt.generation != req.EndpointGeneration:
		return gateway.Refusal{Outcome: kdn.OutcomeStale, Message: msgTaskOtherGen}, true
	}
	return gateway.Refusal{}, false
}
