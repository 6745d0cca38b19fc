package pickercost

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestConversationBodies: every body is valid JSON of the chat shape,
// the turns of a conversation average the nominal size, each follow-up
// resends its history, and conversations and phases differ.
func TestConversationBodies(t *testing.T) {
	c := newCorpus(1 << 20)
	for _, size := range []int{512, 1 << 10, 8 << 10, 128 << 10} {
		for _, stream := range []bool{false, true} {
			conv := c.conversation(size, 1, 7, stream)
			if len(conv) != turns {
				t.Fatalf("%d B: %d turns, want %d", size, len(conv), turns)
			}
			for i, b := range conv {
				var req struct {
					Model    string `json:"model"`
					Stream   bool   `json:"stream"`
					Messages []struct{ Role, Content string }
				}
				if err := json.Unmarshal(b, &req); err != nil {
					t.Fatalf("%d B turn %d: %v\n%.300s", size, i, err, b)
				}
				if req.Stream != stream || req.Messages[0].Role != "system" || req.Messages[len(req.Messages)-1].Role != "user" || len(req.Messages) != 2+2*i {
					t.Errorf("%d B turn %d: stream %v, %d messages", size, i, req.Stream, len(req.Messages))
				}
				if i > 0 {
					cut := bytes.LastIndexByte(conv[i-1], ']')
					if !bytes.HasPrefix(b, conv[i-1][:cut]) {
						t.Errorf("%d B turn %d does not resend turn %d's messages", size, i, i-1)
					}
				}
			}
			if m := meanLen(conv); m < size*85/100 || m > size*110/100 {
				t.Errorf("%d B: mean body %d B, want within 85%%..110%% of nominal", size, m)
			}
		}
		a, b, p := c.conversation(size, 1, 1, false), c.conversation(size, 1, 2, false), c.conversation(size, 2, 1, false)
		if bytes.Equal(a[0], b[0]) || bytes.Equal(a[0], p[0]) {
			t.Errorf("%d B: conversations of different ids or phases are equal", size)
		}
	}
}

// TestPhaseBodies: a phase holds exactly n requests in whole
// conversations but the last, half of them streamed.
func TestPhaseBodies(t *testing.T) {
	c := newCorpus(1 << 20)
	for _, n := range []int{1, 2, 3, 10, 200} {
		convs := phaseBodies(c, 1<<10, n, 3)
		if got := len(flatten(convs)); got != n {
			t.Errorf("n=%d: %d requests", n, got)
		}
		for i, cv := range convs[:len(convs)-1] {
			if len(cv) != turns {
				t.Errorf("n=%d: conversation %d has %d turns", n, i, len(cv))
			}
		}
	}
}
