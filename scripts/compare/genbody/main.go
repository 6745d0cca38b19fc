// Command genbody writes the deterministic OpenAI chat request bodies that
// scripts/compare-proxies.sh posts with wrk: the same bytes on every machine
// and every run, so results from different runs post identical requests.
//
//	go run ./scripts/compare/genbody -out DIR
//
// writes DIR/{1k,4k,128k,512k,1m,tool512k,tool1m}-{stream,nostream}.json,
// each exactly 1024, 4096, 131072, 524288 or 1048576 bytes long:
//
//   - 1k: a short system prompt and one user message;
//   - 4k: a system prompt plus three turns (user, assistant, user, assistant,
//     user), the shape of a short agent conversation;
//   - 128k: a long system prompt (a pasted document) plus three turns;
//   - 512k, 1m: a long conversation of plain messages: a 20 KB system
//     prompt, then 10 or 20 turns of about 26 KB;
//   - tool512k, tool1m: an agent's late turn: tool definitions, a system
//     prompt of source code, then turns of an assistant tool call and its
//     result (source code: escaped newlines, tabs and quotes, some
//     non-ASCII text), each result about 20 KB;
//
// and DIR/agent-{stream,nostream}.seq, one agent session's requests in
// order (40 turns of the tool shape growing from about 35 KB to about
// 830 KB, each resending the last one's messages plus a tool call and
// its result),
// separated by the record separator byte 0x1e, which JSON text never holds
// raw; agent-*.json is its last request.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

type message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type request struct {
	Model     string    `json:"model"`
	Messages  []message `json:"messages"`
	Tools     []tool    `json:"tools,omitempty"`
	MaxTokens int       `json:"max_tokens"`
	Stream    bool      `json:"stream"`
}

type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
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

// The agent shape: what a coding agent sends late in a session. Tool
// definitions with JSON schemas, a long system prompt, then turns of an
// assistant tool call (its arguments a JSON string inside the JSON) and the
// tool's result: source code, so the strings are full of escaped newlines,
// tabs and quotes, with some non-ASCII text.
const (
	agentTurns  = 40    // requests in the replayed session
	agentSystem = 28000 // system prompt bytes: the first request is about 35 KB
	agentResult = 19000 // tool result bytes before escaping: the last is about 830 KB
)

// agentShapes are single agent-shaped bodies of an exact size.
var agentShapes = []struct {
	name string
	size int
}{
	{"tool512k", 524288},
	{"tool1m", 1048576},
}

var codeLines = []string{
	"func (s *Server) handle(w http.ResponseWriter, r *http.Request) {",
	"\tif err := s.check(r.Context(), \"request\"); err != nil {",
	"\t\treturn fmt.Errorf(\"handle %s: %w\", r.URL.Path, err)",
	"\t}",
	"\tfor i := 0; i < len(items) && !done; i++ {",
	"\t\tout = append(out, items[i].Name+\"\\t\"+items[i].Value)",
	"// résumé of the cache → the block table keeps one entry per block",
	"\tbuf := make([]byte, 0, 4<<10) // 4 KiB, \"enough\" for a header",
	"}",
	"",
	"\tswitch v := x.(type) {",
	"\tcase string:",
	"\t\tlog.Printf(\"%q -> %d\\n\", v, len(v))",
	"\tdefault:",
	"\t\tpanic(`unexpected type`)",
	"\t}",
	"--- FAIL: TestRoute (0.01s)",
	"    route_test.go:42: got backend \"b\", want \"a\" — retry 3/3",
}

// code returns about n bytes of source text, lines joined by newlines.
func (r *rng) code(n int) string {
	b := make([]byte, 0, n+128)
	for len(b) < n {
		line := codeLines[r.next()%uint64(len(codeLines))]
		b = append(b, line...)
		if r.next()%3 == 0 {
			b = append(b, " // "...)
			b = append(b, r.text(24+int(r.next()%40))...)
		}
		b = append(b, '\n')
	}
	return string(b)
}

var toolNames = []string{"read_file", "grep", "run_tests", "edit_file", "list_dir", "git_diff"}

// agentTools are the session's tool definitions, about 3 KB in all.
func agentTools(r *rng) []tool {
	out := make([]tool, len(toolNames))
	for i, name := range toolNames {
		out[i].Type = "function"
		out[i].Function.Name = name
		out[i].Function.Description = "Run " + name + " in the repository. " + r.text(300)
		out[i].Function.Parameters = json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"a path relative to the repository root"},"start_line":{"type":"integer","minimum":1},"end_line":{"type":"integer"},"pattern":{"type":"string"}},"required":["path"],"additionalProperties":false}`)
	}
	return out
}

// agentTurn appends turn t: an assistant tool call and its result.
func agentTurn(r *rng, req *request, t, result int) {
	var call toolCall
	call.ID = fmt.Sprintf("call_%04d_%08x", t, r.next())
	call.Type = "function"
	call.Function.Name = toolNames[r.next()%uint64(len(toolNames))]
	call.Function.Arguments = fmt.Sprintf(`{"path":"internal/pkg%d/file_%d.go","start_line":1,"end_line":%d,"pattern":"func (\\w+)\\("}`, t%7, t, 200+t)
	req.Messages = append(req.Messages,
		message{Role: "assistant", Content: "Let me look at " + r.text(80), ToolCalls: []toolCall{call}},
		message{Role: "tool", ToolCallID: call.ID, Content: r.code(result)})
}

// agentStart is the session's first request.
func agentStart(r *rng, stream bool) request {
	req := request{Model: "mock", MaxTokens: 16, Stream: stream, Tools: agentTools(r)}
	req.Messages = append(req.Messages,
		message{Role: "system", Content: "You are a coding agent working in a Go repository.\n\n" + r.code(agentSystem)},
		message{Role: "user", Content: "The test TestRoute fails after the last change. Find why and fix it. " + r.text(400)})
	return req
}

// agentSession is one agent session's requests in order.
func agentSession(stream bool) ([][]byte, error) {
	r := rng(7)
	req := agentStart(&r, stream)
	var out [][]byte
	for t := 0; t < agentTurns; t++ {
		b, err := marshal(req)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
		agentTurn(&r, &req, t, agentResult)
	}
	return out, nil
}

// agentBody is an agent-shaped request of exactly size bytes: turns are
// added until the next would pass size, then the last tool result is
// padded with plain words.
func agentBody(name string, size int, stream bool) ([]byte, error) {
	r := rng(uint64(size))
	req := agentStart(&r, stream)
	for t := 0; ; t++ {
		next := req
		next.Messages = append([]message(nil), req.Messages...)
		agentTurn(&r, &next, t, agentResult)
		b, err := marshal(next)
		if err != nil {
			return nil, err
		}
		if len(b) > size {
			break
		}
		req = next
	}
	return fit(name, &req, req.Messages[len(req.Messages)-1].Content, size, &r)
}

// fit makes req exactly size bytes long by giving its last message base
// followed by as many bytes of words as it takes.
func fit(name string, req *request, base string, size int, r *rng) ([]byte, error) {
	last := &req.Messages[len(req.Messages)-1]
	pad := len(last.Content) - len(base)
	for i := 0; i < 4; i++ {
		b, err := marshal(*req)
		if err != nil {
			return nil, err
		}
		d := size - len(b)
		if d == 0 {
			return b, nil
		}
		pad += d
		if pad < 1 {
			return nil, fmt.Errorf("%s: fixed part longer than %d bytes", name, size)
		}
		last.Content = base + r.text(pad)
	}
	return nil, fmt.Errorf("%s: could not reach exactly %d bytes", name, size)
}

// marshal is JSON as JavaScript and most SDKs send it: <, > and & raw.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
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
	return fit(s.name, &req, "", s.size, &r)
}

func main() {
	out := flag.String("out", ".", "directory to write the bodies into")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "genbody:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, s := range shapes {
		if err := writeBoth(out, s.name, ".json", func(stream bool) ([]byte, error) { return build(s, stream) }); err != nil {
			return err
		}
	}
	for _, a := range agentShapes {
		if err := writeBoth(out, a.name, ".json", func(stream bool) ([]byte, error) { return agentBody(a.name, a.size, stream) }); err != nil {
			return err
		}
	}
	// The session's requests, then its last request alone.
	err := writeBoth(out, "agent", ".seq", func(stream bool) ([]byte, error) {
		seq, err := agentSession(stream)
		return bytes.Join(seq, []byte{0x1e}), err
	})
	if err != nil {
		return err
	}
	return writeBoth(out, "agent", ".json", func(stream bool) ([]byte, error) {
		seq, err := agentSession(stream)
		if err != nil {
			return nil, err
		}
		return seq[len(seq)-1], nil
	})
}

// writeBoth writes name-nostream+ext and name-stream+ext with what gen
// makes for each.
func writeBoth(dir, name, ext string, gen func(stream bool) ([]byte, error)) error {
	for _, stream := range []bool{false, true} {
		b, err := gen(stream)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		file := name + "-nostream" + ext
		if stream {
			file = name + "-stream" + ext
		}
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
