package edge

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
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
