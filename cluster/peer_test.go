package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/cluster/embednats"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/internal/testkit"
)

// indexOf is the local index of the backend with url on srv.
func indexOf(srv *edge.Server, url string) int {
	for _, b := range srv.Scheduler().Backends {
		if b.URL == url {
			return b.Index
		}
	}
	return -1
}

func holds(srv *edge.Server, h uint64, backend int) bool {
	tb := srv.Table()
	for _, l := range tb.Locations(h, tb.Now(), nil) {
		if l.Backend == backend {
			return true
		}
	}
	return false
}

func chatBody(user string) []byte {
	return []byte(`{"model":"mock","max_tokens":2,"messages":[{"role":"system","content":"` +
		strings.Repeat("You are a careful assistant. ", 40) + `"},{"role":"user","content":"` +
		strings.Repeat(user+" ", 200) + `"}]}`)
}

func TestJoinRefusesWithoutHashKey(t *testing.T) {
	t.Parallel()
	cfg := edge.DefaultConfig()
	cfg.Backends = []string{"http://127.0.0.1:1"}
	srv, err := edge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Join(srv, Options{URL: "nats://127.0.0.1:1"}); err != ErrNoHashKey {
		t.Fatalf("Join without a hash key: %v", err)
	}
}

// TestLocationsAndResetsPropagate: a replica learns what another learned,
// with its backends in another order; a reset drops what was learned
// before it everywhere, and a late duplicate of it spares what was
// learned since.
func TestLocationsAndResetsPropagate(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, 2, true)
	a, b := f.replicas[0].srv, f.replicas[1].srv
	url := f.engines[1].URL()
	ia, ib := indexOf(a, url), indexOf(b, url)
	if ia == ib {
		t.Fatal("test wants the replicas to list the backend at different indexes")
	}
	ctx := context.Background()
	old, err := a.Warm(ctx, ia, canon.Chat, mock.PathChat, chatBody("first"))
	if err != nil {
		t.Fatal(err)
	}
	last := old[len(old)-1]
	testkit.WaitUntil(t, "the peer to learn the location", func() bool { return holds(b, last, ib) })

	a.ResetBackend(ia)
	testkit.WaitUntil(t, "the reset to reach the peer", func() bool { return !holds(b, last, ib) })

	// Learned after the reset (by the peer itself this time), in a later
	// millisecond than the reset's.
	resetAt := f.replicas[1].node.floors[ib].Load()
	testkit.WaitUntil(t, "the clock to pass the reset's millisecond", func() bool { return time.Now().UnixMilli() > resetAt })
	fresh, err := b.Warm(ctx, ib, canon.Chat, mock.PathChat, chatBody("second"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitUntil(t, "the replica to learn the fresh location", func() bool { return holds(a, fresh[len(fresh)-1], ia) })

	// A late copy of the reset, as another replica's health check would
	// send it, must not drop the fresh location anywhere.
	nc, err := nats.Connect(f.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nb := f.replicas[1].node
	lateAt := nb.floors[ib].Load() - 1
	msg := appendReset(nil, header{fingerprint: nb.fp, sender: 12345}, backendKey(edge.EndpointID(url)), lateAt)
	if err := nc.Publish("kvca.default.reset", msg); err != nil {
		t.Fatal(err)
	}
	// A location from before the reset, delivered late, is refused too.
	lb := newLocBatch(1)
	lb.add(0, backendKey(edge.EndpointID(url)), lateAt-10, old)
	if err := nc.Publish("kvca.default.loc", lb.encode(nil, header{fingerprint: nb.fp, sender: 12345})); err != nil {
		t.Fatal(err)
	}
	// Messages from a replica with another hash key are ignored.
	if err := nc.Publish("kvca.default.loc", lb.encode(nil, header{fingerprint: nb.fp + 1, sender: 12345})); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*replica{f.replicas[0], f.replicas[1]} {
		testkit.WaitUntil(t, "the crafted messages to be seen", func() bool {
			m := r.node.m
			return m.dropped[dropStale].Get() >= 2 && m.dropped[dropMismatch].Get() >= 1
		})
	}
	if !holds(a, fresh[len(fresh)-1], ia) || !holds(b, fresh[len(fresh)-1], ib) {
		t.Fatal("a late reset dropped a location learned after it")
	}
	if holds(a, last, ia) || holds(b, last, ib) {
		t.Fatal("a late pre-reset location was applied")
	}
}

// TestLoadIsShared: in-flight requests on one replica weigh in the
// other's selection, per backend whatever the order, and vanish when the
// replica goes silent.
func TestLoadIsShared(t *testing.T) {
	t.Parallel()
	engines := []*mock.Engine{}
	for i := range 2 {
		engines = append(engines, testkit.Start(t, mock.New(mock.Config{Name: fmt.Sprint("slow", i), DecodePerToken: 5 * time.Millisecond})))
	}
	f := &fleet{t: t, engines: engines}
	url, stop, err := embednats.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	f.natsURL = url
	for i := range 2 {
		f.replicas = append(f.replicas, f.startReplica(i, url, Options{LoadInterval: 50 * time.Millisecond}))
	}
	f.waitPeers(1)
	a, b := f.replicas[0], f.replicas[1]

	// 6 long requests through a (400 output tokens × 5 ms = 2 s each).
	const k = 6
	var wg sync.WaitGroup
	errs := make(chan error, k)
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := strings.Replace(string(chatBody(fmt.Sprint("long ", i))), `"max_tokens":2`, `"max_tokens":400`, 1)
			resp, err := http.Post("http://"+a.srv.Addr()+mock.PathChat, "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("request %d: status %d, %v", i, resp.StatusCode, err)
			}
		}()
	}
	testkit.WaitUntil(t, "b to see a's in-flight requests per backend", func() bool {
		total := 0
		for _, bb := range b.srv.Scheduler().Backends {
			act, _ := bb.RemoteLoad()
			ba := a.srv.Scheduler().Backends[indexOf(a.srv, bb.URL)]
			if int64(act) != ba.Active() {
				return false
			}
			total += int(act)
		}
		return total == k
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	testkit.WaitUntil(t, "remote load to drop when a's requests end", func() bool {
		for _, bb := range b.srv.Scheduler().Backends {
			if act, pf := bb.RemoteLoad(); act+pf != 0 {
				return false
			}
		}
		return true
	})
	// a goes silent without leaving (its node closed: no more load
	// messages): b ages it out.
	a.stop()
	testkit.WaitUntil(t, "b to age out the silent replica", func() bool { return b.node.LivePeers() == 0 })
}

// TestKillReplicaAndNATS: requests keep succeeding when a replica is taken
// out of rotation and drained, and while the NATS server is down; the
// survivors age the dead replica out, everyone reconnects to NATS by
// itself when it returns, and then shares locations and load again.
func TestKillReplicaAndNATS(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, 3, true)
	lb := f.balancer()
	t.Cleanup(lb.release) // never leave the workload held
	w := chatWorkload(2, 80)
	total := len(w.Requests)
	hostport := strings.TrimPrefix(f.natsURL, "nats://")

	type result struct {
		sent     int64
		failures []string
	}
	ran := make(chan result, 1)
	go func() {
		sent, failures := run(t, w, lb)
		ran <- result{sent, failures}
	}()

	// A quarter in, replica 2 leaves: out of rotation first, then drained
	// once every request the balancer sent it has been admitted (a request
	// still connecting would be refused, which no real balancer would do
	// to a replica it has just taken out).
	testkit.WaitUntil(t, "a quarter of the workload", func() bool { c, _ := lb.progress(); return c >= total/4 })
	dead := f.replicas[2]
	lb.remove(dead.srv.Addr())
	testkit.WaitUntil(t, "replica 2 to have admitted what it was sent", func() bool {
		var active int64
		for _, b := range dead.srv.Scheduler().Backends {
			active += b.Active()
		}
		return int64(lb.inFlight(dead.srv.Addr())) == active
	})
	dead.stop()

	// Half way, NATS goes away; the workload waits until both survivors
	// know, then an eighth of it runs without NATS before it returns at the
	// same address.
	lb.holdFrom(total / 2)
	testkit.WaitUntil(t, "half of the workload", func() bool { _, held := lb.progress(); return held })
	f.stopNATS()
	for i, r := range f.replicas[:2] {
		testkit.WaitUntil(t, fmt.Sprintf("replica %d to notice NATS is gone", i), func() bool { return !r.node.Connected() })
	}
	down, _ := lb.progress()
	lb.release()
	testkit.WaitUntil(t, "an eighth of the workload without NATS", func() bool { c, _ := lb.progress(); return c >= down+total/8 })
	receivedBefore := f.replicas[0].node.Stats().Received
	_, restartStop, err := embednats.Start(hostport)
	if err != nil {
		t.Fatalf("restart NATS: %v", err)
	}
	t.Cleanup(restartStop)

	res := <-ran
	if len(res.failures) > 0 {
		t.Fatalf("%d of %d requests failed, first: %s", len(res.failures), res.sent, res.failures[0])
	}
	if res.sent != int64(total) {
		t.Fatalf("%d requests sent, want the workload's %d", res.sent, total)
	}
	hit, reqs := f.hits()
	t.Logf("%d requests, none failed; hit rate %.3f, requests per engine %v", res.sent, hit, reqs)

	f.replicas = f.replicas[:2]
	for i, r := range f.replicas {
		testkit.WaitUntil(t, fmt.Sprintf("replica %d to reconnect to NATS", i), func() bool { return r.node.Connected() })
		testkit.WaitUntil(t, fmt.Sprintf("replica %d to hear exactly its one live peer", i), func() bool { return r.node.LivePeers() == 1 })
	}
	testkit.WaitUntil(t, "messages after the restart", func() bool { return f.replicas[0].node.Stats().Received > receivedBefore })
	// Locations learned after the restart reach the peer.
	a, b := f.replicas[0].srv, f.replicas[1].srv
	url := f.engines[0].URL()
	ch, err := a.Warm(context.Background(), indexOf(a, url), canon.Chat, mock.PathChat, chatBody("after the restart"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitUntil(t, "the peer to learn a location after the restart", func() bool {
		for _, h := range ch {
			if !holds(b, h, indexOf(b, url)) {
				return false
			}
		}
		return true
	})
	// Nothing is in flight anywhere: no replica may still count load of
	// another (the dead one's included).
	testkit.WaitUntil(t, "remote load to be zero everywhere", func() bool {
		for _, r := range f.replicas {
			for _, bk := range r.srv.Scheduler().Backends {
				if act, pf := bk.RemoteLoad(); act != 0 || pf != 0 {
					return false
				}
			}
		}
		return true
	})
}
