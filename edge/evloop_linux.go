//go:build linux

package edge

import (
	"errors"
	"net"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvca/kvca/uring"
)

const epollSupported = true

// The public listener is served the way nginx serves it: one event loop
// per core (a goroutine), each with its own epoll set, reading requests,
// routing them, writing them to keep-alive backend connections and
// relaying the answers back with non-blocking raw system calls, with no
// goroutine per connection and no HTTP library in between. Every request
// goes this one way: routed POSTs, passthrough paths, kvca's own answers,
// chunked uploads, Expect, HTTP/1.0, TLS (tlssock_linux.go) and refusals,
// under the one acceptance policy of package h1 and the forwarding rules
// of forward.go. compare-proxies measured why loops: with a goroutine per
// connection, Go's scheduler (parking and waking a goroutine on every
// read, sysmon retaking Ps in system calls) cost about 8 µs per request at
// 1 KB, more than kvca's routing work; on loops the same work runs at
// nginx's throughput.

// evHandler is one file descriptor of a loop.
type evHandler interface {
	event(ev uint32)
	deadline() int64 // unix ns; 0: none
	timeout()
}

type evLoop struct {
	s *Server
	// clock is the time the loop last woke; calls read it (call.now).
	clock  time.Time
	ep     int
	wakeFd int
	lfd    int // the shared listening socket; -1 once no longer accepted on
	// fds holds, by descriptor number, each registered descriptor's
	// handler and the generation it was registered with: a batch of
	// events can hold one for a descriptor closed earlier in the batch
	// whose number a new connection has taken since, and that event must
	// not reach the new connection (nginx's "instance" bit). Descriptor
	// numbers are small and dense: indexing beats a map lookup on every
	// event. nFds counts the registered ones.
	fds      []fdSlot
	nFds     int
	gen      int32
	id       int // the loop's index: its keep-alive pool in each upstream
	events   [128]syscall.EpollEvent
	now      int64        // unix ns, at the last wake-up
	scanAt   int64        // when deadlines are next checked
	bufs     [11][][]byte // free buffers by size class (bufClass): 16 KB to 16 MB
	bufLow   [11]int      // the fewest free in each class since trimAt
	bufBytes int
	trimAt   int64 // when buffers free since the last trim are dropped
	iov      [2]unix.Iovec
	msg      unix.Msghdr // rawWritev's, over iov
	small    [8192]byte  // rawWritev's, for a head and a short body
	// ring: write-behind (behind_linux.go); nil: a send call a write.
	ring          *uring.Ring
	behind        []*sock  // the sockets with a queued write, by tag
	told, telling []notice // connections to tell their write went out
	// marks: the marks raised on sockets whose body is awaited whole
	// (await_linux.go), oldest first from marks[markHead]; nMarks of them
	// are still up.
	marks    []markRec
	markHead int
	nMarks   int
	markSeq  uint64
	nCli     int          // client connections open
	open     atomic.Int32 // nCli as other loops see it, plus those given to l
	peers    []*evLoop    // every loop of the server, l included
	inMu     sync.Mutex
	inbox    []newConn // connections other loops accepted for l
	tasks    []func()  // work goroutines finished for l's connections
	inClosed bool
	// acceptAt: accepting paused (out of descriptors) until then; 0: not.
	acceptAt  int64
	acceptOff time.Duration

	drain atomic.Bool // stop accepting; close connections once idle
	kill  atomic.Bool // abort everything
	done  chan struct{}
}

// loopBufSize is a connection's read buffer: a whole 1–4 KB request or a
// stream's read; bodies above it get a buffer of their own size.
const loopBufSize = 16 << 10

// jumpFactor: a request buffer grows straight to the whole request once
// the request is at most this many times the buffer already filled.
const jumpFactor = 32

// yieldEvery is how often a busy loop looks whether other goroutines wait
// for a P, and yields its own if so; yieldMax is how long it runs before
// it yields regardless. Go's monitor thread preempts a goroutine that has
// not been through the scheduler for 10 ms (with a signal, and if that
// finds the loop blocked in epoll_wait it takes the P back and polls every
// 20 µs from then on), so yieldMax stays below that. A wait that blocked
// in epoll_wait is no pass through the scheduler and does not count:
// skipping the yield after such waits made the monitor signal and poll
// instead (on the agent replay, 4 s at about 800 requests a second:
// futex calls 1,385 → 2,349, the monitor's sleeps 392 → 7,241).
const (
	yieldEvery = time.Millisecond
	yieldMax   = 5 * time.Millisecond
)

// deadlineTick is how often deadlines are checked: timeouts fire up to
// this much late.
const deadlineTick = 50 * time.Millisecond

// evLoops is the loop edge of one Server.
type evLoops struct {
	loops []*evLoop
	lfd   int
	wg    sync.WaitGroup
}

// startLoops starts Config.Loops loops (default one per GOMAXPROCS) on
// ln's socket.
func (s *Server) startLoops(ln net.Listener) error {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return errors.New("the public listener must be a TCP listener")
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return err
	}
	lfd := -1
	if cerr := rc.Control(func(fd uintptr) { lfd, err = syscall.Dup(int(fd)) }); cerr != nil {
		return cerr
	}
	if err != nil {
		return err
	}
	syscall.CloseOnExec(lfd)
	if err := syscall.SetNonblock(lfd, true); err != nil {
		syscall.Close(lfd)
		return err
	}
	el := &evLoops{lfd: lfd}
	n := s.cfg.Loops
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	for i := 0; i < n; i++ {
		l, err := newEvLoop(s, lfd, i)
		if err != nil {
			for _, l := range el.loops {
				l.closeFds()
			}
			syscall.Close(lfd)
			return err
		}
		el.loops = append(el.loops, l)
	}
	for _, l := range el.loops {
		l.peers = el.loops
	}
	// Each backend's record holds its keep-alive pool, one list per loop;
	// backends added later get theirs when they are built.
	s.nloops = n
	for _, u := range s.fleet().ups {
		u.idle = make([][]*upConn, n)
	}
	s.evl = el
	for _, l := range el.loops {
		el.wg.Add(1)
		go func() {
			defer el.wg.Done()
			l.run()
		}()
	}
	return nil
}

// stop drains the loops until ctx's deadline (nil channel: wait), then
// aborts what is left.
func (el *evLoops) stop(deadline <-chan struct{}) error {
	// Shutting the listening socket down makes the kernel refuse new
	// connections at once (closing it would not: the listener the caller
	// gave still holds it open).
	_ = syscall.Shutdown(el.lfd, syscall.SHUT_RD)
	for _, l := range el.loops {
		l.drain.Store(true)
		l.wakeUp()
	}
	all := make(chan struct{})
	go func() { el.wg.Wait(); close(all) }()
	var err error
	select {
	case <-all:
	case <-deadline:
		err = errDrainTimeout
		for _, l := range el.loops {
			l.kill.Store(true)
			l.wakeUp()
		}
		<-all
	}
	syscall.Close(el.lfd)
	return err
}

var errDrainTimeout = errors.New("shutdown timeout: in-flight requests aborted")

func newEvLoop(s *Server, lfd, id int) (*evLoop, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if e != 0 {
		syscall.Close(ep)
		return nil, e
	}
	l := &evLoop{s: s, ep: ep, wakeFd: int(r), lfd: lfd,
		id: id, done: make(chan struct{})}
	l.startRing()
	// The listening socket is level-triggered and exclusive: one loop
	// wakes per new connection, and takes it if no other did.
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | epollExclusive, Fd: int32(lfd)}
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, lfd, &ev); err != nil {
		l.closeFds()
		return nil, err
	}
	ev = syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(l.wakeFd)}
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, l.wakeFd, &ev); err != nil {
		l.closeFds()
		return nil, err
	}
	return l, nil
}

func (l *evLoop) closeFds() {
	syscall.Close(l.ep)
	syscall.Close(l.wakeFd)
	l.stopRing()
}

func (l *evLoop) wakeUp() {
	one := uint64(1)
	syscall.Write(l.wakeFd, (*[8]byte)(unsafe.Pointer(&one))[:])
}

// add registers fd edge-triggered for reading and writing: an event comes
// whenever data arrives or the send buffer drains, so interest never has
// to change.
func (l *evLoop) add(fd int, h evHandler) error {
	l.gen++
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | epollET, Fd: int32(fd), Pad: l.gen}
	if err := syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return err
	}
	if fd >= len(l.fds) {
		l.fds = append(l.fds, make([]fdSlot, fd+1-len(l.fds))...)
	}
	l.fds[fd] = fdSlot{h, l.gen}
	l.nFds++
	return nil
}

type fdSlot struct {
	h   evHandler // nil: not registered
	gen int32
}

// each calls f with every registered handler. f may register and forget
// descriptors: each slot is read when it is reached.
func (l *evLoop) each(f func(h evHandler)) {
	for i := 0; i < len(l.fds); i++ {
		if h := l.fds[i].h; h != nil {
			f(h)
		}
	}
}

const (
	epollET        = 1 << 31
	epollExclusive = 1 << 28
)

// forget removes fd from the loop; the caller closes it.
func (l *evLoop) forget(fd int) {
	if fd < len(l.fds) && l.fds[fd].h != nil {
		l.fds[fd] = fdSlot{}
		l.nFds--
	}
	_ = syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_DEL, fd, nil)
}

func (l *evLoop) run() {
	defer func() {
		l.takeInbox(true)
		l.each(func(h evHandler) {
			if c, ok := h.(*cliConn); ok {
				c.abort()
			}
		})
		// Closing forgets the descriptor and leaves the idle lists.
		l.each(func(h evHandler) {
			if u, ok := h.(*upConn); ok {
				u.close()
			}
		})
		l.endRound()
		l.closeFds()
		close(l.done)
	}()
	draining := false
	yielded := time.Now().UnixNano()
	looked := yielded
	runnable := []metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}
	for {
		n := l.wait()
		// One clock read per wake-up: every request this round of events
		// touches is timed by it (a clock read costs tens of nanoseconds
		// on virtual machines, and a request would otherwise take several).
		l.clock = time.Now()
		l.now = l.clock.UnixNano()
		if l.now-looked > int64(yieldEvery) {
			// A loop under load never blocks, and would keep its P from
			// the process's other goroutines (health checks, the admin
			// listener, handed-over connections) until the runtime
			// preempts it: it makes way itself. A yield costs a scheduler
			// round and waking a thread for the idle spare P (which
			// usually runs those goroutines), several µs: yielding every
			// millisecond whether anything waited was 1.5% of kvca's CPU
			// at 4 KB. Reading the count of runnable goroutines costs
			// ~70 ns.
			looked = l.now
			if l.now-yielded > int64(yieldMax) || othersRunnable(runnable) {
				runtime.Gosched()
				yielded = l.now
			}
		}
		for i := 0; i < n; i++ {
			ev := &l.events[i]
			switch fd := int(ev.Fd); fd {
			case l.lfd:
				if !draining {
					l.accept()
				}
			case l.wakeFd:
				var b [8]byte
				syscall.Read(l.wakeFd, b[:])
				l.takeInbox(draining)
				l.runTasks()
			default:
				if fd < len(l.fds) {
					if sl := l.fds[fd]; sl.h != nil && sl.gen == ev.Pad {
						l.event(sl.h, ev.Events, false)
					}
				}
			}
		}
		if l.kill.Load() {
			return
		}
		if !draining && l.drain.Load() {
			draining = true
			_ = syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_DEL, l.lfd, nil)
			l.each(func(h evHandler) {
				if c, ok := h.(*cliConn); ok {
					c.drain()
				}
			})
		}
		if l.nMarks > 0 {
			l.expireMarks()
		}
		if l.now >= l.scanAt {
			l.scanAt = l.now + int64(deadlineTick)
			if l.now >= l.trimAt {
				l.trimAt = l.now + int64(bufTrimEvery)
				l.trimBufs()
			}
			if l.acceptAt != 0 && l.now >= l.acceptAt && !draining {
				l.resumeAccept()
			}
			l.each(func(h evHandler) {
				if d := h.deadline(); d != 0 && d <= l.now {
					l.event(h, 0, true)
				}
			})
		}
		if l.ring != nil {
			l.endRound()
		}
		// Checked after the deadlines: a draining loop whose last
		// connection a timeout closed would otherwise block in epoll with
		// nothing left to wake it, and hold the shutdown to its deadline.
		if draining && l.nCli == 0 {
			return
		}
	}
}

// othersRunnable reports whether goroutines wait for a P (s is the
// caller's sample for /sched/goroutines/runnable:goroutines).
func othersRunnable(s []metrics.Sample) bool {
	metrics.Read(s)
	return s[0].Value.Kind() == metrics.KindUint64 && s[0].Value.Uint64() > 0
}

// event hands ev, or its deadline, to h. A panic (a bug) must not take
// the process and every other connection down: it is logged, and the
// connection it happened on is closed and its load released as for a
// client that left.
func (l *evLoop) event(h evHandler, ev uint32, timeout bool) {
	defer func() {
		if r := recover(); r != nil {
			l.s.log.Error("event loop: panic serving a connection; closing it", "panic", r, "stack", string(debug.Stack()))
			defer func() { _ = recover() }() // state may be too broken to clean up
			switch x := h.(type) {
			case *cliConn:
				x.gone()
			case *upConn:
				if c := x.cli; c != nil {
					c.gone()
				}
				x.close()
			}
		}
	}()
	if timeout {
		h.timeout()
	} else {
		h.event(ev)
	}
}

// wait returns the number of ready events, in one system call through
// the runtime (which lets the P go only if the call blocks). A
// non-blocking raw look first, to stay out of the runtime under load,
// cost more than it saved: at light load most looks come back empty and
// are a second call (on the agent replay, epoll_wait calls fell by 45%
// without it, and the CPU a request by about 4% in six alternating pairs
// of rounds; at 1 KB under full load the two were even).
func (l *evLoop) wait() int {
	ms := int(deadlineTick / time.Millisecond)
	if l.nCli == 0 && l.nFds == 0 && l.acceptAt == 0 && l.bufBytes == 0 {
		ms = -1 // nothing to time out, no free buffers to give back
	}
	ms = l.markWait(ms)
	n, err := syscall.EpollWait(l.ep, l.events[:], ms)
	if err != nil {
		return 0 // EINTR
	}
	return n
}

// accept takes new connections and gives each to the loop with the
// fewest: whichever loop the kernel wakes for the listening socket, the
// connections (and so the cores) stay evenly shared, where a burst of
// connections would otherwise land on one loop and leave a core idle.
// Beyond --max-client-conns a new connection is closed at once. Out of
// descriptors (or memory), the loop stops accepting for a while instead
// of being woken again at once by the same pending connection.
func (l *evLoop) accept() {
	s := l.s
	for {
		fd, sa, err := syscall.Accept4(l.lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			switch err {
			case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM:
				l.pauseAccept(err)
			case syscall.EINVAL:
				// The socket no longer listens (shut down): it stays
				// readable, and would wake the loop for ever.
				_ = syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_DEL, l.lfd, nil)
			default:
				l.acceptOff = 0
			}
			return
		}
		l.acceptOff = 0
		if max := s.cfg.MaxClientConns; max > 0 && int(s.clientConns.Load()) >= max {
			s.m.connsRefused.Inc()
			_ = syscall.SetsockoptLinger(fd, syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
			syscall.Close(fd)
			continue
		}
		s.clientConns.Add(1)
		_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		nc := newConn{fd: fd, ip: appendSockaddrIP(nil, sa)}
		if s.tlsPub != nil {
			go l.handshakeClient(nc)
			continue
		}
		if t := l.least(); t != l && t.give(nc) {
			continue
		}
		l.adopt(nc)
	}
}

// pauseAccept stops accepting on l for a back-off that doubles from
// 10 ms to 1 s while accepting keeps failing.
func (l *evLoop) pauseAccept(err error) {
	l.acceptOff = min(max(2*l.acceptOff, 10*time.Millisecond), time.Second)
	l.acceptAt = l.now + int64(l.acceptOff)
	if l.scanAt > l.acceptAt {
		l.scanAt = l.acceptAt
	}
	l.s.m.acceptErrors.Inc()
	_ = syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_DEL, l.lfd, nil)
	l.s.log.Warn("accept failed; pausing new connections", "err", err, "for", l.acceptOff)
}

func (l *evLoop) resumeAccept() {
	l.acceptAt = 0
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | epollExclusive, Fd: int32(l.lfd)}
	_ = syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, l.lfd, &ev)
}

// newConn is an accepted connection on its way to a loop.
type newConn struct {
	fd  int
	ip  []byte
	tls *tlsSock // after its handshake, if TLS
}

// least returns the loop with the fewest client connections (l on a tie).
func (l *evLoop) least() *evLoop {
	best, n := l, l.open.Load()
	for _, o := range l.peers {
		if m := o.open.Load(); m < n {
			best, n = o, m
		}
	}
	return best
}

// give queues nc for l, which adopts it when it wakes; false once l has
// stopped (the caller keeps it).
func (l *evLoop) give(nc newConn) bool {
	l.inMu.Lock()
	if l.inClosed {
		l.inMu.Unlock()
		return false
	}
	l.inbox = append(l.inbox, nc)
	l.open.Add(1) // counted at once, so the next choice sees it
	l.inMu.Unlock()
	l.wakeUp()
	return true
}

// takeInbox adopts the connections other loops gave l; with closing, it
// closes them instead and takes no more.
func (l *evLoop) takeInbox(closing bool) {
	l.inMu.Lock()
	q := l.inbox
	l.inbox = nil
	l.inClosed = l.inClosed || closing
	l.inMu.Unlock()
	for _, nc := range q {
		l.open.Add(-1)
		if closing {
			syscall.Close(nc.fd)
			l.s.clientConns.Add(-1)
			continue
		}
		l.adopt(nc)
	}
}

// post runs f on l's goroutine (f continues a connection of l after work
// a goroutine did for it); dropped if l has stopped (it closed every
// connection on its way out).
func (l *evLoop) post(f func()) {
	l.inMu.Lock()
	if l.inClosed {
		l.inMu.Unlock()
		return
	}
	l.tasks = append(l.tasks, f)
	l.inMu.Unlock()
	l.wakeUp()
}

func (l *evLoop) runTasks() {
	l.inMu.Lock()
	q := l.tasks
	l.tasks = nil
	l.inMu.Unlock()
	for _, f := range q {
		l.task(f)
	}
}

// task runs f under the loops' panic guard.
func (l *evLoop) task(f func()) {
	defer func() {
		if r := recover(); r != nil {
			l.s.log.Error("event loop: panic in a task", "panic", r, "stack", string(debug.Stack()))
		}
	}()
	f()
}

// adopt registers a client connection with l.
func (l *evLoop) adopt(nc newConn) {
	c := &cliConn{l: l, sock: sock{fd: nc.fd, tls: nc.tls}, ip: nc.ip}
	c.h.Reset()
	if l.add(nc.fd, c) != nil {
		syscall.Close(nc.fd)
		l.s.clientConns.Add(-1)
		return
	}
	l.nCli++
	l.open.Add(1)
	c.idle()
	if nc.tls != nil {
		// The handshake may have brought the first request's bytes along.
		c.sock.rd = true
		c.read()
	}
}

func appendSockaddrIP(b []byte, sa syscall.Sockaddr) []byte {
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		b, _ = net.IP(a.Addr[:]).AppendText(b)
	case *syscall.SockaddrInet6:
		b, _ = net.IP(a.Addr[:]).AppendText(b)
	}
	return b
}

// getBuf returns a buffer of at least n bytes. Buffers come in powers of
// two from loopBufSize and are reused by the loop: a 128 KB request must
// not cost a fresh 128 KB (zeroed, then collected) each time.
func (l *evLoop) getBuf(n int) []byte {
	k := bufClass(n)
	if k < 0 {
		return make([]byte, n) // too large to keep
	}
	if list := l.bufs[k]; len(list) > 0 {
		b := list[len(list)-1]
		l.bufs[k] = list[:len(list)-1]
		l.bufLow[k] = min(l.bufLow[k], len(list)-1)
		l.bufBytes -= cap(b)
		return b[:cap(b)]
	}
	l.bufLow[k] = 0
	return make([]byte, loopBufSize<<k)
}

// trimBufs drops the free buffers no request took since the last trim:
// the pool keeps what the loop's traffic really holds at once (64
// connections posting 1 MB bodies need 64 MB of them; allocating and
// zeroing a megabyte a request was a tenth of kvca's CPU), and gives back
// a burst's buffers a trim interval or two after it ends. The least
// recently freed go: the list is taken from its end.
func (l *evLoop) trimBufs() {
	for k := range l.bufs {
		list := l.bufs[k]
		n := min(l.bufLow[k], len(list))
		for _, b := range list[:n] {
			l.bufBytes -= cap(b)
		}
		kept := copy(list, list[n:])
		clear(list[kept:])
		l.bufs[k] = list[:kept]
		l.bufLow[k] = kept
	}
}

func (l *evLoop) putBuf(b []byte) {
	k := bufClass(cap(b))
	if k < 0 || cap(b) != loopBufSize<<k || l.bufBytes+cap(b) > maxPooledBytes {
		return
	}
	l.bufs[k] = append(l.bufs[k], b[:cap(b)])
	l.bufBytes += cap(b)
}

// bufClass is the smallest k with loopBufSize<<k >= n, or -1 past the
// largest class.
func bufClass(n int) int {
	for k := 0; k < len(evLoop{}.bufs); k++ {
		if n <= loopBufSize<<k {
			return k
		}
	}
	return -1
}

// maxPooledBytes bounds the free buffers a loop keeps; trimBufs gives
// back, every bufTrimEvery, those no request took.
const maxPooledBytes = 256 << 20

// bufTrimEvery is how long a free buffer may stay unused in the pool.
const bufTrimEvery = 2 * time.Second

// sockaddr returns a fresh socket address for a connect.
func (u *upstream) sockaddr() syscall.Sockaddr {
	a := u.la.Load()
	switch {
	case a == nil:
		return nil
	case a.v6:
		return &syscall.SockaddrInet6{Port: a.port, Addr: a.ip}
	}
	s4 := &syscall.SockaddrInet4{Port: a.port}
	copy(s4.Addr[:], a.ip[:4])
	return s4
}
