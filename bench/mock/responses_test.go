package mock

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

const instructions = "You answer questions about the bookshop's orders, deliveries and returns, in one sentence, politely and without inventing order numbers."

func responsesBody(stream bool, maxTokens int, input string) string {
	b, _ := json.Marshal(map[string]any{"model": "mock", "instructions": instructions, "stream": stream, "max_output_tokens": maxTokens, "input": json.RawMessage(input)})
	return string(b)
}

type responseObject struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Status string `json:"status"`
	Model  string `json:"model"`
	Output []struct {
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens        int `json:"input_tokens"`
		OutputTokens       int `json:"output_tokens"`
		TotalTokens        int `json:"total_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

func postResponse(t *testing.T, e *Engine, body string) responseObject {
	t.Helper()
	resp, err := http.Post(e.URL()+PathResponses, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r responseObject
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	return r
}

// TestResponsesAPI: /v1/responses answers as OpenAI's Responses API does,
// and a conversation continued by re-sending its items finds its first
// turn's blocks in the cache.
func TestResponsesAPI(t *testing.T) {
	e := startEngine(t, Config{BlockTokens: 16})
	turn1 := `"Where is my order?"`
	r := postResponse(t, e, responsesBody(false, 3, turn1))
	if r.Object != "response" || r.Status != "completed" || r.Model != "mock" || !strings.HasPrefix(r.ID, "resp_") {
		t.Fatalf("response %+v", r)
	}
	if len(r.Output) != 1 || r.Output[0].Type != "message" || r.Output[0].Role != "assistant" ||
		len(r.Output[0].Content) != 1 || r.Output[0].Content[0].Type != "output_text" || r.Output[0].Content[0].Text != "the kv  hit " {
		t.Fatalf("output %+v", r.Output)
	}
	p1, err := Render(nil, PathResponses, []byte(responsesBody(false, 3, turn1)))
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage == nil || r.Usage.InputTokens != Tokens(p1) || r.Usage.OutputTokens != 3 || r.Usage.TotalTokens != Tokens(p1)+3 || r.Usage.InputTokensDetails.CachedTokens != 0 {
		t.Fatalf("usage %+v, want %d input tokens", r.Usage, Tokens(p1))
	}

	turn2 := `[{"role":"user","content":"Where is my order?"},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Could you give me its number?"}]},
		{"role":"user","content":[{"type":"input_text","text":"It is 4711."}]}]`
	p2, err := Render(nil, PathResponses, []byte(responsesBody(false, 3, turn2)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(p2, p1) {
		t.Fatalf("turn 2's prompt does not extend turn 1's:\n%q\n%q", p1, p2)
	}
	r = postResponse(t, e, responsesBody(false, 3, turn2))
	if want := len(BlockHashes(nil, p1, 16)) * 16; want == 0 || r.Usage.InputTokensDetails.CachedTokens != want {
		t.Fatalf("turn 2 cached %d tokens, want %d (turn 1's complete blocks)", r.Usage.InputTokensDetails.CachedTokens, want)
	}

	// A string input renders as the equivalent one user message.
	p3, _ := Render(nil, PathResponses, []byte(responsesBody(false, 3, `[{"role":"user","content":"Where is my order?"}]`)))
	if !bytes.Equal(p1, p3) {
		t.Fatalf("string input %q, message input %q", p1, p3)
	}
}

// TestResponsesStream: a streamed response is the Responses API's event
// sequence, each event named on its event line and in its data, numbered,
// the deltas adding up to the final text, ending with response.completed.
func TestResponsesStream(t *testing.T) {
	for _, fast := range []bool{false, true} {
		e := startEngine(t, Config{Fast: fast})
		resp, err := http.Post(e.URL()+PathResponses, "application/json", strings.NewReader(responsesBody(true, 4, `"hello"`)))
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("fast=%v: content type %q", fast, ct)
		}
		var types []string
		var deltas, done strings.Builder
		var completed responseObject
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			if n, ok := strings.CutPrefix(line, "event: "); ok {
				name = n
				continue
			}
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				continue
			}
			var ev struct {
				Type     string          `json:"type"`
				Seq      int             `json:"sequence_number"`
				Delta    string          `json:"delta"`
				Text     string          `json:"text"`
				Response json.RawMessage `json:"response"`
			}
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("fast=%v: event %q: %v", fast, data, err)
			}
			if ev.Type != name || ev.Seq != len(types) {
				t.Fatalf("fast=%v: event line %q, data type %q, sequence %d after %d events", fast, name, ev.Type, ev.Seq, len(types))
			}
			types = append(types, ev.Type)
			switch ev.Type {
			case "response.output_text.delta":
				deltas.WriteString(ev.Delta)
			case "response.output_text.done":
				done.WriteString(ev.Text)
			case "response.completed":
				if err := json.Unmarshal(ev.Response, &completed); err != nil {
					t.Fatal(err)
				}
			}
		}
		resp.Body.Close()
		want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
			"response.output_text.delta", "response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
			"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
		if strings.Join(types, " ") != strings.Join(want, " ") {
			t.Fatalf("fast=%v: events\n%v\nwant\n%v", fast, types, want)
		}
		if deltas.String() != "the kv  hit and " || done.String() != deltas.String() {
			t.Fatalf("fast=%v: deltas %q, done %q", fast, deltas.String(), done.String())
		}
		if completed.Status != "completed" || completed.Usage == nil || completed.Usage.OutputTokens != 4 || completed.Output[0].Content[0].Text != deltas.String() {
			t.Fatalf("fast=%v: completed %+v", fast, completed)
		}
	}
}

func TestResponsesRefusals(t *testing.T) {
	e := startEngine(t, Config{})
	for body, param := range map[string]string{
		`{"model":"mock"}`:                                   "input",
		`{"model":"mock","input":""}`:                        "input",
		`{"model":"mock","input":[]}`:                        "input",
		`{"model":"mock","input":[{"content":"x"}]}`:         "input",
		`{"model":"mock","input":"x","instructions":3}`:      "instructions",
		`{"model":"mock","input":"x","max_output_tokens":0}`: "max_output_tokens",
	} {
		code, out := post(t, e, PathResponses, body)
		errObj, _ := out["error"].(map[string]any)
		if code != 400 || errObj["param"] != param {
			t.Errorf("%s: %d %v, want 400 with param %s", body, code, out, param)
		}
	}
	resp, err := http.Get(e.URL() + PathResponses)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}
