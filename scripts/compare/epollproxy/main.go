//go:build linux

// Command epollproxy is an experiment of scripts/compare-proxies.sh
// (TARGETS=epoll): the other floor. Where bareproxy measures what Go and
// fasthttp cost per forwarded request (a goroutine per connection, parked
// and woken through the runtime's poller on every read), epollproxy
// measures a forwarder with nginx's I/O model written in Go: one event
// loop per core, each on its own OS thread with its own epoll set, its own
// SO_REUSEPORT listening socket and its own keep-alive backend connections,
// so a request is read, forwarded, answered and relayed back by one thread
// with no goroutine switch, no channel and no lock. Whatever it costs per
// request is what a Go proxy pays on this machine without the runtime's
// scheduler in the path.
//
//	epollproxy -listen 127.0.0.1:8081 -backend 127.0.0.1:8000
//
// With -route it also does kvca's routing work on every request, inline in
// the loop, with kvca's own packages: the whole body is read, canonicalised
// and hashed into a block chain (with the CBR memo), the scheduler (policy
// kvca) picks among the backends and reserves the load, a 2xx answer
// teaches the block table the chain, and the load is released when the
// answer has been relayed. That is kvca's per-request work without its
// HTTP library and goroutines: what kvca on event loops would cost.
//
// It is a measurement tool, not a proxy to deploy: HTTP/1.1 with
// Content-Length bodies only (wrk's requests and the mock's answers), no
// pipelining, no timeouts, headers forwarded as they came, bodies relayed
// as they arrive (neither side is buffered whole). Anything else is
// answered with 400 or 502 and the connection closed.
package main

import (
	"bytes"
	"flag"
	"log"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	backend := flag.String("backend", "127.0.0.1:8000", "backend host:port (plain HTTP)")
	loops := flag.Int("loops", runtime.GOMAXPROCS(0), "event loops (one OS thread each)")
	route := flag.Bool("route", false, "do kvca's routing work on every request (canon, chain, memo, scheduler, table)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the first -profile-seconds to this file")
	profileSecs := flag.Int("profile-seconds", 10, "length of the -cpuprofile profile")
	flag.Parse()
	// One P more than there are loops, as kvca serve runs (edge.SpareP):
	// with every P held by a loop blocked in epoll_wait, the runtime's
	// monitor would take Ps back from those system calls every 20 µs.
	if runtime.GOMAXPROCS(0) < *loops+1 {
		runtime.GOMAXPROCS(*loops + 1)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		time.AfterFunc(time.Duration(*profileSecs)*time.Second, func() {
			pprof.StopCPUProfile()
			f.Close()
			log.Printf("epollproxy: CPU profile written to %s", *cpuprofile)
		})
	}

	la, err := net.ResolveTCPAddr("tcp4", *listen)
	if err != nil {
		log.Fatal(err)
	}
	ba, err := net.ResolveTCPAddr("tcp4", *backend)
	if err != nil {
		log.Fatal(err)
	}
	var r *router
	if *route {
		r = newRouter()
	}
	var wg sync.WaitGroup
	for i := 0; i < *loops; i++ {
		l, err := newLoop(sockaddr(la), sockaddr(ba))
		if err != nil {
			log.Fatal(err)
		}
		if r != nil {
			l.r = r
			l.h = chain.NewHasher(r.key, 256)
			l.h.UseMemo(r.memo)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			l.run()
		}()
	}
	log.Printf("epollproxy: %d loops on %s -> %s", *loops, *listen, *backend)
	wg.Wait()
}

func sockaddr(a *net.TCPAddr) *syscall.SockaddrInet4 {
	sa := &syscall.SockaddrInet4{Port: a.Port}
	copy(sa.Addr[:], a.IP.To4())
	return sa
}

// conn is one side of a forwarded exchange: a client connection, or a
// backend connection while it carries a client's request.
type conn struct {
	fd     int
	client bool
	peer   *conn  // the other side while a request is in flight
	in     []byte // read buffer
	inN    int    // bytes in in waiting to be parsed (head not complete yet)
	out    []byte // bytes not yet written (the socket was full)
	left   int    // body bytes still to relay from this side
	busy   bool   // client: a request is in flight; backend: not idle
	closed bool
	// -route, client side: the request's chain and reservation.
	chain []uint64
	res   sched.Reservation
	now   int64
}

// router is kvca's routing state, shared by the loops as kvca serve
// shares it between its goroutines.
type router struct {
	key   chain.Key
	canon *canon.Canonicalizer
	memo  *chain.Memo
	table *chain.Table
	sched *sched.Scheduler
}

func newRouter() *router {
	table := chain.NewTable(chain.Config{TTL: 10 * 60e9, MaxBlocks: 4 << 20, TouchSlack: 10 * 60e9 / 4096})
	sc, err := sched.New([]*sched.Backend{sched.NewBackend(0, "backend", "backend")}, table, 4, "kvca")
	if err != nil {
		log.Fatal(err)
	}
	return &router{key: chain.RandomKey(), canon: canon.NewWithOptions(nil, canon.Options{NoSession: true}),
		memo: chain.NewMemo(64 << 20), table: table, sched: sc}
}

type loop struct {
	ep      int
	lfd     int
	backend *syscall.SockaddrInet4
	conns   map[int]*conn
	idle    []*conn // keep-alive backend connections
	events  [256]syscall.EpollEvent
	r       *router // nil without -route
	h       *chain.Hasher
	info    canon.Info
	req     sched.Request
	dec     sched.Decision
}

const bufSize = 64 << 10

func newLoop(listen, backend *syscall.SockaddrInet4) (*loop, error) {
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	const soReusePort = 0xf
	if err := syscall.SetsockoptInt(lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return nil, err
	}
	if err := syscall.SetsockoptInt(lfd, syscall.SOL_SOCKET, soReusePort, 1); err != nil {
		return nil, err
	}
	if err := syscall.Bind(lfd, listen); err != nil {
		return nil, err
	}
	if err := syscall.Listen(lfd, 1024); err != nil {
		return nil, err
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	l := &loop{ep: ep, lfd: lfd, backend: backend, conns: map[int]*conn{}}
	if err := l.add(lfd); err != nil {
		return nil, err
	}
	return l, nil
}

// add registers fd edge-triggered for reading and writing: an event comes
// whenever new data arrives or the send buffer drains, so no EPOLL_CTL_MOD
// is ever needed.
func (l *loop) add(fd int) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | (1 << 31), Fd: int32(fd)}
	return syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &ev)
}

func (l *loop) run() {
	for {
		// Look without blocking first: under load there is nearly always
		// something ready, and a raw call keeps the thread's P.
		r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_WAIT, uintptr(l.ep), uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), 0, 0, 0)
		n := int(r)
		if e != 0 {
			n = 0
		}
		if n == 0 {
			var err error
			n, err = syscall.EpollWait(l.ep, l.events[:], -1)
			if err != nil {
				continue // EINTR
			}
		}
		for i := 0; i < n; i++ {
			fd := int(l.events[i].Fd)
			if fd == l.lfd {
				l.accept()
				continue
			}
			if c := l.conns[fd]; c != nil && !c.closed {
				l.ready(c)
			}
		}
	}
}

func (l *loop) accept() {
	for {
		fd, _, err := syscall.Accept4(l.lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			return
		}
		syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		c := &conn{fd: fd, client: true, in: make([]byte, bufSize)}
		l.conns[fd] = c
		if l.add(fd) != nil {
			l.close(c)
		}
	}
}

// ready handles an event on c: flush what is pending, then read.
func (l *loop) ready(c *conn) {
	if len(c.out) > 0 && !l.flush(c) {
		return
	}
	if c.peer != nil && len(c.peer.out) > 0 {
		return // backpressure: the other side has not taken our last bytes
	}
	l.read(c)
}

func (l *loop) read(c *conn) {
	for !c.closed {
		if c.client && c.busy && c.left == 0 {
			return // the request is out; wait for the answer
		}
		if c.peer != nil && len(c.peer.out) > 0 {
			return // backpressure: flush reads on
		}
		n, e := rawRead(c.fd, c.in[c.inN:])
		if e == syscall.EAGAIN {
			return
		}
		if e != 0 || n == 0 || (!c.client && c.peer == nil) {
			l.fail(c) // an error, a hang-up, or an idle backend spoke
			return
		}
		full := c.inN+n == len(c.in)
		if c.left > 0 {
			// Body bytes: relay as they come.
			c.left -= n
			if c.left < 0 {
				l.fail(c) // more than Content-Length: pipelining, not supported
				return
			}
			if !l.send(c.peer, c.in[:n]) {
				return
			}
			if c.left == 0 {
				l.done(c)
			}
		} else {
			c.inN += n
			if !l.head(c) {
				return
			}
		}
		if !full {
			// Edge-triggered: a short read drained the socket, and new data
			// will raise a new event.
			return
		}
	}
}

// head parses c.in[:c.inN] once it holds a whole header block and starts
// relaying; false if c was closed or must wait.
func (l *loop) head(c *conn) bool {
	end := bytes.Index(c.in[:c.inN], []byte("\r\n\r\n"))
	if end < 0 {
		if c.inN == len(c.in) {
			l.fail(c)
			return false
		}
		return true // more to read
	}
	end += 4
	cl, ok := contentLength(c.in[:end])
	if !ok {
		l.fail(c)
		return false
	}
	have := c.inN - end
	if have > cl {
		l.fail(c) // pipelined request or extra bytes
		return false
	}
	if c.client && l.r != nil {
		c.res, c.chain = sched.Reservation{}, c.chain[:0]
	}
	if c.client && l.r != nil && cl > 0 {
		// The whole body first: routing reads all of it.
		need := end + cl
		if need > 8<<20 {
			l.reply(c, "413 Content Too Large")
			return false
		}
		if need > len(c.in) {
			c.in = append(c.in, make([]byte, need-len(c.in))...)
		}
		if c.inN < need {
			return true
		}
		if !l.route(c, c.in[end:need]) {
			l.reply(c, "400 Bad Request")
			return false
		}
		have = cl
	}
	if !c.client && c.peer != nil && c.peer.res.Backend() != nil {
		// Response headers: the prefill is done; a 2xx teaches the table.
		cl := c.peer
		cl.res.ReleasePrefill()
		if end > 12 && c.in[9] == '2' && len(cl.chain) > 0 {
			l.r.table.Touch(cl.chain, 0, cl.now)
		}
	}
	if c.client {
		b := l.backendConn()
		if b == nil {
			l.reply(c, "502 Bad Gateway")
			return false
		}
		c.peer, b.peer, c.busy = b, c, true
	}
	c.left = cl - have
	n := c.inN
	c.inN = 0
	if !l.send(c.peer, c.in[:n]) {
		return false
	}
	if c.left == 0 {
		l.done(c)
	}
	return !c.closed
}

// done is called when c has relayed its whole message: a request leaves
// the client waiting for its answer; an answer frees the backend.
func (l *loop) done(c *conn) {
	if c.client {
		return
	}
	cl := c.peer
	cl.res.ReleaseActive()
	c.peer, cl.peer, cl.busy = nil, nil, false
	l.idle = append(l.idle, c)
	if len(cl.out) == 0 {
		l.read(cl) // the client may have sent its next request already
	}
}

// send writes p to c, keeping what the socket does not take; false if c
// failed.
func (l *loop) send(c *conn, p []byte) bool {
	if len(c.out) > 0 {
		c.out = append(c.out, p...)
		return true
	}
	for len(p) > 0 {
		n, e := rawWrite(c.fd, p)
		if e == syscall.EAGAIN {
			c.out = append(c.out[:0], p...)
			return true
		}
		if e != 0 {
			l.fail(c)
			return false
		}
		p = p[n:]
	}
	return true
}

func (l *loop) flush(c *conn) bool {
	for len(c.out) > 0 {
		n, e := rawWrite(c.fd, c.out)
		if e == syscall.EAGAIN {
			return false
		}
		if e != 0 {
			l.fail(c)
			return false
		}
		c.out = c.out[n:]
	}
	c.out = c.out[:0]
	if c.peer != nil {
		l.read(c.peer) // it stopped reading while we were full
	} else if c.client {
		l.read(c) // its next request may be waiting
	}
	return true
}

// route is kvca's routing work for one request body; false if the body
// is not a chat request kvca would route.
func (l *loop) route(c *conn, body []byte) bool {
	l.h.Reset()
	if l.r.canon.Canonicalize(canon.Chat, body, l.h, &l.info) != nil {
		return false
	}
	c.chain = append(c.chain[:0], l.h.Sum()...)
	c.now = l.r.table.Now()
	l.req = sched.Request{Chain: c.chain, Followup: l.info.Followup, Now: c.now}
	return l.r.sched.Route(&l.req, &l.dec, &c.res)
}

func (l *loop) backendConn() *conn {
	if n := len(l.idle); n > 0 {
		b := l.idle[n-1]
		l.idle = l.idle[:n-1]
		return b
	}
	// A blocking connect on loopback is immediate; then non-blocking.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	if syscall.Connect(fd, l.backend) != nil || syscall.SetNonblock(fd, true) != nil {
		syscall.Close(fd)
		return nil
	}
	syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	b := &conn{fd: fd, in: make([]byte, bufSize)}
	l.conns[fd] = b
	if l.add(fd) != nil {
		l.close(b)
		return nil
	}
	return b
}

// fail closes c and, while a request is in flight, its peer: a broken
// exchange cannot be resumed on either connection.
func (l *loop) fail(c *conn) {
	if p := c.peer; p != nil {
		if c.client {
			c.res.ReleaseActive()
		} else {
			p.res.ReleaseActive()
		}
		c.peer, p.peer = nil, nil
		l.close(p)
	}
	l.close(c)
}

func (l *loop) close(c *conn) {
	if c.closed {
		return
	}
	c.closed = true
	delete(l.conns, c.fd)
	syscall.Close(c.fd)
	for i, b := range l.idle {
		if b == c {
			l.idle = append(l.idle[:i], l.idle[i+1:]...)
			break
		}
	}
}

func (l *loop) reply(c *conn, status string) {
	msg := "HTTP/1.1 " + status + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	rawWrite(c.fd, []byte(msg))
	l.close(c)
}

// contentLength finds the Content-Length of a header block; a message
// without one has none (0), a chunked one is refused.
func contentLength(h []byte) (int, bool) {
	for len(h) > 0 {
		i := bytes.IndexByte(h, '\n')
		if i < 0 {
			break
		}
		line := h[:i]
		h = h[i+1:]
		k := bytes.IndexByte(line, ':')
		if k < 0 {
			continue
		}
		name := line[:k]
		switch {
		case len(name) == 14 && bytes.EqualFold(name, []byte("Content-Length")):
			v := bytes.TrimSpace(line[k+1:])
			n, err := strconv.Atoi(string(v))
			return n, err == nil && n >= 0
		case len(name) == 17 && bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, false
		}
	}
	return 0, true
}

func rawRead(fd int, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e != syscall.EINTR {
			return int(n), e
		}
	}
}

func rawWrite(fd int, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e != syscall.EINTR {
			return int(n), e
		}
	}
}
