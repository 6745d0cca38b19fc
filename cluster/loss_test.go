package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/cluster/embednats"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/internal/testkit"
)

// lossFleet is two replicas on one NATS server: b connects to it directly,
// a through a proxy that can cut a alone off, so that what a publishes
// while NATS is gone for it reaches a b that never stopped listening.
type lossFleet struct {
	*fleet
	proxy *testkit.Proxy
	a, b  *replica
}

func newLossFleet(t *testing.T, aOpt Options) *lossFleet {
	t.Helper()
	f := &fleet{t: t, engines: startEngines(t, 2)}
	url, stop, err := embednats.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	f.natsURL = url
	p := testkit.StartProxy(t, strings.TrimPrefix(url, "nats://"))
	// Short load intervals: slow-consumer drops are read on each tick.
	aOpt.LoadInterval = 20 * time.Millisecond
	a := f.startReplica(0, "nats://"+p.Addr(), aOpt)
	b := f.startReplica(1, url, Options{LoadInterval: 20 * time.Millisecond})
	f.replicas = []*replica{a, b}
	f.waitPeers(1)
	return &lossFleet{fleet: f, proxy: p, a: a, b: b}
}

// warmOn learns a chain on engine e through a and waits for b to hold all
// of it; it returns the chain.
func (lf *lossFleet) warmOn(t *testing.T, e int, user string) []uint64 {
	t.Helper()
	url := lf.engines[e].URL()
	ch, err := lf.a.srv.Warm(context.Background(), indexOf(lf.a.srv, url), canon.Chat, mock.PathChat, chatBody(user))
	if err != nil {
		t.Fatal(err)
	}
	ib := indexOf(lf.b.srv, url)
	testkit.WaitUntil(t, "b to learn every block a warmed", func() bool { return heldCount(lf.b.srv, ch, ib) == len(ch) })
	return ch
}

// cutA takes NATS away from a only, and waits until a knows it.
func (lf *lossFleet) cutA(t *testing.T) {
	t.Helper()
	lf.proxy.Cut()
	testkit.WaitUntil(t, "a to notice NATS is gone", func() bool { return !lf.a.node.Connected() })
}

func heldCount(srv *edge.Server, ch []uint64, backend int) int {
	n := 0
	for _, h := range ch {
		if holds(srv, h, backend) {
			n++
		}
	}
	return n
}

// TestResetSentWhileNATSIsDown: a reset published while the connection is
// down waits in the reconnect buffer and reaches the peer after it
// returns, dropping exactly the locations it covers.
func TestResetSentWhileNATSIsDown(t *testing.T) {
	t.Parallel()
	lf := newLossFleet(t, Options{})
	a, b := lf.a, lf.b
	x, y := lf.engines[0].URL(), lf.engines[1].URL()
	cx := lf.warmOn(t, 0, "on x")
	cy := lf.warmOn(t, 1, "on y")

	lf.cutA(t)
	a.srv.ResetBackend(indexOf(a.srv, x))
	testkit.WaitUntil(t, "a to publish the reset into its reconnect buffer", func() bool { return a.node.m.sent[kindReset].Get() == 1 })
	if d := a.node.m.dropped[dropPublish].Get(); d != 0 {
		t.Fatalf("%d publications dropped with the reconnect buffer nearly empty", d)
	}
	if got := heldCount(a.srv, cx, indexOf(a.srv, x)); got != 0 {
		t.Fatalf("a still holds %d blocks of the backend it reset", got)
	}
	// b cannot have heard: nothing left a.
	if got := heldCount(b.srv, cx, indexOf(b.srv, x)); got != len(cx) {
		t.Fatalf("b lost %d of %d blocks before the reset could reach it", len(cx)-got, len(cx))
	}

	lf.proxy.Resume()
	testkit.WaitUntil(t, "b to apply the buffered reset", func() bool { return b.node.m.applied[kindReset].Get() == 1 })
	if got := heldCount(b.srv, cx, indexOf(b.srv, x)); got != 0 {
		t.Fatalf("after the reset b still holds %d of %d blocks of the reset backend", got, len(cx))
	}
	if got := b.node.m.resetBlocks.Get(); got != uint64(len(cx)) {
		t.Fatalf("the reset dropped %d locations on b, want %d (the chain on x)", got, len(cx))
	}
	if got := heldCount(b.srv, cy, indexOf(b.srv, y)); got != len(cy) {
		t.Fatalf("the reset of x took %d of %d blocks of y", len(cy)-got, len(cy))
	}
	if !a.node.Connected() {
		t.Fatal("a is not connected although its buffered reset was delivered")
	}
}

// TestPublishFailureWhileNATSIsDown: beyond the reconnect buffer a
// publication is refused and counted; what was refused never reaches the
// peer, what fit still does.
func TestPublishFailureWhileNATSIsDown(t *testing.T) {
	t.Parallel()
	// One byte: the first publication while disconnected fills it.
	lf := newLossFleet(t, Options{ReconnectBuffer: 1})
	a, b := lf.a, lf.b
	x, y := lf.engines[0].URL(), lf.engines[1].URL()
	cx := lf.warmOn(t, 0, "on x")
	cy := lf.warmOn(t, 1, "on y")

	lf.cutA(t)
	a.srv.ResetBackend(indexOf(a.srv, x))
	testkit.WaitUntil(t, "the first reset into the reconnect buffer", func() bool { return a.node.m.sent[kindReset].Get() == 1 })
	a.srv.ResetBackend(indexOf(a.srv, y))
	testkit.WaitUntil(t, "the second reset to be refused", func() bool { return a.node.m.dropped[dropPublish].Get() == 1 })
	if s := a.node.m.sent[kindReset].Get(); s != 1 {
		t.Fatalf("%d resets counted as sent, want 1", s)
	}
	if st := a.node.Stats(); st.DroppedPublish != 1 || st.Dropped != 1 {
		t.Fatalf("stats %+v, want exactly one drop, a publication", st)
	}

	lf.proxy.Resume()
	testkit.WaitUntil(t, "b to apply the reset that fit", func() bool { return b.node.m.applied[kindReset].Get() == 1 })
	if got := heldCount(b.srv, cx, indexOf(b.srv, x)); got != 0 {
		t.Fatalf("b holds %d blocks of x after its reset", got)
	}
	// The refused reset is lost: b keeps y's locations (until their TTL, or
	// its own health check sees y recover).
	if got := heldCount(b.srv, cy, indexOf(b.srv, y)); got != len(cy) {
		t.Fatalf("b holds %d of %d blocks of y, whose reset was never delivered", got, len(cy))
	}
	// Load messages and later resets flow again once reconnected.
	a.srv.ResetBackend(indexOf(a.srv, y))
	testkit.WaitUntil(t, "b to apply a reset sent after reconnection", func() bool { return b.node.m.applied[kindReset].Get() == 2 })
	if got := heldCount(b.srv, cy, indexOf(b.srv, y)); got != 0 {
		t.Fatalf("b holds %d blocks of y after its second reset", got)
	}
}

// TestSlowConsumerDropsAreCounted: messages NATS drops because a replica
// applies them too slowly are counted as slow_consumer, exactly, and the
// ones it kept are applied.
func TestSlowConsumerDropsAreCounted(t *testing.T) {
	t.Parallel()
	f := &fleet{t: t, engines: startEngines(t, 1)}
	url, stop, err := embednats.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	r := f.startReplica(0, url, Options{LoadInterval: 20 * time.Millisecond})
	n := r.node
	// nats.go counts the message being applied as pending: with a limit
	// of 2, one may wait while one is applied.
	if err := n.sub.SetPendingLimits(2, -1); err != nil {
		t.Fatal(err)
	}
	pub, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	key := backendKey(edge.EndpointID(f.engines[0].URL()))
	msg := func(k int) []byte {
		lb := newLocBatch(1)
		lb.add(0, key, time.Now().UnixMilli(), []uint64{uint64(k)<<8 | 1, uint64(k)<<8 | 2})
		return lb.encode(nil, header{fingerprint: n.fp, sender: 777})
	}
	send := func(k int) {
		t.Helper()
		if err := pub.Publish(n.subjLoc, msg(k)); err != nil {
			t.Fatal(err)
		}
		if err := pub.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	// Applying a location takes lagMu: holding it stalls the delivery
	// goroutine inside the first message.
	n.lagMu.Lock()
	locked := true
	defer func() {
		if locked {
			n.lagMu.Unlock()
		}
	}()
	send(0)
	testkit.WaitUntil(t, "the first message to be taken for applying", func() bool {
		p, _, err := n.sub.Pending()
		return err == nil && p == 1 && n.m.received[kindLocations].Get() == 1
	})
	const total = 10
	for k := 1; k < total; k++ {
		send(k)
	}
	// Message 1 waits; 2..9 find the queue full.
	testkit.WaitUntil(t, "NATS to drop the 8 that found the queue full", func() bool {
		d, err := n.sub.Dropped()
		p, _, _ := n.sub.Pending()
		return err == nil && d == total-2 && p == 2
	})
	n.lagMu.Unlock()
	locked = false

	testkit.WaitUntil(t, "the drops to be counted and the kept messages applied", func() bool {
		return n.m.dropped[dropSlowConsumer].Get() == total-2 && n.m.applied[kindLocations].Get() == 2
	})
	if got := n.m.received[kindLocations].Get(); got != 2 {
		t.Fatalf("received %d location messages, want the 2 NATS kept", got)
	}
	i := indexOf(r.srv, f.engines[0].URL())
	for k := range total {
		want := k < 2
		for _, h := range []uint64{uint64(k)<<8 | 1, uint64(k)<<8 | 2} {
			if holds(r.srv, h, i) != want {
				t.Errorf("message %d block %x held: %v, want %v", k, h, !want, want)
			}
		}
	}
	if st := n.Stats(); st.Dropped != total-2 {
		t.Fatalf("stats count %d drops, want %d", st.Dropped, total-2)
	}
}
