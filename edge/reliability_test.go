package edge

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/internal/testkit"
)

func startEngine(t *testing.T, cfg mock.Config) *mock.Engine {
	t.Helper()
	if cfg.DecodePerToken == 0 {
		cfg.DecodePerToken = time.Millisecond
	}
	if cfg.PrefillPerToken == 0 {
		cfg.PrefillPerToken = time.Microsecond
	}
	return testkit.Start(t, mock.New(cfg))
}

func mockChat(id, turn int, stream bool, maxTokens int) string {
	b := conversation(id, turn, stream)
	return strings.Replace(b, `"model":"m"`, fmt.Sprintf(`"model":"mock","max_tokens":%d`, maxTokens), 1)
}

// readAllEvents reads an SSE body to its end and returns the data lines
// and the error that ended it (nil for a clean end).
func readAllEvents(body io.Reader) (events []string, err error) {
	r := bufio.NewReader(body)
	for {
		line, e := r.ReadString('\n')
		if line = strings.TrimSpace(line); line != "" {
			events = append(events, line)
		}
		if e != nil {
			if e == io.EOF {
				return events, nil
			}
			return events, e
		}
	}
}

func TestBackendKilledMidStream(t *testing.T) {
	t.Parallel()
	bad := startEngine(t, mock.Config{Name: "bad", Faults: mock.Faults{KillAfterChunks: 2}})
	good := startEngine(t, mock.Config{Name: "good"})
	s := startProxy(t, func(c *Config) {
		c.Backends = []string{bad.URL()}
		c.HealthInterval = time.Hour
	})
	resp, err := client.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(mockChat(1, 0, true, 8)))
	if err != nil {
		t.Fatal(err)
	}
	events, rerr := readAllEvents(resp.Body)
	resp.Body.Close()
	joined := strings.Join(events, "\n")
	if !strings.Contains(joined, "event: error") || strings.Contains(joined, "[DONE]") {
		t.Fatalf("broken stream not signalled: %q", joined)
	}
	if rerr == nil {
		t.Fatal("broken stream ended like a clean one (terminating chunk sent)")
	}
	waitIdle(t, s)
	if got := s.fleet().ups[0].m.errors[errStream].Get(); got != 1 {
		t.Fatalf("stream errors %d", got)
	}
	// Later requests avoid the broken backend without failures.
	s2 := startProxy(t, func(c *Config) {
		c.Backends = []string{bad.URL(), good.URL()}
		c.HealthInterval = time.Hour
		c.FailThreshold = 1
		c.Routing.Policy = "kvca" // sequential first turns take turns, so some reach bad
	})
	for i := 0; i < 6; i++ {
		resp, err := client.Post("http://"+s2.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(mockChat(i, 0, true, 4)))
		if err != nil {
			t.Fatal(err)
		}
		events, _ := readAllEvents(resp.Body)
		resp.Body.Close()
		if i >= 2 && strings.Contains(strings.Join(events, "\n"), "event: error") {
			t.Fatalf("request %d still reached the broken backend", i)
		}
	}
	if s2.fleet().sched.Backends[0].Healthy() {
		t.Fatal("backend that broke a stream was not ejected")
	}
	waitIdle(t, s2)
}

func TestBackendDiesAndComesBack(t *testing.T) {
	t.Parallel()
	a := startEngine(t, mock.Config{Name: "a"})
	b := startEngine(t, mock.Config{Name: "b"})
	s := startProxy(t, func(c *Config) {
		c.Backends = []string{a.URL(), b.URL()}
		c.HealthInterval = 50 * time.Millisecond
	})
	for i := 0; i < 8; i++ {
		if resp, out := post(t, s, "/v1/chat/completions", mockChat(i, 1, false, 2)); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
	}
	if err := a.Down(); err != nil {
		t.Fatal(err)
	}
	// Requests keep succeeding while a is down: retries, then ejection.
	for i := 0; i < 20; i++ {
		if resp, out := post(t, s, "/v1/chat/completions", mockChat(i, 2, i%2 == 0, 2)); resp.StatusCode != 200 {
			t.Fatalf("request %d while a is down: %d %s", i, resp.StatusCode, out)
		}
	}
	testkit.WaitUntil(t, "a ejected", func() bool { return !s.fleet().sched.Backends[0].Healthy() })
	gen := s.table.Generation(0)
	a.Restart() // its cache is gone
	if err := a.Up(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitUntil(t, "a re-admitted", func() bool { return s.fleet().sched.Backends[0].Healthy() })
	if s.table.Generation(0) <= gen {
		t.Fatalf("generation not bumped: %d", s.table.Generation(0))
	}
	// None of a's old locations survive.
	held0 := 0
	st := s.State()
	if st.Backends[0].Generation != s.table.Generation(0) {
		t.Fatal("state does not show the new generation")
	}
	for i := 0; i < 8; i++ {
		c := s.getCall()
		if err := s.plan(c, canon.Chat, []byte(mockChat(i, 1, false, 2))); err != nil {
			t.Fatal(err)
		}
		for _, h := range c.req.Chain {
			if s.table.Lookup(h, s.table.Now()).Has(0) {
				held0++
			}
		}
		s.putCall(c)
	}
	if held0 != 0 {
		t.Fatalf("%d stale locations of the restarted backend remain", held0)
	}
	waitIdle(t, s)
}

func TestRetryOn503And429BeforeAnyByte(t *testing.T) {
	t.Parallel()
	for _, status := range []int32{503, 429} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			a, b := newTestBackend(t, "a"), newTestBackend(t, "b")
			a.status.Store(status)
			b.status.Store(status)
			s := startProxy(t, func(c *Config) { c.Retries = 1; c.HealthInterval = time.Hour }, a, b)
			// Both refuse: the last answer is passed through unchanged.
			resp, out := post(t, s, "/v1/chat/completions", conversation(1, 0, false))
			if resp.StatusCode != int(status) || !strings.Contains(out, "backend says no") {
				t.Fatalf("%d: got %d %s", status, resp.StatusCode, out)
			}
			// One refuses: the client never sees it.
			b.status.Store(0)
			for i := 0; i < 6; i++ {
				resp, out := post(t, s, "/v1/chat/completions", conversation(i, 0, false))
				if resp.StatusCode != 200 || backendOf(resp) != "b" {
					t.Fatalf("%d: got %d from %q: %s", status, resp.StatusCode, backendOf(resp), out)
				}
			}
			if s.table.Stats().Blocks == 0 {
				t.Fatal("successful retries not learned")
			}
			waitIdle(t, s)
			// With retries off the refusal reaches the client.
			s2 := startProxy(t, func(c *Config) { c.Retries = 0; c.Backends = []string{a.url()} })
			if resp, _ := post(t, s2, "/v1/chat/completions", conversation(1, 0, false)); resp.StatusCode != int(status) {
				t.Fatalf("retries=0: %d", resp.StatusCode)
			}
			if s2.table.Stats().Blocks != 0 {
				t.Fatal("an error answer was learned")
			}
		})
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "stall")
	b.gate = make(chan struct{}) // never released: the stream stalls after one event
	b.events = 3
	s := startProxy(t, func(c *Config) { c.StreamIdleTimeout = 200 * time.Millisecond }, b)
	resp, err := client.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(conversation(1, 0, true)))
	if err != nil {
		t.Fatal(err)
	}
	events, rerr := readAllEvents(resp.Body)
	resp.Body.Close()
	if rerr == nil || !strings.Contains(strings.Join(events, "\n"), "event: error") {
		t.Fatalf("stalled stream not ended with an error: %q %v", events, rerr)
	}
	waitIdle(t, s)
}

func TestAllDownThenOneReturns(t *testing.T) {
	t.Parallel()
	e := startEngine(t, mock.Config{Name: "only"})
	s := startProxy(t, func(c *Config) {
		c.Backends = []string{e.URL()}
		c.HealthInterval = 50 * time.Millisecond
	})
	if err := e.Down(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitUntil(t, "backend unhealthy", func() bool { return !s.fleet().sched.Backends[0].Healthy() })
	start := time.Now()
	resp, out := post(t, s, "/v1/chat/completions", mockChat(1, 0, false, 2))
	if resp.StatusCode != 503 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("503 was not immediate")
	}
	if err := e.Up(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitUntil(t, "backend back", func() bool { return s.fleet().sched.Backends[0].Healthy() })
	if resp, out := post(t, s, "/v1/chat/completions", mockChat(1, 0, false, 2)); resp.StatusCode != 200 {
		t.Fatalf("after return: %d %s", resp.StatusCode, out)
	}
	if st := readyStatus(t, s); st != 200 {
		t.Fatalf("/ready %d", st)
	}
}

// readyStatus is the status of s's /ready.
func readyStatus(t *testing.T, s *Server) int {
	t.Helper()
	r, err := client.Get("http://" + s.Addr() + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	return r.StatusCode
}

// startUnmanaged starts a proxy in front of b that the test shuts down
// itself: startProxy's cleanup would report the shutdown's result as an
// error where the test expects one.
func startUnmanaged(t *testing.T, b *testBackend, mod func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", ""
	cfg.Backends = []string{b.url()}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGracefulDrain(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	b.gate = make(chan struct{})
	b.events = 3
	s := startUnmanaged(t, b, nil)
	// A client of its own: the shared transport may hold idle
	// connections to an earlier test's server on the same port, which a
	// POST is not retried over.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	const n = 4
	var wg sync.WaitGroup
	results := make(chan string, n)
	started := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := hc.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(conversation(i, 0, true)))
			if err != nil {
				results <- err.Error()
				started <- struct{}{} // the test reports it, rather than wait for ever
				return
			}
			r := bufio.NewReader(resp.Body)
			readEvent(r)
			started <- struct{}{}
			events, err := readAllEvents(r)
			resp.Body.Close()
			if err != nil || len(events) == 0 || events[len(events)-1] != "data: [DONE]" {
				results <- fmt.Sprintf("cut: %v %q", err, events)
				return
			}
			results <- "ok"
		}()
	}
	for i := 0; i < n; i++ {
		<-started
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	// New connections are refused while the streams drain.
	testkit.WaitUntil(t, "listener closed", func() bool {
		c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	for i := 0; i < 2*n; i++ {
		select {
		case b.gate <- struct{}{}:
		case <-time.After(time.Second):
		}
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r != "ok" {
			t.Fatalf("in-flight stream: %s", r)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// A backend whose connections are all in use is busy, not dead: the
// request is answered 503 upstream_busy (or served elsewhere), and the
// backend is not ejected however often it happens.
func TestBusyBackendIsNotEjected(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	b.gate = make(chan struct{})
	b.events = 2
	s := startProxy(t, func(c *Config) {
		c.MaxConnsPerBackend = 1
		c.FailThreshold = 1
		c.HealthInterval = time.Hour
	}, b)
	// Model discovery shares the pool: let it finish so that it does not
	// hold the only connection when the first stream is sent.
	testkit.WaitUntil(t, "models discovered", func() bool {
		idx := s.models.Load()
		return idx != nil && idx.wild.Empty()
	})
	// The first stream holds the only connection until the gate opens.
	first := make(chan error, 1)
	go func() {
		resp, err := client.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(conversation(1, 0, true)))
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("first stream: status %d", resp.StatusCode)
			}
		}
		first <- err
	}()
	testkit.WaitUntil(t, "first stream at the backend", func() bool {
		select {
		case err := <-first:
			t.Fatalf("first stream ended early: %v", err)
		default:
		}
		return b.hits.Load() == 1
	})
	for i := 0; i < 3; i++ {
		resp, out := post(t, s, "/v1/chat/completions", conversation(2+i, 0, false))
		if resp.StatusCode != 503 || !strings.Contains(out, "upstream_busy") {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, out)
		}
	}
	if !s.fleet().sched.Backends[0].Healthy() {
		t.Fatal("a busy backend was ejected")
	}
	if got := s.fleet().ups[0].m.errors[errBusy].Get(); got != 3 {
		t.Fatalf("busy count %d", got)
	}
	if got := s.fleet().ups[0].m.errors[errConnect].Get(); got != 0 {
		t.Fatalf("busy counted as %d connection failures", got)
	}
	close(b.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	resp, out := post(t, s, "/v1/chat/completions", conversation(9, 0, false))
	if resp.StatusCode != 200 {
		t.Fatalf("after the stream: %d %s", resp.StatusCode, out)
	}
	waitIdle(t, s)
}

// --drain-delay: at shutdown /ready fails at once while requests are
// still served; the listener closes only after the delay.
func TestDrainDelay(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	s := startProxy(t, func(c *Config) { c.DrainDelay = 400 * time.Millisecond }, b)
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	testkit.WaitUntil(t, "/ready failing", func() bool {
		resp, err := client.Get("http://" + s.Addr() + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 503
	})
	if resp, out := post(t, s, "/v1/chat/completions", conversation(1, 0, false)); resp.StatusCode != 200 {
		t.Fatalf("during the drain delay: %d %s", resp.StatusCode, out)
	}
	select {
	case err := <-done:
		t.Fatalf("shutdown returned during the drain delay: %v", err)
	default:
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("the listener still accepts after shutdown")
	}
}

// A failed attempt's backend is excluded from the retry: a follow-up whose
// only known holder has died (health checks off, below the ejection
// threshold, so kvca still believes in it) is tried there once, then on
// the other backend, which answers. Without the exclusion the holder
// would be picked again and the client would get a 502.
func TestRetryExcludesTheFailedBackend(t *testing.T) {
	t.Parallel()
	a, b := newTestBackend(t, "a"), newTestBackend(t, "b")
	s := startProxy(t, func(c *Config) {
		c.Routing.Policy, c.Retries, c.FailThreshold, c.HealthInterval = "kvca", 1, 10, 0
	}, a, b)
	resp, out := post(t, s, "/v1/chat/completions", conversation(1, 0, false))
	if resp.StatusCode != 200 {
		t.Fatalf("first turn: %d %s", resp.StatusCode, out)
	}
	home := a
	if backendOf(resp) == "b" {
		home = b
	}
	waitIdle(t, s)
	home.close()
	resp, out = post(t, s, "/v1/chat/completions", conversation(1, 1, false))
	if resp.StatusCode != 200 || backendOf(resp) == home.name {
		t.Fatalf("follow-up after its holder died: %d from %q: %s", resp.StatusCode, backendOf(resp), out)
	}
	found := false
	for _, u := range s.fleet().ups {
		if u.addr.url == home.url() {
			found = true
			if got := u.m.errors[errConnect].Get(); got != 1 {
				t.Fatalf("connection failures counted on the dead holder: %d, want exactly 1 (one attempt)", got)
			}
		}
	}
	if !found {
		t.Fatal("dead holder not found among the backends")
	}
	waitIdle(t, s)
}

// A shutdown whose deadline passes with a stream still running cuts it
// with the SSE error event (never a clean-looking end), returns an error
// saying so, and releases the stream's load.
func TestShutdownDeadlineCutsStreams(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	b.events = 3
	b.gate = make(chan struct{}) // the stream stalls after its first event
	defer close(b.gate)
	s := startUnmanaged(t, b, func(c *Config) { c.HealthInterval = 0 })
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := conversation(1, 0, true)
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 16)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); err == nil {
		t.Fatal("shutdown cut a stream and reported no error")
	}
	rest, _ := io.ReadAll(resp.Body) // ends without the terminating chunk
	if !strings.Contains(string(rest), "event: error") || !strings.Contains(string(rest), `"code":"proxy_shutdown"`) {
		t.Fatalf("the cut stream did not end with the shutdown event: %q", rest)
	}
	if be := s.fleet().sched.Backends[0]; be.Active() != 0 || be.Prefill() != 0 {
		t.Fatalf("load left after shutdown: active %d prefill %d", be.Active(), be.Prefill())
	}
}

// A second Shutdown does nothing but return the first's result: it must
// not shut down or close a listening descriptor that, closed by the first,
// another server may have been given since.
func TestShutdownTwiceLeavesOthersAlone(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	for range 5 {
		first := startProxy(t, nil, b)
		if err := first.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		second := startProxy(t, nil, b)
		if err := first.Shutdown(context.Background()); err != nil {
			t.Fatalf("second Shutdown: %v", err)
		}
		if resp, out := post(t, second, "/v1/chat/completions", conversation(1, 0, false)); resp.StatusCode != 200 {
			t.Fatalf("the other server after a second Shutdown: %d %s", resp.StatusCode, out)
		}
	}
}

// A connection still sending its request head when the shutdown begins is
// waited for; once its header timeout closes it, the shutdown ends at
// once, in time and without cutting anything.
func TestShutdownEndsWhenATimeoutClosesTheLastConnection(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	s := startUnmanaged(t, b, func(c *Config) {
		c.HealthInterval, c.Loops, c.HeaderTimeout = 0, 1, 200*time.Millisecond
	})
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
	testkit.WaitUntil(t, "the connection counted", func() bool { return s.clientConns.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown after the last connection timed out: %v", err)
	}
}
