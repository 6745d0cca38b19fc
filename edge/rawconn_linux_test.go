package edge

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// rawPair returns a rawConn and the plain TCP connection at its other end.
func rawPair(t *testing.T) (*rawConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	rc, ok := wrapConn(c).(*rawConn)
	if !ok {
		t.Fatal("not wrapped")
	}
	t.Cleanup(func() { rc.Close(); peer.Close() })
	return rc, peer
}

func TestRawConnReadWrite(t *testing.T) {
	c, peer := rawPair(t)
	big := make([]byte, 4<<20) // more than the socket buffers: writes wait
	for i := range big {
		big[i] = byte(i)
	}
	go func() {
		_, _ = c.Write(big)
		_ = c.CloseWrite()
	}()
	got, err := io.ReadAll(peer)
	if err != nil || len(got) != len(big) || got[len(got)-1] != big[len(big)-1] {
		t.Fatalf("peer read %d bytes, %v", len(got), err)
	}
	go func() { _, _ = peer.Write([]byte("hello")); peer.Close() }()
	got, err = io.ReadAll(c)
	if err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v", got, err)
	}
}

// A deadline that passes is a timeout, as with net.Conn.
func TestRawConnDeadlineExpires(t *testing.T) {
	c, _ := rawPair(t)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 10))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err %v, want a timeout", err)
	}
}

// A deadline moved later (or cleared) after an earlier one was applied
// must not cut a read short: the early one firing is absorbed.
func TestRawConnDeadlineExtended(t *testing.T) {
	for _, later := range []time.Time{{}, time.Now().Add(time.Hour)} {
		c, peer := rawPair(t)
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		_ = c.SetReadDeadline(later)
		go func() {
			time.Sleep(150 * time.Millisecond) // well past the first deadline
			_, _ = peer.Write([]byte("x"))
		}()
		b := make([]byte, 1)
		if n, err := c.Read(b); n != 1 || err != nil {
			t.Fatalf("deadline moved to %v: read %d, %v", later, n, err)
		}
		// The same for a write deadline, on a write that waits.
		_ = c.SetWriteDeadline(time.Now().Add(30 * time.Millisecond))
		_ = c.SetWriteDeadline(later)
		go func() {
			time.Sleep(150 * time.Millisecond)
			_, _ = io.Copy(io.Discard, peer)
		}()
		if _, err := c.Write(make([]byte, 8<<20)); err != nil {
			t.Fatalf("write deadline moved to %v: %v", later, err)
		}
	}
}

// An earlier deadline interrupts a read that is already blocked.
func TestRawConnDeadlineShortenedWhileBlocked(t *testing.T) {
	c, _ := rawPair(t)
	_ = c.SetReadDeadline(time.Now().Add(time.Hour))
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_ = c.SetReadDeadline(time.Now())
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("err %v, want a timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked read was not interrupted")
	}
}
