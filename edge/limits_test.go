//go:build linux

package edge

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
)

// Resource bounds: memory grows with bytes received, not with what a head
// declares; client connections are bounded; running out of descriptors
// does not spin.

// countConns runs on each loop and counts its client connections for
// which f holds (loops own their connections: nothing else may look).
func countConns(t *testing.T, s *Server, f func(*cliConn) bool) int {
	t.Helper()
	total := 0
	for _, l := range s.evl.loops {
		ch := make(chan int, 1)
		l.post(func() {
			n := 0
			l.each(func(h evHandler) {
				if c, ok := h.(*cliConn); ok && f(c) {
					n++
				}
			})
			ch <- n
		})
		select {
		case n := <-ch:
			total += n
		case <-time.After(10 * time.Second):
			t.Fatal("a loop did not run the count")
		}
	}
	return total
}

// TestMaxBlocksHoldsDeclaredBodies: 1,000 connections that each sent only
// a head declaring an 8 MB body cost the process at most 64 KB of heap
// each. (Named for the allocs step of make test, which runs it without
// the race detector along with the other memory bounds.)
func TestMaxBlocksHoldsDeclaredBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 2,000 descriptors")
	}
	// Alone in a process of its own, so that no other test's server is
	// freed, or left behind, between the two readings of the heap.
	t.Parallel()
	if !testkit.Isolate(t) {
		return
	}
	b := newRawBackend(t, nil)
	s, _ := startRawProxy(t, edgeModes[0], nil, func(c *Config) { c.Backends = []string{b.url("")} })
	const n = 1000
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 8<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitUntil(t, "every head read", func() bool {
		return countConns(t, s, func(c *cliConn) bool { return c.state == cliBody }) == n
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	per := grown / n
	t.Logf("%d connections waiting for declared 8 MB bodies: heap in use grew %.1f MiB, %.1f KB per connection (both ends)",
		n, float64(grown)/(1<<20), float64(per)/1024)
	if per > 64<<10 {
		t.Fatalf("%d bytes of heap per connection, bound 64 KB", per)
	}
	b.none(t)
}

// TestMaxClientConns: beyond --max-client-conns a new connection is
// closed at once and counted; once one closes, the next is served.
func TestMaxClientConns(t *testing.T) {
	t.Parallel()
	for _, m := range edgeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t, nil)
			s, d := startRawProxy(t, m, nil, func(c *Config) { c.Backends = []string{b.url("")}; c.MaxClientConns = 3 })
			var held []*rawConn
			for i := 0; i < 3; i++ {
				c := d.dial(t)
				c.open()
				held = append(held, c)
			}
			for i := 1; i <= 2; i++ {
				// The kernel completes the handshake; kvca resets it, so
				// soon that the dial itself may see the reset.
				nc, err := net.Dial("tcp", s.Addr())
				switch {
				case errors.Is(err, syscall.ECONNRESET):
				case err != nil:
					t.Fatal(err)
				case m.tls:
					_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
					cfg := d.tls.Clone()
					cfg.ServerName = "127.0.0.1"
					if err := tls.Client(nc, cfg).Handshake(); err == nil {
						t.Fatal("TLS handshake completed beyond the bound")
					}
					nc.Close()
				default:
					_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
					c := &rawConn{testkit.Wrap(t, nc), t}
					fmt.Fprintf(nc, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
					c.closed()
					nc.Close()
				}
				if got := metric(t, s, "kvca_client_connections_refused_total"); got != float64(i) {
					t.Fatalf("refused connections counted %v, want %d", got, i)
				}
			}
			if got := metric(t, s, "kvca_client_connections"); got != 3 {
				t.Fatalf("kvca_client_connections %v, want 3", got)
			}
			held[0].Close()
			testkit.WaitUntil(t, "the connection counted out", func() bool { return metric(t, s, "kvca_client_connections") == 2 })
			d.dial(t).open()
			for _, c := range held[1:] {
				c.open()
			}
		})
	}
}

// TestAcceptBacksOffOutOfDescriptors runs kvca in a child process with a
// low descriptor limit, fills every descriptor with client connections,
// and checks that the child then stays nearly idle (accepting backs off)
// and counts the accept errors; once descriptors are free it serves
// again.
func TestAcceptBacksOffOutOfDescriptors(t *testing.T) {
	if testkit.IsChild(t) {
		emfileChild(t)
		return
	}
	if testing.Short() {
		t.Skip("runs a child process")
	}
	t.Parallel()
	cmd := testkit.ChildCommand(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	defer func() {
		if !exited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	lines := make(chan string, 16)
	var outMu sync.Mutex
	var out strings.Builder // everything the child printed, for a failure
	go func() {
		sc := bufio.NewScanner(outPipe)
		for sc.Scan() {
			outMu.Lock()
			out.WriteString(sc.Text() + "\n")
			outMu.Unlock()
			lines <- sc.Text()
		}
		close(lines)
	}()
	childOut := func() string {
		outMu.Lock()
		defer outMu.Unlock()
		return out.String() + stderr.String()
	}
	// expect returns the fields of the child's next line starting with
	// word.
	expect := func(word string) []string {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("child ended before %s:\n%s", word, childOut())
				}
				if f := strings.Fields(l); len(f) > 0 && f[0] == word {
					return f
				}
			case <-timeout:
				t.Fatalf("no %s from the child", word)
			}
		}
	}
	f := expect("ADDR")
	addr := f[1]
	free, _ := strconv.Atoi(f[3])
	var conns []net.Conn
	for i := 0; i < free+20; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	fmt.Fprintln(in, "MEASURE")
	f = expect("CPU")
	cpu, _ := strconv.ParseFloat(f[1], 64)
	errs, _ := strconv.ParseFloat(f[3], 64)
	t.Logf("out of descriptors: %.3f s of CPU in 1 s, %v accept errors", cpu, errs)
	if errs == 0 {
		t.Fatal("no accept error counted")
	}
	if cpu >= 0.2 {
		t.Fatalf("%.3f s of CPU in one second out of descriptors: accept spins", cpu)
	}
	for _, c := range conns {
		c.Close()
	}
	// Descriptors free again: a new connection is served.
	dialer{addr: addr}.dial(t).open()
	fmt.Fprintln(in, "EXIT")
	in.Close()
	exited = true
	for range lines { // drain, so that Wait returns
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, childOut())
	}
}

// emfileChild is the child of TestAcceptBacksOffOutOfDescriptors.
func emfileChild(t *testing.T) {
	s := startProxy(t, func(c *Config) {
		c.Backends = []string{"http://127.0.0.1:1#m"}
		c.AdminListen = ""
		c.HealthInterval = 0
		c.Loops = 2
	})
	// Opened before the limit: reading it later needs no descriptor.
	stat, err := os.Open("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	defer stat.Close()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	const free = 16
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = uint64(len(ents) + free)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ADDR %s FREE %d\n", s.Addr(), free)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "MEASURE":
			errs := func() float64 {
				var b bytes.Buffer
				s.m.set.WritePrometheus(&b)
				return metricIn(b.String(), "kvca_accept_errors_total")
			}
			testkit.WaitUntil(t, "an accept error", func() bool { return errs() > 0 })
			c0 := cpuTime(t, stat)
			time.Sleep(time.Second) // the measured interval
			c1 := cpuTime(t, stat)
			fmt.Printf("CPU %.3f ACCEPTERRORS %v\n", c1-c0, errs())
		case "EXIT":
			return
		}
	}
}

// cpuTime is the process's user and system CPU time in seconds, from
// /proc/self/stat (fields 14 and 15, in clock ticks of 1/100 s).
func cpuTime(t *testing.T, stat *os.File) float64 {
	t.Helper()
	var buf [4096]byte
	n, err := stat.ReadAt(buf[:], 0)
	if n == 0 {
		t.Fatalf("reading /proc/self/stat: %v", err)
	}
	s := string(buf[:n])
	// The command name (field 2) may hold spaces; fields count from after it.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/self/stat: %q", s)
	}
	return (ut + st) / 100
}
