package edge

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/admit"
)

// fields is a header map as a picker's protocol gives it.
type fields [][2]string

func (f fields) Len() int                      { return len(f) }
func (f fields) At(i int) (name, value []byte) { return []byte(f[i][0]), []byte(f[i][1]) }

func chatHeaders(extra ...[2]string) fields {
	return append(fields{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "kvca"}, {"content-type", "application/json"}}, extra...)
}

// pickOnce plays one request through the picker: its pick, and, when
// answer is set, a 200 streamed answer from served and the end.
func pickOnce(t *testing.T, p *Picker, h fields, body string, subset []string, served string, answer bool) ([]string, *PickAnswer) {
	t.Helper()
	x := p.Begin(h)
	half := len(body) / 2
	if a := x.Body([]byte(body[:half]), false); a != nil {
		t.Fatalf("body: %+v", a)
	}
	if a := x.Body([]byte(body[half:]), true); a != nil {
		t.Fatalf("body: %+v", a)
	}
	eps, ans := x.Pick(context.Background(), subset)
	if ans == nil && answer {
		x.Response(200, served, fields{{":status", "200"}, {"content-type", "text/event-stream"}})
		x.ResponseBody([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"), false)
		x.ResponseBody([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\ndata: [DONE]\n\n"), true)
	}
	x.End(false)
	x.End(true) // a second End changes nothing
	return eps, ans
}

func idle(t *testing.T, s *Server) {
	t.Helper()
	for i, b := range s.fleet().sched.Backends {
		if b.Active() != 0 || b.Prefill() != 0 {
			t.Fatalf("backend %d: active %d prefill %d after every request ended", i, b.Active(), b.Prefill())
		}
	}
}

// TestPickerRoutesLikeTheEdge: through the picker, a conversation's next
// turn is picked where its first was answered; the pick comes with the
// other endpoints as fallbacks; every load is released once.
func TestPickerRoutesLikeTheEdge(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 4, nil)
	p := s.Picker()
	eps, ans := pickOnce(t, p, chatHeaders(), conversation(11, 8, true), nil, "", true)
	if ans != nil || len(eps) != 4 {
		t.Fatalf("first turn: %v %+v", eps, ans)
	}
	if got := strings.Join(p.Endpoints(), ","); !strings.Contains(got, eps[0]) {
		t.Fatalf("picked %s, not among %s", eps[0], got)
	}
	next, _ := pickOnce(t, p, chatHeaders(), conversation(11, 9, true), nil, "", true)
	if next[0] != eps[0] {
		t.Fatalf("follow-up picked %s, first turn answered by %s", next[0], eps[0])
	}
	idle(t, s)
}

// TestPickerSubsetAndServed: a subset hint limits the pick; an answer
// served by a fallback moves the request's load there and teaches the
// fallback the prefix.
func TestPickerSubsetAndServed(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 3, nil)
	p := s.Picker()
	all := p.Endpoints()
	eps, _ := pickOnce(t, p, chatHeaders(), conversation(12, 8, true), []string{all[2]}, "", true)
	if eps[0] != all[2] || len(eps) != 1 {
		t.Fatalf("subset {%s}: picked %v", all[2], eps)
	}
	x := p.Begin(chatHeaders())
	x.Body([]byte(conversation(13, 8, true)), true)
	eps, _ = x.Pick(context.Background(), nil)
	var fallback string
	for _, e := range all {
		if e != eps[0] {
			fallback = e
			break
		}
	}
	x.Response(200, fallback, fields{{"content-type", "application/json"}, {"content-length", "2"}})
	i := s.endpointIndex(fallback)
	if b := s.fleet().sched.Backends[i]; b.Active() != 1 {
		t.Fatalf("served by %s: its active %d, want 1", fallback, b.Active())
	}
	x.ResponseBody([]byte("{}"), true)
	x.End(false)
	idle(t, s)
	next, _ := pickOnce(t, p, chatHeaders(), conversation(13, 9, true), nil, "", false)
	if next[0] != fallback {
		t.Fatalf("follow-up picked %s, the answer was served by %s", next[0], fallback)
	}
	idle(t, s)
}

// TestPickerAnswersItself: kvca's own answers reach the gateway as
// immediate answers: a bad body, an unknown path, a body over the limit,
// no healthy backend, /health; each ends its request once.
func TestPickerAnswersItself(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 2, func(c *Config) { c.MaxBodyBytes = 4096 })
	p := s.Picker()
	if _, a := pickOnce(t, p, chatHeaders(), `{"model":`, nil, "", false); a == nil || a.Status != 400 {
		t.Fatalf("bad body: %+v", a)
	}
	if _, a := pickOnce(t, p, fields{{":method", "GET"}, {":path", "/nope"}}, "", nil, "", false); a == nil || a.Status != 404 {
		t.Fatalf("unknown path: %+v", a)
	}
	if _, a := pickOnce(t, p, fields{{":method", "GET"}, {":path", "/health"}}, "", nil, "", false); a == nil || a.Status != 200 || string(a.Body) != string(healthBody) {
		t.Fatalf("health: %+v", a)
	}
	x := p.Begin(chatHeaders())
	if a := x.Body(make([]byte, 5000), false); a == nil || a.Status != 413 {
		t.Fatalf("large body: %+v", a)
	}
	x.End(true)
	for _, b := range s.fleet().sched.Backends {
		b.SetHealthy(false)
	}
	if _, a := pickOnce(t, p, chatHeaders(), conversation(14, 1, false), nil, "", false); a == nil || a.Status != 503 {
		t.Fatalf("no healthy backend: %+v", a)
	}
	if p.Ready() {
		t.Fatal("ready with no healthy backend")
	}
	idle(t, s)
}

// TestPickerCancelled: a stream the gateway cancels, before or after the
// answer began, releases what it holds, once.
func TestPickerCancelled(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 2, nil)
	p := s.Picker()
	for _, stage := range []string{"before pick", "after pick", "mid answer"} {
		x := p.Begin(chatHeaders())
		x.Body([]byte(conversation(15, 3, true)), true)
		if stage != "before pick" {
			if eps, a := x.Pick(context.Background(), nil); a != nil || len(eps) == 0 {
				t.Fatalf("%s: %v %+v", stage, eps, a)
			}
		}
		if stage == "mid answer" {
			x.Response(200, "", fields{{"content-type", "text/event-stream"}})
			x.ResponseBody([]byte("data: {}\n\n"), false)
		}
		x.End(true)
		x.End(true)
		idle(t, s)
	}
}

// TestPickerSheds: with admission full and no queue, a pick is answered
// 429 with Retry-After, as on kvca's own listener; once the first ends,
// the next is picked.
func TestPickerSheds(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 1, func(c *Config) { c.Admission.MaxInflightPerBackend = 1; c.Admission.QueueSize = 0 })
	p := s.Picker()
	first := p.Begin(chatHeaders())
	first.Body([]byte(conversation(16, 2, false)), true)
	if eps, a := first.Pick(context.Background(), nil); a != nil || len(eps) != 1 {
		t.Fatalf("first: %v %+v", eps, a)
	}
	_, a := pickOnce(t, p, chatHeaders(), conversation(17, 2, false), nil, "", false)
	if a == nil || a.Status != 429 {
		t.Fatalf("second while the only slot is held: %+v", a)
	}
	retry := false
	for _, h := range a.Header {
		retry = retry || h[0] == "retry-after"
	}
	if !retry {
		t.Fatalf("429 without retry-after: %v", a.Header)
	}
	first.End(true)
	if eps, a := pickOnce(t, p, chatHeaders(), conversation(18, 2, false), nil, "", true); a != nil || len(eps) != 1 {
		t.Fatalf("after the first ended: %v %+v", eps, a)
	}
	idle(t, s)
}

// TestPickerWakeKeepsTheNewest: wakes that come while one is pending
// replace it, so a waiting pick never reads a stale wake and misses the
// one that admits it.
func TestPickerWakeKeepsTheNewest(t *testing.T) {
	t.Parallel()
	x := &PickExchange{wake: make(chan uint64, 1)}
	tk := &admit.Ticket{Owner: x}
	pickerWake(tk, 1)
	pickerWake(tk, 2)
	pickerWake(tk, 3)
	if got := <-x.wake; got != 3 {
		t.Fatalf("read wake %d, want the newest, 3", got)
	}
	select {
	case got := <-x.wake:
		t.Fatalf("another wake %d pending", got)
	default:
	}
}

// TestPickerCreditsTheServedEndpoint: an answer Envoy served at a
// fallback endpoint is credited there, streamed or not: the next turn is
// picked there, with predicted locations on (the default), and the
// admission slot follows it.
func TestPickerCreditsTheServedEndpoint(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		for _, admission := range []bool{false, true} {
			t.Run(fmt.Sprintf("stream=%v,admission=%v", stream, admission), func(t *testing.T) {
				t.Parallel()
				s := offlineCore(t, 2, func(c *Config) {
					c.Table.PredictTTL = DefaultConfig().Table.PredictTTL
					if admission {
						c.Admission.MaxInflightPerBackend = 4
					}
				})
				p := s.Picker()
				for id := range 8 {
					x := p.Begin(chatHeaders())
					x.Body([]byte(longChat(100+id, 0, stream)), true)
					eps, ans := x.Pick(context.Background(), nil)
					if ans != nil || len(eps) != 2 {
						t.Fatalf("pick %v %+v", eps, ans)
					}
					served := eps[1]
					h := fields{{":status", "200"}, {"content-type", "application/json"}, {"content-length", "120"}}
					if stream {
						h = fields{{":status", "200"}, {"content-type", "text/event-stream"}}
					}
					x.Response(200, served, h)
					i := s.endpointIndex(served)
					if admission && (s.adm.Inflight(i) != 1 || s.adm.Inflight(s.endpointIndex(eps[0])) != 0) {
						t.Fatalf("admission slots: served %d, picked %d", s.adm.Inflight(i), s.adm.Inflight(s.endpointIndex(eps[0])))
					}
					if stream {
						x.ResponseBody([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"), true)
					} else {
						x.ResponseBody([]byte(`{"id":"c1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":40,"completion_tokens":1}}`), true)
					}
					x.End(false)
					idle(t, s)
					if admission && s.adm.Inflight(0)+s.adm.Inflight(1) != 0 {
						t.Fatal("admission slots held after the end")
					}
					next, _ := pickOnce(t, p, chatHeaders(), longChat(100+id, 1, stream), nil, "", false)
					if next[0] != served {
						t.Errorf("conversation %d: next turn picked %s, the answer was served by %s", id, next[0], served)
					}
					idle(t, s)
				}
			})
		}
	}
}

// A body given whole is kept as it is (the picker's codec put it
// together; copying it again cost a twentieth of the picker's CPU); a
// body in chunks is copied, its chunks borrowed.
func TestPickerBodyWholeIsKept(t *testing.T) {
	s := offlineCore(t, 3, nil)
	p := s.Picker()
	whole := []byte(conversation(21, 4, false))
	x := p.Begin(chatHeaders())
	if a := x.Body(whole, true); a != nil {
		t.Fatalf("whole body: %+v", a)
	}
	if &x.body[0] != &whole[0] || len(x.body) != len(whole) {
		t.Fatal("a whole body was copied")
	}
	if eps, a := x.Pick(context.Background(), nil); a != nil || len(eps) == 0 {
		t.Fatalf("pick: %v %+v", eps, a)
	}
	x.End(true)

	body := conversation(22, 4, false)
	half := len(body) / 2
	y := p.Begin(chatHeaders())
	first := []byte(body[:half])
	y.Body(first, false)
	clear(first) // the caller's buffer is its own again
	y.Body([]byte(body[half:]), true)
	if string(y.body) != body {
		t.Fatal("a chunked body was not copied")
	}
	if eps, a := y.Pick(context.Background(), nil); a != nil || len(eps) == 0 {
		t.Fatalf("pick: %v %+v", eps, a)
	}
	y.End(true)
	idle(t, s)
}

// TestPickerPickNowWaits: with the only slot held and a queue, PickNow
// says the pick would wait instead of waiting, without an answer; Pick
// then goes on from that wait and picks once the slot is released.
func TestPickerPickNowWaits(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 1, func(c *Config) { c.Admission.MaxInflightPerBackend = 1; c.Admission.QueueSize = 4 })
	p := s.Picker()
	first := p.Begin(chatHeaders())
	first.Body([]byte(conversation(21, 2, false)), true)
	if eps, a, wait := first.PickNow(nil); wait || a != nil || len(eps) != 1 {
		t.Fatalf("first: %v %+v wait %v", eps, a, wait)
	}
	second := p.Begin(chatHeaders())
	second.Body([]byte(conversation(22, 2, false)), true)
	eps, a, wait := second.PickNow(nil)
	if !wait || a != nil || eps != nil {
		t.Fatalf("second while the only slot is held: %v %+v wait %v, want a wait", eps, a, wait)
	}
	done := make(chan []string, 1)
	go func() {
		eps, _ := second.Pick(context.Background(), nil)
		done <- eps
	}()
	first.End(true)
	select {
	case eps := <-done:
		if len(eps) != 1 {
			t.Fatalf("second after the wait: %v", eps)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting pick was never admitted")
	}
	second.End(true)
	idle(t, s)
}

// TestPickerModelsWaitOffTheConnection: the model list may ask the
// backends, so PickNow, which runs where a whole connection is served,
// says it would wait; Pick then answers it.
func TestPickerModelsWaitOffTheConnection(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 2, nil)
	x := s.Picker().Begin(fields{{":method", "GET"}, {":path", "/v1/models"}})
	x.Body(nil, true)
	if eps, a, wait := x.PickNow(nil); !wait || a != nil || eps != nil {
		t.Fatalf("PickNow: %v %+v wait %v, want a wait", eps, a, wait)
	}
	if eps, a := x.Pick(context.Background(), nil); a == nil || a.Status != 200 || eps != nil {
		t.Fatalf("Pick: %v %+v, want the model list", eps, a)
	}
	x.End(false)
	idle(t, s)
}
