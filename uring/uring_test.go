//go:build linux

package uring

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// pair is a loopback TCP connection: fd is the raw, non-blocking sending
// side, peer the receiving side.
func pair(t *testing.T) (int, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.(*net.TCPConn).File()
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd); peer.Close() })
	return fd, peer
}

func ring(t *testing.T, entries uint32, arena int) *Ring {
	t.Helper()
	r, err := New(entries, arena)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("io_uring refused here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// Sends to several sockets, queued together, arrive whole and in order,
// and the caller's buffers are free as soon as Send returns.
func TestSendBatch(t *testing.T) {
	r := ring(t, 8, 1<<16)
	var fds []int
	var peers []net.Conn
	for i := 0; i < 3; i++ {
		fd, p := pair(t)
		fds, peers = append(fds, fd), append(peers, p)
	}
	buf := []byte("head-")
	for i, fd := range fds {
		body := bytes.Repeat([]byte{'a' + byte(i)}, 1000+i)
		if !r.Send(fd, buf, body, uint32(10+i)) {
			t.Fatal("Send refused")
		}
		copy(buf, "XXXXX") // the ring copied the bytes already
		copy(buf, "head-")
		clear(body)
	}
	if !r.Send(fds[0], nil, []byte("-tail"), 99) {
		t.Fatal("second send to one socket refused")
	}
	res := r.Submit()
	if len(res) != 4 {
		t.Fatalf("%d results, want 4", len(res))
	}
	tags := map[uint32]bool{}
	for _, x := range res {
		if x.Err != 0 || x.Rest != nil {
			t.Fatalf("tag %d: err %v, %d bytes left", x.Tag, x.Err, len(x.Rest))
		}
		tags[x.Tag] = true
	}
	for _, tag := range []uint32{10, 11, 12, 99} {
		if !tags[tag] {
			t.Fatalf("no result for tag %d: %v", tag, res)
		}
	}
	for i, p := range peers {
		want := append([]byte("head-"), bytes.Repeat([]byte{'a' + byte(i)}, 1000+i)...)
		if i == 0 {
			want = append(want, "-tail"...)
		}
		if got := readN(t, p, len(want)); !bytes.Equal(got, want) {
			t.Fatalf("socket %d got %q...", i, got[:20])
		}
	}
	if len(r.Submit()) != 0 {
		t.Fatal("an empty Submit reported sends")
	}
}

// Send refuses what does not fit, and nothing empty.
func TestSendRefuses(t *testing.T) {
	r := ring(t, 2, 100)
	fd, _ := pair(t)
	if r.Send(fd, nil, nil, 0) {
		t.Fatal("queued an empty send")
	}
	if r.Send(fd, make([]byte, 101), nil, 0) {
		t.Fatal("queued more than the arena")
	}
	if !r.Send(fd, make([]byte, 60), nil, 0) || r.Send(fd, make([]byte, 41), nil, 1) {
		t.Fatal("the arena's room was counted wrong")
	}
	if !r.Send(fd, make([]byte, 40), nil, 1) {
		t.Fatal("the arena's last bytes were refused")
	}
	r.Submit()
	// The ring has as many entries as asked for at least; fill them.
	n := 0
	for r.Send(fd, []byte{1}, nil, 0) {
		n++
	}
	if n < 2 || n > 100 {
		t.Fatalf("%d one-byte sends queued", n)
	}
	r.Submit()
}

// A socket that cannot take everything gives the rest back, and a send
// to a socket whose peer reset fails with the socket's error; neither
// waits.
func TestSendFullAndBroken(t *testing.T) {
	r := ring(t, 8, 8<<20)
	fd, peer := pair(t)
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096)
	big := bytes.Repeat([]byte("x"), 4<<20)
	var rest []byte
	for i := 0; i < 4 && rest == nil; i++ {
		if !r.Send(fd, big, nil, 7) {
			t.Fatal("Send refused")
		}
		start := time.Now()
		res := r.Submit()
		if time.Since(start) > 5*time.Second {
			t.Fatal("Submit waited for a full socket")
		}
		if len(res) != 1 || res[0].Tag != 7 {
			t.Fatalf("results %+v", res)
		}
		if res[0].Err != 0 && res[0].Err != syscall.EAGAIN {
			t.Fatalf("err %v", res[0].Err)
		}
		rest = res[0].Rest
	}
	if rest == nil {
		t.Fatal("16 MB went into a socket nobody reads")
	}
	if len(rest) == 0 || len(rest) > len(big) {
		t.Fatalf("rest %d bytes", len(rest))
	}
	peer.(*net.TCPConn).SetLinger(0)
	peer.Close()
	var err syscall.Errno
	for i := 0; i < 50 && err == 0; i++ {
		time.Sleep(10 * time.Millisecond)
		r.Send(fd, []byte("after the reset"), nil, 8)
		res := r.Submit()
		if len(res) != 1 {
			t.Fatalf("results %+v", res)
		}
		err = res[0].Err
	}
	if err != syscall.ECONNRESET && err != syscall.EPIPE {
		t.Fatalf("send after the peer's reset: %v, want ECONNRESET or EPIPE", err)
	}
}
