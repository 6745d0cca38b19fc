package run

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/bench/workload"
	"github.com/kvca/kvca/canon"
)

// outcome is what the client saw of one request. Latencies count from the
// request's scheduled time, so a late send (driver or guard) is not hidden.
type outcome struct {
	sent time.Time
	ttft time.Duration
	e2e  time.Duration
	err  error
	// cached is the prompt tokens the engine found cached, from the
	// stream's usage; -1 when it did not say.
	cached int
	// itl is a streamed answer's mean gap between its token events, from
	// the first to the last (0: fewer than two).
	itl time.Duration
	// respID is a Responses API answer's id, which later turns continue.
	respID []byte
	// status is the HTTP status (0: none came), code the error's code when
	// the answer was an OpenAI-style error ("queue_full").
	status int
	code   string
}

// scanWriter lets a JSON answer stream through the id scanner.
type scanWriter struct{ s *canon.ResponseIDScanner }

func (w scanWriter) Write(p []byte) (int, error) { w.s.Write(p); return len(p), nil }

var (
	dataPrefix  = []byte("data: ")
	donePayload = []byte("[DONE]")
	errorPrefix = []byte(`{"error"`)
	errorObject = []byte(`"object":"error"`)
	// The Messages API and the Responses API end their streams with an
	// event of their own, and report errors as an event of type "error".
	messageStop    = []byte(`"type":"message_stop"`)
	responseDone   = []byte(`"type":"response.completed"`)
	errorEvent     = []byte(`"type":"error"`)
	responseFailed = []byte(`"type":"response.failed"`)
)

func send(ctx context.Context, client *http.Client, base string, r *workload.Request, body []byte, due time.Time, timeout time.Duration) (o outcome) {
	o = outcome{sent: due, cached: -1}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+r.Path, bytes.NewReader(body))
	if err != nil {
		o.err = err
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range r.Headers {
		req.Header.Set(h[0], h[1])
	}
	if r.Class != "" {
		req.Header.Set(workload.PriorityHeader, r.Class)
	}
	if r.Tenant != "" {
		req.Header.Set(workload.TenantHeader, r.Tenant)
	}
	var ids *canon.ResponseIDScanner
	if r.Path == mock.PathResponses {
		ids = new(canon.ResponseIDScanner)
		ids.Reset(r.Stream)
		// o is the named result, so the id is in what the caller gets.
		defer func() { o.respID = append([]byte(nil), ids.ID()...) }()
	}
	if r.Stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := client.Do(req)
	if err != nil {
		o.err = err
		return o
	}
	defer resp.Body.Close()
	o.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		o.code = errorCode(b)
		o.err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		return o
	}
	if !r.Stream {
		var w io.Writer = io.Discard
		if ids != nil {
			w = scanWriter{ids}
		}
		if _, err := io.Copy(w, resp.Body); err != nil {
			o.err = err
			return o
		}
		o.e2e = time.Since(due)
		o.ttft = o.e2e
		return o
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	first := true
	var firstAt, lastAt time.Time
	events := 0
	for {
		line, err := br.ReadSlice('\n')
		long := err == bufio.ErrBufferFull
		if err != nil && !long {
			if err == io.EOF {
				err = errNoDone
			}
			o.err = err
			return o
		}
		if payload, ok := bytes.CutPrefix(line, dataPrefix); ok {
			if first {
				o.ttft = time.Since(due)
				first = false
			}
			if ids != nil && !ids.Done() {
				ids.Write(line)
			}
			payload = bytes.TrimSpace(payload)
			if bytes.Equal(payload, donePayload) || bytes.Contains(payload, messageStop) || bytes.Contains(payload, responseDone) {
				o.e2e = time.Since(due)
				if events > 1 {
					o.itl = lastAt.Sub(firstAt) / time.Duration(events-1)
				}
				return o
			}
			if bytes.Contains(payload, contentKey) {
				if now := time.Now(); events == 0 {
					firstAt, lastAt = now, now
				} else {
					lastAt = now
				}
				events++
			}
			if n, ok := cachedTokens(payload); ok {
				o.cached = n
			}
			if bytes.HasPrefix(payload, errorPrefix) || bytes.Contains(payload, errorObject) ||
				bytes.Contains(payload, errorEvent) || bytes.Contains(payload, responseFailed) {
				o.err = fmt.Errorf("error event: %.200s", payload)
				return o
			}
		}
		// The rest of an event longer than the buffer does not matter.
		for long {
			_, err = br.ReadSlice('\n')
			long = err == bufio.ErrBufferFull
			if err != nil && !long {
				o.err = err
				return o
			}
		}
	}
}

var codeKey = []byte(`"code":"`)

// contentKey marks an event carrying generated text (a chat delta's or a
// completion's), as opposed to a role-only or usage-only event.
var contentKey = []byte(`"content":"`)

// errorCode is the "code" string of an OpenAI-style error body, or "".
func errorCode(body []byte) string {
	i := bytes.Index(body, codeKey)
	if i < 0 {
		return ""
	}
	rest := body[i+len(codeKey):]
	if j := bytes.IndexByte(rest, '"'); j >= 0 {
		return string(rest[:j])
	}
	return ""
}
