package edge

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/apikeys"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/h1"
	"github.com/kvca/kvca/sniff"
)

// The exchange's decisions in process, one at a time: which backend an
// attempt goes to, when another is tried, what is learned, how each
// failure is answered. No network: the upstreams are never dialled.

// offlineCore is a server of n backends that is never started, with no
// predicted locations (so that the table holds only what answers taught).
func offlineCore(t *testing.T, n int, mod func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	for i := 0; i < n; i++ {
		cfg.Backends = append(cfg.Backends, fmt.Sprintf("http://127.0.0.1:%d", i+1))
	}
	cfg.Table.PredictTTL = 0
	cfg.Retries = 1
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// planned is a call planned for body (the Chat API) and picked once.
func planned(t *testing.T, s *Server, body string) (*call, *upstream) {
	t.Helper()
	c := testBegin(s, routeChat)
	if err := s.plan(c, canon.Chat, []byte(body)); err != nil {
		t.Fatal(err)
	}
	u, r := s.pick(c, false)
	if r != nil {
		t.Fatalf("pick: %+v", *r)
	}
	return c, u
}

func learnedOn(s *Server, c *call, b int) bool {
	_, ok := s.table.LastAccess(c.req.Chain[len(c.req.Chain)-1], b, c.req.Now)
	return ok
}

// TestAnswered: for each status of an upstream head, whether kvca refuses
// it to try another backend, whether the chain is learned on the backend,
// and whether it counts as the backend's error.
func TestAnswered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status, backends, retries int
		retry, learn, isErr       bool
	}{
		{200, 2, 1, false, true, false},
		{204, 2, 1, false, true, false},
		{299, 2, 1, false, true, false},
		{300, 2, 1, false, false, false},
		{199, 2, 1, false, false, false},
		{404, 2, 1, false, false, false},
		{499, 2, 1, false, false, false},
		{500, 2, 1, false, false, true},
		{502, 2, 1, false, false, true},
		{503, 2, 1, true, false, true},
		{429, 2, 1, true, false, true},
		{503, 2, 0, false, false, true}, // no retry left
		{429, 1, 1, false, false, true}, // no other backend
	} {
		t.Run(fmt.Sprintf("%d/%d backends/%d retries", tc.status, tc.backends, tc.retries), func(t *testing.T) {
			t.Parallel()
			s := offlineCore(t, tc.backends, func(c *Config) { c.Retries = tc.retries })
			c, u := planned(t, s, conversation(1, 1, false))
			before := u.m.errors[errStatus].Get()
			if got := s.answered(c, u, tc.status); got != tc.retry {
				t.Fatalf("retry %v, want %v", got, tc.retry)
			}
			if c.status != tc.status {
				t.Fatalf("call status %d, want %d", c.status, tc.status)
			}
			if got := learnedOn(s, c, u.b.Index); got != tc.learn {
				t.Fatalf("learned %v, want %v", got, tc.learn)
			}
			if got := u.m.errors[errStatus].Get() - before; got != map[bool]uint64{true: 1}[tc.isErr] {
				t.Fatalf("%d status errors counted, want error=%v", got, tc.isErr)
			}
		})
	}
}

// TestAnsweredBindsAMovedSession: a named session whose request succeeded
// on a later attempt is bound to the backend that answered; on a first
// attempt the answer binds nothing (routing claimed it already).
func TestAnsweredBindsAMovedSession(t *testing.T) {
	t.Parallel()
	for _, attempts := range []int{1, 2} {
		t.Run(fmt.Sprint(attempts), func(t *testing.T) {
			t.Parallel()
			s := offlineCore(t, 2, nil)
			c, u := planned(t, s, conversation(1, 0, false))
			c.session = s.canon.HashSessionKey([]byte("sess"))
			c.attempt = attempts
			s.answered(c, u, 200)
			be, ok := s.sessions.Lookup(c.session, c.req.Now)
			if attempts == 1 && ok {
				t.Fatalf("bound to %d after a first attempt", be)
			}
			if attempts == 2 && (!ok || be != u.b.Index) {
				t.Fatalf("bound to %d (%v), want %d", be, ok, u.b.Index)
			}
		})
	}
}

// TestFailed: how each failed attempt is booked and answered.
func TestFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		res      int
		attempts int
		retry    bool
		want     *reply
		excluded bool
	}{
		{"timeout", timedOut, 1, false, &replyTimeout, false},
		{"refused, retry left", connFailed, 1, true, nil, true},
		{"busy, retry left", connBusy, 1, true, nil, true},
		{"refused, none left", connFailed, 2, false, &replyBadGateway, true},
		{"busy, none left", connBusy, 2, false, &replyBusy, true},
		{"stale status, none left", retryStatus, 2, false, &replyBadGateway, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := offlineCore(t, 3, nil)
			c, u := planned(t, s, conversation(1, 0, false))
			if a := u.b.Active(); a != 1 {
				t.Fatalf("active %d after the pick, want 1", a)
			}
			c.attempt = tc.attempts
			retry, r := s.failed(c, u, tc.res)
			if retry != tc.retry || r != tc.want {
				t.Fatalf("failed: retry %v reply %v, want %v %v", retry, r, tc.retry, tc.want)
			}
			if a := u.b.Active(); a != 0 {
				t.Fatalf("active %d after the failure, want 0", a)
			}
			if got := c.req.Exclude.Has(u.b.Index); got != tc.excluded {
				t.Fatalf("backend excluded %v, want %v", got, tc.excluded)
			}
			for i := range s.fleet().sched.Backends {
				if i != u.b.Index && c.req.Exclude.Has(i) {
					t.Fatalf("backend %d excluded too", i)
				}
			}
		})
	}
}

// TestPickWhenNoneIsLeft: with every backend excluded, the answer depends
// on what came before: none tried (no healthy backend), the last one busy,
// or the last one unreachable; each pick that succeeds counts an attempt.
func TestPickWhenNoneIsLeft(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 2, nil)
	c := testBegin(s, routeChat)
	if err := s.plan(c, canon.Chat, []byte(conversation(1, 0, false))); err != nil {
		t.Fatal(err)
	}
	c.req.Exclude.Add(0)
	c.req.Exclude.Add(1)
	for _, tc := range []struct {
		attempts int
		lastBusy bool
		want     *reply
	}{
		{0, false, &replyNoBackend}, {0, true, &replyNoBackend},
		{1, true, &replyBusy}, {1, false, &replyBadGateway}, {2, false, &replyBadGateway},
	} {
		c.attempt = tc.attempts
		if u, r := s.pick(c, tc.lastBusy); u != nil || r != tc.want {
			t.Errorf("attempt %d, last busy %v: %v %v, want %v", tc.attempts, tc.lastBusy, u, r, tc.want)
		}
		if c.attempt != tc.attempts {
			t.Errorf("attempts %d after a failed pick, want %d", c.attempt, tc.attempts)
		}
	}
	c.attempt = 0
	for want := 1; want <= 2; want++ {
		c.req.Exclude = chain.Set{}
		if u, r := s.pick(c, false); u == nil || r != nil {
			t.Fatalf("pick %d: %v", want, r)
		}
		if c.attempt != want {
			t.Fatalf("attempts %d after pick %d", c.attempt, want)
		}
		c.res.ReleaseActive()
	}
}

// TestRouteClaimsASession: a named session's first pick claims the
// backend it lands on; a retry elsewhere does not move the claim; a
// session claimed meanwhile by a sibling pulls the request to the
// sibling's backend; a session already bound is bound to where it goes.
func TestRouteClaimsASession(t *testing.T) {
	t.Parallel()
	t.Run("first pick claims, retry keeps", func(t *testing.T) {
		t.Parallel()
		s := offlineCore(t, 3, nil)
		c := testBegin(s, routeChat)
		if err := s.plan(c, canon.Chat, []byte(conversation(1, 0, false))); err != nil {
			t.Fatal(err)
		}
		c.session = s.canon.HashSessionKey([]byte("s1"))
		u, _ := s.pick(c, false)
		if be, ok := s.sessions.Lookup(c.session, c.req.Now); !ok || be != u.b.Index {
			t.Fatalf("session on %d (%v) after the first pick on %d", be, ok, u.b.Index)
		}
		s.failed(c, u, connFailed)
		u2, _ := s.pick(c, false)
		if u2 == nil || u2 == u {
			t.Fatalf("retry went to %v", u2)
		}
		if be, _ := s.sessions.Lookup(c.session, c.req.Now); be != u.b.Index {
			t.Fatalf("session moved to %d by a retry's pick", be)
		}
	})
	t.Run("a sibling's claim wins", func(t *testing.T) {
		t.Parallel()
		for claimed := 0; claimed < 3; claimed++ {
			s := offlineCore(t, 3, nil)
			c := testBegin(s, routeChat)
			if err := s.plan(c, canon.Chat, []byte(conversation(2, 0, false))); err != nil {
				t.Fatal(err)
			}
			c.session = s.canon.HashSessionKey([]byte("s2"))
			s.sessions.Claim(c.session, claimed, c.req.Now)
			u, _ := s.pick(c, false)
			if u.b.Index != claimed {
				t.Fatalf("routed to %d, the session is claimed for %d", u.b.Index, claimed)
			}
			for i, b := range s.fleet().sched.Backends {
				if want := map[bool]int64{true: 1}[i == claimed]; b.Active() != want {
					t.Fatalf("backend %d active %d, want %d", i, b.Active(), want)
				}
			}
		}
	})
	t.Run("overflowing siblings follow the first", func(t *testing.T) {
		t.Parallel()
		s := offlineCore(t, 3, nil)
		c := testBegin(s, routeChat)
		if err := s.plan(c, canon.Chat, []byte(conversation(4, 0, false))); err != nil {
			t.Fatal(err)
		}
		c.session = s.canon.HashSessionKey([]byte("s4"))
		// The request read the session on backend 0, which is now past the
		// load bound; meanwhile a sibling overflowed to backend 1 and moved
		// the session there. Backend 2 is idle and would win on load alone.
		s.sessions.Claim(c.session, 0, c.req.Now)
		c.req.Bound = 1
		bs := s.fleet().sched.Backends
		bs[0].SetRemoteLoad(3, 0)
		bs[1].SetRemoteLoad(1, 0)
		if w := s.sessions.Follow(c.session, 0, 1, c.req.Now); w != 1 {
			t.Fatalf("the sibling's move: %d", w)
		}
		u, _ := s.pick(c, false)
		if u == nil || u.b.Index != 1 {
			t.Fatalf("routed to %v, the session moved to backend 1", u)
		}
		if be, _ := s.sessions.Lookup(c.session, c.req.Now); be != 1 {
			t.Fatalf("session on %d", be)
		}
		for i, b := range bs {
			if want := map[bool]int64{true: 1}[i == 1]; b.Active() != want {
				t.Fatalf("backend %d active %d, want %d (released exactly once)", i, b.Active(), want)
			}
		}
	})
	t.Run("bound goes where it is routed", func(t *testing.T) {
		t.Parallel()
		s := offlineCore(t, 2, nil)
		c := testBegin(s, routeChat)
		if err := s.plan(c, canon.Chat, []byte(conversation(3, 0, false))); err != nil {
			t.Fatal(err)
		}
		c.session = s.canon.HashSessionKey([]byte("s3"))
		c.req.Bound = 2 // bound to backend 1, which the bootstrap may overrule
		u, _ := s.pick(c, false)
		if be, ok := s.sessions.Lookup(c.session, c.req.Now); !ok || be != u.b.Index {
			t.Fatalf("session on %d (%v), routed to %d", be, ok, u.b.Index)
		}
	})
}

// TestBindConversation: which key names a request's conversation
// (prompt_cache_key, then a session header; user names none), what it is
// bound to, and a Responses continuation pinned to its producer.
func TestBindConversation(t *testing.T) {
	t.Parallel()
	msgs := `"messages":[{"role":"user","content":"hello there, tell me a story about a cat please"}]`
	for _, tc := range []struct {
		name, api, body, header string
		key                     string // the session key that wins ("" for none)
	}{
		{"none", "chat", `{"model":"m",` + msgs + `}`, "", ""},
		{"user is not a session", "chat", `{"model":"m","user":"alice",` + msgs + `}`, "", ""},
		{"header over user", "chat", `{"model":"m","user":"alice",` + msgs + `}`, "X-Session-Id: h1\r\n", "h1"},
		{"second header", "chat", `{"model":"m",` + msgs + `}`, "Session_id: h2\r\n", "h2"},
		{"cache key over header", "chat", `{"model":"m","prompt_cache_key":"pck",` + msgs + `}`, "X-Session-Id: h1\r\n", "pck"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := offlineCore(t, 2, func(c *Config) { c.Routing.Policy = "session-hash" })
			c := testBegin(s, routeChat)
			if err := s.plan(c, canon.Chat, []byte(tc.body)); err != nil {
				t.Fatal(err)
			}
			head := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\n" + tc.header + "\r\n")
			var h h1.Request
			h.Reset()
			if st, err := h1.ParseRequest(head, &h); st != h1.OK {
				t.Fatalf("parse: %v", err)
			}
			c.hdr = &h1Header{h: &h, b: &head}
			s.bindConversation(c)
			var want uint64
			switch {
			case tc.key == "":
				if c.info.UserKey == 0 && strings.Contains(tc.body, `"user":"alice"`) {
					t.Fatal("the plan read no user")
				}
			case tc.key == "pck":
				want = c.info.CacheKey
			default:
				want = s.canon.HashSessionKey([]byte(tc.key))
			}
			if want == 0 && tc.key != "" {
				t.Fatalf("no key for %s in the plan", tc.key)
			}
			if c.session != want || c.req.Bound != 0 {
				t.Fatalf("session %x bound %d, want %x unbound", c.session, c.req.Bound, want)
			}
			if want == 0 {
				return
			}
			// Known: bound to its backend.
			s.sessions.Bind(want, 1, c.req.Now)
			c.session, c.req.Bound = 0, 0
			c.hdr = &h1Header{h: &h, b: &head}
			s.bindConversation(c)
			if c.session != want || c.req.Bound != 2 || c.req.Pin {
				t.Fatalf("session %x bound %d pin %v, want %x bound 2 unpinned", c.session, c.req.Bound, c.req.Pin, want)
			}
		})
	}
	t.Run("responses continuation", func(t *testing.T) {
		t.Parallel()
		s := offlineCore(t, 2, nil)
		body := []byte(`{"model":"m","previous_response_id":"resp_1","input":"and then?","user":"bob"}`)
		c := testBegin(s, routeResponses)
		if err := s.plan(c, canon.Responses, body); err != nil {
			t.Fatal(err)
		}
		head := []byte("POST /v1/responses HTTP/1.1\r\nHost: h\r\n\r\n")
		var h h1.Request
		h.Reset()
		h1.ParseRequest(head, &h)
		// Unknown id: an ordinary request; its user names no session.
		c.hdr = &h1Header{h: &h, b: &head}
		s.bindConversation(c)
		if c.req.Pin || c.req.Bound != 0 || c.session != 0 {
			t.Fatalf("unknown id: pin %v bound %d session %x", c.req.Pin, c.req.Bound, c.session)
		}
		s.threads.Bind(s.canon.HashSessionKey([]byte("resp_1")), 1, c.req.Now)
		c.session = 0
		c.hdr = &h1Header{h: &h, b: &head}
		s.bindConversation(c)
		if !c.req.Pin || c.req.Bound != 2 || c.session != 0 {
			t.Fatalf("known id: pin %v bound %d session %x, want pinned to backend 1", c.req.Pin, c.req.Bound, c.session)
		}
	})
}

// TestAuthenticate: the tenant of a known key; 401 naming a missing key
// when no field carries one, even at the most fields a head may have; 401
// naming an invalid one otherwise, in the route's error shape.
func TestAuthenticate(t *testing.T) {
	t.Parallel()
	keys := filepath.Join(t.TempDir(), "keys")
	writeKeys(t, keys, apikeys.Line([]byte("sk-alpha-0123456789"), "alpha", 0, 0))
	s := offlineCore(t, 1, func(c *Config) { c.APIKeys = keys })
	many := ""
	for i := 0; i < h1.MaxFields-1; i++ {
		many += fmt.Sprintf("X-F%d: v\r\n", i)
	}
	for _, tc := range []struct {
		name, fields string
		route        int
		tenant       string
		body         string
	}{
		{"known", "Authorization: Bearer sk-alpha-0123456789\r\n", routeChat, "alpha", ""},
		{"known x-api-key", "X-Api-Key: sk-alpha-0123456789\r\n", routeMessages, "alpha", ""},
		{"missing", "X-Other: 1\r\n", routeChat, "", apikeys.UnauthorizedBody(false, true)},
		{"missing, every field taken", many, routeChat, "", apikeys.UnauthorizedBody(false, true)},
		{"invalid", "Authorization: Bearer sk-nobody-000000000\r\n", routeChat, "", apikeys.UnauthorizedBody(false, false)},
		{"invalid, Messages", "X-Api-Key: sk-nobody-000000000\r\n", routeMessages, "", apikeys.UnauthorizedBody(true, false)},
		{"missing, Messages", "", routeMessages, "", apikeys.UnauthorizedBody(true, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\n" + tc.fields + "\r\n")
			var h h1.Request
			h.Reset()
			if st, err := h1.ParseRequest(head, &h); st != h1.OK {
				t.Fatalf("parse: %v", err)
			}
			c := testBegin(s, tc.route)
			defer s.putCall(c)
			c.hdr = &h1Header{h: &h, b: &head}
			r, ok := s.authenticate(c)
			if ok != (tc.tenant != "") || c.tenantName() != tc.tenant {
				t.Fatalf("ok %v tenant %q, want %q", ok, c.tenantName(), tc.tenant)
			}
			if ok && r != (reply{}) {
				t.Fatalf("a reply %+v with the tenant", r)
			}
			if !ok && (r.status != 401 || r.body != tc.body) {
				t.Fatalf("reply %d %q, want 401 %q", r.status, r.body, tc.body)
			}
		})
	}
}

// TestFirstByteTeachesOnlyStreamedSuccesses: the TTFT model learns from a
// streamed 200's first byte only (a whole answer's first byte comes after
// its decoding; an error's says nothing of prefill), once per answer.
func TestFirstByteTeachesOnlyStreamedSuccesses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		streamed bool
		status   int
		learns   bool
	}{
		{true, 200, true}, {false, 200, false}, {true, 201, false}, {true, 503, false},
	} {
		t.Run(fmt.Sprintf("streamed=%v/%d", tc.streamed, tc.status), func(t *testing.T) {
			t.Parallel()
			s := offlineCore(t, 1, nil)
			c, _ := planned(t, s, conversation(1, 0, tc.streamed))
			c.status = tc.status
			// The first call releases the prefill (and says so, for the
			// admission's prefill bound), a later one does not.
			if !c.firstByte(tc.streamed) || c.firstByte(tc.streamed) {
				t.Fatal("the prefill release not reported exactly once")
			}
			if p := s.fleet().sched.Backends[0].Prefill(); p != 0 {
				t.Fatalf("prefill %d after the first byte, want 0", p)
			}
			if c.ttft <= 0 {
				t.Fatalf("ttft %v", c.ttft)
			}
			want := uint64(0)
			if tc.learns {
				want = 1
			}
			if got := s.fleet().sched.TTFTSnapshot().Backends[0].Observations; got != want {
				t.Fatalf("%d observations, want %d", got, want)
			}
		})
	}
}

// TestDoneCountsTheAnswer: the exchange's end counts its status class and,
// for a 2xx whose body began, its time to first token; nothing else.
func TestDoneCountsTheAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status   int
		ttft     time.Duration
		class    string // "" when no class is counted
		ttftSeen bool
	}{
		{200, time.Millisecond, "2xx", true},
		{299, time.Millisecond, "2xx", true},
		{204, 0, "2xx", false}, // no body: no first token
		{300, time.Millisecond, "3xx", false},
		{199, time.Millisecond, "1xx", false},
		{404, time.Millisecond, "4xx", false},
		{599, time.Millisecond, "5xx", false},
		{0, 0, "", false}, // no answer at all (the client left first)
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			s := offlineCore(t, 1, nil)
			c, _ := planned(t, s, conversation(1, 0, false))
			c.status, c.ttft = tc.status, tc.ttft
			c.res.ReleasePrefill()
			s.done(c)
			var b bytes.Buffer
			s.m.set.WritePrometheus(&b)
			text := b.String()
			for _, class := range []string{"1xx", "2xx", "3xx", "4xx", "5xx"} {
				want := 0.0
				if class == tc.class {
					want = 1
				}
				if got := metricIn(text, `kvca_responses_total{route="chat",class="`+class+`"}`); got != want {
					t.Errorf("%s answers %v, want %v", class, got, want)
				}
			}
			want := 0.0
			if tc.ttftSeen {
				want = 1
			}
			got := 0.0 // the model label is "other": no backend named its models
			for _, l := range strings.Split(text, "\n") {
				if strings.HasPrefix(l, `kvca_time_to_first_token_seconds_count{route="chat",`) {
					got += metricIn(l, l[:strings.LastIndexByte(l, ' ')])
				}
			}
			if got != want {
				t.Errorf("time to first token counted %v times, want %v", got, want)
			}
			if a := s.fleet().sched.Backends[0].Active(); a != 0 {
				t.Errorf("active %d after done", a)
			}
		})
	}
}

func TestMs(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]float64{0: 0, 1500 * time.Microsecond: 1.5, 2 * time.Second: 2000, 250 * time.Nanosecond: 0.00025} {
		if got := ms(d); got != want {
			t.Errorf("ms(%v) = %v, want %v", d, got, want)
		}
	}
}

// TestLearnID: a Responses answer's id is bound to its backend as soon as
// the sniffer has read it, not before (the id may come in a later read).
func TestLearnID(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 2, nil)
	c, u := planned(t, s, conversation(1, 0, false))
	c.sn.Reset(sniff.JSON)
	c.sn.Feed([]byte(`{"object":"response","created_at":1,`))
	s.learnID(c)
	if c.idBound {
		t.Fatal("bound before the id was read")
	}
	c.sn.Feed([]byte(`"id":"resp_42","output":[]}`))
	s.learnID(c)
	if !c.idBound {
		t.Fatal("not bound once the id was read")
	}
	if be, ok := s.threads.Lookup(s.canon.HashSessionKey([]byte("resp_42")), c.req.Now); !ok || be != u.b.Index {
		t.Fatalf("resp_42 on %d (%v), want %d", be, ok, u.b.Index)
	}
}

// TestDoneCalibrates: a routed 2xx answer whose usage was read teaches the
// bytes-per-token ratio of its model; other answers do not.
func TestDoneCalibrates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		learns bool
	}{{200, true}, {299, true}, {300, false}, {400, false}, {199, false}} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			s := offlineCore(t, 1, nil)
			s.calibrate = true
			c, _ := planned(t, s, conversation(1, 3, false))
			c.sniffing = true
			c.sn.Reset(sniff.JSON)
			c.sn.Feed(fmt.Appendf(nil, `{"usage":{"prompt_tokens":%d,"completion_tokens":3}}`, c.info.CBRLen/4))
			c.status = tc.status
			c.res.ReleasePrefill()
			s.done(c)
			if _, ok := s.cal.Ratios()["m"]; ok != tc.learns {
				t.Fatalf("calibrated %v, want %v (%v)", ok, tc.learns, s.cal.Ratios())
			}
		})
	}
}

// testBegin starts an exchange of route as a transport would for a POST
// to the route's path.
func testBegin(s *Server, route int) *call {
	c := s.begin([]byte("127.0.0.1"), nil)
	path := map[int]string{routeChat: "/v1/chat/completions", routeCompletions: "/v1/completions", routeResponses: "/v1/responses",
		routeMessages: "/v1/messages", routePassthrough: "/v1/embeddings"}[route]
	c.receive([]byte("POST"), []byte(path), false, false, nil)
	return c
}
