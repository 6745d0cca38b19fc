package eppcheck_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvca/kvca/bench/eppcheck"
	"github.com/kvca/kvca/epp"
	"github.com/kvca/kvca/epp/epptest"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// kvca's picker, on a fake lifecycle, passes every check, its own
// included, and every exchange the checks made ended exactly once.
func TestKVCAPickerPasses(t *testing.T) {
	p := &epptest.Proxy{Fallbacks: 1}
	l := listen(t)
	s := epp.New(p, epp.Config{ReadyEvery: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	defer func() {
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	var progress bytes.Buffer
	res, err := eppcheck.Run(context.Background(), eppcheck.Config{
		Target: l.Addr().String(), Ready: p.SetEndpoints, Wait: 5 * time.Second, Out: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	var report bytes.Buffer
	if failed := eppcheck.Report(&report, res); failed != 0 || len(res) < 15 {
		t.Fatalf("%d of %d checks failed:\n%s", failed, len(res), report.String())
	}
	for _, lvl := range []string{eppcheck.Must, eppcheck.KVCA} {
		if !strings.Contains(report.String(), "PASS  "+lvl) {
			t.Errorf("no %s check in the report:\n%s", lvl, report.String())
		}
	}
	// The lifecycle saw what Envoy sent: each exchange ended once; the
	// ones the checks cancelled ended cancelled.
	deadline := time.Now().Add(5 * time.Second)
	for _, x := range p.Exchanges() {
		for x.Snapshot().Ends == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := x.Snapshot().Ends; n != 1 {
			t.Errorf("exchange %v: End called %d times", x.Headers[":path"], n)
		}
	}
	var completed, cancelled int
	for _, x := range p.Exchanges() {
		snap := x.Snapshot()
		if snap.Cancelled {
			cancelled++
		} else if snap.RespEnd {
			completed++
			if snap.Served == "" || snap.Status != 200 || len(snap.RespBody) == 0 {
				t.Errorf("completed exchange: status %d served %q, %d response bytes", snap.Status, snap.Served, len(snap.RespBody))
			}
		}
	}
	if completed < 4 || cancelled < 2 {
		t.Errorf("%d exchanges completed, %d cancelled; want at least 4 and 2", completed, cancelled)
	}
	if !strings.Contains(progress.String(), "mock model servers on") {
		t.Errorf("progress %q names no endpoints", progress.String())
	}
}

// deaf is a picker that breaks the protocol: it answers every message
// with an empty answer of its kind and is never ready.
type deaf struct {
	extprocv3.UnimplementedExternalProcessorServer
}

func (deaf) Process(s extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		r := &extprocv3.ProcessingResponse{}
		switch req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			r.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}
		case *extprocv3.ProcessingRequest_RequestBody:
			r.Response = &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}
		default:
			continue
		}
		if err := s.Send(r); err != nil {
			return err
		}
	}
}

// A picker that names no endpoint and is never ready fails, check by
// check, with the reason.
func TestBrokenPickerFails(t *testing.T) {
	l := listen(t)
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, deaf{})
	hs := health.NewServer()
	hs.SetServingStatus("liveness", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("readiness", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(l) }()
	defer gs.Stop()

	res, err := eppcheck.Run(context.Background(), eppcheck.Config{
		Target: l.Addr().String(), Wait: 300 * time.Millisecond, Timeout: time.Second, MustOnly: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var report bytes.Buffer
	failed := eppcheck.Report(&report, res)
	out := report.String()
	for _, want := range []string{
		"PASS  MUST  health: liveness is SERVING",
		"FAIL  MUST  health: readiness is SERVING",
		"FAIL  MUST  full-duplex: the pick",
		"FAIL  MUST  subset: an empty hint is answered 503",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "  kvca  ") {
		t.Errorf("MustOnly ran kvca's checks:\n%s", out)
	}
	if failed == 0 || failed == len(res) {
		t.Fatalf("%d of %d failed:\n%s", failed, len(res), out)
	}
}
