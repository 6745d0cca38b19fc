package edge

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kvca/kvca/internal/testkit"
)

// The body's priority field (vLLM's: lower is served first) gives the
// admission class when the X-KVCA-Priority header does not: negative is
// high, positive low; the header wins over the field. The field reaches
// the backend untouched (vLLM schedules by it too).
func TestAdmissionClassFromBodyPriority(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, "a")
	release := b.holdAnswers(t)
	s := startProxy(t, func(c *Config) { c.Admission.MaxInflightPerBackend = 1 }, b)
	var wg sync.WaitGroup
	send := func(id int, priority, header string) {
		body := conversation(id, 0, false)
		if priority != "" {
			body = `{"priority":` + priority + `,` + body[1:]
		}
		hdr := map[string]string{}
		if header != "" {
			hdr["X-KVCA-Priority"] = header
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, out := postWith(t, s, body, hdr); resp != nil && resp.StatusCode != 200 {
				t.Errorf("request %d: %d %s", id, resp.StatusCode, out)
			}
		}()
	}
	send(0, "", "")
	testkit.WaitUntil(t, "the first request at the backend", func() bool { return b.hits.Load() == 1 })
	for i, tc := range []struct{ priority, header string }{
		{"5", ""},     // 1: low by the field
		{"-1", "low"}, // 2: low: the header wins
		{"-10", ""},   // 3: high by the field
		{"0", ""},     // 4: normal
	} {
		send(i+1, tc.priority, tc.header)
		testkit.WaitUntil(t, fmt.Sprintf("%d requests queued", i+1), func() bool { return s.adm.Queued() == i+1 })
	}
	release()
	wg.Wait()
	var order []string
	for _, body := range b.received() {
		var req struct {
			Priority *int                       `json:"priority"`
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatal(err)
		}
		order = append(order, req.Messages[1].Content[:len("conversation 0")])
		if strings.HasPrefix(req.Messages[1].Content, "conversation 3") && (req.Priority == nil || *req.Priority != -10) {
			t.Errorf("the priority field did not reach the backend as sent: %s", body)
		}
	}
	want := []string{"conversation 0", "conversation 3", "conversation 4", "conversation 1", "conversation 2"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("served in order %q, want %q", order, want)
	}
	waitIdle(t, s)
}
