package edge

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/h1"
)

// kvca's own answers, byte for byte: what a client (and its SDK) parses.

func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"plain text", `"plain text"`},
		{`a "quoted" \ path`, `"a \"quoted\" \\ path"`},
		{"nul\x00 tab\t nl\n us\x1f", `"nul\u0000 tab\u0009 nl\u000a us\u001f"`},
		{"space ~ del\x7f é", "\"space ~ del\x7f é\""},
	} {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			t.Parallel()
			got := string(appendJSONString([]byte("x"), tc.in))
			if got != "x"+tc.want {
				t.Fatalf("got %s, want x%s", got, tc.want)
			}
			var back string
			if err := json.Unmarshal([]byte(got[1:]), &back); err != nil || back != tc.in {
				t.Fatalf("%s reads back as %q (%v)", got[1:], back, err)
			}
		})
	}
}

func TestAppendErrorAnswer(t *testing.T) {
	t.Parallel()
	const rid = "req-1"
	for _, tc := range []struct {
		name                   string
		r                      reply
		close, head, anthropic bool
		want                   string
	}{
		{"no backend", replyNoBackend, false, false, false,
			"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 139\r\nX-Request-Id: req-1\r\nRetry-After: 1\r\n\r\n" +
				`{"error":{"message":"no healthy backend is available; retry later","type":"service_unavailable","param":null,"code":"no_healthy_backend"}}` + "\n"},
		{"bad gateway, closing", replyBadGateway, true, false, false,
			"HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: 134\r\nX-Request-Id: req-1\r\nConnection: close\r\n\r\n" +
				`{"error":{"message":"the inference backend could not be reached","type":"upstream_error","param":null,"code":"upstream_unreachable"}}` + "\n"},
		{"timeout to HEAD", replyTimeout, false, true, false,
			"HTTP/1.1 504 Gateway Timeout\r\nContent-Type: application/json\r\nContent-Length: 132\r\nX-Request-Id: req-1\r\n\r\n"},
		{"busy, Anthropic", replyBusy, false, false, true,
			"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 131\r\nX-Request-Id: req-1\r\nRetry-After: 1\r\n\r\n" +
				`{"type":"error","error":{"type":"overloaded_error","message":"every connection to the inference backends is in use; retry later"}}` + "\n"},
		{"whole body given", reply{status: 401, body: `{"k":"v"}`, header: "X-A: b\r\n"}, false, false, true,
			"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: 9\r\nX-Request-Id: req-1\r\nX-A: b\r\n\r\n" + `{"k":"v"}`},
		{"method", methodNotAllowed("GET, HEAD"), false, false, false,
			"HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\nContent-Length: 110\r\nX-Request-Id: req-1\r\nAllow: GET, HEAD\r\n\r\n" +
				`{"error":{"message":"use GET, HEAD","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := string(appendErrorAnswer([]byte("prev"), &tc.r, []byte(rid), tc.close, tc.head, tc.anthropic))
			if got != "prev"+tc.want {
				t.Fatalf("got\n%q\nwant\n%q", got, "prev"+tc.want)
			}
			if head, body, _ := strings.Cut(got, "\r\n\r\n"); !tc.head && tc.r.body == "" {
				var v map[string]any
				if err := json.Unmarshal([]byte(body), &v); err != nil {
					t.Fatalf("body %q: %v", body, err)
				}
				if cl := "Content-Length: " + strconv.Itoa(len(body)); !strings.Contains(head, cl) {
					t.Fatalf("head %q lacks %q", head, cl)
				}
			}
		})
	}
}

// TestAppendAnswerWithoutID: with no request id (an answer before one
// exists) the head has no X-Request-Id line at all.
func TestAppendAnswerWithoutID(t *testing.T) {
	t.Parallel()
	got := string(appendAnswer(nil, 200, "text/plain", []byte("ok"), nil, "", false, false))
	if want := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestReplyConstructors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		got  reply
		want reply
	}{
		{"refused", refused(&h1.Error{Status: 431, Code: "header_too_large", Msg: "too many fields"}),
			reply{status: 431, typ: "invalid_request_error", code: "header_too_large", msg: "too many fields", close: true}},
		{"unknown model", unknownModel([]byte("gpt-x")),
			reply{status: 404, typ: "invalid_request_error", code: "model_not_found", msg: "The model `gpt-x` does not exist or no backend serves it."}},
		{"bad body", badBody("invalid_json", "not JSON"),
			reply{status: 400, typ: "invalid_request_error", code: "invalid_json", msg: "not JSON"}},
		{"too large", tooLarge(1024),
			reply{status: 413, typ: "invalid_request_error", code: "request_too_large", msg: "request body exceeds 1024 bytes", close: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.got != tc.want {
				t.Fatalf("got %+v, want %+v", tc.got, tc.want)
			}
		})
	}
}

func TestAnthropicType(t *testing.T) {
	t.Parallel()
	want := map[int]string{
		400: "invalid_request_error", 405: "invalid_request_error", 408: "invalid_request_error",
		411: "invalid_request_error", 417: "invalid_request_error", 431: "invalid_request_error",
		501: "invalid_request_error", 505: "invalid_request_error",
		401: "authentication_error", 403: "permission_error", 404: "not_found_error",
		413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
		500: "api_error", 502: "api_error", 504: "api_error", 200: "api_error",
	}
	for status, typ := range want {
		if got := anthropicType(status); got != typ {
			t.Errorf("anthropicType(%d) = %q, want %q", status, got, typ)
		}
	}
}

func TestStatusText(t *testing.T) {
	t.Parallel()
	want := map[int]string{
		100: "Continue", 200: "OK", 204: "No Content", 400: "Bad Request", 401: "Unauthorized",
		404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 413: "Content Too Large",
		417: "Expectation Failed", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
		500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable",
		504: "Gateway Timeout", 505: "HTTP Version Not Supported", 418: "Unknown", 299: "Unknown",
	}
	for code, text := range want {
		if got := statusText(code); got != text {
			t.Errorf("statusText(%d) = %q, want %q", code, got, text)
		}
	}
}

// TestRequestIDRuleBounds: the rule for keeping a client's X-Request-Id,
// at each of its edges.
func TestRequestIDRuleBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		id   string
		keep bool
	}{
		{"empty", "", false},
		{"one char", "a", true},
		{"128 chars", strings.Repeat("x", 128), true},
		{"129 chars", strings.Repeat("x", 129), false},
		{"lowest visible", "!", true},
		{"highest visible", "~", true},
		{"space", "a b", false},
		{"control", "a\x1fb", false},
		{"DEL", "a\x7f", false},
		{"8-bit", "caf\xc3\xa9", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := validRequestID([]byte(tc.id)); got != tc.keep {
				t.Fatalf("validRequestID(%q) = %v, want %v", tc.id, got, tc.keep)
			}
		})
	}
}

// TestGeneratedRequestIDs: 16 lower-case hex digits appended after what
// the buffer holds, different each time.
func TestGeneratedRequestIDs(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for i := 0; i < 64; i++ {
		b := appendRequestID([]byte("p:"))
		id, ok := strings.CutPrefix(string(b), "p:")
		if !ok || !isGenerated(id) {
			t.Fatalf("generated %q", b)
		}
		if seen[id] {
			t.Fatalf("id %s generated twice", id)
		}
		seen[id] = true
	}
}

func TestIsTraceHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"traceparent": true, "TraceParent": true, "tracestate": true, "TRACESTATE": true,
		"traceparenx": false, "tracestatx": false, "trace": false, "x-traceparent": false,
	} {
		if got := isTraceHeader([]byte(name)); got != want {
			t.Errorf("isTraceHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestDropRequestField(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"Host": true, "expect": true, "X-Request-Id": true, "x-kvca-tenant": true, "Content-Length": true,
		"X-Forwarded-For": true, "x-kvca-priority": true, "Transfer-Encoding": true, "X-Forwarded-Proto": true,
		"Connection": true, "keep-alive": true, "TE": true, "Upgrade": true, "Proxy-Authorization": true,
		"Hosts": false, "Expects": false, "X-Request-Ix": false, "x-kvca-tenanx": false, "Content-Lengtx": false,
		"X-Forwarded-Fox": false, "x-kvca-prioritx": false, "Transfer-Encodinx": false, "X-Forwarded-Protx": false,
		"Content-Type": false, "Authorization": false, "User-Agent": false,
	} {
		if got := dropRequestField([]byte(name)); got != want {
			t.Errorf("dropRequestField(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestAppendClientHead: the head relayed to the client for an upstream
// head, in each framing mode, byte for byte.
func TestAppendClientHead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, up       string
		head           bool
		dechunk, close bool
		extra          string
		want           string
	}{
		{"length kept, id added", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-End: 2\r\n\r\n", false, false, false, "",
			"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-End: 2\r\nX-Request-Id: rid\r\n\r\n"},
		{"chunked kept, stray length dropped", "HTTP/1.1 200 Fine\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n", false, false, false, "X-Extra: e\r\n",
			"HTTP/1.1 200 Fine\r\nTransfer-Encoding: chunked\r\nX-Request-Id: rid\r\nX-Extra: e\r\n\r\n"},
		{"dechunked for HTTP/1.0, closing", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, true, true, "",
			"HTTP/1.1 200 OK\r\nX-Request-Id: rid\r\nConnection: close\r\n\r\n"},
		{"backend's id kept, no reason", "HTTP/1.1 404 \r\nX-Request-Id: theirs\r\nContent-Length: 0\r\n\r\n", false, false, false, "",
			"HTTP/1.1 404 Not Found\r\nX-Request-Id: theirs\r\nContent-Length: 0\r\n\r\n"},
		{"HEAD: transfer coding not relayed", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true, false, false, "",
			"HTTP/1.1 200 OK\r\nX-Request-Id: rid\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := []byte(tc.up)
			var r h1.Response
			if st, err := h1.ParseResponse(b, &r); st != h1.OK {
				t.Fatalf("parse %q: %v", tc.up, err)
			}
			got := string(appendClientHead([]byte("prev"), b, &r, r.Framing(tc.head), tc.dechunk, []byte("rid"), []byte(tc.extra), tc.close))
			if got != "prev"+tc.want {
				t.Fatalf("got\n%q\nwant\n%q", got, "prev"+tc.want)
			}
		})
	}
}

// TestPredictedLocationDated: with --predict-ttl the backend chosen is a
// predicted location of the whole chain at once, dated at routing, that
// expires exactly PredictTTL after it; without it nothing is recorded
// until an answer.
func TestPredictedLocationDated(t *testing.T) {
	t.Parallel()
	for _, predict := range []time.Duration{0, 5 * time.Second} {
		t.Run(predict.String(), func(t *testing.T) {
			t.Parallel()
			var elapsed atomic.Int64
			base := time.Unix(1_000_000, 0)
			cfg := DefaultConfig()
			cfg.Backends = []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}
			cfg.Table.TTL = time.Minute
			cfg.Table.PredictTTL = predict
			cfg.Now = func() time.Time { return base.Add(time.Duration(elapsed.Load())) }
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			// Well past one TTL, so that a date computed wrong is not
			// clamped to the table's epoch.
			elapsed.Store(int64(10 * time.Minute))
			c := s.getCall()
			if err := s.plan(c, canon.Chat, []byte(conversation(1, 2, false))); err != nil {
				t.Fatal(err)
			}
			u, r := s.pick(c, false)
			if r != nil || u == nil {
				t.Fatalf("pick: %+v", r)
			}
			if c.attempt != 1 {
				t.Fatalf("attempt %d after the first pick, want 1", c.attempt)
			}
			now, b := c.req.Now, c.dec.Backend.Index
			if len(c.req.Chain) < 2 {
				t.Fatalf("chain of %d blocks", len(c.req.Chain))
			}
			ms := predict.Milliseconds()
			for i, h := range c.req.Chain {
				for _, o := range []int{0, 1} {
					l, ok := s.table.LocationOf(h, o, now)
					if want := predict > 0 && o == b; ok != want {
						t.Fatalf("block %d on backend %d: located %v, want %v", i, o, ok, want)
					}
					if ok && (l.Last != now || !l.Predicted) {
						t.Fatalf("block %d: %+v, want a prediction dated %d", i, l, now)
					}
				}
				if predict > 0 {
					if _, ok := s.table.LastAccess(h, b, now+ms-1); !ok {
						t.Fatalf("block %d gone before PredictTTL", i)
					}
					if _, ok := s.table.LastAccess(h, b, now+ms+1); ok {
						t.Fatalf("block %d still located after PredictTTL", i)
					}
				}
			}
			c.res.ReleasePrefill()
			c.res.ReleaseActive()
			s.putCall(c)
		})
	}
}
