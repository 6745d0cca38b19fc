package sdk_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

var weatherTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:        "get_weather",
	Description: openai.String("Current weather for a city"),
	Parameters: shared.FunctionParameters{
		"type": "object",
		"properties": map[string]any{
			"city": map[string]any{"type": "string"},
		},
		"required": []string{"city"},
	},
})

// bodyRecorder is SDK middleware that keeps the last request body the SDK
// put on the wire, so a test can compare it with what the engine received.
type bodyRecorder struct {
	mu   sync.Mutex
	last []byte
}

func (r *bodyRecorder) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		r.mu.Lock()
		r.last = b
		r.mu.Unlock()
	}
	return next(req)
}

func (r *bodyRecorder) body() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// TestToolCallConversation runs the tool-calling loop as an application
// writes it with the SDK: a request offering tools, then the assistant's
// tool call and the tool's result sent back as history. The mock never
// emits tool calls (bench/mock answers every request with fixed words and
// finish_reason "length"), so the assistant tool call here is the one a
// model would have produced; what is checked is that kvca forwards such a
// conversation unchanged and keeps it on the engine holding its prefix.
func TestToolCallConversation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	ctx := testContext(t)
	rec := &bodyRecorder{}
	mw := option.WithMiddleware(rec.middleware)

	msgs := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(systemPrompt),
		openai.UserMessage("What is the weather in Lyon?"),
	}
	params := chatParams(msgs...)
	params.Tools = []openai.ChatCompletionToolUnionParam{weatherTool}
	params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}

	var first *openai.ChatCompletion
	e1 := f.servedBy(t, func() {
		var err error
		if first, err = f.client.Chat.Completions.New(ctx, params, mw); err != nil {
			t.Fatal(err)
		}
	})
	checkAnswer(t, first)
	if !bytes.Equal(f.lastBody(t, e1), rec.body()) {
		t.Errorf("engine received\n%s\nSDK sent\n%s", f.lastBody(t, e1), rec.body())
	}

	call := openai.ChatCompletionAssistantMessageParam{
		ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
			OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID: "call_lyon_1",
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
					Name:      "get_weather",
					Arguments: `{"city":"Lyon"}`,
				},
			},
		}},
	}
	// The tool-call turn replaces the first answer in the history, as it
	// would have if the model had called the tool: the shared prefix is
	// the system prompt, the tools and the user question.
	msgs = append(msgs,
		openai.ChatCompletionMessageParamUnion{OfAssistant: &call},
		openai.ToolMessage(`{"temperature_c":21,"sky":"clear"}`, "call_lyon_1"),
	)
	params.Messages = msgs
	var second *openai.ChatCompletion
	e2 := f.servedBy(t, func() {
		var err error
		if second, err = f.client.Chat.Completions.New(ctx, params, mw); err != nil {
			t.Fatal(err)
		}
	})
	checkAnswer(t, second)
	if e2 != e1 {
		t.Errorf("tool result went to engine %d, the question to %d", e2, e1)
	}
	if second.Usage.PromptTokensDetails.CachedTokens <= 0 {
		t.Errorf("tool-result turn: cached_tokens %d", second.Usage.PromptTokensDetails.CachedTokens)
	}
	got := f.lastBody(t, e2)
	if !bytes.Equal(got, rec.body()) {
		t.Errorf("engine received\n%s\nSDK sent\n%s", got, rec.body())
	}

	// What reached the engine is still a well-formed tool conversation.
	var req struct {
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(got, &req); err != nil {
		t.Fatal(err)
	}
	if len(req.Tools) != 1 || req.Tools[0].Type != "function" || req.Tools[0].Function.Name != "get_weather" {
		t.Errorf("tools %+v", req.Tools)
	}
	if len(req.Messages) != 4 {
		t.Fatalf("%d messages, want 4", len(req.Messages))
	}
	a, tool := req.Messages[2], req.Messages[3]
	if a.Role != "assistant" || len(a.ToolCalls) != 1 || a.ToolCalls[0].ID != "call_lyon_1" ||
		a.ToolCalls[0].Type != "function" || a.ToolCalls[0].Function.Name != "get_weather" ||
		a.ToolCalls[0].Function.Arguments != `{"city":"Lyon"}` {
		t.Errorf("assistant tool call %+v", a)
	}
	if tool.Role != "tool" || tool.ToolCallID != "call_lyon_1" {
		t.Errorf("tool message %+v", tool)
	}
}
