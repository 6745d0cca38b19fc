package sdk_test

import (
	"encoding/json"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/kvca/kvca/internal/testkit"
)

// TestChatPlainStreamIsChecked: a stream the SDK sends as it does by
// default (no stream_options) reaches the engine asking for usage
// (--stream-usage), yet the SDK decodes no usage chunk: the role, one
// chunk per token, nothing else, as from the engine without kvca. kvca
// has checked the engine's cached-token count meanwhile: a follow-up
// streamed plainly is reported cached, and counted in the check's
// metrics.
func TestChatPlainStreamIsChecked(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	msgs := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(systemPrompt),
		openai.UserMessage("Stream me an answer, plainly."),
	}
	check := func(acc openai.ChatCompletionAccumulator, chunks int, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if chunks != maxTokens+1 {
			t.Errorf("%d chunks, want %d: a usage chunk reached the SDK", chunks, maxTokens+1)
		}
		if acc.Usage.PromptTokens != 0 || acc.Usage.CompletionTokens != 0 {
			t.Errorf("the SDK saw usage %+v it did not ask for", acc.Usage)
		}
		if len(acc.Choices) != 1 || len(acc.Choices[0].Message.Content) != wantContentLen {
			t.Fatalf("accumulated %+v", acc.Choices)
		}
		var sent struct {
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(f.lastBody(t, 0), &sent); err != nil || !sent.StreamOptions.IncludeUsage {
			t.Fatalf("the engine got %s: no include_usage", f.lastBody(t, 0))
		}
	}
	acc, chunks, err := streamChat(t, f, chatParams(msgs...))
	check(acc, chunks, err)

	next := append(msgs[:len(msgs):len(msgs)], acc.Choices[0].Message.ToParam(), openai.UserMessage("Go on."))
	acc, chunks, err = streamChat(t, f, chatParams(next...))
	check(acc, chunks, err)

	// The answers' ends are booked after their last byte: the removal
	// counted last.
	testkit.WaitUntil(t, "both streams booked", func() bool { return f.metric(t, "kvca_stream_usage_removed_total") == 2 })
	backend := f.engines[0].URL()[len("http://"):]
	checks := 0.0
	for _, v := range []string{"agree", "under", "over"} {
		checks += f.metric(t, `kvca_backend_cache_checks_total{backend="`+backend+`",verdict="`+v+`"}`)
	}
	if checks != 2 {
		t.Errorf("%v answers checked, want the 2 plain streams", checks)
	}
	if got := f.metric(t, `kvca_backend_engine_cached_tokens_total{backend="`+backend+`"}`); got <= 0 {
		t.Errorf("engine cached tokens %v after a follow-up: the follow-up's count was not read", got)
	}
}
