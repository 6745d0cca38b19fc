package workload

import (
	"encoding/json"
	"fmt"

	"github.com/kvca/kvca/bench/mock"
)

// AsMessages replays w's chat conversations as Anthropic Messages API
// traffic, the way a coding agent sends them: the system prompt in
// "system", tools in Anthropic's shape, assistant tool calls as tool_use
// blocks and their results as tool_result blocks of a user turn, and one
// cache_control breakpoint on the system prompt and one on the newest
// block, which moves forward every turn. Requests keep their times,
// sessions and turns. Non-chat requests are kept as they are.
func AsMessages(w *Workload) (*Workload, error) {
	out := &Workload{Name: w.Name + "-messages", TraceIdeal: w.TraceIdeal, HasTraceIdeal: w.HasTraceIdeal}
	for i, r := range w.Requests {
		if r.Path != mock.PathChat {
			out.Requests = append(out.Requests, r)
			continue
		}
		body, err := chatToMessages(r.Body)
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		r.Path, r.Body = mock.PathMessages, body
		out.Requests = append(out.Requests, r)
	}
	return out, nil
}

type chatMsg struct {
	Role       string `json:"role"`
	Content    any    `json:"content"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls,omitempty"`
}

type block = map[string]any

func ephemeral() block { return block{"type": "ephemeral"} }

func chatToMessages(body []byte) ([]byte, error) {
	var req struct {
		Model     string    `json:"model"`
		Messages  []chatMsg `json:"messages"`
		MaxTokens int       `json:"max_tokens"`
		Stream    bool      `json:"stream"`
		Tools     []struct {
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	out := map[string]any{"model": req.Model, "max_tokens": req.MaxTokens}
	if req.Stream {
		out["stream"] = true
	}
	if len(req.Tools) > 0 {
		var tools []block
		for _, t := range req.Tools {
			tools = append(tools, block{"name": t.Function.Name, "description": t.Function.Description, "input_schema": t.Function.Parameters})
		}
		out["tools"] = tools
	}
	type turn struct {
		Role    string  `json:"role"`
		Content []block `json:"content"`
	}
	var turns []turn
	add := func(role string, b block) {
		if n := len(turns); n > 0 && turns[n-1].Role == role {
			turns[n-1].Content = append(turns[n-1].Content, b)
			return
		}
		turns = append(turns, turn{role, []block{b}})
	}
	for _, m := range req.Messages {
		text, _ := m.Content.(string)
		switch m.Role {
		case "system":
			out["system"] = []block{{"type": "text", "text": text, "cache_control": ephemeral()}}
		case "tool":
			add("user", block{"type": "tool_result", "tool_use_id": m.ToolCallID, "content": text})
		case "assistant":
			if text != "" {
				add("assistant", block{"type": "text", "text": text})
			}
			for _, tc := range m.ToolCalls {
				var input any = map[string]any{}
				_ = json.Unmarshal([]byte(tc.Function.Arguments), &input)
				add("assistant", block{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name, "input": input})
			}
		default:
			add("user", block{"type": "text", "text": text})
		}
	}
	if n := len(turns); n > 0 {
		last := turns[n-1].Content
		last[len(last)-1]["cache_control"] = ephemeral()
	}
	out["messages"] = turns
	return json.Marshal(out)
}
