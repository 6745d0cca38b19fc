package sniff

import (
	"bytes"
	"fmt"
	"github.com/kvca/kvca/h1"
	"math/rand/v2"

	"github.com/valyala/fastjson"
	"strings"
	"testing"
)

// The answers below have the shapes vLLM, OpenAI and Anthropic send
// (field order, nulls, nested details, [DONE], event lines).

func chatStream(words int) string {
	var b strings.Builder
	b.WriteString(`data: {"id":"chatcmpl-9f1c2a","object":"chat.completion.chunk","created":1733000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	for i := range words {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-9f1c2a","object":"chat.completion.chunk","created":1733000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" w\"o\\rd%d\n"},"logprobs":null,"finish_reason":null}],"usage":null}`+"\n\n", i)
	}
	b.WriteString(`data: {"id":"chatcmpl-9f1c2a","object":"chat.completion.chunk","created":1733000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":null}` + "\n\n")
	b.WriteString(`data: {"id":"chatcmpl-9f1c2a","object":"chat.completion.chunk","created":1733000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],"usage":{"prompt_tokens":1742,"total_tokens":1810,"completion_tokens":68,"prompt_tokens_details":{"cached_tokens":1536}}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

func chatJSON(contentBytes int) string {
	content := strings.Repeat(`Lorem ipsum dolor sit amet, \"quoted\" and a back\\slash, line\n`, contentBytes/64+1)[:contentBytes]
	content = strings.TrimRight(content, `\`)
	return `{"id":"chatcmpl-b2d4","object":"chat.completion","created":1733000000,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		content + `","refusal":null,"usage":{"prompt_tokens":999999}},"logprobs":null,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_bd83329f63"}`
}

const responsesStream = "event: response.created\n" +
	`data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","created_at":1741290958,"status":"in_progress","error":null,"instructions":"You are a helpful assistant.","model":"gpt-4.1-2025-04-14","output":[],"usage":null,"metadata":{}}}` + "\n\n" +
	"event: response.in_progress\n" +
	`data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","status":"in_progress","output":[],"usage":null}}` + "\n\n" +
	"event: response.output_item.added\n" +
	`data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","type":"message","status":"in_progress","role":"assistant","content":[]}}` + "\n\n" +
	"event: response.output_text.delta\n" +
	`data: {"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"delta":"Hi"}` + "\n\n" +
	"event: response.completed\n" +
	`data: {"type":"response.completed","sequence_number":4,"response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","created_at":1741290958,"status":"completed","output":[{"id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi there!","annotations":[]}]}],"usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":0},"output_tokens":11,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":48},"metadata":{}}}` + "\n\n"

const responsesJSON = `{
  "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
  "object": "response",
  "created_at": 1741476542,
  "status": "completed",
  "output": [
    {
      "type": "message",
      "id": "msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b",
      "status": "completed",
      "role": "assistant",
      "content": [{"type": "output_text", "text": "In a peaceful grove beneath a silver moon...", "annotations": []}]
    }
  ],
  "usage": {
    "input_tokens": 36,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 87,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 123
  },
  "user": null,
  "metadata": {}
}`

const anthropicStream = "event: message_start\n" +
	`data: {"type":"message_start","message":{"id":"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}` + "\n\n" +
	"event: content_block_start\n" +
	`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
	"event: ping\n" +
	`data: {"type": "ping"}` + "\n\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}` + "\n\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"!"}}` + "\n\n" +
	"event: content_block_stop\n" +
	`data: {"type":"content_block_stop","index":0}` + "\n\n" +
	"event: message_delta\n" +
	`data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}` + "\n\n" +
	"event: message_stop\n" +
	`data: {"type":"message_stop"}` + "\n\n"

const anthropicJSON = `{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hi! My name is Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":2095,"output_tokens":503}}`

// The shapes llama.cpp's server sends: its own /completion answer (no
// usage object, its counts in timings) as a body and as a stream whose
// last event carries the timings, and its OpenAI-compatible stream, whose
// final chunk has both usage and timings.
const llamaJSON = `{"index":0,"content":"hi","tokens":[],"id_slot":0,"stop":true,"model":"qwen2.5-0.5b-instruct-q8_0.gguf","tokens_predicted":2,"tokens_evaluated":237,` +
	`"generation_settings":{"n_predict":2,"seed":4294967295,"temperature":0.800000011920929,"dry_sequence_breakers":["\n",":","\"","*"],"stop":[],"lora":[],"samplers":["penalties","dry","top_k"],"speculative.n_max":16},` +
	`"prompt":"<|im_start|>user\nsay hi<|im_end|>\n","has_new_line":false,"truncated":false,"stop_type":"limit","stopping_word":"","tokens_cached":238,` +
	`"timings":{"cache_n":236,"prompt_n":1,"prompt_ms":12.315,"prompt_per_token_ms":12.315,"prompt_per_second":81.20178643930166,"predicted_n":2,"predicted_ms":30.091,"predicted_per_token_ms":15.0455,"predicted_per_second":66.46505599680968}}`

const llamaStream = `data: {"index":0,"content":"h","tokens":[71],"stop":false,"id_slot":-1,"tokens_predicted":1,"tokens_evaluated":237}` + "\n\n" +
	`data: {"index":0,"content":"i","tokens":[72],"stop":false,"id_slot":-1,"tokens_predicted":2,"tokens_evaluated":237}` + "\n\n" +
	`data: {"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"model":"qwen2.5-0.5b-instruct-q8_0.gguf","tokens_predicted":2,"tokens_evaluated":237,"generation_settings":{"n_predict":2,"stop":[]},"prompt":"say hi","has_new_line":false,"truncated":false,"stop_type":"limit","stopping_word":"","tokens_cached":238,"timings":{"cache_n":236,"prompt_n":1,"prompt_ms":12.315,"prompt_per_token_ms":12.315,"prompt_per_second":81.2,"predicted_n":2,"predicted_ms":30.091,"predicted_per_token_ms":15.0455,"predicted_per_second":66.46}}` + "\n\n"

const llamaChatStream = `data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1749000000,"id":"chatcmpl-Ql2nXhGQ","model":"gpt-3.5-turbo","system_fingerprint":"b5600-a1b2c3d4","object":"chat.completion.chunk"}` + "\n\n" +
	`data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"hi"}}],"created":1749000000,"id":"chatcmpl-Ql2nXhGQ","model":"gpt-3.5-turbo","system_fingerprint":"b5600-a1b2c3d4","object":"chat.completion.chunk"}` + "\n\n" +
	`data: {"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1749000000,"id":"chatcmpl-Ql2nXhGQ","model":"gpt-3.5-turbo","system_fingerprint":"b5600-a1b2c3d4","object":"chat.completion.chunk","usage":{"completion_tokens":2,"prompt_tokens":237,"total_tokens":239},"timings":{"cache_n":236,"prompt_n":1,"prompt_ms":12.3,"prompt_per_token_ms":12.3,"prompt_per_second":81.2,"predicted_n":2,"predicted_ms":30.1,"predicted_per_token_ms":15.05,"predicted_per_second":66.4}}` + "\n\n" +
	"data: [DONE]\n\n"

type want struct {
	prompt, completion int64
	ok                 bool
	id                 string
	cached             int64 // EngineCached
	cachedOK           bool
}

type sample struct {
	name string
	f    Format
	body string
	want want
}

// chatFinalUsage is the usage of chatStream's final chunk, with the details.
const chatFinalUsage = `"usage":{"prompt_tokens":1742,"total_tokens":1810,"completion_tokens":68,"prompt_tokens_details":{"cached_tokens":1536}}`

func samples() []sample {
	chatID := "chatcmpl-9f1c2a"
	respStreamID := "resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654"
	respID := "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b"
	anthID := "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY"
	anthJSONID := "msg_013Zva2CMHLNnXjNJJKqJ2EF"
	return []sample{
		{"chat stream", SSE, chatStream(8), want{1742, 68, true, chatID, 1536, true}},
		{"chat stream CRLF", SSE, strings.ReplaceAll(chatStream(3), "\n", "\r\n"), want{1742, 68, true, chatID, 1536, true}},
		{"chat stream details null", SSE, strings.Replace(chatStream(2), `"prompt_tokens_details":{"cached_tokens":1536}`, `"prompt_tokens_details":null`, 1), want{1742, 68, true, chatID, 0, false}},
		{"chat stream no details", SSE, strings.Replace(chatStream(2), `,"prompt_tokens_details":{"cached_tokens":1536}`, ``, 1), want{1742, 68, true, chatID, 0, false}},
		{"chat json", JSON, chatJSON(600), want{19, 10, true, "chatcmpl-b2d4", 0, true}},
		{"chat json cached", JSON, strings.Replace(chatJSON(100), `"cached_tokens":0`, `"cached_tokens":16`, 1), want{19, 10, true, "chatcmpl-b2d4", 16, true}},
		{"vllm json details null", JSON, `{"id":"cmpl-7a1","object":"chat.completion","created":1733000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":19,"total_tokens":21,"completion_tokens":2,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null}`,
			want{19, 2, true, "cmpl-7a1", 0, false}},
		{"responses stream", SSE, responsesStream, want{37, 11, true, respStreamID, 0, true}},
		{"responses stream cached", SSE, strings.Replace(responsesStream, `"input_tokens_details":{"cached_tokens":0}`, `"input_tokens_details":{"cached_tokens":32}`, 1), want{37, 11, true, respStreamID, 32, true}},
		{"responses json", JSON, responsesJSON, want{36, 87, true, respID, 0, true}},
		{"responses json cached", JSON, strings.Replace(responsesJSON, `{"cached_tokens": 0}`, `{ "cached_tokens" : 24 }`, 1), want{36, 87, true, respID, 24, true}},
		{"anthropic stream", SSE, anthropicStream, want{25, 15, true, anthID, 0, true}},
		{"anthropic json", JSON, anthropicJSON, want{2095, 503, true, anthJSONID, 0, false}},
		{"anthropic cached stream", SSE, strings.Replace(anthropicStream, `"cache_creation_input_tokens":0,"cache_read_input_tokens":0`, `"cache_creation_input_tokens":7,"cache_read_input_tokens":1000`, 1),
			want{1032, 15, true, anthID, 1000, true}},
		{"anthropic cached json", JSON, strings.Replace(anthropicJSON, `"input_tokens":2095`, `"input_tokens":5,"cache_read_input_tokens":2090,"cache_creation_input_tokens":0`, 1),
			want{2095, 503, true, anthJSONID, 2090, true}},
		{"llama.cpp json", JSON, llamaJSON, want{0, 0, false, "", 236, true}},
		{"llama.cpp stream", SSE, llamaStream, want{0, 0, false, "", 236, true}},
		{"llama.cpp stream timings per token", SSE, strings.Replace(llamaStream, `"tokens_evaluated":237}`, `"tokens_evaluated":237,"timings":{"cache_n":230,"prompt_n":7}}`, 1), want{0, 0, false, "", 236, true}},
		{"llama.cpp chat stream", SSE, llamaChatStream, want{237, 2, true, "chatcmpl-Ql2nXhGQ", 236, true}},
		{"llama.cpp chat stream details", SSE, strings.Replace(llamaChatStream, `"total_tokens":239}`, `"total_tokens":239,"prompt_tokens_details":{"cached_tokens":200}}`, 1), want{237, 2, true, "chatcmpl-Ql2nXhGQ", 200, true}},
		{"llama.cpp timings null", SSE, strings.Replace(llamaStream, `"timings":{"cache_n":236,`, `"timings":null,"x":{"cache_n":236,`, 1), want{0, 0, false, "", 0, false}},
		{"stream without usage", SSE, strings.Replace(chatStream(2), chatFinalUsage, `"usage":null`, 1), want{0, 0, false, chatID, 0, false}},
		{"nested usage only", JSON, `{"choices":[{"usage":{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":3}}}],"data":{"usage":{"input_tokens":6}},"x":{"id":"no","timings":{"cache_n":4}},"cache_n":5,"cached_tokens":6}`, want{}},
		{"details misplaced", JSON, `{"prompt_tokens_details":{"cached_tokens":1},"usage":{"cached_tokens":2,"completion_tokens_details":{"cached_tokens":3},"timings":{"cache_n":4}},"response":{"input_tokens_details":{"cached_tokens":5},"usage":{"prompt_tokens_details":{"cached_tokens":6}}}}`, want{}},
		{"details too deep", JSON, `{"response":{"usage":{"input_tokens_details":{"cached_tokens":{"cached_tokens":7},"x":{"y":{"cached_tokens":8}}}}}}`, want{}},
		{"details not whole", JSON, `{"usage":{"prompt_tokens_details":{"cached_tokens":1.5}},"timings":{"cache_n":-3}}`, want{}},
		{"details null", JSON, `{"usage":{"prompt_tokens_details":{"cached_tokens":null}},"timings":{"cache_n":"4"}}`, want{}},
		{"precedence all", JSON, `{"timings":{"cache_n":9},"usage":{"cache_read_input_tokens":7,"prompt_tokens_details":{"cached_tokens":5}}}`, want{7, 0, true, "", 5, true}},
		{"precedence anthropic over llama", JSON, `{"timings":{"cache_n":9},"usage":{"cache_read_input_tokens":7}}`, want{7, 0, true, "", 7, true}},
		{"precedence openai over llama", SSE, "data: {\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\ndata: {\"timings\":{\"cache_n\":9}}\n\n", want{0, 0, false, "", 0, true}},
		{"escaped key", JSON, `{"usag\u0065":{"prompt_tokens":5},"usage":{"prompt_tokens":"7","completion_tokens":3.5,"input_tokens":-2,"output_tokens":4,"prompt_tokens_details":{"cached_token\u0073":3}},"timing\u0073":{"cache_n":2}}`, want{0, 4, true, "", 0, false}},
		{"multi-line data", SSE, "data: {\"usage\":\ndata: {\"prompt_tokens\":12\ndata: ,\"completion_tokens\":3,\"prompt_tokens_details\":\ndata: {\"cached_tokens\":8}}}\n\n", want{12, 3, true, "", 8, true}},
		{"not json", JSON, "<html>502 Bad Gateway</html>", want{}},
		{"error json", JSON, `{"error":{"message":"usage: bad","type":"invalid_request_error","param":null,"code":null}}`, want{}},
	}
}

func check(t *testing.T, label string, s *Sniffer, w want) {
	t.Helper()
	p, c, ok := s.Usage()
	if p != w.prompt || c != w.completion || ok != w.ok || string(s.ID()) != w.id {
		t.Fatalf("%s: got prompt %d completion %d ok %v id %q; want %d %d %v %q", label, p, c, ok, s.ID(), w.prompt, w.completion, w.ok, w.id)
	}
	if n, ok := s.EngineCached(); n != w.cached || ok != w.cachedOK {
		t.Fatalf("%s: EngineCached() = %d, %v; want %d, %v", label, n, ok, w.cached, w.cachedOK)
	}
}

// chunk frames body as HTTP/1.1 chunks of the given sizes, with an
// extension on one and a trailer.
func chunk(body string, rng *rand.Rand) string {
	var b strings.Builder
	for i, n := 0, 0; i < len(body); i += n {
		n = min(1+rng.IntN(300), len(body)-i)
		if rng.IntN(5) == 0 {
			fmt.Fprintf(&b, "%X;ext=1\r\n", n)
		} else {
			fmt.Fprintf(&b, "%x\r\n", n)
		}
		b.WriteString(body[i : i+n])
		b.WriteString("\r\n")
	}
	b.WriteString("0\r\nX-Trailer: 1\r\n\r\n")
	return b.String()
}

// TestEveryBoundary feeds each sample split in two at every byte, then in
// single bytes, then in random pieces with chunked framing.
func TestEveryBoundary(t *testing.T) {
	var s Sniffer
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range samples() {
		b := []byte(c.body)
		s.Reset(c.f)
		s.Feed(b)
		s.Close()
		check(t, c.name+" whole", &s, c.want)
		for i := 0; i <= len(b); i++ {
			s.Reset(c.f)
			s.Feed(b[:i])
			s.Feed(b[i:])
			s.Close()
			check(t, fmt.Sprintf("%s split at %d", c.name, i), &s, c.want)
		}
		s.Reset(c.f)
		for i := range b {
			s.Feed(b[i : i+1])
		}
		s.Close()
		check(t, c.name+" bytewise", &s, c.want)
		for round := range 20 {
			framed := []byte(chunk(c.body, rng))
			s.Reset(c.f)
			var cs h1.ChunkScan
			for i, n := 0, 0; i < len(framed); i += n {
				n = min(1+rng.IntN(64), len(framed)-i)
				cs.ScanTo(framed[i:i+n], feeder{&s})
			}
			s.Close()
			check(t, fmt.Sprintf("%s chunked round %d", c.name, round), &s, c.want)
		}
		framed := []byte(chunk(c.body, rng))
		for i := 0; i <= len(framed); i++ {
			s.Reset(c.f)
			var cs h1.ChunkScan
			cs.ScanTo(framed[:i], feeder{&s})
			cs.ScanTo(framed[i:], feeder{&s})
			s.Close()
			check(t, fmt.Sprintf("%s chunked split at %d", c.name, i), &s, c.want)
		}
	}
}

func TestBounds(t *testing.T) {
	var s Sniffer
	s.Reset(JSON)
	deep := strings.Repeat("[", MaxDepth+10) + `{"usage":{"prompt_tokens":1}}`
	s.Feed([]byte(deep))
	if _, _, ok := s.Usage(); ok {
		t.Fatal("usage found below the depth bound")
	}
	// An over-deep event is dropped; the next event is read.
	s.Reset(SSE)
	s.Feed([]byte("data: " + deep + "\n\ndata: {\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\n"))
	check(t, "after a deep event", &s, want{4, 2, true, "", 3, true})
	s.Reset(JSON)
	s.Feed([]byte(`{"id":"` + strings.Repeat("x", MaxID+1) + `","usage":{"output_tokens":1}}`))
	check(t, "long id", &s, want{0, 1, true, "", 0, false})
}

func TestNoAllocs(t *testing.T) {
	var s Sniffer
	body := []byte(chunk(chatStream(20), rand.New(rand.NewPCG(3, 4))))
	if n := testing.AllocsPerRun(50, func() {
		s.Reset(SSE)
		var cs h1.ChunkScan
		for i := 0; i < len(body); i += 100 {
			cs.ScanTo(body[i:min(i+100, len(body))], feeder{&s})
		}
	}); n != 0 {
		t.Fatalf("%v allocs per answer", n)
	}
}

// TestNoAllocsEveryShape reads every sample, chunked and cut in pieces,
// with all the accessors, without allocating.
func TestNoAllocsEveryShape(t *testing.T) {
	var s Sniffer
	rng := rand.New(rand.NewPCG(7, 8))
	for _, c := range samples() {
		body := []byte(chunk(c.body, rng))
		var sink int64
		if n := testing.AllocsPerRun(20, func() {
			s.Reset(c.f)
			var cs h1.ChunkScan
			for i := 0; i < len(body); i += 37 {
				cs.ScanTo(body[i:min(i+37, len(body))], feeder{&s})
			}
			s.Close()
			p, q, _ := s.Usage()
			r, w := s.CacheTokens()
			e, _ := s.EngineCached()
			sink += p + q + r + w + e + int64(len(s.ID()))
		}); n != 0 {
			t.Fatalf("%s: %v allocs per answer", c.name, n)
		}
		check(t, c.name, &s, c.want)
	}
}

func benchFeed(b *testing.B, f Format, body []byte, piece int) {
	var s Sniffer
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		s.Reset(f)
		for i := 0; i < len(body); i += piece {
			s.Feed(body[i:min(i+piece, len(body))])
		}
	}
	if _, _, ok := s.Usage(); !ok {
		b.Fatal("no usage")
	}
}

func stream4KB() []byte {
	body := []byte(chatStream(14))
	for len(body) < 4096 {
		body = []byte(chatStream(len(body)/200 + 15))
	}
	return body
}

// BenchmarkStream4KB feeds a 4 KB chat stream one event per piece, as a
// server writes them.
func BenchmarkStream4KB(b *testing.B) {
	body := stream4KB()
	var events [][]byte
	for rest := body; len(rest) > 0; {
		i := bytes.Index(rest, []byte("\n\n")) + 2
		events = append(events, rest[:i])
		rest = rest[i:]
	}
	var s Sniffer
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		s.Reset(SSE)
		for _, ev := range events {
			s.Feed(ev)
		}
	}
	if _, _, ok := s.Usage(); !ok {
		b.Fatal("no usage")
	}
}

// BenchmarkStream4KBCut256 feeds it in 256-byte pieces, cut anywhere.
func BenchmarkStream4KBCut256(b *testing.B) {
	benchFeed(b, SSE, stream4KB(), 256)
}

func BenchmarkJSON64KB(b *testing.B) {
	benchFeed(b, JSON, []byte(chatJSON(64<<10)), 16<<10)
}

// BenchmarkJSON64KBChunked reads a chunked answer as the edge does: the
// transport's chunk decoder hands the Sniffer the data.
func BenchmarkJSON64KBChunked(b *testing.B) {
	body := []byte(chunk(chatJSON(64<<10), rand.New(rand.NewPCG(5, 6))))
	var s Sniffer
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		s.Reset(JSON)
		var cs h1.ChunkScan
		for i := 0; i < len(body); i += 16 << 10 {
			cs.ScanTo(body[i:min(i+16<<10, len(body))], feeder{&s})
		}
	}
}

// feeder hands a chunk decoder's data to a Sniffer, as the edge does.
type feeder struct{ s *Sniffer }

func (f feeder) Data(p []byte) { f.s.Feed(p) }

// BenchmarkCopy4KB is the copy the proxy makes of the same bytes, for scale.
func BenchmarkCopy4KB(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 4096)
	dst := make([]byte, 4096)
	b.SetBytes(4096)
	for b.Loop() {
		copy(dst, body)
	}
}

// BenchmarkStream4KBFastjson parses the same stream's events with a
// pooled fastjson parser, as the edge could do instead, for a ratio.
func BenchmarkStream4KBFastjson(b *testing.B) {
	body := stream4KB()
	var p fastjson.Parser
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var prompt int
		for rest := body; len(rest) > 0; {
			ev := rest
			if i := bytes.Index(rest, []byte("\n\n")); i >= 0 {
				ev, rest = rest[:i], rest[i+2:]
			} else {
				rest = nil
			}
			ev = bytes.TrimPrefix(ev, []byte("data: "))
			if v, err := p.ParseBytes(ev); err == nil {
				if u := v.Get("usage"); u != nil {
					prompt = u.GetInt("prompt_tokens")
				}
			}
		}
		if prompt != 1742 {
			b.Fatal(prompt)
		}
	}
}

// TestTargetTables checks the compiled key switches against the targets.
func TestTargetTables(t *testing.T) {
	if len(targets) > 32 {
		t.Fatalf("%d targets do not fit the uint32 masks", len(targets))
	}
	if allTargets != 1<<len(targets)-1 {
		t.Errorf("allTargets = %b", allTargets)
	}
	keys := map[string]bool{"other": true, "": true}
	for _, tg := range targets {
		if len(tg.path) > maxLevels {
			t.Errorf("%v deeper than maxLevels", tg.path)
		}
		for _, k := range tg.path {
			keys[k] = true
			if len(k) > maxKey {
				t.Errorf("key %q longer than maxKey", k)
			}
		}
	}
	for lvl := range maxLevels {
		var ends uint32
		for i, tg := range targets {
			if len(tg.path) == lvl+1 {
				ends |= 1 << i
			}
		}
		if endsAt[lvl] != ends {
			t.Errorf("endsAt[%d] = %b, want %b", lvl, endsAt[lvl], ends)
		}
		for k := range keys {
			var want uint32
			for i, tg := range targets {
				if len(tg.path) > lvl && tg.path[lvl] == k {
					want |= 1 << i
				}
			}
			if got := keyTargets(lvl, []byte(k)); got != want {
				t.Errorf("keyTargets(%d, %q) = %b, want %b", lvl, k, got, want)
			}
		}
	}
}

func TestSkipTable(t *testing.T) {
	for c := range 256 {
		want := strings.IndexByte(`"{}[]`, byte(c)) >= 0
		if (skipTable[c] != 0) != want {
			t.Errorf("skipTable[%#x] = %d", c, skipTable[c])
		}
	}
}

// TestWatchedObject checks the SSE fast path's test for a line that may
// hold a usage or timings object (a false true only costs a read).
func TestWatchedObject(t *testing.T) {
	for line, want := range map[string]bool{
		`{"usage":null,"logprobs":null}`:          false,
		`{"usage" : {"prompt_tokens":1}}`:         true,
		`{"usage":`:                               true, // the value is in the next line
		`{"x":"usage"}`:                           false,
		`{"usage"`:                                false,
		`{"timings":{"cache_n":1}}`:               true,
		`{"timings":	{}}`:                         true,
		`{"timings":null,"settings":{"a":1}}`:     false,
		`{"content":"good things","tags":{}}`:     false,
		`{"gs":{},"ge":{},"g":{}}`:                false,
		`ge":{`:                                   false,
		`gs":{`:                                   false,
		`{"a":"usage","b":"timings","c":"usage"}`: false,
		`{"a":"x","timings":{}}`:                  true,
	} {
		if got := watchedObject([]byte(line)); got != want {
			t.Errorf("watchedObject(%s) = %v, want %v", line, got, want)
		}
	}
}
