package main

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/epp"
)

func extProcFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "ext-proc", Usage: "also serve as an inference gateway's endpoint picker: an Envoy ext_proc gRPC listener at `ADDR` (docs/endpoint-picker.md); kvca's own listener stays", EnvVars: env("ext-proc")},
	}
}

// startExtProc serves the endpoint picker on --ext-proc, if set; stop
// ends it (streams in flight end with their requests released).
func startExtProc(c *cli.Context, srv *edge.Server, log *slog.Logger) (stop func(), err error) {
	addr := c.String("ext-proc")
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, cli.Exit("kvca: --ext-proc: "+err.Error(), 1)
	}
	ps := epp.New(pickerProxy{srv.Picker()}, epp.Config{})
	srv.AddMetrics(ps.WritePrometheus)
	go func() {
		if err := ps.Serve(ln); err != nil {
			log.Error("endpoint picker stopped", "err", err)
		}
	}()
	log.Info("endpoint picker listening", "addr", ln.Addr().String())
	return func() {
		// Streams a gateway keeps open would hold a graceful stop for
		// ever: they get a moment to end, then are cut (each releases
		// its request once).
		done := make(chan struct{})
		go func() { ps.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(pickerStopWait):
			ps.Stop()
		}
	}, nil
}

// pickerStopWait bounds a graceful stop of the endpoint picker.
const pickerStopWait = 5 * time.Second

// pickerProxy is the edge's request lifecycle as the endpoint picker
// sees it.
type pickerProxy struct{ p *edge.Picker }

func (x pickerProxy) Begin(h epp.Headers) epp.Exchange { return pickerExchange{x.p.Begin(h)} }
func (x pickerProxy) Endpoints() []string              { return x.p.Endpoints() }
func (x pickerProxy) SetEndpoints(eps []string) error  { return x.p.SetEndpoints(eps) }
func (x pickerProxy) Ready() bool                      { return x.p.Ready() }

type pickerExchange struct{ x *edge.PickExchange }

func (e pickerExchange) Body(chunk []byte, end bool) *epp.Answer {
	return answer(e.x.Body(chunk, end))
}

func (e pickerExchange) Pick(ctx context.Context, subset []string) ([]string, *epp.Answer) {
	eps, a := e.x.Pick(ctx, subset)
	return eps, answer(a)
}

func (e pickerExchange) PickNow(subset []string) ([]string, *epp.Answer, bool) {
	eps, a, wait := e.x.PickNow(subset)
	return eps, answer(a), wait
}

func (e pickerExchange) Response(status int, served string, h epp.Headers) [][2]string {
	return e.x.Response(status, served, h)
}

func (e pickerExchange) RequestHeaders() [][2]string         { return e.x.RequestHeaders() }
func (e pickerExchange) ResponseBody(chunk []byte, end bool) { e.x.ResponseBody(chunk, end) }
func (e pickerExchange) End(cancelled bool)                  { e.x.End(cancelled) }

func answer(a *edge.PickAnswer) *epp.Answer {
	if a == nil {
		return nil
	}
	return &epp.Answer{Status: a.Status, Header: a.Header, Body: a.Body}
}
