package edge

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A backend that is not fasthttp: net/http's server, streaming with its
// own chunk framing and Flush. kvca relays each event as it is flushed
// (the client reads the first before the backend writes the second) and
// forwards the body byte for byte, but for the edit that asks a plain
// stream's usage.
func TestNetHTTPBackend(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	got := make(chan []byte, 1)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			return
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
			return
		}
		b, _ := io.ReadAll(r.Body)
		got <- b
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-next:
		case <-time.After(10 * time.Second):
			return
		}
		fmt.Fprint(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(be.Close)
	s := startProxy(t, func(c *Config) { c.Backends = []string{be.URL} })
	body := conversation(1, 0, true)
	resp, err := client.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: {\"n\":1}\n" {
		t.Fatalf("first event: %q %v", line, err)
	}
	close(next) // only now does the backend write the rest
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: {\"n\":2}\n\ndata: [DONE]\n\n" {
		t.Fatalf("rest: %q %v", rest, err)
	}
	// The plain stream asks for its usage (--stream-usage), with the
	// Content-Length net/http reads the edited body by.
	if b := <-got; string(b) != `{"stream_options":{"include_usage":true},`+body[1:] {
		t.Fatalf("backend got %q", b)
	}
	waitIdle(t, s)
}
