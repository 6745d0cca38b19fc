package canon_test

import (
	"strings"
	"testing"

	"github.com/kvca/kvca/canon"
)

func TestResponseIDScanner(t *testing.T) {
	t.Parallel()
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
		// A closer with nothing open (an SSE comment, a stray byte) leaves
		// the nesting at the top: the next object's members are its own.
		{"sse stray closer", true, ": keep-alive ]}\n\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_k\"}}\n\n", "resp_k"},
		{"json stray closer", false, `]{"id":"resp_j"}`, "resp_j"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// Every split of the body into two pieces finds the same id.
			for cut := 0; cut <= len(c.body); cut++ {
				var s canon.ResponseIDScanner
				s.Reset(c.stream)
				s.Write([]byte(c.body[:cut]))
				s.Write([]byte(c.body[cut:]))
				if string(s.ID()) != c.want || s.Done() != (c.want != "") {
					t.Fatalf("cut %d: id %q done %v, want %q", cut, s.ID(), s.Done(), c.want)
				}
			}
		})
	}
	// A JSON answer is not scanned forever.
	var s canon.ResponseIDScanner
	s.Reset(false)
	s.Write([]byte(`{"output":"` + strings.Repeat("x", 70<<10)))
	if !s.Done() || s.ID() != nil {
		t.Fatal("scanned a long answer without an id to the end")
	}
}

// TestResponseIDScannerScanBound: a JSON answer is scanned for exactly
// maxScan (64 KiB) bytes however it is split: an id that ends on the last
// of them is found, one that ends a byte later is not, and the scanner is
// done once those bytes are seen.
func TestResponseIDScannerScanBound(t *testing.T) {
	t.Parallel()
	const maxScan = 64 << 10
	// An answer of n bytes whose id (resp_b) ends on its last byte.
	answer := func(n int) string {
		tail := `","id":"resp_b"`
		return `{"pad":"` + strings.Repeat("x", n-len(`{"pad":"`)-len(tail)) + tail
	}
	for _, tc := range []struct {
		name   string
		body   string
		pieces int // the size of the pieces written; 0: at once
		want   string
		done   bool
	}{
		{"id on the last byte", answer(maxScan), 0, "resp_b", true},
		{"id on the last byte, in pieces", answer(maxScan), 1000, "resp_b", true},
		{"id a byte too far", answer(maxScan + 1), 0, "", true},
		{"id a byte too far, in pieces", answer(maxScan + 1), 1000, "", true},
		{"id a byte too far, in two exact halves", answer(maxScan + 1), maxScan / 2, "", true},
		{"no id, exactly the bound", `{"pad":"` + strings.Repeat("x", maxScan-8), 0, "", true},
		{"no id, exactly the bound in pieces", `{"pad":"` + strings.Repeat("x", maxScan-8), 4096, "", true},
		{"no id, a byte short", `{"pad":"` + strings.Repeat("x", maxScan-9), 0, "", false},
		{"no id, a byte short in pieces", `{"pad":"` + strings.Repeat("x", maxScan-9), 4096, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var s canon.ResponseIDScanner
			s.Reset(false)
			p := []byte(tc.body)
			for len(p) > 0 {
				n := len(p)
				if tc.pieces > 0 {
					n = min(n, tc.pieces)
				}
				s.Write(p[:n])
				p = p[n:]
			}
			if string(s.ID()) != tc.want || s.Done() != tc.done {
				t.Fatalf("id %q done %v, want %q %v", s.ID(), s.Done(), tc.want, tc.done)
			}
		})
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
