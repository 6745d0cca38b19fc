// Command genbody writes the deterministic OpenAI chat request bodies that
// scripts/compare-proxies.sh posts with wrk: the same bytes on every machine
// and every run, so results from different runs post identical requests.
//
//	go run ./scripts/compare/genbody -out DIR
//
// writes DIR/{1k,4k,128k,512k,1m}-{stream,nostream}.json, each exactly
// 1024, 4096, 131072, 524288 or 1048576 bytes long:
//
//   - 1k: a short system prompt and one user message;
//   - 4k: a system prompt plus three turns (user, assistant, user, assistant,
//     user), the shape of a short agent conversation;
//   - 128k: a long system prompt (a pasted document) plus three turns;
//   - 512k, 1m: an agent's late turn: a 20 KB system prompt and tool
//     definitions, then 10 or 20 turns of tool results of about 26 KB;
//
// and DIR/agent-{stream,nostream}.seq, one agent session's requests in
// order (30 turns growing from about 20 KB to about 800 KB, each turn
// resending the last one's messages plus a tool call and its result),
// separated by the record separator byte 0x1e, which JSON text never holds
// raw; agent-*.json is its last request.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type request struct {
	Model     string    `json:"model"`
	Messages  []message `json:"messages"`
	MaxTokens int       `json:"max_tokens"`
	Stream    bool      `json:"stream"`
}

// words is a small fixed vocabulary; text is drawn from it with a fixed
// linear congruential generator, so the output never changes.
var words = []string{
	"the", "cache", "prefix", "token", "block", "request", "server", "model",
	"route", "latency", "answer", "question", "system", "user", "assistant",
	"prompt", "context", "window", "memory", "throughput", "of", "and", "to",
	"a", "in", "is", "for", "with", "that", "on", "KV", "attention", "layer",
	"batch", "decode", "prefill", "engine", "proxy", "hash", "chain",
}

type rng uint64

func (r *rng) next() uint64 {
	*r = *r*6364136223846793005 + 1442695040888963407
	return uint64(*r >> 33)
}

// text returns n bytes of words separated by spaces (n > 0).
func (r *rng) text(n int) string {
	b := make([]byte, 0, n+16)
	for len(b) < n {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, words[r.next()%uint64(len(words))]...)
	}
	return string(b[:n])
}

type shape struct {
	name  string
	size  int
	turns int // user messages; assistant answers sit between them
	sys   int // system prompt length in bytes
	turn  int // length of every message but the last user one
}

var shapes = []shape{
	{name: "1k", size: 1024, turns: 1, sys: 200},
	{name: "4k", size: 4096, turns: 3, sys: 1200, turn: 500},
	{name: "128k", size: 131072, turns: 3, sys: 110000, turn: 4000},
	{name: "512k", size: 524288, turns: 10, sys: 20000, turn: 26000},
	{name: "1m", size: 1048576, turns: 20, sys: 20000, turn: 26000},
}

// agentTurns and agentResult shape the agent session: each turn adds an
// assistant tool call and a tool result of about agentResult bytes.
const (
	agentTurns  = 30
	agentSystem = 20000
	agentResult = 26000
)

// agentSession is one agent session's requests in order.
func agentSession(stream bool) ([][]byte, error) {
	r := rng(7)
	req := request{Model: "mock", MaxTokens: 16, Stream: stream}
	req.Messages = append(req.Messages,
		message{Role: "system", Content: "You are a coding agent. Tools: read_file, run_tests, edit. " + r.text(agentSystem)},
		message{Role: "user", Content: "Fix the failing test in package " + r.text(200)})
	var out [][]byte
	for t := 0; t < agentTurns; t++ {
		b, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
		req.Messages = append(req.Messages,
			message{Role: "assistant", Content: "Calling read_file on " + r.text(300)},
			message{Role: "user", Content: "Tool result: " + r.text(agentResult)})
	}
	return out, nil
}

func build(s shape, stream bool) ([]byte, error) {
	r := rng(uint64(s.size)) // the same prefix for stream and not
	req := request{Model: "mock", MaxTokens: 16, Stream: stream}
	req.Messages = append(req.Messages, message{Role: "system", Content: "You are a helpful assistant. " + r.text(s.sys)})
	for t := 0; t < s.turns; t++ {
		if t > 0 {
			req.Messages = append(req.Messages, message{Role: "assistant", Content: r.text(s.turn)})
		}
		req.Messages = append(req.Messages, message{Role: "user", Content: r.text(s.turn + 1)})
	}
	// Pad (or cut) the last user message so the body is exactly s.size bytes.
	last := &req.Messages[len(req.Messages)-1]
	for i := 0; i < 4; i++ {
		b, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		d := s.size - len(b)
		if d == 0 {
			return b, nil
		}
		n := len(last.Content) + d
		if n < 1 {
			return nil, fmt.Errorf("%s: fixed part longer than %d bytes", s.name, s.size)
		}
		last.Content = r.text(n)
	}
	return nil, fmt.Errorf("%s: could not reach exactly %d bytes", s.name, s.size)
}

func main() {
	out := flag.String("out", ".", "directory to write the bodies into")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, s := range shapes {
		for _, stream := range []bool{false, true} {
			b, err := build(s, stream)
			if err != nil {
				fmt.Fprintln(os.Stderr, "genbody:", err)
				os.Exit(1)
			}
			name := s.name + "-nostream.json"
			if stream {
				name = s.name + "-stream.json"
			}
			if err := os.WriteFile(filepath.Join(*out, name), b, 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	}
	for _, stream := range []bool{false, true} {
		seq, err := agentSession(stream)
		if err != nil {
			fmt.Fprintln(os.Stderr, "genbody:", err)
			os.Exit(1)
		}
		name := "agent-nostream"
		if stream {
			name = "agent-stream"
		}
		var all []byte
		for i, b := range seq {
			if i > 0 {
				all = append(all, 0x1e)
			}
			all = append(all, b...)
		}
		if err := os.WriteFile(filepath.Join(*out, name+".seq"), all, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(filepath.Join(*out, name+".json"), seq[len(seq)-1], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
