package sdk_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/kvca/kvca/internal/testkit"
)

func completionParams(prompt string) openai.CompletionNewParams {
	return openai.CompletionNewParams{
		Model:     "mock",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens: openai.Int(maxTokens),
	}
}

// TestCompletions covers /v1/completions: a non-streaming answer, the same
// prompt streamed (text joined from the chunks, usage on the last one) on
// the engine that now holds it, reported as cached tokens.
func TestCompletions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	ctx := testContext(t)
	prompt := systemPrompt + "\nComplete this sentence: a KV-cache-aware proxy"

	var c *openai.Completion
	e1 := f.servedBy(t, func() {
		var err error
		if c, err = f.client.Completions.New(ctx, completionParams(prompt)); err != nil {
			t.Fatal(err)
		}
	})
	if c.Object != "text_completion" || c.Model != "mock" || len(c.Choices) != 1 {
		t.Fatalf("completion %s", c.RawJSON())
	}
	text := c.Choices[0].Text
	if len(text) != wantContentLen || c.Choices[0].FinishReason != openai.CompletionChoiceFinishReasonLength {
		t.Errorf("text %q finish_reason %q", text, c.Choices[0].FinishReason)
	}
	if c.Usage.CompletionTokens != maxTokens || c.Usage.PromptTokens <= 0 ||
		c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens {
		t.Errorf("usage %+v", c.Usage)
	}
	if c.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("fresh engine reports %d cached tokens", c.Usage.PromptTokensDetails.CachedTokens)
	}

	params := completionParams(prompt)
	params.StreamOptions.IncludeUsage = openai.Bool(true)
	var streamed strings.Builder
	var finish openai.CompletionChoiceFinishReason
	var usage openai.CompletionUsage
	e2 := f.servedBy(t, func() {
		stream := f.client.Completions.NewStreaming(ctx, params)
		defer stream.Close()
		for stream.Next() {
			chunk := stream.Current()
			for _, ch := range chunk.Choices {
				streamed.WriteString(ch.Text)
				if ch.FinishReason != "" {
					finish = ch.FinishReason
				}
			}
			if chunk.JSON.Usage.Valid() {
				usage = chunk.Usage
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
	})
	// Completions carry no roles and are routed by prefix: the repeat goes
	// where the prompt already is.
	if e2 != e1 {
		t.Errorf("repeated prompt went to engine %d, first to %d", e2, e1)
	}
	if streamed.String() != text || finish != openai.CompletionChoiceFinishReasonLength {
		t.Errorf("streamed %q finish %q, non-streaming %q", streamed.String(), finish, text)
	}
	if usage.PromptTokens != c.Usage.PromptTokens || usage.CompletionTokens != maxTokens {
		t.Errorf("stream usage %+v", usage)
	}
	if usage.PromptTokensDetails.CachedTokens <= 0 {
		t.Errorf("repeated prompt: cached_tokens %d", usage.PromptTokensDetails.CachedTokens)
	}
}

// TestModels checks that the SDK decodes kvca's union of the engines'
// /v1/models, each model once.
func TestModels(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	ctx := testContext(t)
	page, err := f.client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		if m.Object != "model" || m.OwnedBy == "" {
			t.Errorf("model %s", m.RawJSON())
		}
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	if want := []string{"mock", "mock-e0", "mock-e1"}; !slices.Equal(ids, want) {
		t.Errorf("models %v, want %v", ids, want)
	}

	// The auto-pager must stop after the one page kvca returns.
	n := 0
	iter := f.client.Models.ListAutoPaging(ctx)
	for iter.Next() {
		n++
	}
	if err := iter.Err(); err != nil || n != 3 {
		t.Errorf("auto-paging: %d models, %v", n, err)
	}
}

// apiError unwraps err as the SDK's *openai.Error.
func apiError(t *testing.T, err error) *openai.Error {
	t.Helper()
	var apierr *openai.Error
	if !errors.As(err, &apierr) {
		t.Fatalf("error %v (%T), want *openai.Error", err, err)
	}
	return apierr
}

// TestErrors checks that kvca's own errors reach SDK callers as typed API
// errors with status, type and code.
func TestErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	ctx := testContext(t)

	t.Run("chat without messages", func(t *testing.T) {
		_, err := f.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "mock"})
		e := apiError(t, err)
		if e.StatusCode != 400 || e.Type != "invalid_request_error" || e.Code == "" || e.Message == "" {
			t.Errorf("status %d type %q code %q message %q", e.StatusCode, e.Type, e.Code, e.Message)
		}
	})
	t.Run("completion without prompt", func(t *testing.T) {
		_, err := f.client.Completions.New(ctx, openai.CompletionNewParams{Model: "mock"})
		e := apiError(t, err)
		if e.StatusCode != 400 || e.Type != "invalid_request_error" {
			t.Errorf("status %d type %q code %q", e.StatusCode, e.Type, e.Code)
		}
	})
	t.Run("streaming request rejected", func(t *testing.T) {
		// A 400 on a streaming call arrives before any event: the SDK
		// reports it from the stream, not from a chunk.
		stream := f.client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "mock"})
		defer stream.Close()
		if stream.Next() {
			t.Fatalf("got a chunk: %s", stream.Current().RawJSON())
		}
		if e := apiError(t, stream.Err()); e.StatusCode != 400 {
			t.Errorf("status %d", e.StatusCode)
		}
	})
	t.Run("unknown model", func(t *testing.T) {
		// kvca knows each backend's models and answers itself, in
		// OpenAI's shape. It learns them asynchronously from /v1/models at
		// start; until then an engine answers the 404 (vLLM-style, with a
		// numeric code), so wait a bounded time for kvca's own answer.
		p := chatParams(openai.UserMessage("hi"))
		p.Model = "no-such-model"
		var e *openai.Error
		testkit.WaitUntil(t, "kvca to answer model_not_found itself", func() bool {
			_, err := f.client.Chat.Completions.New(ctx, p)
			e = apiError(t, err)
			return e.Code == "model_not_found"
		})
		if e.StatusCode != 404 || e.Code != "model_not_found" || e.Type != "invalid_request_error" || e.Message == "" {
			t.Errorf("status %d code %q message %q raw %s", e.StatusCode, e.Code, e.Message, e.RawJSON())
		}
	})
	t.Run("backends down", func(t *testing.T) {
		for _, e := range f.engines {
			if err := e.Down(); err != nil {
				t.Fatal(err)
			}
		}
		_, err := f.client.Chat.Completions.New(ctx, chatParams(openai.UserMessage("anyone there?")))
		e := apiError(t, err)
		// 502 while kvca still tries the backends, 503 once it has
		// ejected them: both in OpenAI's shape with a code to branch on.
		switch {
		case e.StatusCode == 502 && e.Code == "upstream_unreachable":
		case e.StatusCode == 503 && e.Code == "no_healthy_backend":
		default:
			t.Errorf("status %d code %q raw %s", e.StatusCode, e.Code, e.RawJSON())
		}
	})
}
