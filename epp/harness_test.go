package epp_test

import (
	"context"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvca/kvca/epp"
	"github.com/kvca/kvca/epp/epptest"
)

// picker is an epp.Server on a loopback port with a fake proxy, and a
// client connection to it; both stop with the test.
type picker struct {
	t     *testing.T
	proxy *epptest.Proxy
	srv   *epp.Server
	conn  *grpc.ClientConn
}

func startPicker(t *testing.T, p *epptest.Proxy, cfg epp.Config) *picker {
	t.Helper()
	s, conn := startWith(t, p, cfg)
	return &picker{t: t, proxy: p, srv: s, conn: conn}
}

// startRaw serves any epp.Proxy with the default configuration.
func startRaw(t *testing.T, p epp.Proxy) (*epp.Server, *grpc.ClientConn) {
	t.Helper()
	return startWith(t, p, epp.Config{})
}

func startWith(t *testing.T, p epp.Proxy, cfg epp.Config) (*epp.Server, *grpc.ClientConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := epp.New(p, cfg)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, conn
}

// stream is one ext_proc stream as Envoy drives it.
type stream struct {
	t      *testing.T
	c      extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
}

func (p *picker) open() *stream {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	c, err := extprocv3.NewExternalProcessorClient(p.conn).Process(ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(cancel)
	return &stream{t: p.t, c: c, cancel: cancel}
}

func (s *stream) send(r *extprocv3.ProcessingRequest) {
	s.t.Helper()
	if err := s.c.Send(r); err != nil {
		s.t.Fatalf("send: %v", err)
	}
}

func (s *stream) recv() *extprocv3.ProcessingResponse {
	s.t.Helper()
	r, err := s.c.Recv()
	if err != nil {
		s.t.Fatalf("recv: %v", err)
	}
	return r
}

func modes(req, resp epp.BodyMode, noWait bool) *extprocv3.ProtocolConfiguration {
	return &extprocv3.ProtocolConfiguration{RequestBodyMode: req, ResponseBodyMode: resp, SendBodyWithoutWaitingForHeaderResponse: noWait}
}

func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func reqHeaders(pc *extprocv3.ProtocolConfiguration, md *corev3.Metadata, eos bool, kv ...string) *extprocv3.ProcessingRequest {
	base := []string{":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw", "content-type", "application/json"}
	return &extprocv3.ProcessingRequest{
		ProtocolConfig:  pc,
		MetadataContext: md,
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(append(base, kv...)...), EndOfStream: eos,
		}},
	}
}

func reqBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func respHeaders(served string, eos bool) *extprocv3.ProcessingRequest {
	var md *corev3.Metadata
	if served != "" {
		md = lbMetadata(epp.DestinationNamespace, epp.ServedKey, structpb.NewStringValue(served))
	}
	return &extprocv3.ProcessingRequest{
		MetadataContext: md,
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(":status", "200", "content-type", "text/event-stream"), EndOfStream: eos,
		}},
	}
}

func respBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func lbMetadata(ns, key string, v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ns: {Fields: map[string]*structpb.Value{key: v}}}}
}

// destination returns the pick a response carries: the header mutation's
// value and the dynamic metadata's, which must be equal.
func destination(t *testing.T, r *extprocv3.ProcessingResponse, c *extprocv3.CommonResponse) string {
	t.Helper()
	var hdr string
	for _, h := range c.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == epp.DestinationHeader {
			hdr = string(h.GetHeader().GetRawValue())
			if h.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
				t.Errorf("destination header action %v, want overwrite", h.GetAppendAction())
			}
		}
	}
	md := r.GetDynamicMetadata().GetFields()[epp.DestinationNamespace].GetStructValue().GetFields()[epp.DestinationHeader].GetStringValue()
	if hdr == "" || hdr != md {
		t.Fatalf("pick: header %q, metadata %q; want equal and set", hdr, md)
	}
	return hdr
}

func waitEnded(t *testing.T, x *epptest.Exchange) epptest.Snapshot {
	t.Helper()
	select {
	case <-x.Ended():
	case <-time.After(5 * time.Second):
		t.Fatal("End not called")
	}
	// End is called once; give a second call, if any, a moment to show.
	time.Sleep(20 * time.Millisecond)
	return x.Snapshot()
}

func onlyExchange(t *testing.T, p *epptest.Proxy) *epptest.Exchange {
	t.Helper()
	xs := p.Exchanges()
	if len(xs) != 1 {
		t.Fatalf("%d exchanges, want 1", len(xs))
	}
	return xs[0]
}
