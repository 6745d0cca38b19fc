package epp_test

import (
	"context"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvca/kvca/epp"
	"github.com/kvca/kvca/epp/epptest"
)

func check(t *testing.T, c healthpb.HealthClient, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("check %q: %v", service, err)
	}
	return r.GetStatus()
}

// Liveness is SERVING from the start; readiness and the ext_proc service
// follow Proxy.Ready, at once for Check and within ReadyEvery for Watch.
func TestHealth(t *testing.T) {
	p := startPicker(t, &epptest.Proxy{}, epp.Config{ReadyEvery: 10 * time.Millisecond})
	c := healthpb.NewHealthClient(p.conn)
	serving, not := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	for svc, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
		"": serving, epp.LivenessService: serving, epp.ReadinessService: not, epp.ExtProcService: not,
	} {
		if got := check(t, c, svc); got != want {
			t.Errorf("%q: %v, want %v", svc, got, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: epp.ReadinessService})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != not {
		t.Fatalf("watch first: %v %v", r, err)
	}
	_ = p.proxy.SetEndpoints(pool)
	if r, err := w.Recv(); err != nil || r.GetStatus() != serving {
		t.Fatalf("watch after endpoints: %v %v", r, err)
	}
	for _, svc := range []string{epp.ReadinessService, epp.ExtProcService} {
		if got := check(t, c, svc); got != serving {
			t.Errorf("%q: %v with endpoints", svc, got)
		}
	}
	// Stopping says NOT_SERVING to watchers before streams close.
	go p.srv.GracefulStop()
	if r, err := w.Recv(); err == nil && r.GetStatus() != not {
		t.Fatalf("watch at stop: %v", r)
	}
}

// panicky's Ready panics, as a broken lifecycle might.
type panicky struct{ *epptest.Proxy }

func (panicky) Ready() bool { panic("not today") }

// A Ready that panics reads as not ready and the server goes on.
func TestHealthReadyPanics(t *testing.T) {
	p := &epptest.Proxy{}
	_, conn := startRaw(t, panicky{p})
	c := healthpb.NewHealthClient(conn)
	for range 2 {
		if got := check(t, c, epp.ReadinessService); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("readiness %v, want NOT_SERVING", got)
		}
	}
	if got := check(t, c, epp.LivenessService); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness %v after a panicking Ready", got)
	}
}
