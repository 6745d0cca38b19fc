package eppcheck

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/kvca/kvca/bench/mock"
)

// engines are the mock model servers the picker is to pick from.
type engines struct {
	list  []*mock.Engine
	addrs []string // the endpoints the picker picks from
	// prefills are prefill workers (Config.Prefill): never picked, named
	// in x-prefiller-host-port.
	prefills []string
}

// startEngines starts one mock engine per address ("127.0.0.1:0" for
// any port). Their simulated time runs fast: the checks are about the
// protocol, not the engines.
func startEngines(addrs []string) (*engines, error) {
	e := &engines{}
	for i, a := range addrs {
		m := mock.New(mock.Config{Name: fmt.Sprintf("eppcheck-%d", i), TimeScale: 0.02, DefaultMaxTokens: 4})
		if err := m.Start(a); err != nil {
			e.close()
			return nil, fmt.Errorf("mock engine on %s: %w", a, err)
		}
		e.list = append(e.list, m)
		e.addrs = append(e.addrs, m.Addr())
	}
	return e, nil
}

func (e *engines) close() {
	for _, m := range e.list {
		_ = m.Close()
	}
}

// startPrefills adds the prefill workers.
func (e *engines) startPrefills(addrs []string) error {
	for i, a := range addrs {
		m := mock.New(mock.Config{Name: fmt.Sprintf("eppcheck-prefill-%d", i), TimeScale: 0.02, DefaultMaxTokens: 4})
		if err := m.Start(a); err != nil {
			return fmt.Errorf("mock prefill worker on %s: %w", a, err)
		}
		e.list = append(e.list, m)
		e.prefills = append(e.prefills, m.Addr())
	}
	return nil
}

// prefill reports whether ep is one of the prefill workers.
func (e *engines) prefill(ep string) bool {
	for _, a := range e.prefills {
		if a == ep {
			return true
		}
	}
	return false
}

func (e *engines) has(ep string) bool {
	for _, a := range e.addrs {
		if a == ep {
			return true
		}
	}
	return false
}

// chatBody is an OpenAI chat completion request the mock engines serve,
// its user content padded to about size bytes.
func chatBody(size int, stream bool) []byte {
	content := "hello from eppcheck"
	if size > len(content) {
		content += strings.Repeat(" lorem ipsum", (size-len(content))/12)
	}
	return fmt.Appendf(nil, `{"model":"mock","max_tokens":4,"stream":%t,"messages":[{"role":"user","content":%q}]}`, stream, content)
}

// split cuts b into n nearly equal chunks.
func split(b []byte, n int) [][]byte {
	out := make([][]byte, 0, n)
	size := (len(b) + n - 1) / n
	for len(b) > size {
		out = append(out, b[:size])
		b = b[size:]
	}
	return append(out, b)
}

// forward sends the request to the picked endpoint as Envoy would, over
// plain HTTP, the body as the picker let it through.
func forward(ctx context.Context, client *http.Client, ep, path string, body []byte) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ep+path, bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("content-type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

// cancelOnClose ends the request's context with its body.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
