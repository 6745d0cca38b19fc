package edge

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/internal/testkit"
	"github.com/kvca/kvca/sched"
)

func postWith(t *testing.T, s *Server, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+s.Addr()+"/v1/chat/completions", strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Error(err)
		return nil, ""
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// servedOrder is the ids of the conversations (conversation(id, 0, ...))
// whose requests b received, in the order it received them.
func servedOrder(b *testBackend) []string {
	var order []string
	for _, body := range b.received() {
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		id, _, _ := strings.Cut(strings.TrimPrefix(req.Messages[1].Content, "conversation "), " ")
		order = append(order, id)
	}
	return order
}

// With --max-inflight-per-backend 1, requests beyond it wait in kvca and
// leave the queue by priority class: high before low, whatever their
// arrival order; the backend never runs two at once.
func TestAdmissionQueuesByPriority(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	release := b.holdAnswers(t)
	s := startProxy(t, func(c *Config) { c.Admission.MaxInflightPerBackend = 1 }, b)
	var wg sync.WaitGroup
	send := func(id int, class string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, out := postWith(t, s, conversation(id, 0, false), map[string]string{"X-KVCA-Priority": class}); resp != nil && resp.StatusCode != 200 {
				t.Errorf("request %d: %d %s", id, resp.StatusCode, out)
			}
		}()
	}
	send(0, "normal")
	testkit.WaitUntil(t, "the first request at the backend", func() bool { return b.hits.Load() == 1 })
	send(1, "low")
	testkit.WaitUntil(t, "one request queued", func() bool { return s.adm.Queued() == 1 })
	send(2, "high")
	testkit.WaitUntil(t, "two requests queued", func() bool { return s.adm.Queued() == 2 })
	if b.hits.Load() != 1 {
		t.Fatalf("the backend got %d requests while its one slot was taken", b.hits.Load())
	}
	release()
	wg.Wait()
	if order, want := servedOrder(b), []string{"0", "2", "1"}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("served in order %q, want %q", order, want)
	}
	// The priority header is kvca's: the backend never sees it.
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range b.hdrs {
		if strings.Contains(strings.ToLower(h), "x-kvca-priority") {
			t.Fatalf("X-KVCA-Priority forwarded: %q", h)
		}
	}
	waitIdle(t, s)
}

// A full queue and an expired wait answer 429 in OpenAI's shape with
// Retry-After; the shed requests never reach the backend.
func TestAdmissionSheds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		code string
	}{
		{"queue full", func(c *Config) { c.Admission.QueueSize = 0 }, "queue_full"},
		{"queue timeout", func(c *Config) { c.Admission.QueueTimeout = 100 * time.Millisecond }, "queue_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newTestBackend(t, "a")
			release := b.holdAnswers(t) // the first request keeps the one slot
			s := startProxy(t, func(c *Config) { c.Admission.MaxInflightPerBackend = 1; tc.mod(c) }, b)
			first := make(chan struct{})
			go func() {
				defer close(first)
				postWith(t, s, conversation(0, 0, false), nil)
			}()
			testkit.WaitUntil(t, "the first request at the backend", func() bool { return b.hits.Load() == 1 })
			resp, out := postWith(t, s, conversation(1, 0, false), nil)
			release()
			if resp == nil {
				return
			}
			var e struct {
				Error struct{ Type, Code string }
			}
			if err := json.Unmarshal([]byte(out), &e); err != nil || resp.StatusCode != 429 || e.Error.Code != tc.code || e.Error.Type != "rate_limit_exceeded" {
				t.Fatalf("got %d %s, want 429 %s", resp.StatusCode, out, tc.code)
			}
			if ra := resp.Header.Get("Retry-After"); ra == "" || resp.Header.Get("X-Request-Id") == "" {
				t.Fatalf("429 without Retry-After or X-Request-Id: %v", resp.Header)
			}
			<-first
			if b.hits.Load() != 1 {
				t.Fatalf("a shed request reached the backend (%d requests)", b.hits.Load())
			}
			waitIdle(t, s)
		})
	}
}

// A client that leaves while queued is removed at once, holds nothing,
// and never reaches the backend.
func TestAdmissionClientLeavesWhileQueued(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	release := b.holdAnswers(t)
	s := startProxy(t, func(c *Config) { c.Admission.MaxInflightPerBackend = 1 }, b)
	first := make(chan struct{})
	go func() {
		defer close(first)
		postWith(t, s, conversation(0, 0, false), nil)
	}()
	testkit.WaitUntil(t, "the first request at the backend", func() bool { return b.hits.Load() == 1 })
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	body := conversation(1, 0, false)
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	testkit.WaitUntil(t, "the request queued", func() bool { return s.adm.Queued() == 1 })
	conn.Close()
	testkit.WaitUntil(t, "the queue empty", func() bool { return s.adm.Queued() == 0 })
	release()
	<-first
	waitIdle(t, s)
	if b.hits.Load() != 1 || s.adm.Inflight(0) != 0 {
		t.Fatalf("backend requests %d, admission slots held %d", b.hits.Load(), s.adm.Inflight(0))
	}
}

// With --queue-max-prefill, a request waits in the queue while the prefill
// of the requests already sent to the backend would take longer than the
// bound, though the backend has free slots; the first byte of the answer
// ahead of it (its prefill done) lets it go, while that answer still
// streams.
func TestAdmissionPrefillBound(t *testing.T) {
	t.Parallel()
	firstOut, restOut := make(chan struct{}), make(chan struct{})
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	chunk := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
	b := newRawBackend(t, func(r rawReq) rawAnswer {
		if strings.Contains(string(r.body), "conversation 1 ") {
			return rawAnswer{hold: firstOut, resp: head + chunk("data: {\"a\":1}\n\n"), rest: chunk("data: [DONE]\n\n") + "0\r\n\r\n", restHold: restOut}
		}
		return rawAnswer{resp: head + chunk("data: [DONE]\n\n") + "0\r\n\r\n"}
	})
	s, d := startRawProxy(t, edgeModes[0], nil, func(c *Config) {
		c.Backends = []string{b.url("")}
		c.Admission.MaxInflightPerBackend = 4
		c.Admission.QueueMaxPrefill = time.Millisecond
		c.Routing.TTFT = sched.TTFTConfig{BlockTime: time.Millisecond, Base: time.Millisecond}
	})
	req := func(body string) string {
		return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	long, short := d.dial(t), d.dial(t)
	long.send(req(conversation(1, 6, true)))
	b.next(t)
	short.send(req(conversation(2, 0, true)))
	testkit.WaitUntil(t, "the second request held back by the prefill ahead", func() bool { return s.adm.Queued() == 1 })
	if s.adm.Inflight(0) != 1 {
		t.Fatalf("%d slots held, want 1 (the backend has room)", s.adm.Inflight(0))
	}
	b.none(t)
	close(firstOut) // the long prompt's first event: its prefill is done
	if r := b.next(t); !strings.Contains(string(r.body), "conversation 2 ") {
		t.Fatalf("the backend got %q", r.body)
	}
	short.read(false)
	close(restOut)
	long.read(false)
	waitIdle(t, s)
}

// With --queue-high-preempts, a high-priority request that finds its one
// backend full, the request there already streaming, goes past the limit
// at once and the engine (preempting by priority) sets the streaming one
// aside: the high answer is complete before the normal stream ends, and
// the normal stream still ends whole. Without the flag it waits in kvca's
// queue for the slot, after the normal stream.
func TestAdmissionHighPreempts(t *testing.T) {
	t.Parallel()
	for _, preempts := range []bool{true, false} {
		e := startEngine(t, mock.Config{MaxSeqs: 1, Priority: true, DecodePerToken: 20 * time.Millisecond})
		s := startProxy(t, func(c *Config) {
			c.Backends = []string{e.URL()}
			c.Admission.MaxInflightPerBackend = 1
			c.Admission.QueueTimeout = 20 * time.Second
			c.Admission.QueueHighPreempts = preempts
		})
		resp, err := client.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(mockChat(1, 0, true, 30)))
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil { // its first event: past its prefill
			t.Fatal(err)
		}
		normal := make(chan []string, 1)
		go func() {
			ev, err := readAllEvents(br)
			if err != nil {
				t.Error(err)
			}
			resp.Body.Close()
			normal <- ev
		}()
		body := strings.Replace(mockChat(2, 0, false, 2), "{", `{"priority":-1,`, 1)
		if r, out := postWith(t, s, body, map[string]string{"X-KVCA-Priority": "high"}); r == nil || r.StatusCode != 200 {
			t.Fatalf("preempts %v: high request: %v %s", preempts, r, out)
		}
		var ev []string
		if preempts {
			select {
			case <-normal:
				t.Fatal("the normal stream ended before the high request that preempted it")
			default:
			}
		} else if !strings.Contains(scrape(t, s), `kvca_admission_admitted_total{class="high",how="queued"} 1`) {
			t.Fatal("the high request went past the limit without --queue-high-preempts")
		}
		ev = <-normal
		if last := ev[len(ev)-1]; last != "data: [DONE]" {
			t.Fatalf("preempts %v: the normal stream ended with %q", preempts, last)
		}
		want := uint64(0)
		if preempts {
			want = 1
		}
		if st := e.Stats(); st.Preemptions != want {
			t.Fatalf("preempts %v: %d preemptions", preempts, st.Preemptions)
		}
		testkit.WaitUntil(t, "the slots released", func() bool { return s.adm.Inflight(0) == 0 })
	}
}

// Within a class, tenants share the slots in turn. A request's tenant is
// X-KVCA-Tenant, else the body's user field: three requests of user alice
// queued first, then one of bob (named by the header, which wins over its
// body's user alice) and one of user carol, leave the queue as alice,
// bob, carol, alice, alice.
func TestAdmissionTenantFromHeaderOrUser(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	release := b.holdAnswers(t)
	s := startProxy(t, func(c *Config) { c.Admission.MaxInflightPerBackend = 1 }, b)
	var wg sync.WaitGroup
	send := func(id int, user, header string) {
		body := strings.Replace(conversation(id, 0, false), "{", `{"user":"`+user+`",`, 1)
		hdr := map[string]string{}
		if header != "" {
			hdr["X-KVCA-Tenant"] = header
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, out := postWith(t, s, body, hdr); resp != nil && resp.StatusCode != 200 {
				t.Errorf("request %d: %d %s", id, resp.StatusCode, out)
			}
		}()
	}
	send(0, "dave", "")
	testkit.WaitUntil(t, "the first request at the backend", func() bool { return b.hits.Load() == 1 })
	for i, r := range []struct{ user, header string }{{"alice", ""}, {"alice", ""}, {"alice", ""}, {"alice", "bob"}, {"carol", ""}} {
		send(i+1, r.user, r.header)
		testkit.WaitUntil(t, "the request queued", func() bool { return s.adm.Queued() == i+1 })
	}
	release()
	wg.Wait()
	if order, want := servedOrder(b), []string{"0", "1", "4", "5", "2", "3"}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("served in order %q, want %q", order, want)
	}
	waitIdle(t, s)
}
