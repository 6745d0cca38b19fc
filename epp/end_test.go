package epp_test

import (
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvca/kvca/epp"
	"github.com/kvca/kvca/epp/epptest"
)

func subsetMD(v *structpb.Value) *corev3.Metadata {
	return lbMetadata(epp.SubsetNamespace, epp.SubsetKey, v)
}

func strList(s ...string) *structpb.Value {
	vs := make([]*structpb.Value, len(s))
	for i, e := range s {
		vs[i] = structpb.NewStringValue(e)
	}
	return structpb.NewListValue(&structpb.ListValue{Values: vs})
}

// The subset hint, as a list or as one comma-separated string, reaches
// Pick, and every endpoint picked is one of it.
func TestSubsetHint(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    *structpb.Value
		want []string
	}{
		{"list", strList(pool[1], pool[2]), []string{pool[1], pool[2]}},
		{"string", structpb.NewStringValue(pool[2] + ", " + pool[0]), []string{pool[2], pool[0]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPicker(t, newProxy(2), epp.Config{})
			for range 3 {
				s := p.open()
				s.send(reqHeaders(nil, subsetMD(tc.v), true))
				r := s.recv()
				for _, e := range strings.Split(destination(t, r, r.GetRequestHeaders().GetResponse()), ",") {
					if !slices.Contains(tc.want, e) {
						t.Fatalf("picked %s outside the subset %v", e, tc.want)
					}
				}
			}
			for _, x := range p.proxy.Exchanges() {
				if got := x.Snapshot().Subset; !slices.Equal(got, tc.want) {
					t.Fatalf("Pick got subset %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// A subset with no endpoint of the pool, or an empty one, is a 503.
func TestSubsetUnavailable(t *testing.T) {
	for name, v := range map[string]*structpb.Value{"foreign": strList("192.0.2.1:9"), "empty": strList()} {
		t.Run(name, func(t *testing.T) {
			p := startPicker(t, newProxy(0), epp.Config{})
			s := p.open()
			s.send(reqHeaders(nil, subsetMD(v), true))
			ir := s.recv().GetImmediateResponse()
			if ir.GetStatus().GetCode() != 503 {
				t.Fatalf("answer %v, want an immediate 503", ir)
			}
			if _, err := s.c.Recv(); err != io.EOF {
				t.Fatalf("after the answer: %v, want the stream closed", err)
			}
			if snap := waitEnded(t, onlyExchange(t, p.proxy)); snap.Ends != 1 || snap.Cancelled {
				t.Fatalf("exchange %+v", snap)
			}
		})
	}
}

// The lifecycle's answers go out as Envoy's local reply, as they are.
func TestAnswers(t *testing.T) {
	t.Run("429", func(t *testing.T) {
		p := startPicker(t, newProxy(0), epp.Config{})
		s := p.open()
		s.send(reqHeaders(nil, nil, false, epptest.HeaderAnswer, "429"))
		s.send(reqBody("{}", true))
		ir := s.recv().GetImmediateResponse()
		if ir.GetStatus().GetCode() != 429 || string(ir.GetBody()) != "answered 429\n" {
			t.Fatalf("answer %v", ir)
		}
		h := ir.GetHeaders().GetSetHeaders()
		if len(h) != 1 || h[0].GetHeader().GetKey() != "retry-after" || string(h[0].GetHeader().GetRawValue()) != "1" {
			t.Fatalf("answer headers %v", h)
		}
		if snap := waitEnded(t, onlyExchange(t, p.proxy)); snap.Ends != 1 || snap.Cancelled {
			t.Fatalf("exchange %+v", snap)
		}
	})
	t.Run("no endpoints", func(t *testing.T) {
		p := startPicker(t, &epptest.Proxy{}, epp.Config{})
		s := p.open()
		s.send(reqHeaders(nil, nil, true))
		if ir := s.recv().GetImmediateResponse(); ir.GetStatus().GetCode() != 503 {
			t.Fatalf("answer %v, want 503", ir)
		}
	})
	t.Run("413 mid-body", func(t *testing.T) {
		p := startPicker(t, &epptest.Proxy{MaxBody: 4}, epp.Config{})
		_ = p.proxy.SetEndpoints(pool)
		s := p.open()
		s.send(reqHeaders(nil, nil, false))
		s.send(reqBody("abc", false))
		s.send(reqBody("defgh", false))
		if ir := s.recv().GetImmediateResponse(); ir.GetStatus().GetCode() != 413 {
			t.Fatalf("answer %v, want 413", ir)
		}
		if snap := waitEnded(t, onlyExchange(t, p.proxy)); snap.Ends != 1 || snap.Cancelled || snap.Picked != nil {
			t.Fatalf("exchange %+v", snap)
		}
	})
}

// A stream Envoy cancels ends its exchange once, cancelled, wherever it
// was: in the body, in an admission wait, in the response.
func TestCancel(t *testing.T) {
	steps := map[string]func(s *stream){
		"mid-body": func(s *stream) {
			s.send(reqHeaders(nil, nil, false))
			s.send(reqBody("{", false))
		},
		"waiting to be admitted": func(s *stream) {
			s.send(reqHeaders(nil, nil, true, epptest.HeaderBlock, "1"))
		},
		"mid-response": func(s *stream) {
			s.send(reqHeaders(nil, nil, true))
			s.recv()
			s.send(respHeaders("", false))
			s.recv()
			s.send(respBody("data: a\n\n", false))
			s.recv()
		},
	}
	for name, step := range steps {
		t.Run(name, func(t *testing.T) {
			p := startPicker(t, newProxy(0), epp.Config{})
			s := p.open()
			step(s)
			deadline := time.Now().Add(5 * time.Second)
			for len(p.proxy.Exchanges()) == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond) // let the picker reach its wait
			s.cancel()
			if snap := waitEnded(t, onlyExchange(t, p.proxy)); snap.Ends != 1 || !snap.Cancelled {
				t.Fatalf("End called %d times, cancelled %v; want once, true", snap.Ends, snap.Cancelled)
			}
		})
	}
}

// Envoy closing its side before the response ends is a cancellation too.
func TestCloseBeforeResponseEnd(t *testing.T) {
	p := startPicker(t, newProxy(0), epp.Config{})
	s := p.open()
	s.send(reqHeaders(nil, nil, true))
	s.recv()
	s.send(respHeaders("", false))
	s.recv()
	if err := s.c.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if snap := waitEnded(t, onlyExchange(t, p.proxy)); snap.Ends != 1 || !snap.Cancelled {
		t.Fatalf("exchange %+v", snap)
	}
}

// A panic in the lifecycle answers 500 and an Internal status, ends the
// exchange once, and leaves the server serving.
func TestPanicStaysInStream(t *testing.T) {
	p := startPicker(t, newProxy(0), epp.Config{})
	s := p.open()
	s.send(reqHeaders(nil, nil, true, epptest.HeaderPanic, "1"))
	if ir := s.recv().GetImmediateResponse(); ir.GetStatus().GetCode() != 500 {
		t.Fatalf("answer %v, want 500", ir)
	}
	if _, err := s.c.Recv(); status.Code(err) != codes.Internal {
		t.Fatalf("stream status %v, want Internal", err)
	}
	if snap := waitEnded(t, onlyExchange(t, p.proxy)); snap.Ends != 1 {
		t.Fatalf("End called %d times", snap.Ends)
	}
	s2 := p.open()
	s2.send(reqHeaders(nil, nil, true))
	r := s2.recv()
	destination(t, r, r.GetRequestHeaders().GetResponse())
}

// Messages out of order are refused, not guessed at.
func TestProtocolErrors(t *testing.T) {
	p := startPicker(t, newProxy(0), epp.Config{})
	s := p.open()
	s.send(reqBody("{}", true))
	if _, err := s.c.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("body before headers: %v, want InvalidArgument", err)
	}
}

// A broken connection and a server stop end the exchanges in flight
// once, cancelled.
func TestBrokenAndStopped(t *testing.T) {
	t.Run("connection closed", func(t *testing.T) {
		p := startPicker(t, newProxy(0), epp.Config{})
		s := p.open()
		s.send(reqHeaders(nil, nil, false))
		s.send(reqBody("{", false))
		waitExchanges(t, p.proxy, 1)
		p.conn.Close()
		if snap := waitEnded(t, onlyExchange(t, p.proxy)); snap.Ends != 1 || !snap.Cancelled {
			t.Fatalf("exchange %+v", snap)
		}
	})
	t.Run("server stopped", func(t *testing.T) {
		p := startPicker(t, newProxy(0), epp.Config{})
		s := p.open()
		s.send(reqHeaders(nil, nil, true, epptest.HeaderBlock, "1"))
		waitExchanges(t, p.proxy, 1)
		p.srv.Stop()
		if snap := waitEnded(t, onlyExchange(t, p.proxy)); snap.Ends != 1 || !snap.Cancelled {
			t.Fatalf("exchange %+v", snap)
		}
	})
}

func waitExchanges(t *testing.T, p *epptest.Proxy, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(p.Exchanges()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d exchanges begun, want %d", len(p.Exchanges()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the picker reach its wait
}

// A pick that waits for admission holds up no other stream of its
// connection (the transport serves a connection's streams on one
// goroutine, a waiting pick on one of its own): requests picked while
// it waits complete, and the waiting one still ends once, cancelled.
func TestWaitingPickHoldsNoOneUp(t *testing.T) {
	p := startPicker(t, newProxy(0), epp.Config{})
	waiting := p.open()
	waiting.send(reqHeaders(nil, nil, true, epptest.HeaderBlock, "1"))
	for i := range 20 {
		s := p.open()
		s.send(reqHeaders(nil, nil, false))
		s.send(reqBody(`{"i":`+strconv.Itoa(i)+`}`, true))
		r := s.recv()
		if destination(t, r, r.GetRequestHeaders().GetResponse()) == "" {
			t.Fatalf("request %d: no pick while another waits", i)
		}
	}
	var blocked *epptest.Exchange
	for _, x := range p.proxy.Exchanges() {
		if _, ok := x.Headers[epptest.HeaderBlock]; ok {
			blocked = x
		}
	}
	if blocked == nil {
		t.Fatal("the waiting request has no exchange")
	}
	waiting.cancel()
	if snap := waitEnded(t, blocked); snap.Ends != 1 || !snap.Cancelled {
		t.Fatalf("the waiting request: End called %d times, cancelled %v", snap.Ends, snap.Cancelled)
	}
}
