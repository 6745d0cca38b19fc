package cluster

import (
	"context"
	"testing"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/cluster/embednats"
	"github.com/kvca/kvca/internal/testkit"
)

// Learned runs on the request path: it must not allocate, and must drop
// rather than grow when the publisher falls behind.
func TestLearnedDoesNotAllocateAndIsBounded(t *testing.T) {
	n := &Node{buf: newLearnBuf(1024), kick: make(chan struct{}, 1), urgent: make(chan struct{}, 1)}
	n.o.MaxPendingBlocks = 1024
	n.m = newNodeMetrics(n)
	chain := make([]uint64, 100)
	if allocs := testing.AllocsPerRun(100, func() {
		n.Learned(chain, 1, 5)
		if len(n.buf.cur.hashes) > 900 {
			n.buf.cur.hashes, n.buf.cur.recs = n.buf.cur.hashes[:0], n.buf.cur.recs[:0]
		}
	}); allocs > 0 {
		t.Fatalf("Learned allocates %.1f times per call", allocs)
	}
	for range 20 {
		n.Learned(chain, 1, 5)
	}
	if got := len(n.buf.cur.hashes); got > 1024 {
		t.Fatalf("buffer grew to %d blocks past its bound", got)
	}
	if n.m.dropped[dropBufferFull].Get() == 0 {
		t.Fatal("drops not counted")
	}
}

func BenchmarkLearned(b *testing.B) {
	n := &Node{buf: newLearnBuf(1 << 20), kick: make(chan struct{}, 1), urgent: make(chan struct{}, 1)}
	n.o.MaxPendingBlocks = 1 << 20
	n.m = newNodeMetrics(n)
	chain := make([]uint64, 32)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Learned(chain, 1, 5)
			if len(n.buf.cur.hashes) > 1<<19 {
				n.buf.swap(learnBatch{})
			}
		}
	})
}

// A chain larger than one message is split over several, all applied.
func TestLargeChainsAreSplit(t *testing.T) {
	t.Parallel()
	f := &fleet{t: t, engines: startEngines(t, 2)}
	url, stop, err := embednats.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	for i := range 2 {
		f.replicas = append(f.replicas, f.startReplica(i, url, Options{MaxMessageBytes: 128}))
	}
	f.waitPeers(1)
	a, b := f.replicas[0], f.replicas[1]
	eu := f.engines[0].URL()
	ch, err := a.srv.Warm(context.Background(), indexOf(a.srv, eu), canon.Chat, mock.PathChat, chatBody("split"))
	if err != nil {
		t.Fatal(err)
	}
	ib := indexOf(b.srv, eu)
	testkit.WaitUntil(t, "every block to reach the peer", func() bool {
		for _, h := range ch {
			if !holds(b.srv, h, ib) {
				return false
			}
		}
		return true
	})
	// The sender counts a message once NATS took it, which can be after
	// the peer applied it.
	testkit.WaitUntil(t, "the sender to count every block it sent", func() bool {
		return a.node.Stats().SentBlocks >= uint64(len(ch))
	})
	if st := a.node.Stats(); st.SentLocations < 2 || st.SentBlocks != uint64(len(ch)) {
		t.Fatalf("%d blocks went in %d messages carrying %d blocks", len(ch), st.SentLocations, st.SentBlocks)
	}
}
