package mock

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// sse reads a stream's events as (event name, data) pairs.
func sse(t *testing.T, e *Engine, path, body string) (int, [][2]string) {
	t.Helper()
	resp, err := http.Post(e.URL()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode == 200 && ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var evs [][2]string
	var name string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data := line[len("data: "):]
			if name != "" {
				var m map[string]any
				if err := json.Unmarshal([]byte(data), &m); err != nil || m["type"] != name {
					t.Fatalf("event %s data %s (%v)", name, data, err)
				}
			}
			evs = append(evs, [2]string{name, data})
			name = ""
		}
	}
	return resp.StatusCode, evs
}

func names(evs [][2]string) string {
	var n []string
	for i, e := range evs {
		if i > 0 && e[0] == evs[i-1][0] {
			continue // runs of deltas count once
		}
		n = append(n, e[0])
	}
	return strings.Join(n, ",")
}

const messagesSystem = `"system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}]`

func TestMessagesAnswerAndCache(t *testing.T) {
	e := startEngine(t, Config{BlockTokens: 4})
	user := strings.Repeat("wxyz", 40)
	b1 := `{"model":"mock","max_tokens":3,` + messagesSystem + `,"messages":[{"role":"user","content":[{"type":"text","text":"` + user + `","cache_control":{"type":"ephemeral"}}]}]}`
	code, r := post(t, e, PathMessages, b1)
	if code != 200 || r["type"] != "message" || r["role"] != "assistant" || r["stop_reason"] != "max_tokens" || !strings.HasPrefix(r["id"].(string), "msg_") {
		t.Fatalf("%d %v", code, r)
	}
	content := r["content"].([]any)[0].(map[string]any)
	if content["type"] != "text" || content["text"] != OutputText(3) {
		t.Fatalf("content %v", content)
	}
	p1, err := Render(nil, PathMessages, []byte(b1))
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|system|>\nYou are terse.\n<|user|>\n" + user + "\n" + genPrompt; string(p1) != want {
		t.Fatalf("rendered %q", p1)
	}
	u := r["usage"].(map[string]any)
	if int(u["input_tokens"].(float64)) != Tokens(p1) || u["cache_read_input_tokens"].(float64) != 0 || u["output_tokens"].(float64) != 3 {
		t.Fatalf("usage %v", u)
	}
	// The next turn resends the history with the breakpoint moved: the
	// prompt extends the first and hits its complete blocks.
	b2 := `{"model":"mock","max_tokens":3,` + messagesSystem + `,"messages":[{"role":"user","content":[{"type":"text","text":"` + user + `"}]},` +
		`{"role":"assistant","content":[{"type":"text","text":"` + OutputText(3) + `"}]},{"role":"user","content":"more","cache_control":{"type":"ephemeral"}}]}`
	p2, _ := Render(nil, PathMessages, []byte(b2))
	if !bytes.HasPrefix(p2, p1) {
		t.Fatalf("turn 2 does not extend turn 1:\n%q\n%q", p1, p2)
	}
	_, r2 := post(t, e, PathMessages, b2)
	u2 := r2["usage"].(map[string]any)
	if hit := int(u2["cache_read_input_tokens"].(float64)); hit != len(p1)/4/4*4 || int(u2["input_tokens"].(float64)) != Tokens(p2)-hit {
		t.Fatalf("usage %v, first prompt %d tokens", u2, Tokens(p1))
	}
}

func TestMessagesStream(t *testing.T) {
	e := startEngine(t, Config{})
	code, evs := sse(t, e, PathMessages, `{"model":"mock","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 {
		t.Fatal(code)
	}
	if got := names(evs); got != "message_start,content_block_start,ping,content_block_delta,content_block_stop,message_delta,message_stop" {
		t.Fatalf("events %s", got)
	}
	var text string
	for _, ev := range evs {
		if ev[0] == "content_block_delta" {
			var d struct{ Delta struct{ Type, Text string } }
			json.Unmarshal([]byte(ev[1]), &d)
			if d.Delta.Type != "text_delta" {
				t.Fatal(ev)
			}
			text += d.Delta.Text
		}
	}
	if text != OutputText(4) || !strings.Contains(evs[len(evs)-2][1], `"usage":{"output_tokens":4}`) {
		t.Fatalf("text %q, %v", text, evs[len(evs)-2])
	}
}

func TestMessagesToolUse(t *testing.T) {
	e := startEngine(t, Config{})
	body := `{"model":"mock","max_tokens":2,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"weather?"}]`
	_, r := post(t, e, PathMessages, body+`}`)
	c := r["content"].([]any)[0].(map[string]any)
	if r["stop_reason"] != "tool_use" || c["type"] != "tool_use" || c["name"] != "get_weather" || c["input"].(map[string]any)["q"] != OutputText(2) {
		t.Fatalf("%v", r)
	}
	_, evs := sse(t, e, PathMessages, body+`,"stream":true}`)
	var js string
	for _, ev := range evs {
		if ev[0] == "content_block_delta" {
			var d struct {
				Delta struct {
					Type        string
					PartialJSON string `json:"partial_json"`
				}
			}
			json.Unmarshal([]byte(ev[1]), &d)
			js += d.Delta.PartialJSON
		}
	}
	if js != `{"q":"`+OutputText(2)+`"}` || !strings.Contains(evs[1][1], `"type":"tool_use"`) || !strings.Contains(evs[len(evs)-2][1], `"stop_reason":"tool_use"`) {
		t.Fatalf("streamed input %q, %v", js, evs)
	}
	// The tool's result comes back in a user turn.
	p, err := Render(nil, PathMessages, []byte(`{"max_tokens":1,"messages":[{"role":"user","content":"w"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"q":"x"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"sunny"}]}]}]}`))
	if err != nil || string(p) != "<|user|>\nw\n<|assistant|>\n<|tool_call|>f {\"q\":\"x\"}\n<|user|>\n<|tool_result|>sunny\n"+genPrompt {
		t.Fatalf("%q %v", p, err)
	}
}

func TestMessagesErrors(t *testing.T) {
	e := startEngine(t, Config{})
	for _, c := range []struct {
		body, typ string
		code      int
	}{
		{`{"model":"mock","messages":[{"role":"user","content":"x"}]}`, "invalid_request_error", 400},
		{`{"model":"mock","max_tokens":1,"messages":[]}`, "invalid_request_error", 400},
		{`{"model":"mock","max_tokens":1,"messages":[{"role":"system","content":"x"}]}`, "invalid_request_error", 400},
		{`{"model":"nope","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, "not_found_error", 404},
		{`{"model":`, "invalid_request_error", 400},
	} {
		code, r := post(t, e, PathMessages, c.body)
		er, _ := r["error"].(map[string]any)
		if code != c.code || r["type"] != "error" || er["type"] != c.typ || er["message"] == "" {
			t.Errorf("%s: %d %v", c.body, code, r)
		}
	}
	e.SetFaults(Faults{ErrorRate: 1})
	code, r := post(t, e, PathMessages, `{"model":"mock","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`)
	if code != 500 || r["error"].(map[string]any)["type"] != "api_error" {
		t.Fatalf("%d %v", code, r)
	}
}

func TestResponsesThreads(t *testing.T) {
	e := startEngine(t, Config{BlockTokens: 4})
	first := `{"model":"mock","instructions":"Be brief.","input":"` + strings.Repeat("abcd", 30) + `","max_output_tokens":3}`
	code, r1 := post(t, e, PathResponses, first)
	id, _ := r1["id"].(string)
	if code != 200 || !strings.HasPrefix(id, "resp_") || r1["status"] != "completed" || r1["previous_response_id"] != nil {
		t.Fatalf("%d %v", code, r1)
	}
	out := r1["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)
	if out["type"] != "output_text" || out["text"] != OutputText(3) {
		t.Fatalf("output %v", out)
	}
	// A continuation renders exactly as the whole conversation resent.
	whole := `{"model":"mock","instructions":"Be brief.","input":[{"role":"user","content":"` + strings.Repeat("abcd", 30) + `"},` +
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"` + OutputText(3) + `"}]},{"role":"user","content":"and?"}],"max_output_tokens":3}`
	pw, err := Render(nil, PathResponses, []byte(whole))
	if err != nil {
		t.Fatal(err)
	}
	code, r2 := post(t, e, PathResponses, `{"model":"mock","previous_response_id":"`+id+`","input":[{"role":"user","content":"and?"}],"max_output_tokens":3}`)
	if code != 200 || r2["previous_response_id"] != id {
		t.Fatalf("%d %v", code, r2)
	}
	u := r2["usage"].(map[string]any)
	p1, _ := Render(nil, PathResponses, []byte(first))
	if int(u["input_tokens"].(float64)) != Tokens(pw) || int(u["input_tokens_details"].(map[string]any)["cached_tokens"].(float64)) != len(p1)/4/4*4 {
		t.Fatalf("usage %v; whole %d tokens, first %d", u, Tokens(pw), Tokens(p1))
	}
	// An id this engine never produced fails as OpenAI's API does.
	code, r3 := post(t, e, PathResponses, `{"model":"mock","previous_response_id":"resp_elsewhere","input":"x"}`)
	er := r3["error"].(map[string]any)
	if code != 400 || er["code"] != "previous_response_not_found" || er["param"] != "previous_response_id" {
		t.Fatalf("%d %v", code, r3)
	}
	// store:false answers are not kept; a restart forgets the others.
	_, r4 := post(t, e, PathResponses, `{"model":"mock","input":"x","store":false}`)
	if code, _ := post(t, e, PathResponses, `{"model":"mock","previous_response_id":"`+r4["id"].(string)+`","input":"y"}`); code != 400 {
		t.Fatalf("continued an unstored response: %d", code)
	}
	if st := e.Stats(); st.Stored != 2 {
		t.Fatalf("stored %d", st.Stored)
	}
	e.Restart()
	if code, _ := post(t, e, PathResponses, `{"model":"mock","previous_response_id":"`+id+`","input":"y"}`); code != 400 {
		t.Fatalf("continued a thread after a restart: %d", code)
	}
}

func TestResponsesStreamIsStored(t *testing.T) {
	e := startEngine(t, Config{})
	code, evs := sse(t, e, PathResponses, `{"model":"mock","input":"hi","stream":true,"max_output_tokens":3}`)
	if code != 200 {
		t.Fatal(code)
	}
	want := "response.created,response.in_progress,response.output_item.added,response.content_part.added,response.output_text.delta," +
		"response.output_text.done,response.content_part.done,response.output_item.done,response.completed"
	if got := names(evs); got != want {
		t.Fatalf("events %s", got)
	}
	var created, completed struct {
		Response struct{ ID, Status string }
	}
	json.Unmarshal([]byte(evs[0][1]), &created)
	json.Unmarshal([]byte(evs[len(evs)-1][1]), &completed)
	if created.Response.ID == "" || created.Response.ID != completed.Response.ID || completed.Response.Status != "completed" {
		t.Fatalf("%+v %+v", created, completed)
	}
	// The streamed response is stored too.
	code, r := post(t, e, PathResponses, `{"model":"mock","previous_response_id":"`+created.Response.ID+`","input":"more"}`)
	if code != 200 {
		t.Fatalf("%d %v", code, r)
	}
}
