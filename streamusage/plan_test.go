package streamusage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestPlan: each shape of request, whether it is edited and into what.
func TestPlan(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi \"stream\":true"}]`
	for _, tc := range []struct {
		body, want string // want "": not edited
	}{
		{`{` + msgs + `,"model":"m"}`, ""},
		{`{` + msgs + `,"stream":false}`, ""},
		{`{` + msgs + `,"stream":"true"}`, ""},
		{`{` + msgs + `,"stream":true}`, `{"stream_options":{"include_usage":true},` + msgs + `,"stream":true}`},
		{` { "model":"m", "stream" : true ,` + msgs + `} `, ` {"stream_options":{"include_usage":true}, "model":"m", "stream" : true ,` + msgs + `} `},
		{`{` + msgs + `,"stream":true,"stream_options":null}`, `{` + msgs + `,"stream":true,"stream_options":{"include_usage":true}}`},
		{`{` + msgs + `,"stream":true,"stream_options":{ }}`, `{` + msgs + `,"stream":true,"stream_options":{"include_usage":true }}`},
		{`{` + msgs + `,"stream":true,"stream_options":{"include_usage":false}}`, `{` + msgs + `,"stream":true,"stream_options":{"include_usage":true}}`},
		{`{` + msgs + `,"stream":true,"stream_options":{"include_usage":null,"x":1}}`, `{` + msgs + `,"stream":true,"stream_options":{"include_usage":true,"x":1}}`},
		{`{` + msgs + `,"stream":true,"stream_options":{"include_usage":true}}`, ""},
		{`{` + msgs + `,"stream":true,"stream_options":{"include_usage":false,"include_usage":true}}`, ""},
		{`{` + msgs + `,"stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`, `{` + msgs + `,"stream":true,"stream_options":{"include_usage":true,"include_usage":true}}`},
		{`{` + msgs + `,"stream":true,"stream_options":{"continuous_usage_stats":false}}`, `{` + msgs + `,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false}}`},
		{`{` + msgs + `,"stream":true,"stream_options":{"continuous_usage_stats":true}}`, ""},
		{`{` + msgs + `,"stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`, ""},
		{`{` + msgs + `,"stream":true,"stream_options":"yes"}`, ""},
		{`{"stream":true,` + msgs + `,"stream":false}`, ""},
		{`{"stream":false,` + msgs + `,"stream":true}`, `{"stream_options":{"include_usage":true},"stream":false,` + msgs + `,"stream":true}`},
		{`{` + msgs + `,"tools":[{"function":{"parameters":{"stream":true}}}]}`, ""},
		{`{` + msgs + `,"metadata":{"stream":true,"stream_options":null},"stream":true}`, `{"stream_options":{"include_usage":true},` + msgs + `,"metadata":{"stream":true,"stream_options":null},"stream":true}`},
		{`{` + msgs + `,"str\u0065am":true}`, ""},
		{`{` + msgs + `,"stream":true,"stream_opti\u006fns":{"include_usage":true}}`, ""},
		{`{"prompt":"say \"stream_options\"","stream":true}`, `{"stream_options":{"include_usage":true},"prompt":"say \"stream_options\"","stream":true}`},
		{`[1]`, ""},
		{``, ""},
		{`{"stream":true`, ""},
		{`{"stream":true,}`, ""},
	} {
		e := Plan([]byte(tc.body), "messages", 0)
		got := ""
		if e.Asks() {
			got = string(e.Append(nil, []byte(tc.body)))
			if len(got) != e.Len(len(tc.body)) {
				t.Errorf("%s: Len %d, edited %d bytes", tc.body, e.Len(len(tc.body)), len(got))
			}
		}
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.body, got, tc.want)
		}
	}
}

// TestPlanJumpsThePrompt: with the prompt array's end known, what lies in
// it is not read (a body whose prompt is not valid JSON is still planned),
// and a wrong end is not trusted.
func TestPlanJumpsThePrompt(t *testing.T) {
	body := []byte(`{"model":"m","messages":[ [ ],"stream":true}`) // an unbalanced prompt
	end := bytes.IndexByte(body, ']')
	if e := Plan(body, "messages", end); !e.Asks() || e.At != 1 {
		t.Fatalf("jumping the prompt: %+v", e)
	}
	if e := Plan(body, "messages", 0); e.Asks() {
		t.Fatalf("without its end, an unreadable prompt was planned: %+v", e)
	}
	if e := Plan(body, "messages", end-1); e.Asks() {
		t.Fatalf("an end that is no closing bracket was trusted: %+v", e)
	}
}

// expectAsk is what Plan must decide for body, read with encoding/json
// (whose duplicate keys resolve as the engines' parsers do: the last
// wins): whether to ask, and the stream_options the edited body must have.
func expectAsk(body []byte) (ask bool, want map[string]any) {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || escapedKey(body) {
		return false, nil
	}
	if string(top["stream"]) != "true" {
		return false, nil
	}
	so, has := top["stream_options"]
	want = map[string]any{}
	if has && string(so) != "null" {
		if json.Unmarshal(so, &want) != nil {
			return false, nil
		}
		if want["include_usage"] == true {
			return false, nil
		}
		if c, ok := want["continuous_usage_stats"]; ok && c != false && c != nil {
			return false, nil
		}
	}
	want["include_usage"] = true
	return true, want
}

// escapedKey reports whether a key of body's top level or of its
// stream_options holds a backslash (Plan does not read such a body).
func escapedKey(body []byte) bool {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var walk func(depth int) bool
	walk = func(depth int) bool {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		if tok != json.Delim('{') {
			if tok == json.Delim('[') {
				for d.More() {
					var v json.RawMessage
					_ = d.Decode(&v)
				}
				_, _ = d.Token()
			}
			return false
		}
		found, inOptions := false, false // only the last stream_options counts
		for d.More() {
			off := d.InputOffset()
			tok, _ := d.Token()
			k, _ := tok.(string)
			raw := body[off:d.InputOffset()]
			if bytes.IndexByte(raw, '\\') >= 0 {
				found = true
			}
			if depth == 0 && k == "stream_options" {
				inOptions = walk(1)
			} else {
				var v json.RawMessage
				_ = d.Decode(&v)
			}
		}
		_, _ = d.Token()
		return found || inOptions
	}
	return walk(0)
}

// checkPlan holds Plan's edit of body against expectAsk: the edited body
// is JSON whose members are the original's, but stream_options, which
// asks for usage and keeps the client's other options.
func checkPlan(t *testing.T, body []byte, promptEnd int) {
	t.Helper()
	e := Plan(body, "messages", promptEnd)
	if !json.Valid(body) {
		return // kvca plans only bodies canon has read as JSON
	}
	ask, want := expectAsk(body)
	if e.Asks() != ask {
		t.Fatalf("body %s: edit %+v, want ask=%v", body, e, ask)
	}
	if !ask {
		return
	}
	edited := e.Append(nil, body)
	var before, after map[string]any
	if err := json.Unmarshal(edited, &after); err != nil {
		t.Fatalf("body %s edited into %s: %v", body, edited, err)
	}
	_ = json.Unmarshal(body, &before)
	if !reflect.DeepEqual(after["stream_options"], want) {
		t.Fatalf("body %s edited into %s: stream_options %v, want %v", body, edited, after["stream_options"], want)
	}
	delete(before, "stream_options")
	delete(after, "stream_options")
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("body %s edited into %s: other members changed", body, edited)
	}
}

// randomBody is a request body of random members, in random order, some
// of them repeated: stream and stream_options in every shape, nested
// look-alikes, a prompt with quotes and escapes.
func randomBody(r *rand.Rand) ([]byte, int) {
	vals := []string{`true`, `false`, `null`, `1`, `"true"`, `{}`, `[]`, `{"stream":true}`}
	opts := []string{`null`, `{}`, `{"include_usage":true}`, `{"include_usage":false}`, `{"include_usage":null}`,
		`{"continuous_usage_stats":true}`, `{"continuous_usage_stats":false,"include_usage":false}`, `{ "x" : [1,{"include_usage":true}] }`,
		`{"include_usage":true,"include_usage":false}`, `"s"`, `[]`}
	var members []string
	promptAt := -1
	for range 1 + r.IntN(6) {
		switch r.IntN(6) {
		case 0, 1:
			members = append(members, `"stream":`+vals[r.IntN(len(vals))])
		case 2:
			members = append(members, `"stream_options":`+opts[r.IntN(len(opts))])
		case 3:
			if promptAt < 0 {
				promptAt = len(members)
				members = append(members, `"messages":[{"role":"user","content":"a \"stream\":true, \\\"}"},{"role":"assistant","content":"]}{["}]`)
			}
		case 4:
			members = append(members, `"tools":[{"type":"function","function":{"parameters":{"stream_options":{"include_usage":true}}}}]`)
		default:
			members = append(members, fmt.Sprintf(`"max_tokens" : %d`, r.IntN(100)))
		}
	}
	ws := []string{"", " ", "\n\t"}
	var b strings.Builder
	b.WriteString(ws[r.IntN(3)] + "{" + ws[r.IntN(3)])
	end := 0
	for i, m := range members {
		if i > 0 {
			b.WriteString(ws[r.IntN(3)] + "," + ws[r.IntN(3)])
		}
		b.WriteString(m)
		if i == promptAt {
			end = b.Len() - 1
		}
	}
	b.WriteString(ws[r.IntN(3)] + "}")
	return []byte(b.String()), end
}

// TestPlanRandomBodies: random bodies, planned with and without the
// prompt's end, decide as encoding/json reads them.
func TestPlanRandomBodies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		body, end := randomBody(r)
		checkPlan(t, body, 0)
		if end > 0 {
			checkPlan(t, body, end)
		}
	}
}

func FuzzPlan(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 32 {
		body, _ := randomBody(r)
		f.Add(body)
	}
	f.Add([]byte(`{"stream":true,"stream_options":{"include_usage":false}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		checkPlan(t, body, 0)
	})
}

// TestPlanNoAllocs: planning allocates nothing (make allocs).
func TestPlanNoAllocs(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}],"stream":true,"stream_options":{"continuous_usage_stats":false}}`)
	end := bytes.IndexByte(body, ']')
	var e Edit
	if n := testing.AllocsPerRun(100, func() { e = Plan(body, "messages", end) }); n != 0 {
		t.Fatalf("%v allocations per Plan", n)
	}
	if !e.Asks() {
		t.Fatal("not planned")
	}
}

// BenchmarkPlan: a 1 MB chat body, with its prompt's end known (what a
// resumed or recorded body gives) and without (every byte read).
func BenchmarkPlan(b *testing.B) {
	var msgs []map[string]string
	for i := 0; len(msgs) < 400; i++ {
		msgs = append(msgs, map[string]string{"role": "user", "content": strings.Repeat(fmt.Sprintf("line %d of a tool output with \"quotes\" and {json: true}\n", i), 40)})
	}
	raw, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	body := append(raw[:len(raw)-1:len(raw)-1], `,"stream":true}`...)
	end := bytes.LastIndexByte(body, ']')
	for _, bc := range []struct {
		name string
		end  int
	}{{"jump", end}, {"scan", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if !Plan(body, "messages", bc.end).Asks() {
					b.Fatal("not planned")
				}
			}
		})
	}
}
