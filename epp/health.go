package epp

import (
	"context"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthService is grpc's health server with the protocol's services:
// liveness (and the server as a whole, "") SERVING while the process
// answers; readiness and the ext_proc service as Proxy.Ready says.
type healthService struct {
	*health.Server
	ready func() bool
}

func newHealthService(ready func() bool) *healthService {
	h := &healthService{Server: health.NewServer(), ready: ready}
	h.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	h.refresh()
	return h
}

// refresh reads readiness now. After Shutdown it changes nothing: grpc's
// server then keeps every service NOT_SERVING.
func (h *healthService) refresh() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.safeReady() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.SetServingStatus(ReadinessService, st)
	h.SetServingStatus(ExtProcService, st)
}

// Check reads readiness at the time of the check rather than as of the
// last poll, so a probe right after the endpoints arrive sees them.
func (h *healthService) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch req.GetService() {
	case ReadinessService, ExtProcService:
		h.refresh()
	}
	return h.Server.Check(ctx, req)
}

// safeReady is Proxy.Ready with a panic taken as not ready: a health
// check runs outside any stream's recovery and must not end the process.
func (h *healthService) safeReady() (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return h.ready()
}
