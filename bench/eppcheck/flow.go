package eppcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

type bodyMode = filterv3.ProcessingMode_BodySendMode

// request is a request as Envoy hands it to the picker.
type request struct {
	mode     bodyMode // request and response body mode
	noWait   bool     // STREAMED: body sent before the headers' answer
	method   string
	path     string
	chunks   [][]byte // the body as it arrives; none: headers only
	metadata *corev3.Metadata
	extra    []string // more headers, name then value
}

// picked is what the picker answered a request with.
type picked struct {
	immediate *extprocv3.ImmediateResponse
	header    string // the destination header's value
	metadata  string // the envelope's value in envoy.lb
	option    *corev3.HeaderValueOption
	forwarded []byte // the body Envoy would send upstream
	maxPiece  int    // largest streamed body chunk
	where     string // which answer carried the pick
	// prefiller is the prefill worker the pick names (x-prefiller-host-port);
	// prefillerRemoved: the pick removes a client's own.
	prefiller        string
	prefillerRemoved bool
}

// sendRequest plays Envoy's request side in the request's mode and
// reads the pick; a protocol violation is an error.
func sendRequest(s *envoyStream, q request) (*picked, error) {
	pc := protocolConfig(q.mode, q.mode, q.noWait)
	if q.method == "" {
		q.method, q.path = "POST", "/v1/chat/completions"
	}
	eos := len(q.chunks) == 0
	if err := s.send(requestHeaders(pc, q.metadata, q.method, q.path, eos, q.extra...)); err != nil {
		return nil, err
	}
	p := &picked{}
	whole := bytes.Join(q.chunks, nil)
	waitsForHeaders := q.mode == buffered || (q.mode == streamedMode && !q.noWait)
	if !eos && !waitsForHeaders {
		for i, c := range q.chunks {
			if err := s.send(requestBody(c, i == len(q.chunks)-1)); err != nil {
				return nil, err
			}
		}
	}
	r, err := s.next()
	if err != nil {
		return nil, fmt.Errorf("waiting for the request headers' answer: %w", err)
	}
	if ir := r.GetImmediateResponse(); ir != nil {
		p.immediate = ir
		return p, nil
	}
	if r.GetRequestHeaders() == nil {
		return nil, fmt.Errorf("first answer is a %s, want the request headers' answer (Envoy processes headers, then body)", kind(r))
	}
	p.header, p.metadata, p.option = pickOf(r, commonOf(r))
	p.prefiller, p.prefillerRemoved = prefillerOf(r)
	p.where = "request headers answer"
	if eos {
		return p, nil
	}
	switch {
	case q.mode == fullDuplex:
		return p, readStreamedRequest(s, p)
	case waitsForHeaders:
		if err := s.send(requestBody(whole, true)); err != nil {
			return nil, err
		}
		r, err := s.next()
		if err != nil {
			return nil, fmt.Errorf("waiting for the body's answer: %w", err)
		}
		if ir := r.GetImmediateResponse(); ir != nil {
			p.immediate = ir
			return p, nil
		}
		if r.GetRequestBody() == nil {
			return nil, fmt.Errorf("body answered with a %s", kind(r))
		}
		if p.header == "" && p.metadata == "" {
			p.header, p.metadata, p.option = pickOf(r, commonOf(r))
			p.prefiller, p.prefillerRemoved = prefillerOf(r)
			p.where = "request body answer"
		}
	default: // STREAMED, body sent without waiting: one answer per chunk
		for i := range q.chunks {
			r, err := s.next()
			if err != nil {
				return nil, fmt.Errorf("waiting for chunk %d's answer: %w", i, err)
			}
			if r.GetRequestBody() == nil {
				return nil, fmt.Errorf("chunk %d answered with a %s", i, kind(r))
			}
		}
	}
	p.forwarded = whole
	return p, nil
}

// readStreamedRequest collects the body a FULL_DUPLEX_STREAMED picker
// streams back: Envoy forwards that, and only that, upstream.
func readStreamedRequest(s *envoyStream, p *picked) error {
	for n := 0; n < 100000; n++ {
		r, err := s.next()
		if err != nil {
			return fmt.Errorf("waiting for the streamed request body (%d bytes so far): %w", len(p.forwarded), err)
		}
		if ir := r.GetImmediateResponse(); ir != nil {
			p.immediate = ir
			return nil
		}
		sb := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sb == nil {
			return fmt.Errorf("in FULL_DUPLEX_STREAMED a body answer must carry a streamed_response; got a %s", kind(r))
		}
		p.forwarded = append(p.forwarded, sb.GetBody()...)
		p.maxPiece = max(p.maxPiece, len(sb.GetBody()))
		if sb.GetEndOfStream() {
			return nil
		}
	}
	return errors.New("streamed request body never ended")
}

// response is the model server's answer as Envoy hands it back.
type response struct {
	status  string
	served  string // reported in metadata; "" reports nothing
	headers []string
	body    io.Reader // read in the pieces it gives
}

// sendResponse plays Envoy's response side and returns the body as the
// picker let it through (FULL_DUPLEX_STREAMED) or as it was.
func sendResponse(s *envoyStream, mode bodyMode, q response) ([]byte, error) {
	var md *corev3.Metadata
	if q.served != "" {
		md = servedMetadata(q.served)
	}
	kv := append([]string{":status", q.status}, q.headers...)
	if err := s.send(responseHeaders(md, false, kv...)); err != nil {
		return nil, err
	}
	r, err := s.next()
	if err != nil {
		return nil, fmt.Errorf("waiting for the response headers' answer: %w", err)
	}
	if r.GetResponseHeaders() == nil {
		return nil, fmt.Errorf("response headers answered with a %s", kind(r))
	}
	var sent, back []byte
	buf := make([]byte, 16<<10)
	pieces := 0
	for pieces < 100000 {
		n, rerr := q.body.Read(buf)
		last := rerr != nil
		if n == 0 && !last {
			continue
		}
		chunk := append([]byte(nil), buf[:n]...)
		sent = append(sent, chunk...)
		if mode == buffered && !last {
			continue
		}
		if mode == buffered {
			chunk = sent
		}
		if err := s.send(responseBody(chunk, last)); err != nil {
			return nil, err
		}
		pieces++
		if mode != fullDuplex {
			r, err := s.next()
			if err != nil {
				return nil, fmt.Errorf("waiting for response chunk %d's answer: %w", pieces, err)
			}
			if r.GetResponseBody() == nil {
				return nil, fmt.Errorf("response chunk %d answered with a %s", pieces, kind(r))
			}
		}
		if last {
			break
		}
	}
	if mode != fullDuplex {
		return sent, nil
	}
	for n := 0; n < 100000; n++ {
		r, err := s.next()
		if err != nil {
			return back, fmt.Errorf("waiting for the streamed response body (%d of %d bytes back): %w", len(back), len(sent), err)
		}
		sb := r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sb == nil {
			return back, fmt.Errorf("in FULL_DUPLEX_STREAMED a response body answer must carry a streamed_response; got a %s", kind(r))
		}
		back = append(back, sb.GetBody()...)
		if sb.GetEndOfStream() {
			break
		}
	}
	if !bytes.Equal(back, sent) {
		return back, fmt.Errorf("the response body came back as %d bytes, not the %d sent", len(back), len(sent))
	}
	return back, nil
}

// closeAndWait half-closes as Envoy does when the HTTP stream is over
// and waits for the picker to end the stream without error.
func closeAndWait(s *envoyStream) error {
	if err := s.c.CloseSend(); err != nil {
		return err
	}
	r, err := s.next()
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stream ended with %w", err)
	}
	return fmt.Errorf("unexpected %s after the response ended", kind(r))
}
