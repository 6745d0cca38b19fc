package pickercost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvca/kvca/epp"
)

// maxChunk is the largest body chunk sent to the picker: Envoy's
// recommended bound on a streamed ext_proc body message.
const maxChunk = 64 << 10

// envoyWindow is Envoy's default HTTP/2 window, for a stream and for
// the connection (initial_stream_window_size and
// initial_connection_window_size).
const envoyWindow = 256 << 20

// chatPath is the one path the bench posts to.
const chatPath = "/v1/chat/completions"

// envoy plays the gateway's part for picker mode: one ext_proc stream per
// request in FULL_DUPLEX_STREAMED mode, as the endpoint picker protocol
// requires, then the request to the endpoint picked and its response fed
// back through the picker.
type envoy struct {
	conn *grpc.ClientConn
	http *http.Client
	// known are the endpoints a pick may name: anything else is an error.
	known map[string]bool
}

// exchange is one picker-mode request. It returns the time from opening
// the stream to the pick, and when the whole response had come back
// through the picker (what the client would have seen); the stream's
// clean close follows it and is not part of the latency, as the client
// has its answer by then.
func (e *envoy) exchange(ctx context.Context, id string, body []byte) (pick, total time.Duration, err error) {
	t0 := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := extprocv3.NewExternalProcessorClient(e.conn).Process(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("opening the ext_proc stream: %w", err)
	}
	full := filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	hdr := &extprocv3.ProcessingRequest{
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: full, ResponseBodyMode: full},
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headers(
			":method", "POST", ":path", chatPath, ":authority", "pickercost", ":scheme", "http",
			"content-type", "application/json", "content-length", strconv.Itoa(len(body)), "x-request-id", id)}},
	}
	if err := s.Send(hdr); err != nil {
		return 0, 0, fmt.Errorf("sending the request headers: %w", err)
	}
	// In full duplex Envoy sends the body as it arrives without waiting
	// for answers, and the picker answers nothing until the body ended:
	// sending all of it before reading cannot block on the picker.
	for off := 0; off < len(body); off += maxChunk {
		end := min(off+maxChunk, len(body))
		m := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body[off:end], EndOfStream: end == len(body)}}}
		if err := s.Send(m); err != nil {
			return 0, 0, fmt.Errorf("sending the request body: %w", err)
		}
	}
	r, err := s.Recv()
	if err != nil {
		return 0, 0, fmt.Errorf("waiting for the pick: %w", err)
	}
	if ir := r.GetImmediateResponse(); ir != nil {
		return 0, 0, fmt.Errorf("the picker answered itself: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
	}
	ep, err := e.pickOf(r)
	if err != nil {
		return 0, 0, err
	}
	pick = time.Since(t0)

	// Envoy sends the request upstream as the picker streams the body
	// back, not after: the body goes through a pipe while it arrives.
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ep+chatPath, pr)
	if err != nil {
		return 0, 0, err
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("content-type", "application/json")
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := e.http.Do(req)
		done <- result{resp, err}
	}()
	back, err := relayBody(s, pw, len(body))
	if err != nil {
		pw.CloseWithError(err)
		if res := <-done; res.err == nil {
			res.resp.Body.Close()
		}
		return 0, 0, err
	}
	res := <-done
	if res.err != nil {
		return 0, 0, fmt.Errorf("sending to the endpoint picked, %s: %w", ep, res.err)
	}
	defer res.resp.Body.Close()
	if back != len(body) {
		return 0, 0, fmt.Errorf("the picker streamed back %d bytes of a %d-byte body", back, len(body))
	}
	respBody, err := io.ReadAll(res.resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("reading %s's answer: %w", ep, err)
	}
	if res.resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("%s answered %d: %.200s", ep, res.resp.StatusCode, respBody)
	}
	if err := e.response(s, ep, res.resp, respBody); err != nil {
		return 0, 0, err
	}
	total = time.Since(t0)
	if err := s.CloseSend(); err != nil {
		return 0, 0, err
	}
	if r, err := s.Recv(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("an unexpected message (%T) after the response", r.GetResponse())
		}
		return 0, 0, fmt.Errorf("closing the stream: %w", err)
	}
	return pick, total, nil
}

// pickOf is the primary endpoint of the headers' answer, checked to be a
// known one and the same in the header and the metadata.
func (e *envoy) pickOf(r *extprocv3.ProcessingResponse) (string, error) {
	h := r.GetRequestHeaders()
	if h == nil {
		return "", fmt.Errorf("first answer is a %T, want the request headers' answer", r.GetResponse())
	}
	var header string
	for _, o := range h.GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetHeader().GetKey() == epp.DestinationHeader {
			header = string(o.GetHeader().GetRawValue())
		}
	}
	md := r.GetDynamicMetadata().GetFields()[epp.DestinationNamespace].GetStructValue().GetFields()[epp.DestinationHeader].GetStringValue()
	if header == "" || header != md {
		return "", fmt.Errorf("pick header %q and metadata %q: want both, equal", header, md)
	}
	ep, _, _ := strings.Cut(header, ",")
	if !e.known[ep] {
		return "", fmt.Errorf("picked %q, not one of the mock engines", ep)
	}
	return ep, nil
}

// relayBody writes the body the picker streams back into w, the
// upstream request's body, and closes w at its end.
func relayBody(s extprocv3.ExternalProcessor_ProcessClient, w *io.PipeWriter, want int) (int, error) {
	n := 0
	// Bounded: a picker that never ends the body would otherwise hold the
	// bench; 62,000-byte chunks mean a few hundred for the largest body.
	for range want/1000 + 16 {
		r, err := s.Recv()
		if err != nil {
			return n, fmt.Errorf("waiting for the streamed request body (%d of %d bytes): %w", n, want, err)
		}
		sb := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sb == nil {
			return n, fmt.Errorf("a %T where the streamed request body was expected", r.GetResponse())
		}
		if _, err := w.Write(sb.GetBody()); err != nil {
			return n, fmt.Errorf("sending the body upstream: %w", err)
		}
		n += len(sb.GetBody())
		if sb.GetEndOfStream() {
			return n, w.Close()
		}
	}
	return n, errors.New("the streamed request body never ended")
}

// response feeds the endpoint's answer through the picker as Envoy does:
// the headers with the endpoint that served in the metadata, the body in
// chunks, and reads the body the picker streams back. In full duplex the
// body goes as it arrives, without waiting for the headers' answer, as
// the request's did.
func (e *envoy) response(s extprocv3.ExternalProcessor_ProcessClient, ep string, resp *http.Response, body []byte) error {
	kv := []string{":status", strconv.Itoa(resp.StatusCode), "content-type", resp.Header.Get("content-type")}
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		epp.DestinationNamespace: {Fields: map[string]*structpb.Value{epp.ServedKey: structpb.NewStringValue(ep)}},
	}}
	if err := s.Send(&extprocv3.ProcessingRequest{MetadataContext: md, Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headers(kv...)}}}); err != nil {
		return fmt.Errorf("sending the response headers: %w", err)
	}
	// The answers are small (a few tokens): sending every chunk before
	// reading what comes back cannot fill the stream's window.
	for off := 0; ; off += maxChunk {
		end := min(off+maxChunk, len(body))
		if err := s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: body[off:end], EndOfStream: end == len(body)}}}); err != nil {
			return fmt.Errorf("sending the response body: %w", err)
		}
		if end == len(body) {
			break
		}
	}
	r, err := s.Recv()
	if err != nil {
		return fmt.Errorf("waiting for the response headers' answer: %w", err)
	}
	if r.GetResponseHeaders() == nil {
		return fmt.Errorf("response headers answered with a %T", r.GetResponse())
	}
	var back []byte
	for range len(body)/1000 + 16 {
		r, err := s.Recv()
		if err != nil {
			return fmt.Errorf("waiting for the streamed response body: %w", err)
		}
		sb := r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sb == nil {
			return fmt.Errorf("a %T where the streamed response body was expected", r.GetResponse())
		}
		back = append(back, sb.GetBody()...)
		if sb.GetEndOfStream() {
			if !bytes.Equal(back, body) {
				return fmt.Errorf("the response came back as %d bytes, not the %d sent", len(back), len(body))
			}
			return nil
		}
	}
	return errors.New("the streamed response body never ended")
}

func headers(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, 0, len(kv)/2)}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}
