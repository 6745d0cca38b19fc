package streamusage

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// The streams engines send when asked for usage, each as a list of
// events; usageAt is the one the Filter removes (-1: none).
type stream struct {
	name    string
	events  []string
	usageAt int
}

func (s stream) whole() []byte { return []byte(strings.Join(s.events, "")) }

// want is the stream without its usage event.
func (s stream) want() []byte {
	var b []byte
	for i, e := range s.events {
		if i != s.usageAt {
			b = append(b, e...)
		}
	}
	return b
}

var streams = []stream{
	{"vllm chat", []string{
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n",
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}` + "\n\n",
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":12,"total_tokens":14,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}}` + "\n\n",
		"data: [DONE]\n\n",
	}, 2},
	{"vllm completions", []string{
		`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null,"stop_reason":null}]}` + "\n\n",
		`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"total_tokens":4,"completion_tokens":1}}` + "\n\n",
		"data: [DONE]\n\n",
	}, 1},
	{"llm-d simulator: usage null in every chunk, and before choices", []string{
		`data: {"id":"chatcmpl-2","model":"m","object":"chat.completion.chunk","created":1,"usage":null,"choices":[{"index":0,"finish_reason":null,"delta":{"role":"assistant"}}]}` + "\n\n",
		`data: {"id":"chatcmpl-2","model":"m","object":"chat.completion.chunk","created":1,"usage":null,"choices":[{"index":0,"finish_reason":"stop","delta":{}}]}` + "\n\n",
		`data: {"id":"chatcmpl-2","model":"m","object":"chat.completion.chunk","created":1,"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":0}},"choices":[]}` + "\n\n",
		"data: [DONE]\n\n",
	}, 2},
	{"CRLF lines, spaces, an event field and a comment", []string{
		": keep-alive\r\n\r\n",
		"event: message\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\r\n\r\n",
		"data:{ \"choices\" : [ ] , \"usage\" : { \"prompt_tokens\" : 1 } }  \r\n\r\n",
		"data: [DONE]\r\n\r\n",
	}, 2},
	{"usage in every chunk (continuous_usage_stats), then the usage event", []string{
		`data: {"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}` + "\n\n",
		`data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}` + "\n\n",
		"data: [DONE]\n\n",
	}, 1},
	{"look-alikes that stay", []string{
		`data: {"choices":[],"usage":null}` + "\n\n",
		`data: {"choices":[]}` + "\n\n",
		`data: {"usage":{"prompt_tokens":1}}` + "\n\n",
		`data: {"choices":[{}],"usage":{"prompt_tokens":1}}` + "\n\n",
		`data: {"x":{"choices":[],"usage":{}}}` + "\n\n",
		"id: 7\ndata: {\"choices\":[],\"usage\":{}}\n\n",
		"data: {\"choices\":[],\n\"usage\":{}}\n\n",
		"data: {\"choices\":[],\"usage\":{\"a\"\n:0}}\n\n",
		"data: {\"choices\":[],\"usage\":{\"a\":[\r\n]}}\n\n",
		"data: {\"choices\":[],\"usage\":{\"a\x00\":0}}\n\n",
		"data: {\"choices\":[],\"usage\":{\"a\":\"\t\"}}\n\n",
		"data: {\"choices\":[],\"usage\":{}}\ndata: {}\n\n",
		`data: {"choices":[],"usage":{}} x` + "\n\n",
		`data: {"cho\u0069ces":[],"usage":{}}` + "\n\n",
		`data: {"choices":[],"usage":{"note":"` + strings.Repeat("long ", MaxHold/5) + `"}}` + "\n\n",
		"\n",
		"data: [DONE]\n\n",
	}, -1},
	{"a last event that never ends", []string{
		`data: {"choices":[{"delta":{"content":"a"}}]}` + "\n\n",
		`data: {"choices":[],"usage":{"prompt_tokens":1}}` + "\n",
	}, -1},
}

// run filters pieces as they come, then closes.
func run(f *Filter, pieces [][]byte) []byte {
	f.Reset()
	var out []byte
	for _, p := range pieces {
		out = f.Append(out, p)
	}
	return f.Close(out)
}

// splits cuts b at random places: single bytes, runs, and whole.
func splits(r *rand.Rand, b []byte) [][]byte {
	var ps [][]byte
	for len(b) > 0 {
		n := 1 + r.IntN(min(len(b), []int{1, 7, 64, 1 << 20}[r.IntN(4)]))
		ps = append(ps, b[:n])
		b = b[n:]
	}
	return ps
}

// TestFilterStreams: each stream loses its usage event and nothing else,
// whole and cut at random anywhere.
func TestFilterStreams(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var f Filter
	for _, s := range streams {
		t.Run(s.name, func(t *testing.T) {
			whole, want := s.whole(), s.want()
			removed := map[bool]int{true: 1}[s.usageAt >= 0]
			for i := range 500 {
				pieces := [][]byte{whole}
				if i > 0 {
					pieces = splits(r, whole)
				}
				if got := run(&f, pieces); !bytes.Equal(got, want) {
					t.Fatalf("cut into %q:\n got %q\nwant %q", pieces, got, want)
				}
				if f.Removed() != removed {
					t.Fatalf("removed %d events, want %d", f.Removed(), removed)
				}
			}
		})
	}
}

// TestFilterConcatenated: every stream after the others in one, cut at
// random: the state carries across events of every kind.
func TestFilterConcatenated(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var whole, want []byte
	for _, s := range streams[:len(streams)-1] { // the last one never ends
		whole = append(whole, s.whole()...)
		want = append(want, s.want()...)
	}
	var f Filter
	for range 2000 {
		if got := run(&f, splits(r, whole)); !bytes.Equal(got, want) {
			t.Fatalf("got %q\nwant %q", got, want)
		}
	}
}

// checkFilter holds the Filter's output on b against its own output on b
// whole, and each removed event against encoding/json: one data line of
// an object with "choices":[] and a usage object.
func checkFilter(t *testing.T, b []byte, r *rand.Rand) {
	t.Helper()
	var f Filter
	whole := run(&f, [][]byte{b})
	for range 8 {
		if got := run(&f, splits(r, b)); !bytes.Equal(got, whole) {
			t.Fatalf("stream %q: cut, %q; whole, %q", b, got, whole)
		}
	}
	// What was removed: the events of b not in the output, in order.
	rest := whole
	for _, ev := range events(b) {
		if bytes.HasPrefix(rest, ev) {
			rest = rest[len(ev):]
			continue
		}
		line, _, _ := bytes.Cut(ev, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		var v struct {
			Choices *[]json.RawMessage
			Usage   map[string]any
		}
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok || json.Unmarshal(data, &v) != nil || v.Choices == nil || len(*v.Choices) != 0 || v.Usage == nil || len(ev) > MaxHold {
			t.Fatalf("stream %q: removed %q", b, ev)
		}
	}
	if len(rest) != 0 {
		t.Fatalf("stream %q: output %q is not its events less some", b, whole)
	}
}

// events splits b into SSE events, each with the blank line ending it.
func events(b []byte) [][]byte {
	var evs [][]byte
	var f Filter
	for len(b) > 0 {
		k, _ := f.eventEnd(b)
		evs = append(evs, b[:k])
		b = b[k:]
	}
	return evs
}

func FuzzFilter(f *testing.F) {
	for _, s := range streams {
		f.Add(s.whole(), uint64(1))
	}
	f.Fuzz(func(t *testing.T, b []byte, seed uint64) {
		checkFilter(t, b, rand.New(rand.NewPCG(seed, 9)))
	})
}

// TestFilterNoAllocs: filtering into a buffer with room allocates nothing
// (make allocs).
func TestFilterNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates; make allocs runs this without it")
	}
	whole := streams[0].whole()
	pieces := splits(rand.New(rand.NewPCG(1, 1)), whole)
	var f Filter
	dst := make([]byte, 0, len(whole)+MaxHold)
	if n := testing.AllocsPerRun(100, func() {
		f.Reset()
		out := dst[:0]
		for _, p := range pieces {
			out = f.Append(out, p)
		}
		f.Close(out)
	}); n != 0 {
		t.Fatalf("%v allocations per stream", n)
	}
}

// BenchmarkFilter: a vLLM chat stream of 64 content chunks and its usage
// event, arriving one event a read.
func BenchmarkFilter(b *testing.B) {
	s := streams[0]
	var evs [][]byte
	for range 64 {
		evs = append(evs, []byte(s.events[1]))
	}
	evs = append(evs, []byte(s.events[2]), []byte(s.events[3]))
	n := 0
	for _, e := range evs {
		n += len(e)
	}
	dst := make([]byte, 0, n+MaxHold)
	var f Filter
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		f.Reset()
		out := dst[:0]
		for _, e := range evs {
			out = f.Append(out, e)
		}
		f.Close(out)
	}
}

// FuzzValidAsStd: the filter's check of a usage event's JSON accepts
// exactly what encoding/json's does, up to the longest event it holds, so
// that no event encoding/json calls invalid is removed, and no valid one
// kept.
func FuzzValidAsStd(f *testing.F) {
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens":8,"prompt_tokens_details":{"cached_tokens":0}}}`))
	f.Add([]byte(`{"a":"\u00e9\t","b":[1e5,-0.5,true,null]}`))
	f.Add([]byte("{\"a\":\"\x01\"}"))
	f.Add([]byte("\"\x00\\b\"")) // fastjson alone accepts it
	f.Add([]byte(`{"a":01}`))
	f.Add([]byte(`{"a":` + strings.Repeat("[", MaxHold/2-4) + strings.Repeat("]", MaxHold/2-4) + `}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > MaxHold {
			return
		}
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON %v, encoding/json %v: %q", got, want, b)
		}
	})
}
