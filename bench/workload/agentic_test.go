package workload

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/kvca/kvca/bench/mock"
)

func TestAsMessagesKeepsConversations(t *testing.T) {
	chat := Synthetic{Seed: 3, Sessions: 20, ToolRate: 0.5, SystemPromptTokens: 256, UserTokens: 32, OutputTokens: 16}.Generate()
	msgs, err := AsMessages(chat)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs.Requests) != len(chat.Requests) {
		t.Fatal(len(msgs.Requests))
	}
	last := map[int][]byte{}
	tools := 0
	for i, r := range msgs.Requests {
		c := chat.Requests[i]
		if r.Path != mock.PathMessages || r.At != c.At || r.Session != c.Session || r.Turn != c.Turn || r.Stream != c.Stream {
			t.Fatalf("request %d: %+v", i, r)
		}
		var m struct {
			System   []map[string]any `json:"system"`
			Messages []struct {
				Role    string           `json:"role"`
				Content []map[string]any `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(r.Body, &m); err != nil {
			t.Fatal(err)
		}
		// Roles alternate, starting with the user; one breakpoint on the
		// system prompt, one on the newest block.
		marks := 0
		for k, mm := range m.Messages {
			if want := []string{"user", "assistant"}[k%2]; mm.Role != want {
				t.Fatalf("request %d message %d role %s", i, k, mm.Role)
			}
			for _, b := range mm.Content {
				if b["cache_control"] != nil {
					marks++
				}
				if b["type"] == "tool_result" {
					tools++
				}
			}
		}
		lastBlocks := m.Messages[len(m.Messages)-1].Content
		if m.System[0]["cache_control"] == nil || marks != 1 || lastBlocks[len(lastBlocks)-1]["cache_control"] == nil {
			t.Fatalf("request %d breakpoints: %s", i, r.Body)
		}
		p, err := mock.Render(nil, mock.PathMessages, r.Body)
		if err != nil {
			t.Fatal(err)
		}
		if prev := last[r.Session]; !bytes.HasPrefix(p, prev) {
			t.Fatalf("request %d does not extend its session's previous prompt", i)
		}
		last[r.Session] = p
	}
	if tools == 0 {
		t.Fatal("no tool results converted")
	}
	ic, _ := Ideal(chat.Requests, 16)
	im, err := Ideal(msgs.Requests, 16)
	if err != nil || math.Abs(ic.Rate()-im.Rate()) > 0.02 {
		t.Fatalf("ideal hit rate: chat %.3f, messages %.3f (%v)", ic.Rate(), im.Rate(), err)
	}
}

func TestThreads(t *testing.T) {
	w := Synthetic{Seed: 5, Sessions: 30, MinTurns: 2, MaxTurns: 4, SystemPromptTokens: 128, UserTokens: 16, OutputTokens: 8}.Threads()
	firsts := 0
	for i, r := range w.Requests {
		if r.Path != mock.PathResponses || bytes.Contains(r.Body, []byte("previous_response_id")) {
			t.Fatalf("request %d: %s", i, r.Body)
		}
		if r.Continues == 0 {
			firsts++
			if r.Turn != 0 || !bytes.Equal(mustRender(t, r.Body), mustRender(t, r.Full)) {
				t.Fatalf("request %d: a first turn must render as itself", i)
			}
			continue
		}
		p := w.Requests[r.Continues-1]
		if p.Session != r.Session || p.Turn != r.Turn-1 || p.At > r.At || r.Continues-1 >= i {
			t.Fatalf("request %d continues %+v", i, p)
		}
		// The engine's thread: the previous prompt, its answer, this input.
		want := append(mustRender(t, p.Full), mock.OutputText(8)...)
		if full := mustRender(t, r.Full); !bytes.HasPrefix(full, append(want, '\n')) {
			t.Fatalf("request %d: Full does not extend the previous turn and its answer", i)
		}
	}
	if firsts != 30 {
		t.Fatal(firsts)
	}
	if h, err := Ideal(w.Requests, 16); err != nil || h.Rate() < 0.3 {
		t.Fatalf("ideal %v %v", h.Rate(), err)
	}
}

func mustRender(t *testing.T, body []byte) []byte {
	t.Helper()
	p, err := mock.Render(nil, mock.PathResponses, body)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSubAgents(t *testing.T) {
	s := SubAgents{Seed: 2, Sessions: 10, Agents: 3, Rounds: 2, ContextTokens: 256, SystemTokens: 64}
	w := s.Generate()
	if len(w.Requests) != 10*(1+2*(3+1)) {
		t.Fatal(len(w.Requests))
	}
	type key struct{ sess, turn int }
	siblings := map[key][]Request{}
	for _, r := range w.Requests {
		if len(r.Headers) != 1 || r.Headers[0][0] != SessionHeader || r.Path != mock.PathMessages {
			t.Fatalf("%+v", r)
		}
		siblings[key{r.Session, r.Turn}] = append(siblings[key{r.Session, r.Turn}], r)
	}
	fanouts := 0
	for k, rs := range siblings {
		if len(rs) == 1 {
			continue
		}
		fanouts++
		if len(rs) != 3 {
			t.Fatalf("%v: %d siblings", k, len(rs))
		}
		// Fired together, sharing a prefix longer than the context, and
		// naming the same session.
		a, b := mustRenderM(t, rs[0].Body), mustRenderM(t, rs[1].Body)
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		if rs[0].At != rs[1].At || n < 256*mock.BytesPerToken || rs[0].Headers[0] != rs[2].Headers[0] {
			t.Fatalf("%v: common prefix %d bytes", k, n)
		}
	}
	if fanouts != 20 {
		t.Fatal(fanouts)
	}
	if w2 := s.Generate(); !bytes.Equal(w2.Requests[5].Body, w.Requests[5].Body) {
		t.Fatal("not deterministic")
	}
}

func mustRenderM(t *testing.T, body []byte) []byte {
	t.Helper()
	p, err := mock.Render(nil, mock.PathMessages, body)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
