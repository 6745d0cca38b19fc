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

// counters are the picker's own series.
type counters struct {
	ends [numEnds]atomic.Uint64
	msgs [numMsgs]atomic.Uint64
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
// ended and the messages the gateway sent by kind.
func (s *Server) WritePrometheus(w io.Writer) {
	for i := range numEnds {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_picker_streams_total{end=%q}`, endNames[i]), s.count.ends[i].Load())
	}
	for i := range numMsgs {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvca_picker_messages_total{kind=%q}`, msgNames[i]), s.count.msgs[i].Load())
	}
}
