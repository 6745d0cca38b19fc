package sdk_test

import (
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

const bookshop = "You are the support assistant of an online bookshop. Answer in one or two sentences, politely, and only about orders, deliveries, returns and the catalogue."

func responseParams(input responses.ResponseNewParamsInputUnion) responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model:           "mock",
		Instructions:    openai.String(bookshop),
		Input:           input,
		MaxOutputTokens: openai.Int(maxTokens),
	}
}

// TestResponsesThroughKvca: the Responses API, tried against kvca mock
// engines as an application would: a first turn, then the conversation
// continued by re-sending its items, which kvca keeps on the engine that
// holds the prefix (the engine reports the first turn's tokens cached);
// then the same streamed, decoded by the SDK's event stream.
func TestResponsesThroughKvca(t *testing.T) {
	f := newFixture(t, 3)
	ctx := testContext(t)

	var first *responses.Response
	home := f.servedBy(t, func() {
		var err error
		first, err = f.client.Responses.New(ctx, responseParams(responses.ResponseNewParamsInputUnion{OfString: openai.String("Where is my order?")}))
		if err != nil {
			t.Fatal(err)
		}
	})
	if first.Status != responses.ResponseStatusCompleted || len(first.OutputText()) != wantContentLen || first.Usage.OutputTokens != maxTokens {
		t.Fatalf("first turn: status %q, output %q, usage %+v", first.Status, first.OutputText(), first.Usage)
	}
	if first.Usage.InputTokensDetails.CachedTokens != 0 {
		t.Errorf("first turn found %d tokens cached on fresh engines", first.Usage.InputTokensDetails.CachedTokens)
	}

	history := responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("Where is my order?", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfMessage(first.OutputText(), responses.EasyInputMessageRoleAssistant),
		responses.ResponseInputItemParamOfMessage("It is 4711.", responses.EasyInputMessageRoleUser),
	}
	var second *responses.Response
	if got := f.servedBy(t, func() {
		var err error
		second, err = f.client.Responses.New(ctx, responseParams(responses.ResponseNewParamsInputUnion{OfInputItemList: history}))
		if err != nil {
			t.Fatal(err)
		}
	}); got != home {
		t.Fatalf("second turn served by engine %d, the first by %d", got, home)
	}
	if second.Usage.InputTokensDetails.CachedTokens == 0 {
		t.Errorf("second turn found nothing cached: usage %+v", second.Usage)
	}

	history = append(history,
		responses.ResponseInputItemParamOfMessage(second.OutputText(), responses.EasyInputMessageRoleAssistant),
		responses.ResponseInputItemParamOfMessage("Thank you.", responses.EasyInputMessageRoleUser))
	var text string
	var completed *responses.Response
	if got := f.servedBy(t, func() {
		stream := f.client.Responses.NewStreaming(ctx, responseParams(responses.ResponseNewParamsInputUnion{OfInputItemList: history}))
		for stream.Next() {
			ev := stream.Current()
			switch ev.Type {
			case "response.output_text.delta":
				text += ev.Delta
			case "response.completed":
				r := ev.AsResponseCompleted().Response
				completed = &r
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		stream.Close()
	}); got != home {
		t.Fatalf("streamed third turn served by engine %d, the first by %d", got, home)
	}
	if completed == nil || len(text) != wantContentLen || completed.OutputText() != text || completed.Usage.InputTokensDetails.CachedTokens == 0 {
		t.Fatalf("stream: text %q, completed %+v", text, completed)
	}
}
