package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/bench/workload"
	"github.com/kvca/kvca/cluster/embednats"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/internal/testkit"
)

const testKey = "000102030405060708090a0b0c0d0e0f"

// fleet is engines behind replicas, optionally clustered over NATS.
type fleet struct {
	t        *testing.T
	engines  []*mock.Engine
	replicas []*replica
	natsURL  string
	natsStop func()
	natsOnce sync.Once
}

func (f *fleet) stopNATS() { f.natsOnce.Do(f.natsStop) }

type replica struct {
	t    testing.TB
	srv  *edge.Server
	node *Node // nil when not clustered
	down atomic.Bool
}

func startEngines(t *testing.T, n int) []*mock.Engine {
	t.Helper()
	var es []*mock.Engine
	for i := range n {
		es = append(es, testkit.Start(t, mock.New(mock.Config{
			Name:            fmt.Sprintf("e%d", i),
			PrefillPerToken: 20 * time.Microsecond,
			DecodePerToken:  2 * time.Millisecond,
		})))
	}
	return es
}

// startReplica builds a replica; each lists the backends rotated by its
// index, so that only endpoint ids can make their tables agree.
func (f *fleet) startReplica(i int, natsURL string, opt Options) *replica {
	f.t.Helper()
	var urls []string
	for k := range f.engines {
		urls = append(urls, f.engines[(k+i)%len(f.engines)].URL())
	}
	cfg := edge.DefaultConfig()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Backends, cfg.Table.HashKey, cfg.HealthInterval = urls, testKey, time.Hour
	srv, err := edge.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	r := &replica{t: f.t, srv: srv}
	if natsURL != "" {
		opt.URL = natsURL
		if r.node, err = Join(srv, opt); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := srv.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { r.stop() })
	return r
}

func (r *replica) stop() {
	if r.down.Swap(true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil {
		r.t.Errorf("replica shutdown: %v", err)
	}
	if r.node != nil {
		r.node.Close()
	}
}

func newFleet(t *testing.T, engines, replicas int, clustered bool) *fleet {
	t.Helper()
	f := &fleet{t: t, engines: startEngines(t, engines)}
	if clustered {
		url, stop, err := embednats.Start("")
		if err != nil {
			t.Fatal(err)
		}
		f.natsStop = stop
		t.Cleanup(f.stopNATS)
		f.natsURL = url
	}
	for i := range replicas {
		f.replicas = append(f.replicas, f.startReplica(i, f.natsURL, Options{}))
	}
	if clustered {
		f.waitPeers(replicas - 1)
	}
	return f
}

// waitPeers waits until every live replica hears from want others.
func (f *fleet) waitPeers(want int) {
	f.t.Helper()
	for i, r := range f.replicas {
		testkit.WaitUntil(f.t, fmt.Sprintf("replica %d to hear %d peers", i, want), func() bool {
			return r.down.Load() || r.node.LivePeers() >= want
		})
	}
}

// hits sums the engines' prefix-cache hits.
func (f *fleet) hits() (rate float64, perEngine []uint64) {
	var h, q uint64
	for _, e := range f.engines {
		st := e.Stats()
		h += st.HitTokens
		q += st.QueryTokens
		perEngine = append(perEngine, st.Requests)
	}
	return float64(h) / float64(q), perEngine
}

// imbalance is max/mean of requests per engine.
func imbalance(reqs []uint64) float64 {
	var sum, mx uint64
	for _, r := range reqs {
		sum += r
		mx = max(mx, r)
	}
	return float64(mx) * float64(len(reqs)) / float64(sum)
}

// balancer spreads requests over the live replicas round-robin, request
// by request, as an L4 balancer with short connections would: the worst
// case for a router that learns only locally. It counts what it handed out
// and what came back, and can hold new requests once a number of them
// completed, so a test can change the fleet at a known point of the
// workload instead of at a guessed time.
type balancer struct {
	mu        sync.Mutex
	changed   *sync.Cond // completed moved, or the hold was lifted
	addrs     []string
	next      int
	inflight  map[string]int
	completed int
	holdAt    int // picks wait once completed reaches it; 0: never
}

func (f *fleet) balancer() *balancer {
	b := &balancer{inflight: map[string]int{}}
	b.changed = sync.NewCond(&b.mu)
	for _, r := range f.replicas {
		b.addrs = append(b.addrs, r.srv.Addr())
	}
	return b
}

func (b *balancer) pick() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.holdAt > 0 && b.completed >= b.holdAt {
		b.changed.Wait()
	}
	a := b.addrs[b.next%len(b.addrs)]
	b.next++
	b.inflight[a]++
	return a
}

// done records that a request to addr is over, answered or not.
func (b *balancer) done(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inflight[addr]--
	b.completed++
	b.changed.Broadcast()
}

// holdFrom makes picks wait from the n-th completed request on, until
// release.
func (b *balancer) holdFrom(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holdAt = n
}

func (b *balancer) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holdAt = 0
	b.changed.Broadcast()
}

func (b *balancer) progress() (completed int, held bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.completed, b.holdAt > 0 && b.completed >= b.holdAt
}

func (b *balancer) inFlight(addr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight[addr]
}

// remove takes a replica out of rotation, as a balancer's health check
// would before the replica drains.
func (b *balancer) remove(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, a := range b.addrs {
		if a == addr {
			b.addrs = append(b.addrs[:i], b.addrs[i+1:]...)
			return
		}
	}
}

// chatWorkload is multi-turn chat with shared system prompts: each turn
// re-sends the history, the previous answer and a new user message (and
// some turns a tool call and its result).
func chatWorkload(seed uint64, sessions int) *workload.Workload {
	return workload.Synthetic{
		Seed: seed, Sessions: sessions, Rate: 25, MinTurns: 3, MaxTurns: 8,
		ThinkTime: 150 * time.Millisecond, SystemPrompts: 4, SystemPromptTokens: 256,
		UserTokens: 96, OutputTokens: 48, ToolRate: 0.2,
	}.Generate()
}

// run replays w: each session's requests in order, each sent at its time
// or when the previous answer is complete, whichever is later. It returns
// the failures (anything but a complete 200).
func run(t testing.TB, w *workload.Workload, lb *balancer) (sent int64, failures []string) {
	t.Helper()
	sessions := map[int][]workload.Request{}
	for _, r := range w.Requests {
		sessions[r.Session] = append(sessions[r.Session], r)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var n atomic.Int64
	start := time.Now()
	for _, reqs := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, r := range reqs {
				if d := time.Until(start.Add(r.At)); d > 0 {
					time.Sleep(d)
				}
				n.Add(1)
				addr := lb.pick()
				err := send(client, addr, r)
				lb.done(addr)
				if err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return n.Load(), failures
}

func send(c *http.Client, addr string, r workload.Request) error {
	resp, err := c.Post("http://"+addr+r.Path, "application/json", bytes.NewReader(r.Body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: reading: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d: %.200s", addr, resp.StatusCode, body)
	}
	if r.Stream && !bytes.Contains(body, []byte("data: [DONE]")) {
		return fmt.Errorf("%s: stream ended early: %.200s", addr, body)
	}
	return nil
}
