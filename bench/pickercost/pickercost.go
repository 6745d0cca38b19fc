// Package pickercost measures what kvca costs as an inference gateway's
// endpoint picker against what it costs as the proxy, in one run of one
// kvca process: the same chat requests sent through its listener (proxy
// mode), through its ext_proc server with the bench playing Envoy
// (picker mode), and straight to the mock engines (direct, the latency
// baseline). It reports kvca's CPU time per request, read from /proc,
// and the latencies each mode adds (docs/endpoint-picker.md, "Cost of
// the picker").
package pickercost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvca/kvca/bench/mock"
)

// The modes, in the order each size runs them.
const (
	Direct = "direct"
	Proxy  = "proxy"
	Picker = "picker"
)

var allModes = []string{Direct, Proxy, Picker}

// selectModes is the modes asked for, in their run order; all of them
// when none is.
func selectModes(asked []string) ([]string, error) {
	if len(asked) == 0 {
		return allModes, nil
	}
	for _, m := range asked {
		if !slices.Contains(allModes, m) {
			return nil, fmt.Errorf("pickercost: mode %q: want %s", m, strings.Join(allModes, ", "))
		}
	}
	var out []string
	for _, m := range allModes {
		if slices.Contains(asked, m) {
			out = append(out, m)
		}
	}
	return out, nil
}

// Target is a running kvca: its listener, its ext_proc server and the
// process whose CPU time is read.
type Target struct {
	ProxyURL    string // e.g. http://127.0.0.1:8080
	ExtProcAddr string // host:port
	PID         int
}

// Config is one measurement's settings. Zero values take the defaults
// noted.
type Config struct {
	// Sizes are the nominal request body sizes in bytes (mean of a
	// conversation's turns). Default 1 KiB, 128 KiB, 512 KiB.
	Sizes []int
	// Requests per mode and size; 0: RequestsFor(size).
	Requests int
	// Concurrency is the requests in flight at once. Default 8.
	Concurrency int
	// Timeout bounds one request. Default 30s.
	Timeout time.Duration
	// Modes are the modes to run, each in the order of the modes
	// (direct, proxy, picker). Default all three: a run of one mode
	// serves to profile kvca in it, not to compare.
	Modes []string
	// Progress receives a line per phase; nil: none.
	Progress io.Writer
}

// Row is one size and mode's figures.
type Row struct {
	Size     int
	Mode     string
	Requests int
	MeanBody int // bytes
	// CPU is kvca's CPU time over the phase per request. In direct mode
	// kvca has nothing to do: its figure there is the floor, what kvca
	// spends idle, and shows whether anything else ran in it.
	CPU      time.Duration
	P50, P99 time.Duration
	Added    time.Duration // P50 less direct's (0 when direct did not run)
	PickP50  time.Duration // picker mode only
}

// RequestsFor is the default number of requests per mode for a body
// size: 4000 for small bodies, fewer as they grow so that each mode
// sends about 128 MiB, and never fewer than 200 so that a mode spans
// enough 10 ms ticks of /proc's CPU time to be read. The default sizes
// take about a minute on two shared cores.
func RequestsFor(size int) int {
	return min(4000, max(200, (128<<20)/max(size, 1)))
}

// Engines starts n mock engines on loopback for kvca's backends. They
// answer at once (simulated time runs 10,000 times faster than an
// engine's) with a few tokens, but keep their prefix caches and report
// cached tokens, so kvca's learning reads real answers.
func Engines(n int) ([]*mock.Engine, error) {
	var out []*mock.Engine
	for i := range n {
		e := mock.New(mock.Config{Name: fmt.Sprintf("pickercost-%d", i), TimeScale: 1e-4, DefaultMaxTokens: 8})
		if err := e.Start("127.0.0.1:0"); err != nil {
			for _, s := range out {
				s.Close()
			}
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Run measures every size in every mode against the kvca at t, whose
// backends are the engines. Any failed request fails the run: a figure
// over requests that did not complete would mean nothing.
func Run(ctx context.Context, cfg Config, t Target, engines []*mock.Engine) ([]Row, error) {
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = []int{1 << 10, 128 << 10, 512 << 10}
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	modes, err := selectModes(cfg.Modes)
	if err != nil {
		return nil, err
	}
	if len(engines) == 0 {
		return nil, errors.New("pickercost: no engines")
	}
	known := map[string]bool{}
	var addrs []string
	for _, e := range engines {
		known[e.Addr()] = true
		addrs = append(addrs, e.Addr())
	}
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency * 2, MaxIdleConns: cfg.Concurrency * 8}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: cfg.Timeout}
	// Envoy keeps one HTTP/2 connection to its processor and multiplexes
	// the streams over it: so does the bench. Its HTTP/2 windows are
	// Envoy's defaults, static (256 MiB for a stream and the connection):
	// gRPC's own client would start at 64 KiB and grow them by PINGs
	// measuring the link, which Envoy never sends and the picker would
	// answer, about two for every three requests at 1 KB.
	conn, err := grpc.NewClient(t.ExtProcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
		grpc.WithInitialWindowSize(envoyWindow), grpc.WithInitialConnWindowSize(envoyWindow))
	if err != nil {
		return nil, fmt.Errorf("pickercost: %w", err)
	}
	defer conn.Close()
	env := &envoy{conn: conn, http: client, known: known}
	c := newCorpus(4 << 20)

	var rows []Row
	for si, size := range cfg.Sizes {
		n := cfg.Requests
		if n <= 0 {
			n = RequestsFor(size)
		}
		send := func(mode string) sendFunc {
			return func(ctx context.Context, id string, conv int, body []byte) (total, pick time.Duration, err error) {
				switch mode {
				case Direct:
					// A conversation stays on one engine, as a perfect router
					// would keep it: the engines then see what they would.
					total, err = post(ctx, client, "http://"+addrs[conv%len(addrs)]+chatPath, body)
				case Proxy:
					total, err = post(ctx, client, t.ProxyURL+chatPath, body)
				default:
					pick, total, err = env.exchange(ctx, id, body)
				}
				return total, pick, err
			}
		}
		// A warm-up of each mode's own requests opens the connections and
		// fills the pools before anything is counted.
		for _, mode := range modes {
			warm := phaseBodies(c, size, min(4*cfg.Concurrency, n), phaseSeed(si, slices.Index(allModes, mode), 2))
			if _, err := runPhase(ctx, cfg, warm, send(mode), 0); err != nil {
				return rows, fmt.Errorf("pickercost: %s %s warm-up: %w", mode, SizeName(size), err)
			}
		}
		// Each mode runs in two halves, the modes in order then in the
		// reverse order (direct, proxy, picker, picker, proxy, direct):
		// a machine whose other load rises or falls during the run then
		// weighs on every mode alike, not on the last.
		got := make([]phaseResult, len(modes))
		bodyBytes := make([]int, len(modes))
		for round := range 2 {
			for k := range modes {
				mi := k
				if round == 1 {
					mi = len(modes) - 1 - k
				}
				half := n / 2
				if round == 1 {
					half = n - n/2
				}
				bodies := phaseBodies(c, size, half, phaseSeed(si, slices.Index(allModes, modes[mi]), round))
				r, err := runPhase(ctx, cfg, bodies, send(modes[mi]), t.PID)
				if err != nil {
					return rows, fmt.Errorf("pickercost: %s %s: %w", modes[mi], SizeName(size), err)
				}
				got[mi].add(r)
				for _, b := range flatten(bodies) {
					bodyBytes[mi] += len(b)
				}
			}
		}
		direct := time.Duration(-1)
		for mi, mode := range modes {
			g := got[mi]
			r := Row{
				Size: size, Mode: mode, Requests: len(g.lat), MeanBody: bodyBytes[mi] / max(len(g.lat), 1),
				CPU: g.cpu / time.Duration(max(len(g.lat), 1)),
				P50: percentile(g.lat, 50), P99: percentile(g.lat, 99), PickP50: percentile(g.picks, 50),
			}
			if mode == Direct {
				direct = r.P50
			}
			if direct >= 0 {
				r.Added = r.P50 - direct
			}
			fmt.Fprintf(cfg.Progress, "pickercost: %s %s, %d requests of %d B on average: p50 %v, kvca CPU %v/request\n",
				SizeName(size), mode, r.Requests, r.MeanBody, r.P50.Round(time.Microsecond), r.CPU.Round(time.Microsecond))
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// phaseSeed keeps the conversations of each size, mode and round (2:
// the warm-up) apart from every other's, so that no phase finds another's
// prefixes in kvca's tables and memo.
func phaseSeed(size, mode, round int) uint64 {
	return uint64(size*100 + mode*10 + round)
}

// phaseResult is what one or more phases of a mode measured.
type phaseResult struct {
	lat, picks []time.Duration
	cpu        time.Duration // kvca's, over the phases
}

func (p *phaseResult) add(q phaseResult) {
	p.lat = append(p.lat, q.lat...)
	p.picks = append(p.picks, q.picks...)
	p.cpu += q.cpu
}

// phaseBodies are n requests' bodies as conversations of turns requests,
// odd conversations streamed. phase keeps them apart from every other
// phase's.
func phaseBodies(c *corpus, size, n int, phase uint64) [][][]byte {
	var convs [][][]byte
	for total, id := 0, 0; total < n; id++ {
		b := c.conversation(size, phase, uint64(id), id%2 == 1)
		if total+len(b) > n {
			b = b[:n-total]
		}
		convs = append(convs, b)
		total += len(b)
	}
	return convs
}

func flatten(convs [][][]byte) [][]byte {
	var out [][]byte
	for _, c := range convs {
		out = append(out, c...)
	}
	return out
}

// sendFunc sends one request in a mode: its latency end to end and, in
// picker mode, to the pick.
type sendFunc func(ctx context.Context, id string, conv int, body []byte) (total, pick time.Duration, err error)

// runPhase sends every conversation's turns in order, Concurrency
// conversations at once, and returns the latencies and, when pid is not
// 0, the process's CPU time over the phase.
func runPhase(ctx context.Context, cfg Config, convs [][][]byte, send sendFunc, pid int) (phaseResult, error) {
	var cpu0 time.Duration
	if pid != 0 {
		var err error
		if cpu0, err = settle(ctx, pid); err != nil {
			return phaseResult{}, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		picks    []time.Duration
		firstErr error
	)
	var wg sync.WaitGroup
	for range min(cfg.Concurrency, len(convs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(convs) || ctx.Err() != nil {
					return
				}
				for turn, body := range convs[i] {
					rctx, rcancel := context.WithTimeout(ctx, cfg.Timeout)
					d, pick, err := send(rctx, "pickercost-"+strconv.Itoa(i)+"-"+strconv.Itoa(turn), i, body)
					rcancel()
					mu.Lock()
					if err != nil {
						if firstErr == nil {
							firstErr = fmt.Errorf("conversation %d turn %d: %w", i, turn, err)
						}
						mu.Unlock()
						cancel()
						return
					}
					lat = append(lat, d)
					if pick != 0 {
						picks = append(picks, pick)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return phaseResult{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return phaseResult{}, err
	}
	r := phaseResult{lat: lat, picks: picks}
	if pid != 0 {
		cpu1, err := settle(ctx, pid)
		if err != nil {
			return phaseResult{}, err
		}
		r.cpu = cpu1 - cpu0
	}
	return r, nil
}

// settle waits until the process's CPU time stops growing and returns
// it. After a phase kvca still works a moment (streams ending on its side
// after the bench saw them, the collection of the phase's garbage): that
// work is the phase's, and must not land in the next one. Bounded: on a
// process that never idles it gives up after two seconds.
func settle(ctx context.Context, pid int) (time.Duration, error) {
	last, err := processCPU(pid)
	if err != nil {
		return 0, err
	}
	for range 20 {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		now, err := processCPU(pid)
		if err != nil || now == last {
			return now, err
		}
		last = now
	}
	return last, nil
}

// post sends body and reads the whole answer, which must be a 200.
func post(ctx context.Context, client *http.Client, url string, body []byte) (time.Duration, error) {
	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("content-type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s answered %d: %.200s", url, resp.StatusCode, b)
	}
	return time.Since(t0), nil
}

// percentile is the nearest-rank p-th percentile of d (0 when empty).
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	k := (len(s)*p + 99) / 100 // ceil(n·p/100), the nearest rank
	return s[max(k, 1)-1]
}

// Table writes the rows as a Markdown table.
func Table(w io.Writer, rows []Row) error {
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64)
	}
	if _, err := fmt.Fprintln(w, "| size | mode | requests | kvca CPU µs/req | p50 ms | p99 ms | added p50 ms | pick p50 ms |\n|---|---|---:|---:|---:|---:|---:|---:|"); err != nil {
		return err
	}
	direct := map[int]bool{}
	for _, r := range rows {
		direct[r.Size] = direct[r.Size] || r.Mode == Direct
	}
	for _, r := range rows {
		cpu := strconv.FormatFloat(float64(r.CPU)/float64(time.Microsecond), 'f', 0, 64)
		added, pick := "–", "–"
		if r.Mode != Direct && direct[r.Size] {
			added = ms(r.Added)
		}
		if r.Mode == Picker {
			pick = ms(r.PickP50)
		}
		if _, err := fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %s |\n",
			SizeName(r.Size), r.Mode, r.Requests, cpu, ms(r.P50), ms(r.P99), added, pick); err != nil {
			return err
		}
	}
	return nil
}

// SizeName spells a size as the flag takes it: 1KB, 128KB, 2MB, 300B.
func SizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KB"
	}
	return strconv.Itoa(n) + "B"
}

// ParseSizes reads a comma-separated list of sizes: a number with an
// optional unit B, KB or MB (powers of 1024), e.g. "1KB,128KB,512KB".
func ParseSizes(s string) ([]int, error) {
	var out []int
	for orig := range strings.SplitSeq(s, ",") {
		f := strings.ToUpper(strings.TrimSpace(orig))
		if f == "" {
			continue
		}
		unit := 1
		switch {
		case strings.HasSuffix(f, "MB"):
			unit, f = 1<<20, strings.TrimSuffix(f, "MB")
		case strings.HasSuffix(f, "KB"):
			unit, f = 1<<10, strings.TrimSuffix(f, "KB")
		case strings.HasSuffix(f, "B"):
			f = strings.TrimSuffix(f, "B")
		}
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("size %q: want a positive number of B, KB or MB", orig)
		}
		// Below 512 B a body has no room for its conversation; above 2 MB
		// the last turns outgrow the text bodies are cut from.
		if n*unit < 512 || n*unit > 2<<20 {
			return nil, fmt.Errorf("size %s: want 512B to 2MB", SizeName(n*unit))
		}
		out = append(out, n*unit)
	}
	if len(out) == 0 {
		return nil, errors.New("no sizes")
	}
	return out, nil
}
