package eppcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"
)

type checker struct {
	ctx     context.Context
	cfg     Config
	conn    *grpc.ClientConn
	eng     *engines
	http    *http.Client
	results []Result
}

// errSkipped marks a check a failed one before it made impossible.
var errSkipped = errors.New("not reached: an earlier step failed")

func (c *checker) record(name, level string, err error) {
	if level != Must && c.cfg.MustOnly {
		return
	}
	c.results = append(c.results, Result{Name: name, Level: level, Err: err})
}

func (c *checker) run() {
	c.health()
	c.fullDuplex()
	c.servedFallback()
	c.servedCredit()
	c.disaggregation()
	c.subsets()
	c.otherModes()
	c.cancellations()
	c.headersOnly()
	c.clientDestination()
}

func (c *checker) open() (*envoyStream, error) {
	return openStream(c.ctx, c.conn, c.cfg.Timeout)
}

func (c *checker) healthStatus(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.Timeout)
	defer cancel()
	r, err := healthpb.NewHealthClient(c.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return r.GetStatus(), err
}

func (c *checker) serving(service string) error {
	st, err := c.healthStatus(service)
	if err != nil {
		return err
	}
	if st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("status %v", st)
	}
	return nil
}

func (c *checker) health() {
	c.record("health: liveness is SERVING", Must, c.serving("liveness"))
	// Readiness waits for the picker to have the mock endpoints.
	deadline := time.Now().Add(c.cfg.Wait)
	err := c.serving("readiness")
	for err != nil && time.Now().Before(deadline) && c.ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		err = c.serving("readiness")
	}
	c.record("health: readiness is SERVING once the picker has endpoints", Must, err)
	c.record("health: "+extProcName+" is SERVING", Must, c.serving(extProcName))
}

// validPick checks a pick as the protocol defines it: the header and
// the metadata set, equal, one or more ip:port endpoints, each distinct
// and each one of the pool's (the mock servers).
func (c *checker) validPick(p *picked, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	if p.immediate != nil {
		return nil, fmt.Errorf("answered %d %q instead of picking", p.immediate.GetStatus().GetCode(), p.immediate.GetBody())
	}
	if p.header == "" || p.metadata == "" {
		return nil, fmt.Errorf("the pick must be both the %s header (%q) and envoy.lb metadata (%q)", destHeader, p.header, p.metadata)
	}
	if p.header != p.metadata {
		return nil, fmt.Errorf("header %q and metadata %q differ", p.header, p.metadata)
	}
	eps := strings.Split(p.header, ",")
	seen := map[string]bool{}
	for _, e := range eps {
		host, port, err := net.SplitHostPort(e)
		if err != nil || net.ParseIP(host) == nil || port == "" {
			return nil, fmt.Errorf("%q is not ip:port", e)
		}
		if !c.eng.has(e) {
			return nil, fmt.Errorf("%s is not one of the pool's endpoints %v", e, c.eng.addrs)
		}
		if seen[e] {
			return nil, fmt.Errorf("%s named twice in %q", e, p.header)
		}
		seen[e] = true
	}
	return eps, nil
}

// exchange is a whole request in one mode: pick, forward, answer back,
// close. It records its steps' checks under prefix.
func (c *checker) exchange(prefix, level string, q request, bodyMust bool) {
	s, err := c.open()
	if err != nil {
		c.record(prefix+"the picker accepts an ext_proc stream", level, err)
		return
	}
	defer s.close()
	whole := []byte(nil)
	for _, ch := range q.chunks {
		whole = append(whole, ch...)
	}
	p, err := sendRequest(s, q)
	eps, err := c.validPick(p, err)
	c.record(prefix+"the pick: "+destHeader+" header and envoy.lb metadata, equal, endpoints of the pool", level, err)
	bodyErr := errSkipped
	if err == nil {
		bodyErr = nil
		if string(p.forwarded) != string(whole) {
			bodyErr = fmt.Errorf("%d bytes forwarded, not the %d sent", len(p.forwarded), len(whole))
		}
	}
	if bodyMust {
		c.record(prefix+"the request body is streamed back whole (Envoy forwards only that)", level, bodyErr)
		if err == nil {
			var pieceErr error
			if p.maxPiece > maxStreamed {
				pieceErr = fmt.Errorf("a streamed chunk of %d bytes", p.maxPiece)
			}
			c.record(prefix+"streamed chunks are at most 64 KiB", KVCA, pieceErr)
		}
	}
	if err != nil || bodyErr != nil {
		return
	}
	resp, err := forward(c.ctx, c.http, eps[0], q.path, p.forwarded)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	c.record(prefix+"the primary endpoint answers the forwarded request", level, err)
	if err != nil {
		if resp != nil {
			resp.Body.Close()
		}
		return
	}
	defer resp.Body.Close()
	_, err = sendResponse(s, q.mode, response{
		status: "200", served: eps[0], body: resp.Body,
		headers: []string{"content-type", resp.Header.Get("content-type")},
	})
	c.record(prefix+"the response goes through: headers answered, body answered", level, err)
	if err == nil {
		c.record(prefix+"the stream ends cleanly when Envoy closes it", level, closeAndWait(s))
	}
}

func (c *checker) fullDuplex() {
	c.exchange("full-duplex: ", Must, request{mode: fullDuplex, path: "/v1/chat/completions", chunks: split(chatBody(150_000, true), 3)}, true)
}

func (c *checker) otherModes() {
	body := chatBody(4000, false)
	c.exchange("buffered: ", KVCA, request{mode: buffered, path: "/v1/chat/completions", chunks: [][]byte{body}}, false)
	c.exchange("streamed: ", KVCA, request{mode: streamedMode, noWait: true, path: "/v1/chat/completions", chunks: split(body, 3)}, false)
}

// quickPick is a small full-duplex request picked and then dropped.
func (c *checker) quickPick(md *corev3.Metadata, extra ...string) (*picked, error) {
	s, err := c.open()
	if err != nil {
		return nil, err
	}
	defer s.close()
	return sendRequest(s, request{mode: fullDuplex, path: "/v1/chat/completions", chunks: [][]byte{chatBody(200, true)}, metadata: md, extra: extra})
}

// servedFallback: the gateway reports a fallback as the endpoint that
// served; the picker takes the report and the stream completes.
func (c *checker) servedFallback() {
	name := "served: the picker takes " + servedKey + " naming another endpoint than the primary"
	s, err := c.open()
	if err != nil {
		c.record(name, Must, err)
		return
	}
	defer s.close()
	p, err := sendRequest(s, request{mode: fullDuplex, path: "/v1/chat/completions", chunks: [][]byte{chatBody(200, true)}})
	eps, err := c.validPick(p, err)
	if err != nil {
		c.record(name, Must, err)
		return
	}
	served := eps[len(eps)-1]
	if len(eps) == 1 {
		for _, a := range c.eng.addrs {
			if a != eps[0] {
				served = a
				break
			}
		}
	}
	resp, err := forward(c.ctx, c.http, served, "/v1/chat/completions", p.forwarded)
	if err == nil {
		defer resp.Body.Close()
		_, err = sendResponse(s, fullDuplex, response{status: "200", served: served, body: resp.Body,
			headers: []string{"content-type", resp.Header.Get("content-type")}})
	}
	if err == nil {
		err = closeAndWait(s)
	}
	c.record(name, Must, err)
}

func (c *checker) subsets() {
	one := c.eng.addrs[1]
	p, err := c.quickPick(subsetMetadata(stringList(one)))
	eps, err := c.validPick(p, err)
	if err == nil {
		for _, e := range eps {
			if e != one {
				err = fmt.Errorf("picked %s outside the subset [%s]", e, one)
			}
		}
	}
	c.record("subset: every endpoint picked is of the subset hint (a list)", Must, err)

	two := []string{c.eng.addrs[0], c.eng.addrs[len(c.eng.addrs)-1]}
	p, err = c.quickPick(subsetMetadata(structpb.NewStringValue(strings.Join(two, ","))))
	eps, err = c.validPick(p, err)
	if err == nil {
		for _, e := range eps {
			if e != two[0] && e != two[1] {
				err = fmt.Errorf("picked %s outside the subset %v", e, two)
			}
		}
	}
	c.record("subset: a hint as one comma-separated string is honoured too", KVCA, err)

	for _, tc := range []struct {
		name string
		v    *structpb.Value
	}{
		{"subset: a hint of no endpoint of the pool is answered 503", stringList("192.0.2.1:9")},
		{"subset: an empty hint is answered 503", stringList()},
	} {
		p, err := c.quickPick(subsetMetadata(tc.v))
		if err == nil {
			switch {
			case p.immediate == nil:
				err = fmt.Errorf("picked %q instead of answering 503", p.header)
			case p.immediate.GetStatus().GetCode() != 503:
				err = fmt.Errorf("answered %d, not 503", p.immediate.GetStatus().GetCode())
			}
		}
		c.record(tc.name, Must, err)
	}
}

// cancellations: streams Envoy cancels mid-body and mid-response leave
// the picker picking and ready.
func (c *checker) cancellations() {
	after := func() error {
		if _, err := c.validPick(c.quickPick(nil)); err != nil {
			return fmt.Errorf("the next request: %w", err)
		}
		return c.serving("readiness")
	}

	s, err := c.open()
	if err == nil {
		body := chatBody(2000, true)
		err = s.send(requestHeaders(protocolConfig(fullDuplex, fullDuplex, false), nil, "POST", "/v1/chat/completions", false))
		if err == nil {
			err = s.send(requestBody(body[:100], false))
		}
		time.Sleep(50 * time.Millisecond)
		s.close()
	}
	if err == nil {
		err = after()
	}
	c.record("cancel: a stream cancelled mid-body leaves the picker serving", KVCA, err)

	s, err = c.open()
	if err == nil {
		err = c.cancelMidResponse(s)
		s.close()
	}
	if err == nil {
		err = after()
	}
	c.record("cancel: a stream cancelled mid-response leaves the picker serving", KVCA, err)
}

func (c *checker) cancelMidResponse(s *envoyStream) error {
	p, err := sendRequest(s, request{mode: fullDuplex, path: "/v1/chat/completions", chunks: [][]byte{chatBody(200, true)}})
	eps, err := c.validPick(p, err)
	if err != nil {
		return err
	}
	if err := s.send(responseHeaders(servedMetadata(eps[0]), false, ":status", "200", "content-type", "text/event-stream")); err != nil {
		return err
	}
	if _, err := s.next(); err != nil {
		return err
	}
	if err := s.send(responseBody([]byte("data: {}\n\n"), false)); err != nil {
		return err
	}
	_, err = s.next()
	return err
}

// headersOnly: a request without a body is answered at its headers.
func (c *checker) headersOnly() {
	s, err := c.open()
	if err == nil {
		defer s.close()
		var p *picked
		p, err = sendRequest(s, request{mode: fullDuplex, method: "GET", path: "/v1/models"})
		if err == nil && p.immediate == nil {
			_, err = c.validPick(p, nil)
		}
	}
	c.record("headers only: a request without a body is picked or answered at its headers", KVCA, err)
}

// clientDestination: a destination header the client sent is replaced,
// not appended to: a client must not choose its endpoint.
func (c *checker) clientDestination() {
	p, err := c.quickPick(nil, destHeader, "192.0.2.1:9")
	_, err = c.validPick(p, err)
	if err == nil {
		switch a := p.option.GetAppendAction(); {
		case p.option.GetAppend() != nil && !p.option.GetAppend().GetValue():
		case a == corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD || a == corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
		default:
			err = fmt.Errorf("the destination header is set with %v: a client's own value would stay", a)
		}
	}
	c.record("client header: the pick overwrites a client's "+destHeader, KVCA, err)
}
