package epp

import (
	"sync"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvca/kvca/h2grpc"
)

// health is the gRPC health service (grpc.health.v1) with the protocol's
// services: liveness (and the server as a whole, "") SERVING while the
// process answers; readiness and the ext_proc service as Proxy.Ready
// says. Check reads readiness at the time of the check; Watch is told of
// changes as refresh finds them. After shutdown every service is
// NOT_SERVING and stays so.
type health struct {
	ready func() bool

	mu       sync.Mutex
	statuses map[string]healthpb.HealthCheckResponse_ServingStatus
	watchers map[*healthWatch]struct{}
	down     bool
}

func newHealth(ready func() bool) *health {
	h := &health{ready: ready, watchers: map[*healthWatch]struct{}{}, statuses: map[string]healthpb.HealthCheckResponse_ServingStatus{
		"":              healthpb.HealthCheckResponse_SERVING,
		LivenessService: healthpb.HealthCheckResponse_SERVING,
	}}
	h.refresh()
	return h
}

// refresh reads readiness now and tells the watchers of a change.
func (h *health) refresh() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.safeReady() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down {
		return
	}
	h.setLocked(ReadinessService, st)
	h.setLocked(ExtProcService, st)
}

func (h *health) setLocked(service string, st healthpb.HealthCheckResponse_ServingStatus) {
	h.statuses[service] = st
	for w := range h.watchers {
		if w.service == service {
			w.tellLocked(st)
		}
	}
}

// shutdown makes every service NOT_SERVING, tells the watchers and ends
// their streams: a stopping server's watches would hold its stop.
func (h *health) shutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down = true
	for service := range h.statuses {
		h.setLocked(service, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	for w := range h.watchers {
		w.s.Finish(status.Error(codes.Unavailable, "the endpoint picker is stopping"))
	}
	clear(h.watchers)
}

// statusOf is a service's status; false for a service it does not know.
func (h *health) statusOf(service string) (healthpb.HealthCheckResponse_ServingStatus, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st, ok := h.statuses[service]
	return st, ok
}

// safeReady is Proxy.Ready with a panic taken as not ready: a health
// check runs outside any stream's recovery and must not end the process.
func (h *health) safeReady() (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return h.ready()
}

func sendHealth(s *h2grpc.Stream, st healthpb.HealthCheckResponse_ServingStatus) error {
	b, err := proto.Marshal(&healthpb.HealthCheckResponse{Status: st})
	if err != nil {
		return err
	}
	return s.Send(b)
}

func healthRequest(b []byte) (string, error) {
	var req healthpb.HealthCheckRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		return "", status.Error(codes.InvalidArgument, "malformed HealthCheckRequest")
	}
	return req.GetService(), nil
}

// healthCheck is one Check: the request, then the status once the
// client's side ends.
type healthCheck struct {
	h       *health
	s       *h2grpc.Stream
	service string
	asked   bool
}

func (h *health) check(s *h2grpc.Stream) h2grpc.Handler { return &healthCheck{h: h, s: s} }

func (c *healthCheck) Message(b []byte) error {
	if c.asked {
		return status.Error(codes.InvalidArgument, "Check takes one request")
	}
	service, err := healthRequest(b)
	c.service, c.asked = service, true
	return err
}

func (c *healthCheck) CloseSend() error {
	if !c.asked {
		return status.Error(codes.InvalidArgument, "Check without a request")
	}
	switch c.service {
	case ReadinessService, ExtProcService:
		c.h.refresh() // a probe right after the endpoints arrive sees them
	}
	st, ok := c.h.statusOf(c.service)
	if !ok {
		return status.Error(codes.NotFound, "unknown service")
	}
	if err := sendHealth(c.s, st); err != nil {
		return err
	}
	c.s.Finish(nil)
	return nil
}

func (c *healthCheck) Reset() {}

// healthWatch is one Watch: the status now, then each change, until the
// client goes or the server stops.
type healthWatch struct {
	h       *health
	s       *h2grpc.Stream
	service string
	last    healthpb.HealthCheckResponse_ServingStatus
	told    bool
}

func (h *health) watch(s *h2grpc.Stream) h2grpc.Handler { return &healthWatch{h: h, s: s} }

func (w *healthWatch) Message(b []byte) error {
	service, err := healthRequest(b)
	if err != nil {
		return err
	}
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down {
		return status.Error(codes.Unavailable, "the endpoint picker is stopping")
	}
	if w.told {
		return status.Error(codes.InvalidArgument, "Watch takes one request")
	}
	w.service = service
	st, ok := h.statuses[service]
	if !ok {
		st = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	}
	h.watchers[w] = struct{}{}
	w.tellLocked(st)
	return nil
}

// tellLocked sends st if it is news; h.mu is held, so the watch's
// messages go out in the order of the changes.
func (w *healthWatch) tellLocked(st healthpb.HealthCheckResponse_ServingStatus) {
	if w.told && st == w.last {
		return
	}
	w.told, w.last = true, st
	if sendHealth(w.s, st) != nil {
		delete(w.h.watchers, w)
	}
}

// CloseSend: the client sent its one request; the watch goes on.
func (w *healthWatch) CloseSend() error { return nil }

func (w *healthWatch) Reset() {
	w.h.mu.Lock()
	delete(w.h.watchers, w)
	w.h.mu.Unlock()
}
