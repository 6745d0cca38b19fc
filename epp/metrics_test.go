package epp_test

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/kvca/kvca/epp"
)

// The picker's own series count what crossed gRPC: the messages it sent
// back by kind, the body bytes each way, and one handling time per
// stream.
func TestCostMetrics(t *testing.T) {
	p := startPicker(t, newProxy(1), epp.Config{})
	s := p.open()
	s.send(reqHeaders(modes(epp.ModeFullDuplex, epp.ModeFullDuplex, false), nil, false))
	body := []string{`{"model":"m",`, `"messages":[{"role":"user","content":"hi"}]}`}
	for i, c := range body {
		s.send(reqBody(c, i == len(body)-1))
	}
	r := s.recv()
	ep, _, _ := strings.Cut(destination(t, r, r.GetRequestHeaders().GetResponse()), ",")
	for range body {
		s.recv()
	}
	s.send(respHeaders(ep, false))
	s.recv()
	answer := "data: [DONE]\n\n"
	s.send(respBody(answer, true))
	s.recv()
	if err := s.c.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Recv(); err != io.EOF {
		t.Fatalf("stream end: %v, want EOF", err)
	}
	waitEnded(t, onlyExchange(t, p.proxy))

	var w bytes.Buffer
	p.srv.WritePrometheus(&w)
	in := len(body[0]) + len(body[1])
	for _, want := range []string{
		`kvca_picker_messages_sent_total{kind="request_headers"} 1`,
		`kvca_picker_messages_sent_total{kind="request_body"} 2`,
		`kvca_picker_messages_sent_total{kind="response_headers"} 1`,
		`kvca_picker_messages_sent_total{kind="response_body"} 1`,
		`kvca_picker_messages_sent_total{kind="immediate_response"} 0`,
		`kvca_picker_body_received_bytes_total{body="request"} ` + strconv.Itoa(in),
		`kvca_picker_body_sent_bytes_total{body="request"} ` + strconv.Itoa(in),
		`kvca_picker_body_received_bytes_total{body="response"} ` + strconv.Itoa(len(answer)),
		`kvca_picker_body_sent_bytes_total{body="response"} ` + strconv.Itoa(len(answer)),
		`kvca_picker_handling_seconds_count 1`,
	} {
		if !strings.Contains(w.String(), want+"\n") {
			t.Errorf("no %s in\n%s", want, w.String())
		}
	}
}
