package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLifecycleReadsAnswers: which answers are read in passing: a routed
// 2xx when the cache check is on, a Responses 2xx for its id, never a 3xx
// or an error with nothing to charge.
func TestLifecycleReadsAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		route  int
		check  bool
		status int
		want   bool
	}{
		{"chat 200, check on", routeChat, true, 200, true},
		{"chat 299, check on", routeChat, true, 299, true},
		{"chat 300, check on", routeChat, true, 300, false},
		{"chat 200, check off", routeChat, false, 200, false},
		{"responses 200, check off", routeResponses, false, 200, true},
		{"responses 300, check off", routeResponses, false, 300, false},
		{"chat 500, check on", routeChat, true, 500, false},
	} {
		s := offlineCore(t, 1, func(c *Config) { c.Routing.CacheCheck = tc.check })
		c := testBegin(s, tc.route)
		body := conversation(1, 1, false)
		if tc.route == routeResponses {
			body = `{"model":"m","input":"hello there"}`
		}
		if a := c.received([]byte(body), len(body)); a != actPlan {
			t.Fatalf("%s: received %d", tc.name, a)
		}
		if a := c.planned(c.plan([]byte(body))); a != actTry {
			t.Fatalf("%s: planned %d", tc.name, a)
		}
		if a := c.try(); a != actSend {
			t.Fatalf("%s: try %d", tc.name, a)
		}
		c.head(tc.status, false, false, nil)
		if c.sniffing != tc.want {
			t.Errorf("%s: reads the answer %v, want %v", tc.name, c.sniffing, tc.want)
		}
		c.finish(nil, false)
	}
}

// TestLifecycleLearnsResponseIDs: a Responses answer's id is bound to the
// backend that produced it as its data passes, once.
func TestLifecycleLearnsResponseIDs(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 2, nil)
	c := testBegin(s, routeResponses)
	body := `{"model":"m","input":"hello there"}`
	c.received([]byte(body), len(body))
	c.planned(c.plan([]byte(body)))
	c.try()
	backend := c.u.b.Index
	c.head(200, false, false, nil)
	c.bodyBegun(false)
	c.Data([]byte(`{"id":"resp_abc123","object":"response","output":[]}`))
	c.finish(nil, false)
	if be, ok := s.threads.Lookup(s.canon.HashSessionKey([]byte("resp_abc123")), s.table.Now()); !ok || be != backend {
		t.Fatalf("response id on %d (%v), produced on %d", be, ok, backend)
	}
}

// TestLifecycleEnds: the status and outcome each end records, as the
// access log shows them.
func TestLifecycleEnds(t *testing.T) {
	t.Parallel()
	var logged bytes.Buffer
	s := offlineCore(t, 1, func(c *Config) {
		c.AccessLog = true
		c.Logger = slog.New(slog.NewJSONHandler(&logged, nil))
	})
	body := conversation(2, 1, false)
	start := func() *call {
		c := testBegin(s, routeChat)
		c.received([]byte(body), len(body))
		c.planned(c.plan([]byte(body)))
		c.try()
		return c
	}
	last := func() (status int, outcome string) {
		lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
		var l struct {
			Status  int    `json:"status"`
			Outcome string `json:"outcome"`
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &l); err != nil {
			t.Fatal(err)
		}
		return l.Status, l.Outcome
	}
	for _, tc := range []struct {
		name    string
		end     func(c *call)
		status  int
		outcome string
	}{
		{"answered", func(c *call) { c.head(200, false, false, nil); c.finish(nil, false) }, 200, "completed"},
		{"client left mid-answer", func(c *call) { c.head(200, false, false, nil); c.finish(nil, true) }, 200, "client_gone"},
		{"cut by the backend", func(c *call) { c.head(200, false, false, nil); c.finish(errors.New("cut"), false) }, 200, "upstream_cut"},
		{"shutdown cut stays", func(c *call) { c.head(200, false, false, nil); c.outcome = outShutdown; c.finish(nil, true) }, 200, "shutdown_cut"},
		{"client left before the answer", func(c *call) { c.left() }, 499, "client_gone"},
		{"left after kvca answered", func(c *call) { c.answering(503, true, 0); c.left() }, 503, "rejected"},
	} {
		tc.end(start())
		if st, out := last(); st != tc.status || out != tc.outcome {
			t.Errorf("%s: status %d outcome %s, want %d %s", tc.name, st, out, tc.status, tc.outcome)
		}
	}
	idle(t, s)
}

// TestPickerEdges: the picker's boundaries: a body of exactly the limit
// passes and one byte more is 413; a Response before any pick does
// nothing; an empty chunk or one before the answer's head does not begin
// the answer; the first endpoint can be the subset; CONNECT is refused; a
// Messages request's errors are Anthropic-shaped.
func TestPickerEdges(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 3, func(c *Config) { c.MaxBodyBytes = 8192 })
	p := s.Picker()

	x := p.Begin(chatHeaders())
	if a := x.Body(make([]byte, 8192), true); a != nil {
		t.Fatalf("a body of exactly the limit: %+v", a)
	}
	x.End(true)
	x = p.Begin(chatHeaders())
	if a := x.Body(make([]byte, 8193), true); a == nil || a.Status != 413 {
		t.Fatalf("one byte over: %+v", a)
	}
	x.End(true)

	x = p.Begin(chatHeaders())
	x.Body([]byte(conversation(20, 2, true)), true)
	if add := x.Response(200, "", fields{}); add != nil {
		t.Fatalf("a response before the pick: %v", add)
	}
	x.End(true)

	first := p.Endpoints()[0]
	eps, a := pickOnce(t, p, chatHeaders(), conversation(21, 2, true), []string{first}, "", true)
	if a != nil || len(eps) != 1 || eps[0] != first {
		t.Fatalf("subset of the first endpoint: %v %+v", eps, a)
	}

	_, a = pickOnce(t, p, fields{{":method", "CONNECT"}, {":authority", "example.com:443"}}, "", nil, "", false)
	if a == nil || a.Status != 405 {
		t.Fatalf("CONNECT: %+v", a)
	}

	_, a = pickOnce(t, p, fields{{":method", "POST"}, {":path", "/v1/messages"}}, `{"model":`, nil, "", false)
	if a == nil || a.Status != 400 || !strings.Contains(string(a.Body), `"type":"error"`) {
		t.Fatalf("Messages bad body: %+v %s", a, a.Body)
	}
	_, a = pickOnce(t, p, chatHeaders(), `{"model":`, nil, "", false)
	if a == nil || strings.Contains(string(a.Body), `"type":"error"`) {
		t.Fatalf("chat bad body in Anthropic's shape: %s", a.Body)
	}
	idle(t, s)
}

// TestPickerPrefillRelease: an answer with a length releases the
// prefill load at its head; a streamed one (SSE, or no length) at its
// first body byte, and an empty chunk is no byte.
func TestPickerPrefillRelease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		header fields
		atHead bool
	}{
		{"length", fields{{"content-type", "application/json"}, {"content-length", "2"}}, true},
		{"sse", fields{{"content-type", "text/event-stream"}}, false},
		{"no length", fields{{"content-type", "application/json"}}, false},
	} {
		s := offlineCore(t, 1, nil)
		p := s.Picker()
		x := p.Begin(chatHeaders())
		x.Body([]byte(conversation(30, 3, true)), true)
		if _, a := x.Pick(context.Background(), nil); a != nil {
			t.Fatal(a)
		}
		b := s.fleet().sched.Backends[0]
		if b.Prefill() == 0 {
			t.Fatalf("%s: no prefill reserved", tc.name)
		}
		x.Response(200, "", tc.header)
		if released := b.Prefill() == 0; released != tc.atHead {
			t.Errorf("%s: prefill released at the head %v, want %v", tc.name, released, tc.atHead)
		}
		x.ResponseBody(nil, false)
		if !tc.atHead && b.Prefill() == 0 {
			t.Errorf("%s: an empty chunk released the prefill", tc.name)
		}
		x.ResponseBody([]byte("{}"), true)
		if b.Prefill() != 0 {
			t.Errorf("%s: prefill held after the first byte", tc.name)
		}
		x.End(false)
		idle(t, s)
	}
}

// TestPickerFallbacksByLoad: the fallbacks after the pick come least
// loaded first; the gateway's retry goes where there is most room.
func TestPickerFallbacksByLoad(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 4, nil)
	p := s.Picker()
	var held []*PickExchange
	for i := 0; i < 5; i++ {
		x := p.Begin(chatHeaders())
		x.Body([]byte(conversation(40+i, 0, false)), true)
		if _, a := x.Pick(context.Background(), nil); a != nil {
			t.Fatal(a)
		}
		held = append(held, x)
	}
	eps, _ := pickOnce(t, p, chatHeaders(), conversation(50, 0, false), nil, "", false)
	active := func(ep string) int64 { return s.fleet().sched.Backends[s.endpointIndex(ep)].Active() }
	for i := 2; i < len(eps); i++ {
		if active(eps[i]) < active(eps[i-1]) {
			t.Fatalf("fallbacks %v not least loaded first (%d then %d)", eps, active(eps[i-1]), active(eps[i]))
		}
	}
	for _, x := range held {
		x.End(true)
	}
	idle(t, s)
}

// TestPickerServedByUnroutable: an answer served by an endpoint routing
// would not pick (unhealthy) is still credited to it, without a
// reservation, and nothing leaks.
func TestPickerServedByUnroutable(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 2, nil)
	p := s.Picker()
	x := p.Begin(chatHeaders())
	x.Body([]byte(conversation(60, 3, true)), true)
	eps, _ := x.Pick(context.Background(), nil)
	other := p.Endpoints()[0]
	if other == eps[0] {
		other = p.Endpoints()[1]
	}
	s.fleet().sched.Backends[s.endpointIndex(other)].SetHealthy(false)
	x.Response(200, other, fields{{"content-type", "application/json"}, {"content-length", "2"}})
	x.ResponseBody([]byte("{}"), true)
	x.End(false)
	idle(t, s)
}

// TestPickerQueueCancelled: a pick waiting in the admission queue leaves
// when the gateway cancels the stream, and releases nothing it did not
// hold.
func TestPickerQueueCancelled(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 1, func(c *Config) { c.Admission.MaxInflightPerBackend = 1; c.Admission.QueueSize = 4 })
	p := s.Picker()
	first := p.Begin(chatHeaders())
	first.Body([]byte(conversation(70, 1, false)), true)
	first.Pick(context.Background(), nil)
	x := p.Begin(chatHeaders())
	x.Body([]byte(conversation(71, 1, false)), true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if eps, a := x.Pick(ctx, nil); eps != nil || a != nil {
		t.Fatalf("a cancelled wait picked %v %+v", eps, a)
	}
	x.End(true)
	first.End(true)
	idle(t, s)
}

// TestPickerModels: /v1/models through the picker is kvca's own answer.
func TestPickerModels(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 1, nil)
	_, a := pickOnce(t, s.Picker(), fields{{":method", "GET"}, {":path", "/v1/models"}}, "", nil, "", false)
	if a == nil || (a.Status != 200 && a.Status != 503) {
		t.Fatalf("models: %+v", a)
	}
}

// TestModelCreds: the client's credentials, and only they, go with a
// model list asked of the backends.
func TestModelCreds(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 1, nil)
	c := s.begin(nil, nil)
	c.receive([]byte("GET"), []byte("/v1/models"), false, false, fields{{"authorization", "Bearer k"}, {"accept", "*/*"}, {"x-api-key", "x"}})
	got := c.modelCreds()
	if len(got) != 2 || got[0] != [2]string{"authorization", "Bearer k"} || got[1] != [2]string{"x-api-key", "x"} {
		t.Fatalf("creds %v", got)
	}
	s.putCall(c)
}

// TestPickerFallbackOrder: after a pick its session chose, the fallbacks
// are the other backends least loaded first, at most three.
func TestPickerFallbackOrder(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 6, nil)
	p := s.Picker()
	eps := p.Endpoints()
	var held []*PickExchange
	hold := func(ep string, n int) {
		for i := 0; i < n; i++ {
			x := p.Begin(chatHeaders())
			x.Body([]byte(conversation(80+len(held), 0, false)), true)
			if got, a := x.Pick(context.Background(), []string{ep}); a != nil || got[0] != ep {
				t.Fatalf("hold on %s: %v %+v", ep, got, a)
			}
			held = append(held, x)
		}
	}
	// Loads: backend 0 none, 1 two, 3 one, 4 three, 5 three; the session
	// is bound to 2.
	hold(eps[1], 2)
	hold(eps[3], 1)
	hold(eps[4], 3)
	hold(eps[5], 3)
	user := func(n int) string {
		return strings.Replace(conversation(90, n, false), `{"model"`, `{"user":"u1","model"`, 1)
	}
	pickOnce(t, p, chatHeaders(), user(0), []string{eps[2]}, "", true)
	got, a := pickOnce(t, p, chatHeaders(), user(3), nil, "", false)
	if a != nil || len(got) != 4 {
		t.Fatalf("picked %v %+v, want the bound backend and three fallbacks", got, a)
	}
	if want := []string{eps[2], eps[0], eps[3], eps[1]}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("picked %v, want %v (the session's, then least loaded first)", got, want)
	}
	for _, x := range held {
		x.End(true)
	}
	idle(t, s)
}
