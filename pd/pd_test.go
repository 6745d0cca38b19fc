package pd

import (
	"encoding/json"
	"strings"
	"testing"
)

// decoded is a body as an engine's JSON parser reads it (the last
// duplicate winning, as Python's and Go's do).
func decoded(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return m
}

// count is how many times the member k appears at the top of b.
func count(t testing.TB, b []byte, k string) int {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		if tok == k {
			n++
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func TestPrefillBody(t *testing.T) {
	t.Parallel()
	client := `{"model":"m","messages":[{"role":"user","content":"hi \u00e9"}],"stream":true,` +
		`"stream_options":{"include_usage":true},"max_tokens":300,"min_tokens":5,"temperature":0.25,"x_ext":[1,2]}`
	for _, tc := range []struct {
		api          API
		caps, absent []string
	}{
		{Chat, []string{"max_tokens", "max_completion_tokens"}, []string{"max_output_tokens"}},
		{Completions, []string{"max_tokens", "max_completion_tokens"}, []string{"max_output_tokens"}},
		{Responses, []string{"max_output_tokens"}, []string{"max_completion_tokens"}},
	} {
		out, err := PrefillBody([]byte("prefix:"), []byte(client), tc.api)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(out), "prefix:") {
			t.Fatalf("dst not kept: %s", out)
		}
		out = out[len("prefix:"):]
		m := decoded(t, out)
		if m["stream"] != false {
			t.Errorf("%d: stream %v", tc.api, m["stream"])
		}
		for _, k := range []string{"stream_options", "min_tokens"} {
			if _, ok := m[k]; ok {
				t.Errorf("%d: %s kept", tc.api, k)
			}
		}
		for _, k := range tc.caps {
			if m[k] != 1.0 || count(t, out, k) != 1 {
				t.Errorf("%d: %s = %v", tc.api, k, m[k])
			}
		}
		for _, k := range tc.absent {
			if _, ok := m[k]; ok {
				t.Errorf("%d: %s set", tc.api, k)
			}
		}
		kv, _ := m["kv_transfer_params"].(map[string]any)
		want := map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
			"remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
		if len(kv) != len(want) {
			t.Errorf("%d: kv_transfer_params %v", tc.api, kv)
		}
		for k, v := range want {
			if got, ok := kv[k]; !ok || got != v {
				t.Errorf("%d: kv_transfer_params.%s = %v, want %v", tc.api, k, got, v)
			}
		}
		// The rest is the client's.
		if m["model"] != "m" || m["temperature"] != 0.25 || m["x_ext"] == nil || m["messages"].([]any)[0].(map[string]any)["content"] != "hi é" {
			t.Errorf("%d: the client's members changed: %s", tc.api, out)
		}
	}
}

// TestDuplicatesReplaced: a member the client repeated is replaced
// everywhere, so an engine keeping the last duplicate never sees the
// client's value.
func TestDuplicatesReplaced(t *testing.T) {
	t.Parallel()
	client := `{"stream":false,"model":"m","stream":true,"max_tokens":9,"max_tokens":10,"stream_options":{},"stream_options":{}}`
	out, err := PrefillBody(nil, []byte(client), Chat)
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range map[string]int{"stream": 1, "max_tokens": 1, "stream_options": 0, "model": 1} {
		if got := count(t, out, k); got != n {
			t.Errorf("%s appears %d times, want %d: %s", k, got, n, out)
		}
	}
	if m := decoded(t, out); m["stream"] != false || m["max_tokens"] != 1.0 {
		t.Errorf("%s", out)
	}
}

// TestNamesAsWritten: the client's member names reach the legs byte for
// byte, escapes and all, including ones that do not unescape back to
// themselves (a lone surrogate) and names inside strings with quotes,
// brackets and commas in the values before them.
func TestNamesAsWritten(t *testing.T) {
	t.Parallel()
	client := ` { "\ud800" : "a\",}]" , "x\"y":[{"z":"]"}], "\u0073tream":true, "\\ud800":1, "caf\u00e9" : {"k\u0062":2}}`
	want := `{"\ud800":"a\",}]","x\"y":[{"z":"]"}],"\\ud800":1,"caf\u00e9":{"k\u0062":2},`
	out, err := PrefillBody(nil, []byte(client), Chat)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("got  %s\nwant %s...", out, want)
	}
	out, err = BootstrapBody(nil, []byte(client), "h", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"\ud800":"a\",}]","x\"y":[{"z":"]"}],"\u0073tream":true,"\\ud800":1,"caf\u00e9":{"k\u0062":2},"bootstrap_host":"h"`; !strings.HasPrefix(string(out), want) {
		t.Errorf("got  %s\nwant %s...", out, want)
	}
}

func TestTransferParamsAndDecodeBody(t *testing.T) {
	t.Parallel()
	answer := `{"id":"cmpl-1","choices":[{"text":"x","finish_reason":"length"}],` +
		`"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],"remote_engine_id":"e1","remote_host":"10.0.0.5","remote_port":5600,"tp_size":1}}`
	params, err := TransferParams(nil, []byte(answer))
	if err != nil {
		t.Fatal(err)
	}
	client := `{"model":"m","prompt":"hello","stream":true,"max_tokens":64}`
	out, err := DecodeBody(nil, []byte(client), params)
	if err != nil {
		t.Fatal(err)
	}
	m := decoded(t, out)
	if m["stream"] != true || m["max_tokens"] != 64.0 || m["prompt"] != "hello" {
		t.Errorf("the client's body changed: %s", out)
	}
	kv := m["kv_transfer_params"].(map[string]any)
	if kv["remote_engine_id"] != "e1" || kv["remote_port"] != 5600.0 || len(kv["remote_block_ids"].([]any)) != 3 || kv["do_remote_prefill"] != true {
		t.Errorf("kv_transfer_params %v", kv)
	}
	for _, bad := range []string{`{"id":"x"}`, `{"kv_transfer_params":null}`, `{"kv_transfer_params":[1]}`, `not json`, ``} {
		if _, err := TransferParams(nil, []byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := DecodeBody(nil, []byte(client), []byte(`[1]`)); err == nil {
		t.Error("params not an object: no error")
	}
}

func TestBootstrapBody(t *testing.T) {
	t.Parallel()
	room := Room(^uint64(0))
	if room != 1<<63-1 {
		t.Fatalf("room %d", room)
	}
	out, err := BootstrapBody(nil, []byte(`{"model":"m","bootstrap_room":1,"stream":true}`), "10.0.0.7", 8998, room)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"bootstrap_room":9223372036854775807`) || count(t, out, "bootstrap_room") != 1 {
		t.Errorf("room not exact: %s", out)
	}
	m := decoded(t, out)
	if m["bootstrap_host"] != "10.0.0.7" || m["bootstrap_port"] != 8998.0 || m["stream"] != true {
		t.Errorf("%s", out)
	}
}

func TestReservedAndBadBodies(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"model":"m"}`:                           "",
		`{"model":"m","kv_transfer_params":{}}`:   "kv_transfer_params",
		`{"bootstrap_host":"x"}`:                  "bootstrap_host",
		`{"messages":[{"bootstrap_room":1}]}`:     "",
		`{"bootstrap\u005fport":1}`:               "bootstrap_port",
		`[1]`:                                     "",
		`{"kv_transfer_params":null,"model":"m"}`: "kv_transfer_params",
	} {
		if got := Reserved([]byte(body)); got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
	for _, bad := range []string{`[1]`, `"x"`, `{`, ``} {
		if _, err := PrefillBody(nil, []byte(bad), Chat); err == nil {
			t.Errorf("PrefillBody(%q): no error", bad)
		}
		if _, err := BootstrapBody(nil, []byte(bad), "h", 1, 1); err == nil {
			t.Errorf("BootstrapBody(%q): no error", bad)
		}
	}
}

// FuzzBodies: whatever object a client sends, the legs' bodies are JSON
// objects with the protocol's members exactly once and the client's other
// members as they were.
func FuzzBodies(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[],"stream":true,"max_tokens":3}`))
	f.Add([]byte(`{"stream":1,"stream":2,"a\u0062":"\ud83d\ude00"}`))
	f.Add([]byte(`{"kv_transfer_params":{"x":1},"bootstrap_room":-1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			return
		}
		for _, api := range []API{Chat, Completions, Responses} {
			out, err := PrefillBody(nil, body, api)
			if err != nil {
				return // fastjson refuses what encoding/json let through (invalid UTF-8 is let through)
			}
			if count(t, out, "kv_transfer_params") != 1 || count(t, out, "stream") != 1 || count(t, out, "stream_options") != 0 {
				t.Fatalf("%s -> %s", body, out)
			}
			got := decoded(t, out)
			for k := range m {
				switch k {
				case "kv_transfer_params", "stream", "stream_options", "min_tokens", "max_tokens", "max_completion_tokens", "max_output_tokens":
					continue
				}
				if _, ok := got[k]; !ok {
					t.Fatalf("%q lost: %s -> %s", k, body, out)
				}
			}
		}
		out, err := BootstrapBody(nil, body, "h", 1, 7)
		if err != nil {
			return
		}
		if count(t, out, "bootstrap_room") != 1 || decoded(t, out)["bootstrap_room"] != 7.0 {
			t.Fatalf("%s -> %s", body, out)
		}
	})
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for answer, want := range map[string][3]int64{
		`{"usage":{"prompt_tokens":120,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":96}}}`: {120, 96, 1},
		`{"usage":{"prompt_tokens":120}}`:                            {0, 0, 0},
		`{"usage":{"prompt_tokens_details":{"cached_tokens":null}}}`: {0, 0, 0},
		`not json`: {0, 0, 0},
		`{"usage":{"prompt_tokens_details":{"cached_tokens":0},"prompt_tokens":7}}`: {7, 0, 1},
	} {
		p, c, ok := Usage([]byte(answer))
		if got := [3]int64{p, c, map[bool]int64{true: 1}[ok]}; got != want {
			t.Errorf("%s: %v, want %v", answer, got, want)
		}
	}
}
