//go:build linux

package edge

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kvca/kvca/internal/testkit"
)

// fullAccessLine is every field of an access log line.
type fullAccessLine struct {
	Msg           string  `json:"msg"`
	RequestID     string  `json:"request_id"`
	Route         string  `json:"route"`
	Path          string  `json:"path"`
	Client        string  `json:"client"`
	Tenant        string  `json:"tenant"`
	Model         string  `json:"model"`
	Phase         string  `json:"phase"`
	Backend       string  `json:"backend"`
	Attempts      int     `json:"attempts"`
	CachedBlocks  int     `json:"cached_blocks"`
	NovelBlocks   int     `json:"novel_blocks"`
	Status        int     `json:"status"`
	Outcome       string  `json:"outcome"`
	RequestBytes  int     `json:"request_bytes"`
	ResponseBytes int64   `json:"response_bytes"`
	Priority      string  `json:"priority"`
	QueueMs       float64 `json:"queue_ms"`
	HeadersMs     float64 `json:"upstream_headers_ms"`
	TTFTMs        float64 `json:"ttft_ms"`
	DurationMs    float64 `json:"duration_ms"`
}

// fullLogged waits for the one access log line of request id.
func fullLogged(t *testing.T, logs *testkit.LogBuffer, id string) fullAccessLine {
	t.Helper()
	var found []fullAccessLine
	testkit.WaitUntil(t, "the access log line of "+id, func() bool {
		found = found[:0]
		for _, l := range strings.Split(logs.String(), "\n") {
			var a fullAccessLine
			if l == "" || json.Unmarshal([]byte(l), &a) != nil || a.Msg != "request" || a.RequestID != id {
				continue
			}
			found = append(found, a)
		}
		return len(found) > 0
	})
	if len(found) != 1 {
		t.Fatalf("%d access log lines for %s: %+v", len(found), id, found)
	}
	return found[0]
}

// TestAccessLogFields: every field of the access log line, exactly, for a
// first request (all blocks novel), the same request again (all cached),
// a passthrough request and one kvca answers itself.
func TestAccessLogFields(t *testing.T) {
	t.Parallel()
	b := newRawBackend(t, func(r rawReq) rawAnswer {
		return rawAnswer{resp: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}"}
	})
	logs := &testkit.LogBuffer{}
	s, d := startRawProxy(t, edgeModes[0], logs, func(c *Config) { c.Backends = []string{b.url("")} })
	name := s.fleet().sched.Backends[0].Name
	body := conversation(3, 2, false)
	req := func(id string) string {
		return fmt.Sprintf("POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: h\r\nX-Request-Id: %s\r\nContent-Length: %d\r\n\r\n%s", id, len(body), body)
	}
	c := d.dial(t)
	c.send(req("first"))
	b.next(t)
	if r := c.read(false); r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	first := fullLogged(t, logs, "first")
	blocks := first.NovelBlocks
	if blocks < 2 {
		t.Fatalf("novel blocks %d for a %d-byte conversation", blocks, len(body))
	}
	want := fullAccessLine{Msg: "request", RequestID: "first", Route: "chat", Path: "/v1/chat/completions", Client: "127.0.0.1",
		Model: "m", Phase: "fallback", Backend: name, Attempts: 1, CachedBlocks: 0, NovelBlocks: blocks, Status: 200,
		Outcome: "completed", RequestBytes: len(req("first")), ResponseBytes: 7}
	checkTimes(t, first)
	if got := zeroTimes(first); got != want {
		t.Fatalf("first line\n%+v\nwant\n%+v", got, want)
	}
	// A location learned is seen from the table's next millisecond on
	// (a prefix walk is kept for the millisecond it was made in).
	at := s.table.Now()
	testkit.WaitUntil(t, "the table clock past the first answer", func() bool { return s.table.Now() > at })
	c.send(req("again"))
	b.next(t)
	c.read(false)
	again := fullLogged(t, logs, "again")
	want.RequestID, want.Phase, want.CachedBlocks, want.NovelBlocks = "again", "followup", blocks, 0
	checkTimes(t, again)
	if got := zeroTimes(again); got != want {
		t.Fatalf("repeated line\n%+v\nwant\n%+v", got, want)
	}
	files := "GET /v1/files/f-1 HTTP/1.1\r\nHost: h\r\nX-Request-Id: files\r\n\r\n"
	c.send(files)
	b.next(t)
	c.read(false)
	want = fullAccessLine{Msg: "request", RequestID: "files", Route: "passthrough", Path: "/v1/files/f-1", Client: "127.0.0.1",
		Phase: "bootstrap", Backend: name, Attempts: 1, Status: 200, Outcome: "completed", RequestBytes: len(files), ResponseBytes: 7}
	if got := zeroTimes(fullLogged(t, logs, "files")); got != want {
		t.Fatalf("passthrough line\n%+v\nwant\n%+v", got, want)
	}
	missing := "GET /nowhere HTTP/1.1\r\nHost: h\r\nX-Request-Id: nowhere\r\n\r\n"
	c.send(missing)
	if r := c.read(false); r.status != 404 {
		t.Fatalf("status %d for an unknown path", r.status)
	}
	b.none(t)
	got := zeroTimes(fullLogged(t, logs, "nowhere"))
	want = fullAccessLine{Msg: "request", RequestID: "nowhere", Route: "other", Path: "/nowhere", Client: "127.0.0.1",
		Phase: "none", Status: 404, Outcome: "rejected", RequestBytes: len(missing), ResponseBytes: got.ResponseBytes}
	if got != want {
		t.Fatalf("rejected line\n%+v\nwant\n%+v", got, want)
	}
}

// checkTimes: the upstream head came before the first byte, which came
// before the end.
func checkTimes(t *testing.T, a fullAccessLine) {
	t.Helper()
	if !(a.HeadersMs > 0 && a.HeadersMs <= a.TTFTMs && a.TTFTMs <= a.DurationMs) {
		t.Fatalf("%s: upstream headers %v ms, ttft %v ms, duration %v ms", a.RequestID, a.HeadersMs, a.TTFTMs, a.DurationMs)
	}
}

func zeroTimes(a fullAccessLine) fullAccessLine {
	a.HeadersMs, a.TTFTMs, a.DurationMs = 0, 0, 0
	return a
}

// TestRetryGoesElsewhereAndIsLogged: a backend answering 503 (or 429)
// before any byte reached the client is refused and the other one tried;
// the client sees the second backend's answer only, and the access log
// names the backend that answered and counts both attempts.
func TestRetryGoesElsewhereAndIsLogged(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"503 Busy", "429 Slow Down"} {
		t.Run(status, func(t *testing.T) {
			t.Parallel()
			// Whichever backend sees a request first refuses it.
			var mu sync.Mutex
			first := map[string]int{} // request id: the backend that refused it
			answer := func(j int) func(rawReq) rawAnswer {
				return func(r rawReq) rawAnswer {
					id := r.fields("X-Request-Id")[0]
					mu.Lock()
					defer mu.Unlock()
					if _, ok := first[id]; !ok {
						first[id] = j
						return rawAnswer{resp: "HTTP/1.1 " + status + "\r\nContent-Length: 4\r\n\r\nbusy"}
					}
					return rawAnswer{resp: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}"}
				}
			}
			bs := []*rawBackend{newRawBackend(t, answer(0)), newRawBackend(t, answer(1))}
			logs := &testkit.LogBuffer{}
			s, d := startRawProxy(t, edgeModes[0], logs, func(c *Config) {
				c.Backends = []string{bs[0].url(""), bs[1].url("")}
				c.Retries = 1
			})
			for i := 0; i < 4; i++ {
				id := fmt.Sprintf("r-%d", i)
				c := d.dial(t)
				body := conversation(100+i, 0, false)
				c.send(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nX-Request-Id: %s\r\nContent-Length: %d\r\n\r\n%s", id, len(body), body))
				r := c.read(false)
				if r.status != 200 || string(r.body) != `{"a":1}` {
					t.Fatalf("%s: status %d body %q", id, r.status, r.body)
				}
				var got []int
				for j, b := range bs {
					select {
					case up := <-b.reqs:
						if v := up.fields("X-Request-Id"); len(v) != 1 || v[0] != id {
							t.Fatalf("backend %d got X-Request-Id %q, want %q", j, v, id)
						}
						got = append(got, j)
					default:
					}
				}
				if len(got) != 2 {
					t.Fatalf("%s reached backends %v, want both", id, got)
				}
				mu.Lock()
				answered := s.fleet().sched.Backends[1-first[id]].Name
				mu.Unlock()
				l := fullLogged(t, logs, id)
				if l.Backend != answered || l.Attempts != 2 || l.Status != 200 || l.Outcome != "completed" || l.ResponseBytes != 7 {
					t.Fatalf("%s: logged %+v, want backend %s, 2 attempts, 200, completed, 7 bytes", id, l, answered)
				}
			}
		})
	}
}

// TestAccessLogQueueWait: a request that waited in the admission queue is
// logged with its class and the time it waited; one that did not, with 0.
func TestAccessLogQueueWait(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b := newRawBackend(t, func(r rawReq) rawAnswer {
		a := rawAnswer{resp: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}"}
		if strings.Contains(r.head, "X-Request-Id: first") {
			a.hold = gate // the first keeps the one slot until let go
		}
		return a
	})
	logs := &testkit.LogBuffer{}
	s, d := startRawProxy(t, edgeModes[0], logs, func(c *Config) {
		c.Backends = []string{b.url("")}
		c.Admission.MaxInflightPerBackend = 1
	})
	req := func(id, class string, n int) string {
		body := conversation(n, 0, false)
		return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nX-Request-Id: %s\r\nX-KVCA-Priority: %s\r\nContent-Length: %d\r\n\r\n%s", id, class, len(body), body)
	}
	first, second := d.dial(t), d.dial(t)
	first.send(req("first", "low", 1))
	b.next(t)
	second.send(req("second", "high", 2))
	testkit.WaitUntil(t, "the second request queued", func() bool { return s.adm.Queued() == 1 })
	close(gate)
	first.read(false)
	b.next(t)
	second.read(false)
	if l := fullLogged(t, logs, "first"); l.Priority != "low" || l.QueueMs != 0 {
		t.Fatalf("first: priority %q, queue_ms %v; want low, 0", l.Priority, l.QueueMs)
	}
	if l := fullLogged(t, logs, "second"); l.Priority != "high" || l.QueueMs <= 0 || l.QueueMs > l.TTFTMs {
		t.Fatalf("second: priority %q, queue_ms %v (ttft_ms %v); want high and a wait within its TTFT", l.Priority, l.QueueMs, l.TTFTMs)
	}
}
