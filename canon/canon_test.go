package canon_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kvca/kvca/canon"
)

type buf struct{ b []byte }

func (s *buf) Write(p []byte) { s.b = append(s.b, p...) }

func cbr(t testing.TB, c *canon.Canonicalizer, api canon.API, body string) (string, canon.Info, error) {
	var s buf
	var info canon.Info
	err := c.Canonicalize(api, []byte(body), &s, &info)
	return string(s.b), info, err
}

func TestExcludedAndExtraExcluded(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1,"stream":true,"x_trace":"abc","tools":[]}`
	got, _, err := cbr(t, canon.New(nil), canon.Chat, body)
	if err != nil {
		t.Fatal(err)
	}
	if want := "chat\n{\"model\":\"m\",\"tools\":[],\"x_trace\":\"abc\"}\n{\"content\":\"x\",\"role\":\"user\"}\n"; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
	got, _, _ = cbr(t, canon.New([]string{"x_trace"}), canon.Chat, body)
	if strings.Contains(got, "x_trace") {
		t.Fatalf("--cbr-exclude ignored: %q", got)
	}
}

func TestExclusionIsTopLevelOnly(t *testing.T) {
	t.Parallel()
	got, _, err := cbr(t, canon.New(nil), canon.Chat, `{"messages":[{"role":"user","content":"x","stream":true}],"tools":[{"temperature":1}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, `"stream":true`) || !strings.Contains(got, `"temperature":1`) {
		t.Fatalf("nested controls dropped: %q", got)
	}
}

func TestClassification(t *testing.T) {
	t.Parallel()
	c := canon.New(nil)
	for body, want := range map[string]bool{
		`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}`:                                  false,
		`{"messages":[{"role":"user","content":"u"},{"role":"assistant","content":"a"},{"role":"user","content":"v"}]}`: true,
		`{"messages":[{"role":"user","content":"u"},{"role":"tool","content":"t","tool_call_id":"1"}]}`:                 true,
		`{"messages":[{"role":"user","content":"u"},{"role":"function","name":"f","content":"t"}]}`:                     true,
		`{"messages":[{"role":"developer","content":"d"},{"role":"user","content":"u"}]}`:                               false,
	} {
		_, info, err := cbr(t, c, canon.Chat, body)
		if err != nil {
			t.Fatal(err)
		}
		if info.Followup != want {
			t.Fatalf("%s: followup=%v", body, info.Followup)
		}
	}
	_, info, _ := cbr(t, c, canon.Completions, `{"prompt":"x"}`)
	if !info.Followup {
		t.Fatal("completions must route as follow-ups")
	}
}

func TestSessionIsFirstUserMessage(t *testing.T) {
	t.Parallel()
	c := canon.New(nil)
	_, a, _ := cbr(t, c, canon.Chat, `{"messages":[{"role":"system","content":"s1"},{"role":"user","content":"hello"}]}`)
	_, b, _ := cbr(t, c, canon.Chat, `{"messages":[{"role":"system","content":"s2"},{"role":"user","content":"hello"},{"role":"assistant","content":"x"},{"role":"user","content":"more"}]}`)
	_, d, _ := cbr(t, c, canon.Chat, `{"messages":[{"role":"user","content":"other"}]}`)
	if a.Session != b.Session || a.Session == d.Session || a.Session == 0 {
		t.Fatalf("sessions %x %x %x", a.Session, b.Session, d.Session)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	c := canon.New(nil)
	for body, want := range map[string]error{
		`{`:                                     canon.ErrMalformed,
		`"x"`:                                   canon.ErrNotObject,
		`{"messages":{}}`:                       canon.ErrNoMessages,
		`{"messages":[{"role":1}]}`:             canon.ErrBadMessage,
		`{"messages":[{"role":"user"}],"n":01}`: canon.ErrBadNumberText,
	} {
		if _, _, err := cbr(t, c, canon.Chat, body); !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", body, err, want)
		}
	}
	if _, _, err := cbr(t, c, canon.Completions, `{"prompt":3}`); err != canon.ErrNoPrompt {
		t.Fatal(err)
	}
}

func TestLongStringsAndEscapes(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("abcdefgh", 2000)
	body := `{"messages":[{"role":"user","content":"` + long + `\n\u0007` + long + `"}]}`
	got, info, err := cbr(t, canon.New(nil), canon.Chat, body)
	if err != nil {
		t.Fatal(err)
	}
	want := "chat\n{}\n{\"content\":\"" + long + `\n\u0007` + long + "\",\"role\":\"user\"}\n"
	if got != want || info.CBRLen != len(want) {
		t.Fatal("long string CBR mismatch")
	}
}

// Every spelling of a string gives the CBR of the decoding reference, and
// only canonString's own spelling is taken as it is.
func TestLiteralFastPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lit       string
		canonical bool
	}{
		{`""`, true},
		{`"plain text, long enough to take the eight-byte steps"`, true},
		{`"a\"b\\c\nd\re\tf\bg\fh"`, true},
		{`"\u0000\u001f\u000b\u0010"`, true},
		{`"cafÃ© and ÿ invalid"`, true},
		{`"\/"`, false},           // decodes to "/"
		{`"\u00e9"`, false},       // decodes to é
		{`"\u001F"`, false},       // uppercase hex
		{`"\u000a"`, false},       // canonString writes \n
		{`"\u0008"`, false},       // canonString writes \b
		{`"\ud83d\ude00"`, false}, // a surrogate pair
		{"\"raw\ttab\"", false},   // a raw control byte
		{`"dangling\"`, false},
		{`"\u00"`, false},
		{`"\x41"`, false},
	} {
		if got := canon.CanonicalLiteral([]byte(tc.lit)); got != tc.canonical {
			t.Errorf("canonicalLiteral(%s) = %v, want %v", tc.lit, got, tc.canonical)
		}
		body := `{"messages":[{"role":"user","content":` + tc.lit + `,"name":[` + tc.lit + `,[],{}]}],"x":` + tc.lit + `}`
		got, gi, err := cbr(t, canon.New(nil), canon.Chat, body)
		want, wi, werr := cbr(t, canon.NewDecoding(nil), canon.Chat, body)
		if got != want || !sameInfo(gi, wi) || err != werr {
			t.Errorf("%s: CBR %q (%v), the decoding reference %q (%v)", tc.lit, got, err, want, werr)
		}
	}
}

func sameInfo(a, b canon.Info) bool {
	return a.Followup == b.Followup && string(a.Model) == string(b.Model) && a.Session == b.Session &&
		a.Messages == b.Messages && a.CBRLen == b.CBRLen && a.CacheKey == b.CacheKey && a.UserKey == b.UserKey &&
		string(a.PreviousResponseID) == string(b.PreviousResponseID)
}

func TestAppendOnlyAcrossTurns(t *testing.T) {
	t.Parallel()
	c := canon.New(nil)
	msgs := []map[string]any{{"role": "system", "content": "sys"}}
	prev := ""
	for i := 0; i < 10; i++ {
		msgs = append(msgs, map[string]any{"role": "user", "content": strings.Repeat("q", i*37)})
		body, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "max_tokens": i})
		got, _, err := cbr(t, c, canon.Chat, string(body))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(got, prev) {
			t.Fatalf("turn %d CBR does not extend turn %d", i, i-1)
		}
		prev = got
		msgs = append(msgs, map[string]any{"role": "assistant", "content": "a"})
	}
}

func TestNoAllocsSteadyState(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race")
	}
	c := canon.New(nil)
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"caf\u00e9 \"quoted\" and a long tail ` + strings.Repeat("x", 3000) + `"},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"number","minimum":0.5}}}}}],"temperature":0.2,"priority":-1}`)
	var sink discard
	var info canon.Info
	if err := c.Canonicalize(canon.Chat, body, &sink, &info); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(200, func() { _ = c.Canonicalize(canon.Chat, body, &sink, &info) }); n != 0 {
		t.Fatalf("%v allocs per request", n)
	}
}

func TestPriorityField(t *testing.T) {
	t.Parallel()
	c := canon.New(nil)
	var info canon.Info
	for _, tc := range []struct {
		api        canon.API
		body, want string
	}{
		{canon.Chat, `{"model":"m","priority":-5,"messages":[{"role":"user","content":"hi"}]}`, "-5"},
		{canon.Chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"priority":0}`, "0"},
		{canon.Completions, `{"model":"m","prompt":"hi","priority":12}`, "12"},
		{canon.Responses, `{"model":"m","input":"hi","priority":1.5}`, "1.5"},
		// The last of duplicate members wins, as in the engine's parser.
		{canon.Chat, `{"priority":3,"messages":[{"role":"user","content":"hi"}],"priority":-2}`, "-2"},
		{canon.Chat, `{"priority":"high","messages":[{"role":"user","content":"hi"}]}`, ""},
		{canon.Chat, `{"priority":null,"messages":[{"role":"user","content":"hi"}]}`, ""},
		{canon.Chat, `{"messages":[{"role":"user","content":"hi"}]}`, ""},
		// Only the top level counts.
		{canon.Chat, `{"messages":[{"role":"user","content":"hi","priority":1}]}`, ""},
	} {
		if err := c.Canonicalize(tc.api, []byte(tc.body), &discard{}, &info); err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if string(info.Priority) != tc.want {
			t.Errorf("%s: Priority %q, want %q", tc.body, info.Priority, tc.want)
		}
	}
	// The field never reaches the CBR: changing it costs no cache hit.
	var a, b buf
	if err := c.Canonicalize(canon.Chat, []byte(`{"model":"m","priority":-1,"messages":[{"role":"user","content":"hi"}]}`), &a, &info); err != nil {
		t.Fatal(err)
	}
	if err := c.Canonicalize(canon.Chat, []byte(`{"model":"m","priority":9,"messages":[{"role":"user","content":"hi"}]}`), &b, &info); err != nil {
		t.Fatal(err)
	}
	if string(a.b) != string(b.b) {
		t.Fatalf("CBRs differ:\n%q\n%q", a.b, b.b)
	}
}

type discard struct{ n int }

func (d *discard) Write(p []byte) { d.n += len(p) }

// FuzzCanonicalize: no panic on any body; for accepted bodies the CBR is
// deterministic, independent of key order and escaping (checked by a
// re-encoding through encoding/json), and append-only across turns.
func FuzzCanonicalize(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add([]byte(v.Request))
	}
	f.Add([]byte(`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"model":"m","model":"n"}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"\u00e9\ud83d\ude00"}]}]}`))
	f.Add([]byte(`{"prompt":[1,2,3],"n":1e400}`))
	f.Add([]byte(`{"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x","cache_control":{"ttl":1e2}}]}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"\u001f\u001F\u000a\/\"\\\b\u0008 \u00e9 \ud800"}]}`))
	c := canon.New(nil)
	ref := canon.NewDecoding(nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, api := range []canon.API{canon.Chat, canon.Completions, canon.Messages} {
			a, infoA, err := cbr(t, c, api, string(body))
			r, infoR, errR := cbr(t, ref, api, string(body))
			if err != errR || a != r || !sameInfo(infoA, infoR) {
				t.Fatalf("literal fast path differs from decoding every string:\n%q %v\n%q %v", a, err, r, errR)
			}
			if err != nil {
				continue
			}
			b, infoB, _ := cbr(t, c, api, string(body))
			if a != b || infoA.Followup != infoB.Followup || infoA.Session != infoB.Session {
				t.Fatal("not deterministic")
			}
			if !utf8.Valid(body) || bytes.Contains(body, []byte(`\u`)) || bytes.Contains(body, []byte(`\U`)) {
				continue // encoding/json would rewrite invalid text differently
			}
			var m map[string]any
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.UseNumber()
			if dec.Decode(&m) != nil || dec.More() {
				continue
			}
			re, err := json.Marshal(m)
			if err != nil {
				continue
			}
			r, _, err = cbr(t, c, api, string(re))
			if err != nil || r != a {
				t.Fatalf("re-encoded body changes the CBR:\n%q\n%q (%v)", a, r, err)
			}
			if api != canon.Chat && api != canon.Messages {
				continue
			}
			msgs, _ := m["messages"].([]any)
			for k := 1; k < len(msgs); k++ {
				m["messages"] = msgs[:k]
				sub, _ := json.Marshal(m)
				p, _, err := cbr(t, c, api, string(sub))
				if err != nil || !strings.HasPrefix(a, p) {
					t.Fatalf("CBR of the first %d messages is not a prefix", k)
				}
			}
		}
	})
}

func TestResponsesAPI(t *testing.T) {
	t.Parallel()
	c := canon.New(nil)
	got, info, err := cbr(t, c, canon.Responses, `{"model":"m","instructions":"Be brief.","input":"Hello there","max_output_tokens":50,"text":{"format":{"type":"text"}},"temperature":1,"store":false}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := "responses\n{\"instructions\":\"Be brief.\",\"model\":\"m\"}\n\"Hello there\"\n"; got != want || info.Followup {
		t.Fatalf("got %q followup=%v", got, info.Followup)
	}
	turn1 := `{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":"Hi"}]}`
	turn2 := `{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":"Hi"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello!"}]},{"role":"user","content":"More"}]}`
	a, ia, _ := cbr(t, c, canon.Responses, turn1)
	b, ib, err := cbr(t, c, canon.Responses, turn2)
	if err != nil || ia.Followup || !ib.Followup || !strings.HasPrefix(b, a) || ia.Session != ib.Session {
		t.Fatalf("turns: %q %q %v %v", a, b, ia.Followup, ib.Followup)
	}
	_, fc, _ := cbr(t, c, canon.Responses, `{"input":[{"role":"user","content":"x"},{"type":"function_call_output","call_id":"1","output":"42"}]}`)
	_, prev, _ := cbr(t, c, canon.Responses, `{"previous_response_id":"resp_1","input":"next"}`)
	if !fc.Followup || !prev.Followup {
		t.Fatal("function call output / previous_response_id not a follow-up")
	}
	if _, _, err := cbr(t, c, canon.Responses, `{"model":"m"}`); err != canon.ErrNoInput {
		t.Fatalf("missing input: %v", err)
	}
}

func TestNoSessionSameCBR(t *testing.T) {
	t.Parallel()
	with, without := canon.New(nil), canon.NewWithOptions(nil, canon.Options{NoSession: true})
	bodies := []struct {
		api  canon.API
		body string
	}{
		{canon.Chat, `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"` + strings.Repeat(`hi \"there\" `, 600) + `"},{"role":"assistant","content":"a"}]}`},
		{canon.Chat, `{"messages":[{"role":"system","content":"only a system turn"}]}`},
		{canon.Completions, `{"model":"m","prompt":"the start of a prompt"}`},
		{canon.Responses, `{"model":"m","input":[{"role":"user","content":"q"}]}`},
	}
	for _, b := range bodies {
		a, ia, err := cbr(t, with, b.api, b.body)
		if err != nil {
			t.Fatal(err)
		}
		n, in, err := cbr(t, without, b.api, b.body)
		if err != nil {
			t.Fatal(err)
		}
		if a != n || ia.Followup != in.Followup || ia.Messages != in.Messages || ia.CBRLen != in.CBRLen || string(ia.Model) != string(in.Model) {
			t.Errorf("%s: NoSession changed the CBR or the info", b.body[:40])
		}
		if ia.Session == 0 || in.Session != 0 {
			t.Errorf("%s: session %x with, %x without", b.body[:40], ia.Session, in.Session)
		}
	}
	// A pooled state that hashed a session must not leak it.
	if _, in, _ := cbr(t, without, canon.Chat, bodies[0].body); in.Session != 0 {
		t.Error("NoSession after a session request leaked a hash")
	}
}
