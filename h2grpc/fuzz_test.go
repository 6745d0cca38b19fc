package h2grpc_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/kvca/kvca/h2grpc"
)

// oneConn is a listener that yields one connection, then none.
type oneConn struct {
	c    chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *oneConn) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *oneConn) Addr() net.Addr { return &net.TCPAddr{} }

// FuzzConn: whatever frames a client sends after its preface, the server
// never panics, every stream it opened is either finished or reset
// exactly once, a handler is released at most once and called no more
// after, and Stop returns.
func FuzzConn(f *testing.F) {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/t.T/Echo"}, {":authority", "x"}, {"content-type", "application/grpc"}, {"grpc-timeout", "1S"}} {
		enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	fr.WriteData(1, false, []byte{0, 0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0})
	fr.WriteData(1, true, []byte{0, 2, 'd', 'e'})
	f.Add(bytes.Clone(seed.Bytes()))
	fr.WriteWindowUpdate(0, 100)
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	fr.WritePing(false, [8]byte{1})
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 3})
	f.Add(bytes.Clone(seed.Bytes()))
	f.Fuzz(func(t *testing.T, in []byte) {
		var opened, ended, releases, late atomic.Int32
		srv := h2grpc.New(h2grpc.Config{MaxMessageBytes: 1 << 16, PrefaceTimeout: time.Second})
		srv.Handle("/t.T/Echo", func(s *h2grpc.Stream) h2grpc.Handler {
			opened.Add(1)
			return &handler{s: s, message: echo, resets: &ended, releases: &releases, late: &late, close: func(s *h2grpc.Stream) error {
				ended.Add(1)
				s.Finish(nil)
				return nil
			}}
		})
		client, server := net.Pipe()
		l := &oneConn{c: make(chan net.Conn, 1), done: make(chan struct{})}
		l.c <- server
		served := make(chan error, 1)
		go func() { served <- srv.Serve(l) }()
		go io.Copy(io.Discard, client)
		client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		io.WriteString(client, http2.ClientPreface)
		http2.NewFramer(client, nil).WriteSettings()
		client.Write(in)
		srv.Stop()
		client.Close()
		if err := <-served; !errors.Is(err, h2grpc.ErrStopped) {
			t.Fatalf("Serve: %v", err)
		}
		if o, e := opened.Load(), ended.Load(); o != e {
			t.Fatalf("%d streams opened, %d ended", o, e)
		}
		if r, l := releases.Load(), late.Load(); r > opened.Load() || l != 0 {
			t.Fatalf("%d streams opened, %d released, %d calls after a release", opened.Load(), r, l)
		}
	})
}
