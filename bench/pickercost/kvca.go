package pickercost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvca/kvca/epp"
)

// Process is a kvca serve subprocess with its listener and endpoint
// picker on loopback.
type Process struct {
	Target
	Args []string // as started, for the report
	cmd  *exec.Cmd
	done chan error
}

// serveArgs are the arguments kvca serve gets besides its addresses and
// backends: no admin listener, no active health checks and no engine
// metrics scraping, so that the only work kvca does during a phase is
// the requests'; warnings only, as a quiet production log. Everything
// else is kvca's default (policy kvca-cost, GOMAXPROCS the machine's).
func serveArgs() []string {
	return []string{"--admin-listen", "", "--health-interval", "0", "--engine-metrics=false", "--log-level", "warn"}
}

// StartKvca starts the kvca binary at path as `kvca serve` with both its
// listener and its endpoint picker on free loopback ports, the backends
// given and extra arguments after the bench's own (a later flag wins:
// `--admin-listen 127.0.0.1:6060 --pprof` to profile kvca during a run),
// and waits until both answer ready. The ports are
// found free then given to kvca, so another process may take one in
// between: a start that fails is tried again on other ports.
func StartKvca(ctx context.Context, path string, backends, extra []string, stderr io.Writer) (*Process, error) {
	var err error
	for range 3 {
		var p *Process
		if p, err = startKvca(ctx, path, backends, extra, stderr); err == nil {
			return p, nil
		}
	}
	return nil, err
}

func startKvca(ctx context.Context, path string, backends, extra []string, stderr io.Writer) (*Process, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	listen, extProc := ports[0], ports[1]
	args := []string{"serve", "--listen", listen, "--ext-proc", extProc}
	for _, b := range backends {
		args = append(args, "--backend", b)
	}
	args = append(args, serveArgs()...)
	args = append(args, extra...)
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	// KVCA_* variables of the operator's shell would change what is
	// measured (policy, block size…): kvca gets only its flags.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KVCA_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", path, err)
	}
	p := &Process{
		Target: Target{ProxyURL: "http://" + listen, ExtProcAddr: extProc, PID: cmd.Process.Pid},
		Args:   append([]string{path}, args...),
		cmd:    cmd, done: make(chan error, 1),
	}
	go func() { p.done <- cmd.Wait() }()
	if err := p.waitReady(ctx, 15*time.Second); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// waitReady polls the listener's /health and the picker's gRPC readiness
// until both answer, the process exits or wait has passed.
func (p *Process) waitReady(ctx context.Context, wait time.Duration) error {
	conn, err := grpc.NewClient(p.ExtProcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(wait)
	last := errors.New("not yet asked")
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err // Stop waits on it too
			return fmt.Errorf("kvca exited during start-up (%v)", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := client.Get(p.ProxyURL + "/health")
		if err != nil {
			last = err
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("/health answered %d", resp.StatusCode)
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		r, err := health.Check(hctx, &healthpb.HealthCheckRequest{Service: epp.ReadinessService})
		cancel()
		if err != nil {
			last = err
			continue
		}
		if r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		last = fmt.Errorf("picker readiness %s", r.GetStatus())
	}
	return fmt.Errorf("kvca not ready within %v: %w", wait, last)
}

// Stop ends kvca with SIGTERM as an orchestrator would, and kills it if
// it has not left within ten seconds.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// freePorts finds n free loopback ports by listening on port 0; all are
// held until every one is found, so that they differ.
func freePorts(n int) ([]string, error) {
	var out []string
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}
