package canon_test

import (
	"strings"
	"testing"

	"github.com/kvca/kvca/canon"
)

func TestResponseIDScanner(t *testing.T) {
	for _, c := range []struct {
		name   string
		stream bool
		body   string
		want   string
	}{
		{"json", false, `{"id":"resp_abc","object":"response","output":[{"id":"msg_1","type":"message"}]}`, "resp_abc"},
		{"json id last", false, `{"object":"response","output":[{"id":"msg_1","content":[{"text":"\"id\":\"no\""}]}], "id" : "resp_z"}`, "resp_z"},
		{"json nested only", false, `{"output":[{"id":"msg_1"}],"metadata":{"id":"x"}}`, ""},
		{"json escaped id", false, `{"id":"resp_\u0041"}`, ""},
		{"sse", true, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_s1\",\"object\":\"response\",\"status\":\"in_progress\"}}\n\n" +
			"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"id\":\"msg_9\"}}\n\n", "resp_s1"},
		{"sse vllm order", true, "data: {\"response\":{\"background\":false,\"id\":\"resp_v\"},\"sequence_number\":0,\"type\":\"response.created\"}\n\n", "resp_v"},
		{"sse item first", true, "data: {\"type\":\"x\",\"item\":{\"id\":\"msg_9\"}}\n\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_late\"}}\n\n", "resp_late"},
		{"sse error", true, "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"boom\"}\n\n", ""},
	} {
		// Every split of the body into two pieces finds the same id.
		for cut := 0; cut <= len(c.body); cut++ {
			var s canon.ResponseIDScanner
			s.Reset(c.stream)
			s.Write([]byte(c.body[:cut]))
			s.Write([]byte(c.body[cut:]))
			if string(s.ID()) != c.want || s.Done() != (c.want != "") {
				t.Fatalf("%s cut %d: id %q done %v, want %q", c.name, cut, s.ID(), s.Done(), c.want)
			}
		}
	}
	// A JSON answer is not scanned forever.
	var s canon.ResponseIDScanner
	s.Reset(false)
	s.Write([]byte(`{"output":"` + strings.Repeat("x", 70<<10)))
	if !s.Done() || s.ID() != nil {
		t.Fatal("scanned a long answer without an id to the end")
	}
}

func TestResponseIDScannerNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race")
	}
	body := []byte(`{"id":"resp_abc","object":"response"}`)
	var s canon.ResponseIDScanner
	if n := testing.AllocsPerRun(100, func() {
		s.Reset(false)
		s.Write(body)
	}); n != 0 || string(s.ID()) != "resp_abc" {
		t.Fatalf("%v allocs, id %q", n, s.ID())
	}
}

// FuzzResponseIDScanner: no panic on any answer, and the id found does not
// depend on how the answer is split.
func FuzzResponseIDScanner(f *testing.F) {
	f.Add([]byte(`{"id":"resp_abc","object":"response"}`), false, 5)
	f.Add([]byte("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_s1\"}}\n\n"), true, 30)
	f.Add([]byte(`{"a":[{"id":"x"}],"id":"y\"}`), false, 3)
	f.Fuzz(func(t *testing.T, body []byte, stream bool, cut int) {
		var whole, split canon.ResponseIDScanner
		whole.Reset(stream)
		whole.Write(body)
		split.Reset(stream)
		if cut = max(cut, 0); cut > len(body) {
			cut = len(body)
		}
		split.Write(body[:cut])
		split.Write(body[cut:])
		if string(whole.ID()) != string(split.ID()) || len(whole.ID()) > 128 {
			t.Fatalf("whole %q, split at %d %q", whole.ID(), cut, split.ID())
		}
	})
}
