//go:build linux

package uring

import (
	"errors"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's interface (include/uapi/linux/io_uring.h).
const (
	sysSetup = 425 // io_uring_setup
	sysEnter = 426 // io_uring_enter

	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	opSend         = 26 // IORING_OP_SEND
	enterGetEvents = 1  // IORING_ENTER_GETEVENTS
	setupSubmitAll = 1 << 7
)

type ringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  ringOffsets
	cqOff                                                                  cqOffsets
}

type cqOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type sqe struct {
	opcode   uint8
	flags    uint8
	ioprio   uint16
	fd       int32
	off      uint64
	addr     uint64
	len      uint32
	msgFlags uint32
	userData uint64
	_        [3]uint64
}

type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// Result is one queued send's outcome. Rest, on a short send, is the part
// the socket did not take (EAGAIN: all of it); it is the ring's memory,
// valid until the next Send.
type Result struct {
	Tag  uint32
	Err  syscall.Errno // 0 or EAGAIN with Rest; anything else: the send failed
	Rest []byte
}

// Ring is an io_uring used for sends, with an arena the queued bytes are
// copied into.
type Ring struct {
	fd                     int
	maps                   [3][]byte
	sqHead, sqTail, sqMask *uint32
	sqArray                []uint32
	sqes                   []sqe
	cqHead, cqTail, cqMask *uint32
	cqes                   []cqe
	arena                  []byte
	used                   int
	queued                 []queuedSend // by tag order; userData indexes it
	results                []Result
}

type queuedSend struct {
	tag      uint32
	off, len int32
	done     bool
}

// ErrUnsupported: the kernel refused io_uring (too old, disabled by
// kernel.io_uring_disabled, or filtered by a seccomp profile).
var ErrUnsupported = errors.New("io_uring is not available")

// New sets up a ring of entries sends and an arena of arenaBytes.
func New(entries uint32, arenaBytes int) (*Ring, error) {
	var p params
	p.flags = setupSubmitAll
	fd, _, e := syscall.RawSyscall(sysSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e == syscall.EINVAL {
		p = params{} // a kernel before 5.18 knows no SUBMIT_ALL
		fd, _, e = syscall.RawSyscall(sysSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	}
	if e != 0 {
		return nil, errors.Join(ErrUnsupported, e)
	}
	r := &Ring{fd: int(fd)}
	sizes := [3]int{
		int(p.sqOff.array + p.sqEntries*4),
		int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(cqe{}))),
		int(p.sqEntries) * int(unsafe.Sizeof(sqe{})),
	}
	for i, off := range [3]int64{offSQRing, offCQRing, offSQEs} {
		m, err := unix.Mmap(r.fd, off, sizes[i], unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.maps[i] = m
	}
	sq := unsafe.Pointer(&r.maps[0][0])
	r.sqHead = (*uint32)(unsafe.Add(sq, p.sqOff.head))
	r.sqTail = (*uint32)(unsafe.Add(sq, p.sqOff.tail))
	r.sqMask = (*uint32)(unsafe.Add(sq, p.sqOff.ringMask))
	r.sqArray = unsafe.Slice((*uint32)(unsafe.Add(sq, p.sqOff.array)), p.sqEntries)
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&r.maps[2][0])), p.sqEntries)
	cq := unsafe.Pointer(&r.maps[1][0])
	r.cqHead = (*uint32)(unsafe.Add(cq, p.cqOff.head))
	r.cqTail = (*uint32)(unsafe.Add(cq, p.cqOff.tail))
	r.cqMask = (*uint32)(unsafe.Add(cq, p.cqOff.ringMask))
	r.cqes = unsafe.Slice((*cqe)(unsafe.Add(cq, p.cqOff.cqes)), p.cqEntries)
	r.arena = make([]byte, arenaBytes)
	r.queued = make([]queuedSend, 0, p.sqEntries)
	r.results = make([]Result, 0, p.sqEntries)
	if err := r.selfTest(); err != nil {
		r.Close()
		return nil, errors.Join(ErrUnsupported, err)
	}
	return r, nil
}

// selfTest checks, on a socket pair, the two things Submit relies on:
// the kernel knows IORING_OP_SEND (5.6 and later), and a MSG_DONTWAIT
// send to a full socket completes at once with EAGAIN instead of waiting
// for room (older kernels wait, which would block the event loop).
func (r *Ring) selfTest() error {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	probe := []byte("probe")
	if res, err := r.sendNow(fds[0], probe); err != nil || res != int32(len(probe)) {
		return errors.Join(errors.New("io_uring send does not work here"), err, errnoOf(res))
	}
	_ = syscall.SetsockoptInt(fds[0], syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096)
	fill := make([]byte, 64<<10)
	for {
		if _, err := syscall.Write(fds[0], fill); err != nil {
			break // EAGAIN: full
		}
	}
	res, err := r.sendNow(fds[0], probe)
	if err != nil {
		return err
	}
	if syscall.Errno(-res) != syscall.EAGAIN {
		return errors.Join(errors.New("a MSG_DONTWAIT io_uring send to a full socket did not fail at once"), errnoOf(res))
	}
	return nil
}

// sendNow submits one send and returns its result; an error if no
// completion came without waiting (the send was left pending: closing
// the socket pair ends it).
func (r *Ring) sendNow(fd int, p []byte) (int32, error) {
	if !r.Send(fd, p, nil, 0) {
		return 0, errors.New("no room for a probe")
	}
	_, _, e := syscall.RawSyscall6(sysEnter, uintptr(r.fd), 1, 0, 0, 0, 0)
	r.queued, r.used = r.queued[:0], 0
	if e != 0 {
		return 0, e
	}
	h := atomic.LoadUint32(r.cqHead)
	if h == atomic.LoadUint32(r.cqTail) {
		return 0, errors.New("the send did not complete at once")
	}
	res := r.cqes[h&*r.cqMask].res
	atomic.StoreUint32(r.cqHead, h+1)
	return res, nil
}

func errnoOf(res int32) error {
	if res < 0 {
		return syscall.Errno(-res)
	}
	return nil
}

// Close releases the ring; nothing may be queued.
func (r *Ring) Close() {
	for i, m := range r.maps {
		if m != nil {
			_ = unix.Munmap(m)
			r.maps[i] = nil
		}
	}
	if r.fd >= 0 {
		syscall.Close(r.fd)
		r.fd = -1
	}
}

// Send queues a send of a then b to the socket fd, copied into the arena,
// with tag for its Result; false if the ring or the arena is full (Submit,
// then queue again) or the bytes could never fit.
func (r *Ring) Send(fd int, a, b []byte, tag uint32) bool {
	n := len(a) + len(b)
	if n == 0 || r.used+n > len(r.arena) || len(r.queued) == cap(r.queued) {
		return false
	}
	p := r.arena[r.used : r.used+n : r.used+n]
	copy(p, a)
	copy(p[len(a):], b)
	t := *r.sqTail // only this goroutine writes the tail
	i := t & *r.sqMask
	r.sqes[i] = sqe{
		opcode:   opSend,
		fd:       int32(fd),
		addr:     uint64(uintptr(unsafe.Pointer(&p[0]))),
		len:      uint32(n),
		msgFlags: syscall.MSG_DONTWAIT | syscall.MSG_NOSIGNAL,
		userData: uint64(len(r.queued)),
	}
	r.sqArray[i] = i
	atomic.StoreUint32(r.sqTail, t+1) // the entry is written before the kernel sees it
	r.queued = append(r.queued, queuedSend{tag: tag, off: int32(r.used), len: int32(n)})
	r.used += n
	return true
}

// Submit puts every queued send on the wire and returns their outcomes,
// in the order they completed (the slice is reused by the next Submit).
// MSG_DONTWAIT makes every send finish in the call: one that finds its
// socket full completes short or with EAGAIN rather than waiting.
func (r *Ring) Submit() []Result {
	k := len(r.queued)
	r.results = r.results[:0]
	if k == 0 {
		return r.results
	}
	left, got := k, 0
	for got < k {
		n, _, e := syscall.RawSyscall6(sysEnter, uintptr(r.fd), uintptr(left), uintptr(k-got), enterGetEvents, 0, 0)
		switch e {
		case 0:
			left -= int(n)
		case syscall.EINTR, syscall.EAGAIN, syscall.EBUSY:
		default:
			// The ring itself failed, not a send: the sends without an
			// outcome are reported failed with its error.
			r.reap(&r.results)
			for i := range r.queued {
				if q := &r.queued[i]; !q.done {
					r.results = append(r.results, Result{Tag: q.tag, Err: e})
				}
			}
			got = k
			continue
		}
		got += r.reap(&r.results)
	}
	r.queued = r.queued[:0]
	r.used = 0
	return r.results
}

// reap takes the completions there are, appending their Results to out,
// and returns how many it took.
func (r *Ring) reap(out *[]Result) int {
	h := atomic.LoadUint32(r.cqHead)
	t := atomic.LoadUint32(r.cqTail)
	n := 0
	for ; h != t; h++ {
		c := &r.cqes[h&*r.cqMask]
		n++
		if c.userData >= uint64(len(r.queued)) {
			continue
		}
		q := &r.queued[c.userData]
		q.done = true
		res := Result{Tag: q.tag}
		switch {
		case c.res == int32(q.len):
		case c.res >= 0:
			res.Rest = r.arena[q.off+c.res : q.off+q.len]
		case syscall.Errno(-c.res) == syscall.EAGAIN:
			res.Err = syscall.EAGAIN
			res.Rest = r.arena[q.off : q.off+q.len]
		default:
			res.Err = syscall.Errno(-c.res)
		}
		*out = append(*out, res)
	}
	atomic.StoreUint32(r.cqHead, h)
	return n
}
