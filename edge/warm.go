package edge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/sched"
)

// Chain computes the block chain of a request body with the server's key,
// block size and exclusions: what the table would hold for it.
func (s *Server) Chain(api canon.API, body []byte) ([]uint64, canon.Info, error) {
	c := s.getCall()
	defer s.putCall(c)
	if err := s.plan(c, api, body); err != nil {
		return nil, canon.Info{}, err
	}
	info := c.info
	info.Model = append([]byte(nil), c.info.Model...)
	return append([]uint64(nil), c.req.Chain...), info, nil
}

// ErrWarmFailed is returned when a backend did not accept a warm-up.
var ErrWarmFailed = errors.New("backend did not accept the warm-up request")

// Warm sends body to backend i outside client traffic (a prefetch), with
// its load reserved like any request, and on a 2xx answer learns the chain
// as held there. The caller shapes body (for example max_tokens 1). It
// returns the chain learned.
func (s *Server) Warm(ctx context.Context, i int, api canon.API, path string, body []byte) ([]uint64, error) {
	fl := s.fleet()
	if i < 0 || i >= len(fl.ups) || fl.ups[i].b.Retired() {
		return nil, fmt.Errorf("no backend %d", i)
	}
	chain, _, err := s.Chain(api, body)
	if err != nil {
		return nil, err
	}
	u := fl.ups[i]
	if !u.b.Healthy() {
		return nil, ErrWarmFailed
	}
	var res sched.Reservation
	if !fl.sched.ReserveOn(u.b, len(chain), &res) {
		return nil, ErrWarmFailed
	}
	defer res.ReleaseActive()
	timeout := s.cfg.UpstreamHeaderTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, u.addr.url+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	now := s.table.Now()
	resp, err := u.hc.Do(req)
	res.ReleasePrefill()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrWarmFailed, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if sc := resp.StatusCode; sc < 200 || sc > 299 {
		return nil, fmt.Errorf("%w: status %d", ErrWarmFailed, sc)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	s.learned(chain, i, now)
	return chain, nil
}
