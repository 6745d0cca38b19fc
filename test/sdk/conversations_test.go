package sdk_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

func (f *fixture) anthropic() anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL("http://"+f.proxy.Addr()), aoption.WithAPIKey("sk-kvca-test"),
		aoption.WithMaxRetries(0), aoption.WithRequestTimeout(testTimeout))
}

// TestAnthropicThroughKvca: a coding agent's conversation over the
// Messages API, through kvca with the Anthropic SDK: every turn lands on
// the engine that holds its prefix (which reports it cached), streaming
// decodes, tool use round-trips, and kvca's own errors are Anthropic's.
func TestAnthropicThroughKvca(t *testing.T) {
	f := newFixture(t, 4)
	c := f.anthropic()
	ctx := testContext(t)
	params := anthropic.MessageNewParams{
		Model: "mock", MaxTokens: maxTokens, System: []anthropic.TextBlockParam{{Text: systemPrompt}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(strings.Repeat("Review this diff, please. ", 10)))},
	}
	var m *anthropic.Message
	home := f.servedBy(t, func() {
		var err error
		if m, err = c.Messages.New(ctx, params); err != nil {
			t.Fatal(err)
		}
	})
	for turn := 1; turn <= 3; turn++ {
		params.Messages = append(params.Messages, m.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock(fmt.Sprintf("Turn %d: and the tests?", turn))))
		if got := f.servedBy(t, func() {
			if turn == 2 {
				// Streamed: the SDK accumulates Anthropic's event types.
				stream := c.Messages.NewStreaming(ctx, params)
				acc := anthropic.Message{}
				for stream.Next() {
					if err := acc.Accumulate(stream.Current()); err != nil {
						t.Fatal(err)
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				m = &acc
				return
			}
			var err error
			if m, err = c.Messages.New(ctx, params); err != nil {
				t.Fatal(err)
			}
		}); got != home {
			t.Fatalf("turn %d served by engine %d, the conversation lives on %d", turn, got, home)
		}
		if m.Usage.CacheReadInputTokens == 0 {
			t.Fatalf("turn %d: nothing cached (%+v)", turn, m.Usage)
		}
	}
	// Tool use: the forced tool call, then its result, on the same engine.
	tool := anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "read_file", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"path": map[string]any{"type": "string"}}}}}
	params.Tools = []anthropic.ToolUnionParam{tool}
	params.ToolChoice = anthropic.ToolChoiceUnionParam{OfTool: &anthropic.ToolChoiceToolParam{Name: "read_file"}}
	var use *anthropic.Message
	toolHome := f.servedBy(t, func() {
		var err error
		if use, err = c.Messages.New(ctx, params); err != nil {
			t.Fatal(err)
		}
	})
	var id string
	for _, b := range use.Content {
		if b.Type == "tool_use" {
			id = b.ID
		}
	}
	if id == "" {
		t.Fatalf("no tool_use block: %+v", use.Content)
	}
	params.ToolChoice = anthropic.ToolChoiceUnionParam{}
	params.Messages = append(params.Messages, use.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(id, "package main", false)))
	if got := f.servedBy(t, func() {
		if _, err := c.Messages.New(ctx, params); err != nil {
			t.Fatal(err)
		}
	}); got != toolHome {
		t.Fatalf("tool result served by %d, the tool call by %d", got, toolHome)
	}

	// kvca's own error on this route is Anthropic-shaped.
	_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "no-such-model", MaxTokens: maxTokens,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || !strings.Contains(ae.RawJSON(), `"type":"not_found_error"`) {
		t.Fatalf("unknown model: %v", err)
	}
}

// TestResponsesThreadsReachTheirProducer: conversations continued by
// previous_response_id only (no history resent) reach the engine that
// produced the response every time; any other engine does not store it
// and refuses.
func TestResponsesThreadsReachTheirProducer(t *testing.T) {
	f := newFixture(t, 4)
	ctx := testContext(t)
	for conv := 0; conv < 8; conv++ {
		var r *responses.Response
		home := f.servedBy(t, func() {
			var err error
			r, err = f.client.Responses.New(ctx, responseParams(responses.ResponseNewParamsInputUnion{OfString: openai.String(fmt.Sprintf("Conversation %d: where is my order?", conv))}))
			if err != nil {
				t.Fatal(err)
			}
		})
		for turn := 1; turn <= 3; turn++ {
			p := responseParams(responses.ResponseNewParamsInputUnion{OfString: openai.String(fmt.Sprintf("Turn %d: thanks.", turn))})
			p.PreviousResponseID = openai.String(r.ID)
			if got := f.servedBy(t, func() {
				var err error
				if r, err = f.client.Responses.New(ctx, p); err != nil {
					t.Fatalf("conversation %d turn %d: %v", conv, turn, err)
				}
			}); got != home {
				t.Fatalf("conversation %d turn %d served by %d, produced on %d", conv, turn, got, home)
			}
		}
	}
}

// TestSessionSiblingsLandTogether: requests of one agent session fired in
// parallel, before any of them is answered, share its new prefix; they
// name the session in a header and land together while load allows: the
// load bound over affinities lets a backend of an idle fleet of four take
// two of them while they are in flight, so four land on two engines at
// most, never scattered.
func TestSessionSiblingsLandTogether(t *testing.T) {
	f := newFixture(t, 4)
	ctx := testContext(t)
	for session := 0; session < 4; session++ {
		before := f.requests()
		var wg sync.WaitGroup
		for sub := 0; sub < 4; sub++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := f.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
					Model:     "mock",
					MaxTokens: openai.Int(maxTokens),
					Messages: []openai.ChatCompletionMessageParamUnion{
						openai.SystemMessage(fmt.Sprintf("Session %d. %s", session, systemPrompt)),
						openai.UserMessage(fmt.Sprintf("sub-agent %d: look at package %d", sub, sub)),
					},
				}, option.WithHeader("x-claude-code-session-id", fmt.Sprintf("session-%d", session)))
				if err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		after := f.requests()
		moved := 0
		for i := range after {
			if after[i] != before[i] {
				moved++
			}
		}
		if moved > 2 {
			t.Fatalf("session %d's parallel requests spread over %d engines: %v -> %v", session, moved, before, after)
		}
	}
}
