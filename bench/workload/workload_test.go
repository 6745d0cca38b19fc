package workload

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
)

const tracePath = "../testdata/conversation_trace.jsonl"

type chatReq struct {
	Messages []struct {
		Role    string  `json:"role"`
		Content *string `json:"content"`
	} `json:"messages"`
	MaxTokens int  `json:"max_tokens"`
	Stream    bool `json:"stream"`
}

func decode(t *testing.T, b []byte) chatReq {
	t.Helper()
	var r chatReq
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("body %q: %v", b[:min(len(b), 200)], err)
	}
	return r
}

func render(t *testing.T, r Request) []byte {
	t.Helper()
	p, err := mock.Render(nil, r.Path, r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTraceConversations(t *testing.T) {
	recs := []TraceRecord{
		{Timestamp: 0, InputLength: 1000, OutputLength: 50, HashIDs: []int64{0, 1}},             // root: block 0 + partial 1
		{Timestamp: 10, InputLength: 700, OutputLength: 5, HashIDs: []int64{0, 9}},              // shares only the system block: root
		{Timestamp: 20, InputLength: 1300, OutputLength: 30, HashIDs: []int64{0, 2, 3}},         // extends [0] only: root (0 is not r0's own)
		{Timestamp: 30, InputLength: 2000, OutputLength: 7, HashIDs: []int64{0, 2, 4, 5}},       // extends r2's complete blocks [0,2]
		{Timestamp: 40, InputLength: 2100, OutputLength: 7, HashIDs: []int64{0, 2, 4, 5, 6}},    // extends r3's [0,2,4]
		{Timestamp: 50, InputLength: 900, OutputLength: 7, HashIDs: []int64{0, 2}},              // shorter: root
		{Timestamp: 60, InputLength: 3000, OutputLength: 7, HashIDs: []int64{0, 2, 4, 8, 8, 8}}, // sibling of r4: child of r3
	}
	// Many conversations start with block 0: a shared system prompt.
	for k := 0; k < maxFanout; k++ {
		recs = append(recs, TraceRecord{Timestamp: float64(100 + k), InputLength: 600, OutputLength: 1, HashIDs: []int64{0, int64(100 + k)}})
	}
	w := FromTrace(recs, TraceOptions{TimeScale: 0.5})
	wantTurn := []int{0, 0, 0, 1, 2, 0, 2}
	wantSession := []int{0, 1, 2, 2, 2, 3, 2}
	for k := 0; k < maxFanout; k++ {
		wantTurn = append(wantTurn, 0)
		wantSession = append(wantSession, 4+k)
	}
	for i, r := range w.Requests {
		if r.Turn != wantTurn[i] || r.Session != wantSession[i] {
			t.Errorf("request %d: session %d turn %d, want %d %d", i, r.Session, r.Turn, wantSession[i], wantTurn[i])
		}
		if got := mock.Tokens(render(t, r)); got < recs[i].InputLength || got > recs[i].InputLength+7*(r.Turn+1) {
			t.Errorf("request %d renders %d tokens for input_length %d", i, got, recs[i].InputLength)
		}
		if int(r.At.Milliseconds()) != int(recs[i].Timestamp/2) || !r.Stream || r.OutputTokens != recs[i].OutputLength {
			t.Errorf("request %d: %+v", i, r)
		}
	}
	// A follow-up re-sends its parent's messages and adds assistant + user.
	parent, child := decode(t, w.Requests[3].Body), decode(t, w.Requests[4].Body)
	if len(child.Messages) != len(parent.Messages)+2 || child.Messages[len(child.Messages)-2].Role != "assistant" {
		t.Fatalf("child messages %+v", child.Messages)
	}
	if !bytes.HasPrefix(render(t, w.Requests[4]), render(t, w.Requests[3])) {
		t.Fatal("follow-up prompt does not extend its parent's")
	}
	// Equal leading ids give equal text even across conversations.
	if !bytes.HasPrefix(render(t, w.Requests[5]), render(t, w.Requests[2])[:len("<|user|>\n")+512*4]) {
		t.Fatal("shared blocks do not render equal")
	}
	plain := FromTrace(recs, TraceOptions{Plain: true, MaxRequests: 3})
	if len(plain.Requests) != 3 {
		t.Fatal("MaxRequests ignored")
	}
	for _, r := range plain.Requests {
		if m := decode(t, r.Body).Messages; len(m) != 1 || m[0].Role != "user" || r.Turn != 0 {
			t.Fatalf("plain request %+v", m)
		}
	}
}

func TestTraceIdealUnits(t *testing.T) {
	recs := []TraceRecord{
		{InputLength: 1000, HashIDs: []int64{7, 8}},
		{InputLength: 1100, HashIDs: []int64{7, 8, 9}}, // 7 and 8 (512+488 tokens... 8 is full here: 512) hit
		{InputLength: 600, HashIDs: []int64{5, 8}},     // 8 after a different prefix: miss
		{InputLength: 1024, HashIDs: []int64{7, 8, 3}}, // 7,8 hit
	}
	h := TraceIdeal(recs, 512)
	if h.QueryTokens != 3724 || h.HitTokens != 512+512+1024 {
		t.Fatalf("trace ideal %+v", h)
	}
}

func TestReadTraceRejectsGarbage(t *testing.T) {
	if _, err := ReadTrace(strings.NewReader("{\"timestamp\":1}\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err %v", err)
	}
	recs, err := ReadTrace(strings.NewReader("\n{\"timestamp\":5,\"input_length\":3,\"hash_ids\":[1]}\n{\"timestamp\":2.5,\"input_length\":4}\n"))
	if err != nil || len(recs) != 2 || recs[0].Timestamp != 2.5 {
		t.Fatalf("%v %+v", err, recs)
	}
	w := FromTrace(recs, TraceOptions{})
	if got := mock.Tokens(render(t, w.Requests[0])); got < 4 {
		t.Fatalf("id-less request has %d tokens", got)
	}
}

func TestConversationTraceIdeal(t *testing.T) {
	f, err := os.Open(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ReadTrace(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 12031 {
		t.Fatalf("%d records", len(recs))
	}
	// The trace README's figure.
	if r := TraceIdeal(recs, 512).Rate(); math.Abs(r-0.374) > 0.0005 {
		t.Fatalf("trace ideal %.4f, want 0.374", r)
	}
	w := FromTrace(recs, TraceOptions{MaxRequests: 1500})
	ideal, err := Ideal(w.Requests, 16)
	if err != nil {
		t.Fatal(err)
	}
	// In 16-token blocks the partial trace blocks that a follow-up re-sends
	// hit too, so the engine-unit ideal is at least the trace-unit one.
	if ideal.Rate() < w.TraceIdeal.Rate() {
		t.Fatalf("engine-unit ideal %.3f below trace-unit %.3f", ideal.Rate(), w.TraceIdeal.Rate())
	}
	t.Logf("first 1500: trace-unit ideal %.4f, engine-unit ideal %.4f", w.TraceIdeal.Rate(), ideal.Rate())
}

func TestSyntheticDeterministicAndShaped(t *testing.T) {
	s := Synthetic{Seed: 42, Sessions: 20, SystemPrompts: 2, ToolRate: 0.5}
	a, b := s.Generate(), s.Generate()
	if len(a.Requests) != len(b.Requests) {
		t.Fatal("not deterministic")
	}
	for i := range a.Requests {
		if a.Requests[i].At != b.Requests[i].At || !bytes.Equal(a.Requests[i].Body, b.Requests[i].Body) {
			t.Fatalf("request %d differs", i)
		}
	}
	if c := (Synthetic{Seed: 43, Sessions: 20}).Generate(); bytes.Equal(c.Requests[0].Body, a.Requests[0].Body) {
		t.Fatal("seed ignored")
	}
	systems := map[string]bool{}
	last := map[int]Request{}
	tools := 0
	for i, r := range a.Requests {
		if i > 0 && r.At < a.Requests[i-1].At {
			t.Fatal("not time ordered")
		}
		m := decode(t, r.Body).Messages
		systems[*m[0].Content] = true
		if m[len(m)-1].Role == "tool" {
			tools++
		}
		if p, ok := last[r.Session]; ok {
			if r.Turn != p.Turn+1 || !bytes.HasPrefix(render(t, r), render(t, p)) {
				t.Fatalf("session %d turn %d does not extend turn %d", r.Session, r.Turn, p.Turn)
			}
		}
		last[r.Session] = r
	}
	if len(systems) != 2 || tools == 0 || len(last) != 20 {
		t.Fatalf("%d system prompts, %d tool results, %d sessions", len(systems), tools, len(last))
	}
	ideal, err := Ideal(a.Requests, 16)
	if err != nil || ideal.Rate() < 0.5 {
		t.Fatalf("synthetic ideal %.3f %v", ideal.Rate(), err)
	}
}

// PlainStreams sends a streamed chat body as an SDK does by default: the
// same body without stream_options, and non-streamed bodies untouched.
func TestPlainStreams(t *testing.T) {
	w := Synthetic{Seed: 1, Sessions: 3, Rate: 1, MinTurns: 2, MaxTurns: 2, SystemPrompts: 1, SystemPromptTokens: 16, UserTokens: 8, OutputTokens: 4, ThinkTime: time.Second}.Generate()
	before := make([]string, len(w.Requests))
	for i, r := range w.Requests {
		before[i] = string(r.Body)
		if !bytes.Contains(r.Body, includeUsage) {
			t.Fatalf("request %d asks no usage: %s", i, r.Body)
		}
	}
	PlainStreams(w)
	for i, r := range w.Requests {
		if bytes.Contains(r.Body, []byte("stream_options")) || !bytes.Contains(r.Body, []byte(`"stream":true`)) {
			t.Fatalf("request %d: %s", i, r.Body)
		}
		if got := string(r.Body); got != strings.Replace(before[i], string(includeUsage), "", 1) {
			t.Fatalf("request %d changed otherwise: %s", i, got)
		}
	}
}
