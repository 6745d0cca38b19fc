package h2grpc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvca/kvca/h2grpc"
)

// raw is a gRPC codec of plain bytes, for a client of the test methods.
type raw struct{}

func (raw) Name() string { return "proto" }
func (raw) Marshal(v any) ([]byte, error) {
	return *v.(*[]byte), nil
}
func (raw) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}

// handler is a test method's stream: each event goes to the funcs set,
// resets are counted.
type handler struct {
	s       *h2grpc.Stream
	message func(s *h2grpc.Stream, b []byte) error
	close   func(s *h2grpc.Stream) error
	resets  *atomic.Int32
	// releases counts Release (nil: not counted); late, the calls that
	// came after it or a second Release.
	releases, late *atomic.Int32
	released       atomic.Bool
}

func (h *handler) Message(b []byte) error { h.checkLive(); return h.message(h.s, b) }
func (h *handler) CloseSend() error {
	h.checkLive()
	if h.close == nil {
		h.s.Finish(nil)
		return nil
	}
	return h.close(h.s)
}
func (h *handler) Reset() { h.checkLive(); h.resets.Add(1) }

func (h *handler) Release() {
	h.checkLive()
	h.released.Store(true)
	if h.releases != nil {
		h.releases.Add(1)
	}
}

func (h *handler) checkLive() {
	if h.released.Load() && h.late != nil {
		h.late.Add(1)
	}
}

type fixture struct {
	srv    *h2grpc.Server
	addr   string
	conn   *grpc.ClientConn
	resets atomic.Int32
	done   chan error
}

func (f *fixture) method(path string, message func(*h2grpc.Stream, []byte) error, close func(*h2grpc.Stream) error) {
	f.srv.Handle(path, func(s *h2grpc.Stream) h2grpc.Handler {
		return &handler{s: s, message: message, close: close, resets: &f.resets}
	})
}

func echo(s *h2grpc.Stream, b []byte) error { return s.Send(b) }

// start serves the test methods on a loopback port; setup adds more.
func start(t *testing.T, cfg h2grpc.Config, setup func(f *fixture)) *fixture {
	t.Helper()
	f := &fixture{srv: h2grpc.New(cfg), done: make(chan error, 1)}
	f.method("/t.T/Echo", echo, nil)
	f.method("/t.T/Fail", func(s *h2grpc.Stream, b []byte) error {
		return status.Error(codes.FailedPrecondition, "refusé: "+string(b))
	}, nil)
	f.method("/t.T/Panic", func(*h2grpc.Stream, []byte) error { panic("boom") }, nil)
	if setup != nil {
		setup(f)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	go func() { f.done <- f.srv.Serve(l) }()
	f.conn, err = grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(raw{}), grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.conn.Close()
		f.srv.Stop()
		if err := <-f.done; !errors.Is(err, h2grpc.ErrStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
	return f
}

var bidi = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

func (f *fixture) open(t *testing.T, ctx context.Context, method string) grpc.ClientStream {
	t.Helper()
	cs, err := f.conn.NewStream(ctx, bidi, method)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Messages of every size from empty to several windows and frames come
// back whole and in order, on streams sharing a connection, whatever the
// client's windows hold back.
func TestEchoSizes(t *testing.T) {
	f := start(t, h2grpc.Config{StreamWindow: 70 << 10, ConnWindow: 200 << 10}, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 4, 5, 16383, 16384, 16385, 65535, 65536, 1 << 20, 3<<20 + 7}
	for range 20 {
		sizes = append(sizes, rng.IntN(300<<10))
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs, err := f.conn.NewStream(ctxFor(t), bidi, "/t.T/Echo")
			if err != nil {
				t.Error(err)
				return
			}
			for i, n := range sizes {
				msg := bytes.Repeat([]byte{byte(w*31 + i)}, n)
				if err := cs.SendMsg(&msg); err != nil {
					t.Errorf("send %d: %v", n, err)
					return
				}
				var got []byte
				if err := cs.RecvMsg(&got); err != nil || !bytes.Equal(got, msg) {
					t.Errorf("echo of %d bytes: %d bytes, %v", n, len(got), err)
					return
				}
			}
			cs.CloseSend()
			var end []byte
			if err := cs.RecvMsg(&end); err != io.EOF {
				t.Errorf("end: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := f.resets.Load(); n != 0 {
		t.Errorf("%d resets on streams that ended well", n)
	}
}

// Many messages sent before any is read: the server's sends wait for the
// client's windows and lose nothing.
func TestSendsWaitForWindows(t *testing.T) {
	f := start(t, h2grpc.Config{}, nil)
	cs := f.open(t, ctxFor(t), "/t.T/Echo")
	const n = 64
	msg := bytes.Repeat([]byte("x"), 100<<10)
	go func() {
		for i := range n {
			m := append([]byte{byte(i)}, msg...)
			if cs.SendMsg(&m) != nil {
				return
			}
		}
		cs.CloseSend()
	}()
	time.Sleep(50 * time.Millisecond) // let the server's sends fill the windows
	for i := range n {
		var got []byte
		if err := cs.RecvMsg(&got); err != nil || len(got) != len(msg)+1 || got[0] != byte(i) {
			t.Fatalf("message %d: %d bytes, %v", i, len(got), err)
		}
	}
	var end []byte
	if err := cs.RecvMsg(&end); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

// Statuses reach the client as the handler gave them, a message outside
// ASCII included; unknown methods are UNIMPLEMENTED; a panic is INTERNAL
// and the server goes on.
func TestStatuses(t *testing.T) {
	f := start(t, h2grpc.Config{}, nil)
	for _, c := range []struct {
		method string
		code   codes.Code
		msg    string
	}{
		{"/t.T/Fail", codes.FailedPrecondition, "refusé: hi"},
		{"/t.T/Nope", codes.Unimplemented, "h2grpc: unknown method /t.T/Nope"},
		{"/t.T/Panic", codes.Internal, "internal error"},
	} {
		cs := f.open(t, ctxFor(t), c.method)
		m := []byte("hi")
		cs.SendMsg(&m)
		var got []byte
		err := cs.RecvMsg(&got)
		if st, _ := status.FromError(err); st.Code() != c.code || st.Message() != c.msg {
			t.Errorf("%s: %v, want %v %q", c.method, err, c.code, c.msg)
		}
	}
	cs := f.open(t, ctxFor(t), "/t.T/Echo")
	m := []byte("still here")
	cs.SendMsg(&m)
	var got []byte
	if err := cs.RecvMsg(&got); err != nil || string(got) != "still here" {
		t.Fatalf("after the panic: %q %v", got, err)
	}
}

// A stream the client cancels is reset once; a message over the limit
// ends its stream RESOURCE_EXHAUSTED and the handler is reset.
func TestResetAndLimit(t *testing.T) {
	f := start(t, h2grpc.Config{MaxMessageBytes: 1 << 10}, nil)
	ctx, cancel := context.WithCancel(ctxFor(t))
	cs := f.open(t, ctx, "/t.T/Echo")
	m := []byte("a")
	cs.SendMsg(&m)
	var got []byte
	if err := cs.RecvMsg(&got); err != nil {
		t.Fatal(err)
	}
	cancel()
	waitFor(t, func() bool { return f.resets.Load() == 1 })

	cs = f.open(t, ctxFor(t), "/t.T/Echo")
	big := make([]byte, 2<<10)
	cs.SendMsg(&big)
	err := cs.RecvMsg(&got)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the limit: %v", err)
	}
	waitFor(t, func() bool { return f.resets.Load() == 2 })
	time.Sleep(20 * time.Millisecond)
	if n := f.resets.Load(); n != 2 {
		t.Fatalf("%d resets, want 2", n)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met within 5s")
}

// A stream on its own goroutine (Go) holds up no other stream of its
// connection; the messages that come while it waits reach its handler
// afterwards, in order; its context ends with the stream.
func TestGoDoesNotBlockTheConnection(t *testing.T) {
	release := make(chan struct{})
	var order []string
	var mu sync.Mutex
	f := start(t, h2grpc.Config{}, func(f *fixture) {
		f.method("/t.T/Wait", func(s *h2grpc.Stream, b []byte) error {
			mu.Lock()
			order = append(order, string(b))
			mu.Unlock()
			if string(b) != "wait" {
				return s.Send(b)
			}
			ctx := s.Context()
			s.Go(func() error {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
				m := []byte("waited")
				return s.Send(m)
			})
			return nil
		}, nil)
	})
	ws := f.open(t, ctxFor(t), "/t.T/Wait")
	for _, m := range []string{"wait", "after1", "after2"} {
		b := []byte(m)
		ws.SendMsg(&b)
	}
	es := f.open(t, ctxFor(t), "/t.T/Echo")
	for i := range 50 {
		b := []byte(fmt.Sprint(i))
		es.SendMsg(&b)
		var got []byte
		if err := es.RecvMsg(&got); err != nil || string(got) != fmt.Sprint(i) {
			t.Fatalf("echo while another stream waits: %q %v", got, err)
		}
	}
	close(release)
	for _, want := range []string{"waited", "after1", "after2"} {
		var got []byte
		if err := ws.RecvMsg(&got); err != nil || string(got) != want {
			t.Fatalf("got %q %v, want %q", got, err, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != "[wait after1 after2]" {
		t.Fatalf("handler saw %v", order)
	}
}

// Stop resets every open stream, one waiting on its own goroutine
// included, once each, and Serve returns.
func TestStopResets(t *testing.T) {
	f := start(t, h2grpc.Config{}, func(f *fixture) {
		f.method("/t.T/Block", func(s *h2grpc.Stream, b []byte) error {
			ctx := s.Context()
			s.Go(func() error { <-ctx.Done(); return nil })
			return nil
		}, nil)
	})
	for _, m := range []string{"/t.T/Echo", "/t.T/Block", "/t.T/Echo"} {
		cs := f.open(t, ctxFor(t), m)
		b := []byte("x")
		cs.SendMsg(&b)
	}
	time.Sleep(50 * time.Millisecond)
	f.srv.Stop()
	if n := f.resets.Load(); n != 3 {
		t.Fatalf("%d resets after Stop, want 3", n)
	}
}

// GracefulStop lets an open stream finish, refuses new ones, and returns
// once the connection is done.
func TestGracefulStop(t *testing.T) {
	f := start(t, h2grpc.Config{}, nil)
	cs := f.open(t, ctxFor(t), "/t.T/Echo")
	b := []byte("x")
	cs.SendMsg(&b)
	var got []byte
	if err := cs.RecvMsg(&got); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { f.srv.GracefulStop(); close(stopped) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned with a stream open")
	default:
	}
	b = []byte("y")
	if err := cs.SendMsg(&b); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(&got); err != nil || string(got) != "y" {
		t.Fatalf("during the stop: %q %v", got, err)
	}
	cs.CloseSend()
	if err := cs.RecvMsg(&got); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop did not return")
	}
	// A new call finds no server: the listener is closed.
	cs, err := f.conn.NewStream(ctxFor(t), bidi, "/t.T/Echo", grpc.WaitForReady(false))
	if err == nil {
		b = []byte("z")
		cs.SendMsg(&b)
		err = cs.RecvMsg(&got)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a call after the stop: %v, want Unavailable", err)
	}
}

// A grpc-timeout that passes resets the stream for both sides.
func TestDeadline(t *testing.T) {
	f := start(t, h2grpc.Config{}, func(f *fixture) {
		f.method("/t.T/Silent", func(*h2grpc.Stream, []byte) error { return nil }, nil)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	cs := f.open(t, ctx, "/t.T/Silent")
	b := []byte("x")
	cs.SendMsg(&b)
	var got []byte
	if err := cs.RecvMsg(&got); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("%v, want DeadlineExceeded", err)
	}
	waitFor(t, func() bool { return f.resets.Load() == 1 })
}

// Streams of random lengths, sizes and ends, many at once: every stream
// either completes with its echoes or is reset, exactly once.
func TestRandomStreams(t *testing.T) {
	var opened, finished, releases, late atomic.Int32
	f := start(t, h2grpc.Config{StreamWindow: 40 << 10}, func(f *fixture) {
		f.srv.Handle("/t.T/Count", func(s *h2grpc.Stream) h2grpc.Handler {
			opened.Add(1)
			return &handler{s: s, message: echo, resets: &f.resets, releases: &releases, late: &late, close: func(s *h2grpc.Stream) error {
				finished.Add(1)
				s.Finish(nil)
				return nil
			}}
		})
	})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 20 {
				ctx, cancel := context.WithCancel(ctxFor(t))
				cs, err := f.conn.NewStream(ctx, bidi, "/t.T/Count")
				if err != nil {
					t.Error(err)
					cancel()
					return
				}
				cut := rng.IntN(2) == 0
				for i := range 1 + rng.IntN(5) {
					m := bytes.Repeat([]byte{byte(i)}, rng.IntN(100<<10))
					if cs.SendMsg(&m) != nil {
						break
					}
					var got []byte
					if err := cs.RecvMsg(&got); err != nil || !bytes.Equal(got, m) {
						t.Errorf("echo: %d of %d bytes, %v", len(got), len(m), err)
					}
				}
				if !cut {
					cs.CloseSend()
					var end []byte
					if err := cs.RecvMsg(&end); err != io.EOF {
						t.Errorf("end: %v", err)
					}
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	waitFor(t, func() bool { return finished.Load()+f.resets.Load() == opened.Load() })
	time.Sleep(20 * time.Millisecond)
	if o, d, r := opened.Load(), finished.Load(), f.resets.Load(); o != d+r || o != 16*20 {
		t.Fatalf("%d streams opened, %d finished, %d reset", o, d, r)
	}
	// Each handler is released once, when it is called no more.
	waitFor(t, func() bool { return releases.Load() == opened.Load() })
	if l := late.Load(); l != 0 {
		t.Fatalf("%d calls to a handler after its release", l)
	}
}
