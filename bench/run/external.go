package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/telemetry"
)

// engine is one inference server behind the proxy under test: a mock
// engine in this process, or an external one (Options.EngineCommand).
type engine interface {
	Name() string
	URL() string
	Stats() mock.Stats
	Close() error
}

type mockEngine struct{ *mock.Engine }

func (e mockEngine) Name() string { return e.Config().Name }

// Close is the mock's, which has no error to give.
func (e mockEngine) Close() error { e.Engine.Close(); return nil }

// EngineCommand placeholders, replaced in every argument.
const (
	PortPlaceholder = "{port}"
	NamePlaceholder = "{name}"
)

// externalEngine is an engine run as a child process from
// Options.EngineCommand: any server that answers the OpenAI API and
// exports vLLM's or SGLang's Prometheus names on /metrics (an independent
// vLLM simulator, or vLLM itself). What the bench knows of it is what its
// /metrics says.
type externalEngine struct {
	name, url string
	cmd       *exec.Cmd
	exited    chan struct{}
	waitErr   error
	out       *tail
	client    *http.Client

	mu       sync.Mutex
	last     mock.Stats
	lastAt   time.Time
	lastBusy bool
}

// startExternal starts argv (placeholders replaced) and waits until its
// readyPath answers 200.
func startExternal(argv []string, name, readyPath string, timeout time.Duration) (*externalEngine, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = strings.NewReplacer(PortPlaceholder, port, NamePlaceholder, name).Replace(a)
	}
	if len(args) == 0 || args[0] == "" {
		return nil, errors.New("empty engine command")
	}
	e := &externalEngine{
		name: name, url: "http://" + addr, cmd: exec.Command(args[0], args[1:]...),
		exited: make(chan struct{}), out: &tail{max: 4096},
		client: &http.Client{Timeout: 5 * time.Second},
	}
	e.cmd.Stdout, e.cmd.Stderr = e.out, e.out
	// Its own process group, so that a wrapper script's children stop
	// with it.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { e.waitErr = e.cmd.Wait(); close(e.exited) }()
	deadline := time.Now().Add(timeout)
	for {
		if resp, err := e.client.Get(e.url + readyPath); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return e, nil
			}
		}
		select {
		case <-e.exited:
			return nil, fmt.Errorf("engine %s exited before ready (%v): %s", name, e.waitErr, e.out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.Close()
			return nil, fmt.Errorf("engine %s not ready at %s%s within %s: %s", name, e.url, readyPath, timeout, e.out)
		}
	}
}

func (e *externalEngine) Name() string { return e.name }
func (e *externalEngine) URL() string  { return e.url }

// Stats reads the engine's /metrics. The prefix-cache counters are the
// engine's own; BusyTime adds up the time between two calls that found
// it running or queueing requests at the first, so it is only as fine as
// the sampling (Options.SampleEvery). A failed scrape returns what the
// last one said.
func (e *externalEngine) Stats() mock.Stats {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rd, err := e.scrape(ctx)
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.lastAt.IsZero() && e.lastBusy {
		e.last.BusyTime += now.Sub(e.lastAt)
	}
	e.lastAt = now
	if err != nil {
		return e.last
	}
	st := &e.last
	if rd.HasPrefix {
		st.QueryTokens, st.HitTokens = uint64(rd.PrefixQueries), uint64(rd.PrefixHits)
	}
	st.Running, st.Waiting = int(rd.Running), int(rd.Waiting)
	e.lastBusy = rd.Running+rd.Waiting > 0
	return *st
}

func (e *externalEngine) scrape(ctx context.Context) (telemetry.Reading, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/metrics", nil)
	if err != nil {
		return telemetry.Reading{}, err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return telemetry.Reading{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return telemetry.Reading{}, fmt.Errorf("%s/metrics: %s", e.url, resp.Status)
	}
	return telemetry.Parse(io.LimitReader(resp.Body, 8<<20))
}

// CapacityTokens is the KV-cache capacity the engine exports, 0 if none.
func (e *externalEngine) CapacityTokens() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rd, err := e.scrape(ctx)
	if err != nil || !rd.HasCapacity {
		return 0
	}
	return rd.CapacityTokens
}

// Close stops the engine's process group with SIGTERM, then SIGKILL after
// 10s.
func (e *externalEngine) Close() error {
	pid := e.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-e.exited
	}
	return nil
}

// tail keeps the last max bytes written to it, for the error message of
// an engine that fails to start.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strconv.Quote(string(t.b))
}
