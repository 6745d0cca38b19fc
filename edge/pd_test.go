package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/internal/testkit"
)

// longChat is turn n of conversation id with a system prompt long enough
// that its prefill matters (several blocks).
func longChat(id, n int, stream bool) string {
	sys := strings.Repeat(fmt.Sprintf("Conversation %d has a long system prompt about shipping policies. ", id), 8)
	msgs := []map[string]any{{"role": "system", "content": sys}}
	for i := 0; i <= n; i++ {
		msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("question %d of conversation %d", i, id)})
		if i < n {
			msgs = append(msgs, map[string]any{"role": "assistant", "content": fmt.Sprintf("answer %d", i)})
		}
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "stream": stream, "max_tokens": 50,
		"stream_options": map[string]any{"include_usage": true}, "min_tokens": 2})
	return string(b)
}

// routeOf parses an X-Kvca-Route header into its fields.
func routeOf(h string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(h, ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
			out[k] = v
		}
	}
	return out
}

// TestVLLMLegs: a disaggregated request's prefill leg carries the body the
// protocol wants, to a prefill worker, with the request's id; its answer's
// transfer goes, with the client's own body, to a decode worker only once
// the prefill answered, and the decode worker's stream is the client's
// answer. The next turn's prefill goes where the prefix was prefilled.
func TestVLLMLegs(t *testing.T) {
	t.Parallel()
	f := startPD(t, false, 2, 2, nil)
	resp, body := f.chat(t, longChat(1, 0, true))
	if resp.StatusCode != 200 || !strings.Contains(body, "tok2") || !strings.Contains(body, "[DONE]") {
		t.Fatalf("answer %d %q", resp.StatusCode, body)
	}
	ev := f.rec.all()
	if len(ev) != 2 {
		t.Fatalf("%d requests reached the workers, want 2: %+v", len(ev), ev)
	}
	pre, dec := ev[0], ev[1]
	if !strings.HasPrefix(pre.worker, "p") || !strings.HasPrefix(dec.worker, "d") {
		t.Fatalf("legs: %s then %s, want a prefill worker then a decode worker", pre.worker, dec.worker)
	}
	if pre.answered != 200 || pre.path != "/v1/chat/completions" || dec.path != pre.path {
		t.Fatalf("paths %s %s, prefill answered %d", pre.path, dec.path, pre.answered)
	}
	if pre.rid == "" || pre.rid != dec.rid || resp.Header.Get("X-Request-Id") != pre.rid {
		t.Fatalf("request ids: prefill %q decode %q answer %q", pre.rid, dec.rid, resp.Header.Get("X-Request-Id"))
	}
	kv := pre.body["kv_transfer_params"].(map[string]any)
	if kv["do_remote_decode"] != true || kv["do_remote_prefill"] != false || len(kv) != 6 {
		t.Errorf("prefill kv_transfer_params %v", kv)
	}
	if pre.body["stream"] != false || pre.body["stream_options"] != nil || pre.body["min_tokens"] != nil ||
		pre.body["max_tokens"] != 1.0 || pre.body["max_completion_tokens"] != 1.0 {
		t.Errorf("prefill body %s", pre.raw)
	}
	var client map[string]any
	_ = json.Unmarshal([]byte(longChat(1, 0, true)), &client)
	dkv, _ := dec.body["kv_transfer_params"].(map[string]any)
	if dkv["remote_engine_id"] != pre.worker || dkv["do_remote_prefill"] != true || dkv["remote_port"] != 5600.0 {
		t.Errorf("decode kv_transfer_params %v, want the prefill answer's", dkv)
	}
	delete(dec.body, "kv_transfer_params")
	if fmt.Sprint(dec.body) != fmt.Sprint(client) {
		t.Errorf("the decode leg's body is not the client's:\n%v\n%v", dec.body, client)
	}
	r := routeOf(resp.Header.Get("X-Kvca-Route"))
	if r["pd"] != "disaggregated" || !strings.HasSuffix(f.s.fleet().ups[0].b.Name, "") || r["backend"] == "" || r["prefill"] == "" {
		t.Errorf("route header %q", resp.Header.Get("X-Kvca-Route"))
	}
	waitPDIdle(t, f.s)

	// The next turn: its prefix is prefilled where it was.
	resp2, _ := f.chat(t, longChat(1, 1, false))
	if resp2.StatusCode != 200 {
		t.Fatalf("second turn %d", resp2.StatusCode)
	}
	ev = f.rec.all()
	if len(ev) != 4 || ev[2].worker != pre.worker || ev[3].worker != dec.worker {
		t.Errorf("second turn went to %s then %s, want %s then %s", ev[2].worker, ev[3].worker, pre.worker, dec.worker)
	}
	if r := routeOf(resp2.Header.Get("X-Kvca-Route")); r["rule"] != "prefix" {
		t.Errorf("second turn's route %q", resp2.Header.Get("X-Kvca-Route"))
	}
	waitPDIdle(t, f.s)
}

// TestVLLMThreshold: a request whose uncached part is short runs on a
// decode worker alone, its body untouched; the prefill workers see
// nothing.
func TestVLLMThreshold(t *testing.T) {
	t.Parallel()
	f := startPD(t, false, 1, 1, func(c *Config) { c.PD.Threshold = 1 << 20 })
	body := longChat(2, 0, false)
	resp, _ := f.chat(t, body)
	if resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	ev := f.rec.all()
	if len(ev) != 1 || ev[0].worker != "d0" || string(ev[0].raw) != body {
		t.Fatalf("events %+v", ev)
	}
	if r := routeOf(resp.Header.Get("X-Kvca-Route")); r["pd"] != "aggregated:threshold" {
		t.Errorf("route %q", resp.Header.Get("X-Kvca-Route"))
	}
	waitPDIdle(t, f.s)
}

// TestReservedFieldsRefused: in a disaggregated fleet a client may not
// name a transfer or a bootstrap server.
func TestReservedFieldsRefused(t *testing.T) {
	t.Parallel()
	f := startPD(t, false, 1, 1, nil)
	for _, k := range []string{"kv_transfer_params", "bootstrap_host", "bootstrap_room"} {
		resp, body := f.chat(t, `{"model":"m","messages":[{"role":"user","content":"hi"}],"`+k+`":{}}`)
		if resp.StatusCode != 400 || !strings.Contains(body, k) || !strings.Contains(body, "reserved_field") {
			t.Errorf("%s: %d %s", k, resp.StatusCode, body)
		}
	}
	if n := len(f.rec.all()); n != 0 {
		t.Errorf("%d requests reached the workers", n)
	}
}

// decodesOf are the events of decode workers.
func (f *pdFleet) decodeEvents() []pdEvent {
	var out []pdEvent
	for _, e := range f.rec.all() {
		if strings.HasPrefix(e.worker, "d") {
			out = append(out, e)
		}
	}
	return out
}

func (f *pdFleet) prefillEvents() []pdEvent {
	var out []pdEvent
	for _, e := range f.rec.all() {
		if strings.HasPrefix(e.worker, "p") {
			out = append(out, e)
		}
	}
	return out
}

// TestVLLMPrefillFailsOver: a prefill leg that fails (an error status, a
// broken connection) goes to another prefill worker; when every one
// failed, the request runs aggregated on its decode worker, with the
// client's body.
func TestVLLMPrefillFailsOver(t *testing.T) {
	t.Parallel()
	f := startPD(t, false, 2, 1, nil)
	f.prefills[0].status.Store(500)
	f.prefills[1].drop.Store(true)
	body := longChat(3, 0, true)
	resp, out := f.chat(t, body)
	if resp.StatusCode != 200 || !strings.Contains(out, "[DONE]") {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	pre, dec := f.prefillEvents(), f.decodeEvents()
	if len(pre) != 2 || pre[0].worker == pre[1].worker {
		t.Fatalf("prefill legs %+v, want one on each worker", pre)
	}
	if len(dec) != 1 || string(dec[0].raw) != body {
		t.Fatalf("decode legs %+v, want the client's body once", dec)
	}
	if r := routeOf(resp.Header.Get("X-Kvca-Route")); r["pd"] != "aggregated:prefill_failed" {
		t.Errorf("route %q", resp.Header.Get("X-Kvca-Route"))
	}
	waitPDIdle(t, f.s)

	// One worker fails: every request is answered through the other.
	f.prefills[1].drop.Store(false)
	for id := range 6 {
		resp, _ := f.chat(t, longChat(10+id, 0, false))
		if resp.StatusCode != 200 {
			t.Fatalf("conversation %d: %d", id, resp.StatusCode)
		}
		if r := routeOf(resp.Header.Get("X-Kvca-Route")); r["pd"] != "disaggregated" || r["prefill"] != strings.TrimPrefix(f.prefills[1].url(), "http://") {
			t.Errorf("conversation %d: route %q", id, resp.Header.Get("X-Kvca-Route"))
		}
	}
	for _, e := range f.decodeEvents()[1:] {
		if kv, _ := e.body["kv_transfer_params"].(map[string]any); kv["remote_engine_id"] != "p1" {
			t.Errorf("a decode leg with transfer %v", kv)
		}
	}
	waitPDIdle(t, f.s)
}

// TestVLLMPrefillRefused: a prefill worker that refuses the request
// itself (4xx) is not one another worker would differ from: the request
// runs aggregated at once, and the decode worker answers it.
func TestVLLMPrefillRefused(t *testing.T) {
	t.Parallel()
	f := startPD(t, false, 2, 1, nil)
	f.prefills[0].status.Store(400)
	f.prefills[1].status.Store(400)
	resp, _ := f.chat(t, longChat(4, 0, false))
	if resp.StatusCode != 200 || len(f.prefillEvents()) != 1 || len(f.decodeEvents()) != 1 {
		t.Fatalf("%d, %d prefill legs, %d decode legs", resp.StatusCode, len(f.prefillEvents()), len(f.decodeEvents()))
	}
	waitPDIdle(t, f.s)
}

// TestVLLMDecodeFailsOver: a decode worker that fails before its first
// byte is replaced by another decode worker with the same transfer: the
// prompt is not prefilled again.
func TestVLLMDecodeFailsOver(t *testing.T) {
	t.Parallel()
	f := startPD(t, false, 1, 2, nil)
	f.decodes[0].status.Store(503)
	f.decodes[1].drop.Store(true)
	// Both decode workers fail: one prefill, two decode attempts, 503.
	resp, _ := f.chat(t, longChat(5, 0, false))
	if resp.StatusCode != 503 && resp.StatusCode != 502 {
		t.Fatalf("answer %d with every decode worker failing", resp.StatusCode)
	}
	if n := len(f.prefillEvents()); n != 1 {
		t.Fatalf("%d prefill legs, want 1", n)
	}
	waitPDIdle(t, f.s)
	f.decodes[1].drop.Store(false)
	for id := range 4 {
		resp, _ := f.chat(t, longChat(20+id, 0, true))
		if resp.StatusCode != 200 {
			t.Fatalf("conversation %d: %d", id, resp.StatusCode)
		}
	}
	// Each request: one prefill leg; each of its decode legs carries that
	// leg's transfer.
	byRID := map[string][]pdEvent{}
	for _, e := range f.rec.all()[3:] {
		byRID[e.rid] = append(byRID[e.rid], e)
	}
	for rid, evs := range byRID {
		if !strings.HasPrefix(evs[0].worker, "p") {
			t.Fatalf("%s: first leg at %s", rid, evs[0].worker)
		}
		for _, e := range evs[1:] {
			if strings.HasPrefix(e.worker, "p") {
				t.Errorf("%s: prefilled twice", rid)
			}
			if _, ok := e.body["kv_transfer_params"]; !ok {
				t.Errorf("%s: a decode leg without the transfer", rid)
			}
		}
	}
	waitPDIdle(t, f.s)
}

// TestVLLMClientLeavesDuringPrefill: the prefill leg ends with its client,
// no decode leg is sent, and nothing stays reserved.
func TestVLLMClientLeavesDuringPrefill(t *testing.T) {
	t.Parallel()
	f := startPD(t, false, 1, 1, nil)
	defer f.prefills[0].holdAnswers()()
	conn := dialRaw(t, f.s)
	sendChat(t, conn, longChat(6, 0, true))
	testkit.WaitUntil(t, "the prefill leg at its worker", func() bool { return len(f.prefillEvents()) == 1 })
	conn.Close()
	testkit.WaitUntil(t, "the prefill leg cancelled", func() bool {
		e := f.prefillEvents()
		return len(e) == 1 && e[0].cancelled
	})
	waitPDIdle(t, f.s)
	if n := len(f.decodeEvents()); n != 0 {
		t.Fatalf("%d decode legs sent for a client gone", n)
	}
}

// TestVLLMClientLeavesDuringDecode: the decode leg ends with its client.
func TestVLLMClientLeavesDuringDecode(t *testing.T) {
	t.Parallel()
	f := startPD(t, false, 1, 1, nil)
	f.decodes[0].holdFirst = make(chan struct{})
	defer close(f.decodes[0].holdFirst)
	conn := dialRaw(t, f.s)
	sendChat(t, conn, longChat(7, 0, true))
	testkit.WaitUntil(t, "the decode leg at its worker", func() bool { return len(f.decodeEvents()) == 1 })
	conn.Close()
	testkit.WaitUntil(t, "the decode leg cancelled", func() bool {
		e := f.decodeEvents()
		return len(e) == 1 && e[0].cancelled
	})
	waitPDIdle(t, f.s)
}

func dialRaw(t *testing.T, s *Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func sendChat(t *testing.T, c net.Conn, body string) {
	t.Helper()
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
}

// TestSGLangLegs: both legs carry the client's body with the prefill
// worker's bootstrap host and port and one room, at once (the mock's
// workers wait for each other at the room), with the request's id; the
// decode worker's stream is the answer, the prefill worker's is drained.
func TestSGLangLegs(t *testing.T) {
	t.Parallel()
	f := startPD(t, true, 1, 1, func(c *Config) { c.Backends[0] += ",bootstrap-port=9123" })
	body := longChat(8, 0, true)
	resp, out := f.chat(t, body)
	if resp.StatusCode != 200 || !strings.Contains(out, "tok2") || strings.Contains(out, "remote_decode") {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	pre, dec := f.prefillEvents(), f.decodeEvents()
	if len(pre) != 1 || len(dec) != 1 {
		t.Fatalf("legs: %d prefill, %d decode", len(pre), len(dec))
	}
	p, d := pre[0], dec[0]
	if string(p.raw) != string(d.raw) || p.rid != d.rid || p.rid == "" {
		t.Errorf("the legs differ: %s\n%s", p.raw, d.raw)
	}
	room, ok := d.body["bootstrap_room"].(float64)
	if d.body["bootstrap_host"] != f.prefills[0].host() || d.body["bootstrap_port"] != 9123.0 || !ok || room < 0 {
		t.Errorf("bootstrap fields %v %v %v", d.body["bootstrap_host"], d.body["bootstrap_port"], d.body["bootstrap_room"])
	}
	var client map[string]any
	_ = json.Unmarshal([]byte(body), &client)
	for _, k := range []string{"bootstrap_host", "bootstrap_port", "bootstrap_room"} {
		delete(d.body, k)
	}
	if fmt.Sprint(d.body) != fmt.Sprint(client) {
		t.Errorf("not the client's body: %v", d.body)
	}
	testkit.WaitUntil(t, "the prefill answer drained", func() bool { return f.prefillEvents()[0].answered == 200 })
	waitPDIdle(t, f.s)
	if st := f.s.State(); st.Backends[0].BootstrapPort != 9123 || st.Backends[1].BootstrapPort != 0 {
		t.Errorf("state's bootstrap ports %d %d", st.Backends[0].BootstrapPort, st.Backends[1].BootstrapPort)
	}
}

// TestSGLangPrefillFailureCancelsDecode: a pair whose prefill leg breaks
// ends its decode leg too (it would wait for a transfer that never comes),
// and a fresh pair, with another room, serves the request.
func TestSGLangPrefillFailureCancelsDecode(t *testing.T) {
	t.Parallel()
	f := startPD(t, true, 2, 1, nil)
	f.prefills[0].drop.Store(true)
	f.prefills[0].pairedFail.Store(true) // the decode leg reached its worker first
	for id := range 4 {
		resp, out := f.chat(t, longChat(30+id, 0, id%2 == 0))
		if resp.StatusCode != 200 {
			t.Fatalf("conversation %d: %d %s", id, resp.StatusCode, out)
		}
	}
	broken := 0
	for _, p := range f.prefillEvents() {
		if p.worker != "p0" {
			continue
		}
		broken++
		room := p.body["bootstrap_room"]
		testkit.WaitUntil(t, "the broken pair's decode leg cancelled", func() bool {
			for _, d := range f.decodeEvents() {
				if d.body["bootstrap_room"] == room {
					return d.cancelled
				}
			}
			return false
		})
	}
	if broken == 0 {
		t.Fatal("no request went to the failing prefill worker")
	}
	for _, d := range f.decodeEvents() {
		if !d.cancelled && d.answered != 200 {
			t.Errorf("a decode leg neither cancelled nor answered: %+v", d)
		}
	}
	waitPDIdle(t, f.s)
}

// TestSGLangDecodeFailureCancelsPrefill: a decode leg that fails before
// its answer ends its pair's prefill leg, and a fresh pair goes to another
// decode worker (a 503, refused by the retry rule); a decode worker's
// error answered to the client (a 500) ends the prefill leg too.
func TestSGLangDecodeFailureCancelsPrefill(t *testing.T) {
	t.Parallel()
	f := startPD(t, true, 1, 2, nil)
	f.decodes[0].status.Store(503)
	f.decodes[0].pairedFail.Store(true) // the prefill leg reached its worker first
	for id := range 4 {
		resp, out := f.chat(t, longChat(40+id, 0, true))
		if resp.StatusCode != 200 {
			t.Fatalf("conversation %d: %d %s", id, resp.StatusCode, out)
		}
	}
	failed := 0
	for _, d := range f.decodeEvents() {
		if d.worker != "d0" {
			continue
		}
		failed++
		room := d.body["bootstrap_room"]
		testkit.WaitUntil(t, "the failed pair's prefill leg cancelled", func() bool {
			for _, p := range f.prefillEvents() {
				if p.body["bootstrap_room"] == room {
					return p.cancelled
				}
			}
			return false
		})
	}
	if failed == 0 {
		t.Fatal("no request went to the failing decode worker")
	}
	waitPDIdle(t, f.s)

	f.decodes[0].status.Store(500)
	f.decodes[1].status.Store(500)
	f.decodes[1].pairedFail.Store(true)
	resp, _ := f.chat(t, longChat(49, 0, false))
	if resp.StatusCode != 500 {
		t.Fatalf("answer %d, want the decode worker's 500", resp.StatusCode)
	}
	p := f.prefillEvents()
	testkit.WaitUntil(t, "the prefill leg of the 500 cancelled", func() bool {
		for _, e := range f.prefillEvents() {
			if e.seq == p[len(p)-1].seq {
				return e.cancelled
			}
		}
		return false
	})
	waitPDIdle(t, f.s)
}

// TestSGLangClientLeaves: both legs end with the client.
func TestSGLangClientLeaves(t *testing.T) {
	t.Parallel()
	f := startPD(t, true, 1, 1, nil)
	defer f.prefills[0].holdAnswers()()
	conn := dialRaw(t, f.s)
	sendChat(t, conn, longChat(9, 0, true))
	testkit.WaitUntil(t, "both legs at their workers", func() bool {
		return len(f.prefillEvents()) == 1 && len(f.decodeEvents()) == 1
	})
	conn.Close()
	testkit.WaitUntil(t, "both legs cancelled", func() bool {
		p, d := f.prefillEvents(), f.decodeEvents()
		return p[0].cancelled && d[0].cancelled
	})
	waitPDIdle(t, f.s)
}

// TestPickerNamesThePrefillWorker: as endpoint picker in a disaggregated
// fleet, the pick is decode endpoints only and the prefill worker goes in
// x-prefiller-host-port; its load ends with the decode answer's head, and
// a 2xx answer teaches both workers the prefix, so the next turn names
// the same pair. A short request names no prefill worker.
func TestPickerNamesThePrefillWorker(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 4, func(c *Config) {
		c.Backends[0] += "#role=prefill"
		c.Backends[1] += "#role=prefill"
		c.Backends[2] += "#role=decode"
		c.Backends[3] += "#role=decode"
		c.PD.Threshold = 50
	})
	p := s.Picker()
	isPrefill := func(ep string) bool { return ep == "127.0.0.1:1" || ep == "127.0.0.1:2" }
	var first [2]string
	for turn := range 2 {
		x := p.Begin(chatHeaders())
		x.Body([]byte(longChat(60, turn, true)), true)
		eps, ans := x.Pick(context.Background(), nil)
		if ans != nil {
			t.Fatalf("turn %d: %+v", turn, ans)
		}
		for _, e := range eps {
			if isPrefill(e) {
				t.Fatalf("turn %d: a prefill worker among the pick %v", turn, eps)
			}
		}
		h := x.RequestHeaders()
		if len(h) != 1 || h[0][0] != "x-prefiller-host-port" || !isPrefill(h[0][1]) {
			t.Fatalf("turn %d: request headers %v", turn, h)
		}
		pre := s.fleet().sched.Backends[s.endpointIndex(h[0][1])]
		if pre.Active() != 1 {
			t.Fatalf("turn %d: the prefill worker's load %d before the answer", turn, pre.Active())
		}
		x.Response(200, "", fields{{":status", "200"}, {"content-type", "text/event-stream"}})
		if pre.Active() != 0 || pre.Prefill() != 0 {
			t.Fatalf("turn %d: the prefill worker's load %d/%d after the answer's head", turn, pre.Active(), pre.Prefill())
		}
		x.ResponseBody([]byte("data: {}\n\ndata: [DONE]\n\n"), true)
		x.End(false)
		idle(t, s)
		if turn == 0 {
			first = [2]string{eps[0], h[0][1]}
		} else if eps[0] != first[0] || h[0][1] != first[1] {
			t.Fatalf("second turn picked %s with %s, first %s with %s", eps[0], h[0][1], first[0], first[1])
		}
	}
	// A request too short to split: aggregated, no header.
	x := p.Begin(chatHeaders())
	x.Body([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), true)
	eps, _ := x.Pick(context.Background(), nil)
	if isPrefill(eps[0]) || x.RequestHeaders() != nil {
		t.Fatalf("short request: %v %v", eps, x.RequestHeaders())
	}
	x.End(true)
	idle(t, s)
}

// TestDecodeLegAsksUsage: a streamed request that did not ask for its
// usage asks on its decode leg (--stream-usage), as an aggregated one
// would; its prefill leg, not streamed, asks nothing.
func TestDecodeLegAsksUsage(t *testing.T) {
	t.Parallel()
	f := startPD(t, false, 1, 1, nil)
	var m map[string]any
	_ = json.Unmarshal([]byte(longChat(70, 0, true)), &m)
	delete(m, "stream_options")
	b, _ := json.Marshal(m)
	body := string(b)
	resp, _ := f.chat(t, body)
	if resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	pre, dec := f.prefillEvents(), f.decodeEvents()
	if len(pre) != 1 || len(dec) != 1 {
		t.Fatalf("legs %d %d", len(pre), len(dec))
	}
	if so, _ := dec[0].body["stream_options"].(map[string]any); so["include_usage"] != true || dec[0].body["kv_transfer_params"] == nil {
		t.Errorf("decode leg %s", dec[0].raw)
	}
	if _, ok := pre[0].body["stream_options"]; ok {
		t.Errorf("prefill leg %s", pre[0].raw)
	}
	waitPDIdle(t, f.s)
}

// TestSGLangPrefillFailureCutsTheAnswer: a pair whose prefill leg breaks
// after the decode leg's answer began cannot be tried again: the answer
// is cut, with an SSE error event, and the decode leg ends.
func TestSGLangPrefillFailureCutsTheAnswer(t *testing.T) {
	t.Parallel()
	f := startPD(t, true, 1, 1, nil)
	f.prefills[0].drop.Store(true)
	f.prefills[0].pairedFail.Store(true)
	f.decodes[0].earlyHead.Store(true)
	resp, err := client.Post("http://"+f.s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(longChat(80, 0, true)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	// A stream cut short ends without its last chunk: never a clean end.
	if err == nil || resp.StatusCode != 200 || !strings.Contains(body, "early") || !strings.Contains(body, `"error"`) || strings.Contains(body, "[DONE]") {
		t.Fatalf("%d %v %q", resp.StatusCode, err, body)
	}
	testkit.WaitUntil(t, "the decode leg cancelled", func() bool {
		d := f.decodeEvents()
		return len(d) == 1 && d[0].cancelled
	})
	waitPDIdle(t, f.s)
	if n := len(f.decodeEvents()); n != 1 {
		t.Fatalf("%d decode legs, want 1: an answer begun is not tried again", n)
	}
}

// TestPassthroughSkipsPrefillWorkers: a request kvca passes through goes
// to a backend that answers requests, never to a prefill worker.
func TestPassthroughSkipsPrefillWorkers(t *testing.T) {
	t.Parallel()
	f := startPD(t, false, 2, 1, nil)
	for range 4 {
		resp, _ := post(t, f.s, "/v1/embeddings", `{"model":"m","input":"hello"}`)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if p := f.prefillEvents(); len(p) != 0 {
		t.Fatalf("%d passthrough requests at prefill workers", len(p))
	}
	if d := f.decodeEvents(); len(d) != 4 {
		t.Fatalf("%d at the decode worker, want 4", len(d))
	}
	waitPDIdle(t, f.s)
}

// TestVLLMWithMockEngines: kvca in front of two of the bench's mock
// engines, one prefill worker and one decode worker, speaking vLLM's
// protocol end to end: a conversation's turns are answered through both
// legs, and the prefill worker finds the history it prefilled.
func TestVLLMWithMockEngines(t *testing.T) {
	t.Parallel()
	p := startEngine(t, mock.Config{Name: "p", BlockTokens: 16})
	d := startEngine(t, mock.Config{Name: "d", BlockTokens: 16})
	s := startProxy(t, func(c *Config) {
		c.Backends = []string{p.URL() + "#role=prefill", d.URL() + "#role=decode"}
		c.PD.Threshold = 0
		c.RouteHeader = true
	})
	for turn := range 3 {
		body := strings.Replace(longChat(90, turn, true), `"model":"m"`, `"model":"mock"`, 1)
		resp, err := client.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		events, err := readAllEvents(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(events) < 2 {
			t.Fatalf("turn %d: %d %v %d events", turn, resp.StatusCode, err, len(events))
		}
		if r := routeOf(resp.Header.Get("X-Kvca-Route")); r["pd"] != "disaggregated" {
			t.Fatalf("turn %d: route %q", turn, resp.Header.Get("X-Kvca-Route"))
		}
	}
	waitPDIdle(t, s)
	ps, ds := p.Stats(), d.Stats()
	if ps.Requests != 3 || ds.Requests != 3 {
		t.Fatalf("requests: prefill %d, decode %d; want 3 each", ps.Requests, ds.Requests)
	}
	if ps.HitTokens == 0 {
		t.Fatal("the prefill worker found none of the history it prefilled")
	}
}
