package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"

	"github.com/kvca/kvca/bench/mock"
)

// These drive one mock engine directly with the official Anthropic Go SDK:
// what the engine answers on /v1/messages must be what the SDK's typed
// decoding, stream accumulation and error unwrapping expect, before kvca
// is put in between.

func anthropicEngine(t *testing.T) (*mock.Engine, anthropic.Client) {
	t.Helper()
	e := mock.New(mock.Config{DecodePerToken: time.Millisecond, PrefillPerToken: time.Microsecond, RecordBodies: true})
	if err := e.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	c := anthropic.NewClient(aoption.WithBaseURL(e.URL()), aoption.WithAPIKey("test"), aoption.WithMaxRetries(0),
		aoption.WithRequestTimeout(testTimeout))
	return e, c
}

func anthropicCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

var system = []anthropic.TextBlockParam{{Text: strings.Repeat("You review Go code and answer in one line. ", 8),
	CacheControl: anthropic.NewCacheControlEphemeralParam()}}

func TestAnthropicMessagesTurns(t *testing.T) {
	e, c := anthropicEngine(t)
	ctx := anthropicCtx(t)
	params := anthropic.MessageNewParams{
		Model: "mock", MaxTokens: maxTokens, System: system,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(strings.Repeat("Is this racy? ", 20)))},
		Metadata: anthropic.MetadataParam{UserID: anthropic.String("user-1")},
	}
	m1, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(m1.Content) != 1 || m1.Content[0].AsText().Text != mock.OutputText(maxTokens) || m1.StopReason != anthropic.StopReasonMaxTokens ||
		m1.Role != "assistant" || !strings.HasPrefix(m1.ID, "msg_") || m1.Usage.OutputTokens != maxTokens {
		t.Fatalf("%+v", m1)
	}
	p1, _ := mock.Render(nil, mock.PathMessages, e.Bodies()[0])
	if m1.Usage.InputTokens != int64(mock.Tokens(p1)) || m1.Usage.CacheReadInputTokens != 0 {
		t.Fatalf("usage %+v, prompt %d tokens", m1.Usage, mock.Tokens(p1))
	}
	// The next turn resends the history as the SDK rebuilds it.
	params.Messages = append(params.Messages, m1.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("And now?")))
	m2, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := mock.Render(nil, mock.PathMessages, e.Bodies()[1])
	if !bytes.HasPrefix(p2, p1) {
		t.Fatalf("turn 2's prompt does not extend turn 1's:\n%q\n%q", p1, p2)
	}
	// Every complete 16-token block of turn 1's prompt is cached.
	hit := int64(len(p1) / (16 * mock.BytesPerToken) * 16)
	if m2.Usage.CacheReadInputTokens != hit || m2.Usage.InputTokens != int64(mock.Tokens(p2))-hit {
		t.Fatalf("usage %+v, want %d cached of %d", m2.Usage, hit, mock.Tokens(p2))
	}
}

func TestAnthropicMessagesStream(t *testing.T) {
	_, c := anthropicEngine(t)
	stream := c.Messages.NewStreaming(anthropicCtx(t), anthropic.MessageNewParams{
		Model: "mock", MaxTokens: maxTokens, System: system,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("stream please"))},
	})
	var msg anthropic.Message
	var types []string
	deltas := 0
	for stream.Next() {
		ev := stream.Current()
		if err := msg.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "content_block_delta" {
			deltas++
			continue
		}
		types = append(types, ev.Type)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(types, ","); got != "message_start,content_block_start,content_block_stop,message_delta,message_stop" {
		t.Fatalf("events %s", got)
	}
	if deltas != maxTokens || len(msg.Content) != 1 || msg.Content[0].Text != mock.OutputText(maxTokens) ||
		msg.StopReason != anthropic.StopReasonMaxTokens || msg.Usage.OutputTokens != maxTokens {
		t.Fatalf("%d deltas, %+v", deltas, msg)
	}
}

func TestAnthropicToolUse(t *testing.T) {
	e, c := anthropicEngine(t)
	ctx := anthropicCtx(t)
	tool := anthropic.ToolParam{Name: "run_tests", Description: anthropic.String("Run the package's tests."),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"q": map[string]any{"type": "string"}}}}
	params := anthropic.MessageNewParams{
		Model: "mock", MaxTokens: maxTokens, System: system,
		Tools:      []anthropic.ToolUnionParam{{OfTool: &tool}},
		ToolChoice: anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}},
		Messages:   []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Do the tests pass?"))},
	}
	m, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	use := m.Content[0].AsToolUse()
	var input struct{ Q string }
	if m.StopReason != anthropic.StopReasonToolUse || use.Name != "run_tests" || json.Unmarshal(use.Input, &input) != nil || input.Q != mock.OutputText(maxTokens) {
		t.Fatalf("%+v", m)
	}
	// Streamed, the tool's input arrives as input_json_delta pieces.
	stream := c.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	su := acc.Content[0].AsToolUse()
	if acc.StopReason != anthropic.StopReasonToolUse || su.Name != "run_tests" || string(su.Input) != string(use.Input) {
		t.Fatalf("streamed %+v (input %s, want %s)", acc, su.Input, use.Input)
	}
	// The result goes back in a user turn; the engine answers in text.
	params.ToolChoice = anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{}}
	params.Messages = append(params.Messages, m.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "ok  \tall 12 tests passed", false)))
	m2, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if m2.StopReason != anthropic.StopReasonMaxTokens || m2.Content[0].Text != mock.OutputText(maxTokens) {
		t.Fatalf("%+v", m2)
	}
	bodies := e.Bodies()
	p, _ := mock.Render(nil, mock.PathMessages, bodies[len(bodies)-1])
	if !bytes.Contains(p, []byte("<|tool_call|>run_tests {\"q\":")) || !bytes.Contains(p, []byte("<|tool_result|>ok  \tall 12 tests passed\n")) {
		t.Fatalf("rendered %q", p)
	}
}

func TestAnthropicErrors(t *testing.T) {
	e, c := anthropicEngine(t)
	ctx := anthropicCtx(t)
	user := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("x"))}
	for _, tc := range []struct {
		params anthropic.MessageNewParams
		status int
		typ    string
	}{
		{anthropic.MessageNewParams{Model: "no-such-model", MaxTokens: 4, Messages: user}, 404, "not_found_error"},
		{anthropic.MessageNewParams{Model: "mock", MaxTokens: 0, Messages: user}, 400, "invalid_request_error"},
	} {
		_, err := c.Messages.New(ctx, tc.params)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || string(apiErr.Type()) != tc.typ {
			t.Fatalf("%v: %v", tc.params.Model, err)
		}
	}
	e.SetFaults(mock.Faults{ErrorRate: 1})
	_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "mock", MaxTokens: 4, Messages: user})
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 || apiErr.Type() != "api_error" {
		t.Fatalf("injected failure: %v", err)
	}
	// A stream cut mid-way is an error, not a short answer.
	e.SetFaults(mock.Faults{KillAfterChunks: 3})
	stream := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "mock", MaxTokens: maxTokens, Messages: user})
	var acc anthropic.Message
	events := 0
	for stream.Next() {
		events++
		_ = acc.Accumulate(stream.Current())
	}
	if stream.Err() == nil || acc.StopReason != "" {
		t.Fatalf("a cut stream ended cleanly after %d events: %+v", events, acc)
	}
}
