package epp

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// How a stream ended, for kvca_picker_streams_total.
const (
	endComplete  = iota // the response ended
	endCancelled        // Envoy cancelled it, or closed it before the response ended
	endAnswered         // the picker answered the request itself
	endError            // a protocol error or a panic
	numEnds
)

var endNames = [numEnds]string{"complete", "cancelled", "answered", "error"}

// Kinds of messages, for kvca_picker_messages_total.
const (
	msgRequestHeaders = iota
	msgRequestBody
	msgRequestTrailers
	msgResponseHeaders
	msgResponseBody
	msgResponseTrailers
	msgOther
	numMsgs
)

var msgNames = [numMsgs]string{"request_headers", "request_body", "request_trailers", "response_headers", "response_body", "response_trailers", "other"}

// Kinds of messages sent, for kvca_picker_messages_sent_total: the
// answers to each kind received, and the picker's own answer.
const (
	sentRequestHeaders = iota
	sentRequestBody
	sentRequestTrailers
	sentResponseHeaders
	sentResponseBody
	sentResponseTrailers
	sentImmediate
	numSent
)

var sentNames = [numSent]string{"request_headers", "request_body", "request_trailers", "response_headers", "response_body", "response_trailers", "immediate_response"}

// Bodies, for the body byte counters.
const (
	bodyRequest = iota
	bodyResponse
	numBodies
)

var bodyNames = [numBodies]string{"request", "response"}

// counters are the picker's own series: what it costs besides the
// lifecycle's work, the messages and body bytes crossing gRPC and the
// time spent handling them.
type counters struct {
	ends     [numEnds]atomic.Uint64
	msgs     [numMsgs]atomic.Uint64
	sent     [numSent]atomic.Uint64
	bodyIn   [numBodies]atomic.Uint64
	bodyOut  [numBodies]atomic.Uint64
	set      *metrics.Set
	handling *metrics.Histogram
}

func (c *counters) init() {
	c.set = metrics.NewSet()
	c.handling = c.set.NewHistogram("kvca_picker_handling_seconds")
}

func sentKind(r *extprocv3.ProcessingResponse) int {
	switch r.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return sentRequestHeaders
	case *extprocv3.ProcessingResponse_RequestBody:
		return sentRequestBody
	case *extprocv3.ProcessingResponse_RequestTrailers:
		return sentRequestTrailers
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return sentResponseHeaders
	case *extprocv3.ProcessingResponse_ResponseBody:
		return sentResponseBody
	case *extprocv3.ProcessingResponse_ResponseTrailers:
		return sentResponseTrailers
	}
	return sentImmediate
}

func kindOf(req *extprocv3.ProcessingRequest) int {
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return msgRequestHeaders
	case *extprocv3.ProcessingRequest_RequestBody:
		return msgRequestBody
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return msgRequestTrailers
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return msgResponseHeaders
	case *extprocv3.ProcessingRequest_ResponseBody:
		return msgResponseBody
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return msgResponseTrailers
	}
	return msgOther
}

// WritePrometheus writes the picker's series: its streams by how they
// ended, the messages the gateway sent by kind and those the picker sent
// back, the body bytes each way, and the time spent handling streams.
func (s *Server) WritePrometheus(w io.Writer) {
	for i := range numEnds {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_picker_streams_total{end=%q}`, endNames[i]), s.count.ends[i].Load())
	}
	for i := range numMsgs {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_picker_messages_total{kind=%q}`, msgNames[i]), s.count.msgs[i].Load())
	}
	for i := range numSent {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_picker_messages_sent_total{kind=%q}`, sentNames[i]), s.count.sent[i].Load())
	}
	for i := range numBodies {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_picker_body_received_bytes_total{body=%q}`, bodyNames[i]), s.count.bodyIn[i].Load())
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_picker_body_sent_bytes_total{body=%q}`, bodyNames[i]), s.count.bodyOut[i].Load())
	}
	s.count.set.WritePrometheus(w)
}
