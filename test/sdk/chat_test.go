package sdk_test

import (
	"errors"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/kvca/kvca/bench/mock"
)

func chatParams(msgs ...openai.ChatCompletionMessageParamUnion) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:               "mock",
		Messages:            msgs,
		MaxCompletionTokens: openai.Int(maxTokens),
	}
}

// checkAnswer asserts the parts of a chat answer the mock fixes: one
// choice, an assistant message of maxTokens words, cut by the length limit,
// and usage that adds up.
func checkAnswer(t *testing.T, c *openai.ChatCompletion) {
	t.Helper()
	if c.Object != "chat.completion" || c.Model != "mock" || c.ID == "" {
		t.Errorf("object %q model %q id %q", c.Object, c.Model, c.ID)
	}
	if len(c.Choices) != 1 {
		t.Fatalf("%d choices, want 1", len(c.Choices))
	}
	ch := c.Choices[0]
	if ch.Message.Role != "assistant" || len(ch.Message.Content) != wantContentLen {
		t.Errorf("message role %q content %q (%d bytes, want %d)", ch.Message.Role, ch.Message.Content, len(ch.Message.Content), wantContentLen)
	}
	if ch.FinishReason != "length" {
		t.Errorf("finish_reason %q, want length (max tokens reached)", ch.FinishReason)
	}
	if len(ch.Message.ToolCalls) != 0 {
		t.Errorf("unexpected tool calls %+v", ch.Message.ToolCalls)
	}
	u := c.Usage
	if u.CompletionTokens != maxTokens || u.PromptTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %+v", u)
	}
	if !u.JSON.PromptTokensDetails.Valid() {
		t.Errorf("usage carries no prompt_tokens_details: %s", u.RawJSON())
	}
}

// TestChatFollowUpHitsCache runs a two-turn conversation the way an
// application does with the SDK (the first answer appended with ToParam)
// and checks that kvca sent the second turn to the engine holding the
// first, which the engine reports as cached prompt tokens.
func TestChatFollowUpHitsCache(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	ctx := testContext(t)
	msgs := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(systemPrompt),
		openai.UserMessage("What does a KV cache hold?"),
	}
	var first *openai.ChatCompletion
	e1 := f.servedBy(t, func() {
		var err error
		if first, err = f.client.Chat.Completions.New(ctx, chatParams(msgs...)); err != nil {
			t.Fatal(err)
		}
	})
	checkAnswer(t, first)
	if got := first.Usage.PromptTokensDetails.CachedTokens; got != 0 {
		t.Errorf("first turn on a fresh engine reports %d cached tokens", got)
	}

	msgs = append(msgs, first.Choices[0].Message.ToParam(), openai.UserMessage("And why route by prefix?"))
	var second *openai.ChatCompletion
	e2 := f.servedBy(t, func() {
		var err error
		if second, err = f.client.Chat.Completions.New(ctx, chatParams(msgs...)); err != nil {
			t.Fatal(err)
		}
	})
	checkAnswer(t, second)
	if e2 != e1 {
		t.Fatalf("follow-up went to engine %d, first turn to %d", e2, e1)
	}
	u := second.Usage
	if u.PromptTokensDetails.CachedTokens <= 0 || u.PromptTokensDetails.CachedTokens >= u.PromptTokens {
		t.Errorf("follow-up cached_tokens %d of %d prompt tokens, want a proper part", u.PromptTokensDetails.CachedTokens, u.PromptTokens)
	}
	if u.PromptTokens <= first.Usage.PromptTokens {
		t.Errorf("follow-up prompt %d tokens, first turn %d", u.PromptTokens, first.Usage.PromptTokens)
	}
	if got := f.metric(t, `kvca_requests_total{route="chat",phase="followup"}`); got != 1 {
		t.Errorf("followup requests %v, want 1", got)
	}
	if got := f.metric(t, `kvca_routed_blocks_total{kind="cached"}`); got <= 0 {
		t.Errorf("cached blocks %v, want > 0", got)
	}
}

// streamChat streams params and returns the accumulated completion, the
// number of chunks decoded and the stream's error.
func streamChat(t *testing.T, f *fixture, params openai.ChatCompletionNewParams) (openai.ChatCompletionAccumulator, int, error) {
	t.Helper()
	stream := f.client.Chat.Completions.NewStreaming(testContext(t), params)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		chunk := stream.Current()
		chunks++
		if !acc.AddChunk(chunk) {
			t.Fatalf("accumulator refused chunk %d: %s", chunks, chunk.RawJSON())
		}
		// acc.JustFinishedContent is not checked: it fires on a chunk
		// without a content delta, which OpenAI sends before finishing but
		// vLLM and the mock do not (finish_reason rides on the last
		// content chunk), so it never fires behind vLLM, with or without
		// kvca.
	}
	return acc, chunks, stream.Err()
}

// TestChatStreamingAccumulates checks that the SSE stream relayed by kvca
// decodes chunk by chunk into the same answer the non-streaming call gives,
// with usage (stream_options.include_usage) on the final chunk, and that
// the accumulated message works as the next turn's history.
func TestChatStreamingAccumulates(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	ctx := testContext(t)
	msgs := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(systemPrompt),
		openai.UserMessage("Stream me an answer."),
	}
	params := chatParams(msgs...)
	params.StreamOptions.IncludeUsage = openai.Bool(true)

	var acc openai.ChatCompletionAccumulator
	var chunks int
	e1 := f.servedBy(t, func() {
		var err error
		acc, chunks, err = streamChat(t, f, params)
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
	})
	// A role announcement, one chunk per token, one usage chunk: kvca must
	// neither merge nor drop events in a way the decoder notices.
	if chunks != maxTokens+2 {
		t.Errorf("%d chunks, want %d", chunks, maxTokens+2)
	}
	if len(acc.Choices) != 1 {
		t.Fatalf("accumulated %d choices", len(acc.Choices))
	}
	content := acc.Choices[0].Message.Content
	if len(content) != wantContentLen {
		t.Errorf("accumulated %q (%d bytes, want %d)", content, len(content), wantContentLen)
	}
	if acc.Choices[0].FinishReason != "length" || acc.Choices[0].Message.Role != "assistant" {
		t.Errorf("finish_reason %q role %q", acc.Choices[0].FinishReason, acc.Choices[0].Message.Role)
	}
	if acc.Object != "chat.completion" || acc.Model != "mock" || acc.ID == "" {
		t.Errorf("accumulated object %q model %q id %q", acc.Object, acc.Model, acc.ID)
	}
	if acc.Usage.CompletionTokens != maxTokens || acc.Usage.PromptTokens <= 0 ||
		acc.Usage.TotalTokens != acc.Usage.PromptTokens+acc.Usage.CompletionTokens {
		t.Errorf("stream usage %+v", acc.Usage)
	}

	// The accumulated message as history: a follow-up on the same engine,
	// reported as cached there.
	next := append(msgs[:len(msgs):len(msgs)], acc.Choices[0].Message.ToParam(), openai.UserMessage("Go on."))
	var answer *openai.ChatCompletion
	e2 := f.servedBy(t, func() {
		var err error
		if answer, err = f.client.Chat.Completions.New(ctx, chatParams(next...)); err != nil {
			t.Fatal(err)
		}
	})
	checkAnswer(t, answer)
	if e2 != e1 {
		t.Errorf("follow-up of a streamed turn went to engine %d, the stream to %d", e2, e1)
	}
	if answer.Usage.PromptTokensDetails.CachedTokens <= 0 {
		t.Errorf("follow-up after a stream: cached_tokens %d", answer.Usage.PromptTokensDetails.CachedTokens)
	}

	// The first turn again without streaming gives the same (deterministic)
	// answer. It is a bootstrap (no assistant message), which the default
	// policy places by load alone, so no engine is asserted here.
	whole, err := f.client.Chat.Completions.New(ctx, chatParams(msgs...))
	if err != nil {
		t.Fatal(err)
	}
	checkAnswer(t, whole)
	if whole.Choices[0].Message.Content != content || whole.Usage.PromptTokens != acc.Usage.PromptTokens {
		t.Errorf("non-streaming %q (%d prompt tokens), streaming %q (%d)",
			whole.Choices[0].Message.Content, whole.Usage.PromptTokens, content, acc.Usage.PromptTokens)
	}
}

// TestChatStreamBreakIsAnError checks that a backend dying mid-stream
// reaches the SDK as an error, not as a short but clean answer: the SDK
// ends a stream quietly on EOF, so only kvca's `event: error` tells it.
func TestChatStreamBreakIsAnError(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	for _, e := range f.engines {
		e.SetFaults(mock.Faults{KillAfterChunks: 3})
	}
	params := chatParams(openai.SystemMessage(systemPrompt), openai.UserMessage("This stream will break."))
	acc, chunks, err := streamChat(t, f, params)
	var se *ssestream.StreamError
	if !errors.As(err, &se) {
		t.Fatalf("stream ended with %v (%T) after %d chunks, want an ssestream.StreamError", err, err, chunks)
	}
	if chunks == 0 || chunks >= maxTokens+1 {
		t.Errorf("%d chunks before the break", chunks)
	}
	if len(acc.Choices) == 1 && acc.Choices[0].FinishReason != "" {
		t.Errorf("broken stream has finish_reason %q", acc.Choices[0].FinishReason)
	}
}
