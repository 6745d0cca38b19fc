package cluster

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"

	"github.com/kvca/kvca/affinity"
)

// Affinity bindings (response id -> producing backend, session key ->
// backend) travel on their own subject, <Subject>.<Name>.affinity.bind,
// which the other kinds' <Subject>.<Name>.* does not match:
//
//	header (kind kindBindings) | nb uvarint, nb × backend key u64 |
//	records to the end: map u8 (affinity.Kind) | backend uvarint (index
//	into the keys) | at uvarint (wall ms) | key u64
//
// Keys are the maps' keyed hashes; the header's fingerprint covers the
// hash key, so replicas that hash differently ignore each other.
const (
	kindBindings    = 17 // after kindQuota
	affinitySubject = ".affinity.bind"
	// maxPendingBindings bounds what waits for the publisher; beyond it a
	// binding is dropped (and counted), never waited for.
	maxPendingBindings = 8192
)

type binding struct {
	kind    affinity.Kind
	backend int32
	at      int64
	key     uint64
}

// affinityShare is a node's side of sharing bindings.
type affinityShare struct {
	n    *Node
	maps map[affinity.Kind]*affinity.Map
	mu   sync.Mutex
	cur  []binding
	kick chan struct{}
	sub  *nats.Subscription
	// receive-side scratch; the subscription delivers on one goroutine
	scratch []uint64

	sent, applied *metrics.Counter
}

// ShareAffinity makes the node publish every binding the maps make and
// apply the other replicas' to them. Call it after Join, before the server
// starts; Close stops it.
func (n *Node) ShareAffinity(maps ...*affinity.Map) error {
	a := &affinityShare{n: n, maps: map[affinity.Kind]*affinity.Map{}, cur: make([]binding, 0, 256), kick: make(chan struct{}, 1)}
	for _, m := range maps {
		a.maps[m.Kind()] = m
	}
	sub, err := n.subscribe(n.o.subjectBase()+affinitySubject, a.receive)
	if err != nil {
		return err
	}
	a.sub = sub
	for _, m := range maps {
		m.SetPeer(a)
	}
	s := n.m.set
	a.sent = s.NewCounter(`kvca_cluster_affinity_bindings_sent_total`)
	a.applied = s.NewCounter(`kvca_cluster_affinity_bindings_applied_total`)
	n.wg.Add(1)
	go func() { defer n.wg.Done(); a.flushLoop() }()
	return nil
}

// Bound implements affinity.Peer: on the request path, a bounded append.
func (a *affinityShare) Bound(kind affinity.Kind, key uint64, backend int, at int64) {
	if a.n.closed.Load() {
		return
	}
	a.mu.Lock()
	if len(a.cur) >= maxPendingBindings {
		a.mu.Unlock()
		a.n.m.dropped[dropBufferFull].Inc()
		return
	}
	a.cur = append(a.cur, binding{kind: kind, backend: int32(backend), at: at, key: key})
	first := len(a.cur) == 1
	a.mu.Unlock()
	if first {
		wake(a.kick)
	}
}

// flushLoop publishes pending bindings: the first after a quiet spell at
// once, then at most one message per FlushInterval.
func (a *affinityShare) flushLoop() {
	var spare []binding
	var out []byte
	for {
		select {
		case <-a.n.stop:
			a.flush(&spare, &out)
			return
		case <-a.kick:
		}
		a.flush(&spare, &out)
		t := time.NewTimer(a.n.o.FlushInterval)
		select {
		case <-a.n.stop:
			t.Stop()
			a.flush(&spare, &out)
			return
		case <-t.C:
		}
		wake(a.kick) // whatever came meanwhile
	}
}

func (a *affinityShare) flush(spare *[]binding, out *[]byte) {
	a.mu.Lock()
	b := a.cur
	a.cur = (*spare)[:0]
	a.mu.Unlock()
	*spare = b
	if len(b) == 0 {
		return
	}
	n := a.n
	limit := n.o.MaxMessageBytes - headerSize - 16
	for len(b) > 0 {
		var k int
		*out, k = appendBindings((*out)[:0], n.header(), n.v.Load().keys, b, limit)
		if err := n.nc.Publish(n.o.subjectBase()+affinitySubject, *out); err != nil {
			n.m.dropped[dropPublish].Inc()
		} else {
			a.sent.Add(k)
		}
		b = b[k:]
	}
}

// appendBindings encodes as many of bs as fit in about max bytes (at least
// one) and says how many.
func appendBindings(dst []byte, h header, keys []uint64, bs []binding, max int) ([]byte, int) {
	h.kind = kindBindings
	dst = appendHeader(dst, h)
	dst = binary.AppendUvarint(dst, uint64(len(keys)))
	for _, k := range keys {
		dst = binary.LittleEndian.AppendUint64(dst, k)
	}
	start := len(dst)
	n := 0
	for _, b := range bs {
		if n > 0 && len(dst)-start+24 > max {
			break
		}
		if int(b.backend) >= len(keys) { // a slot added since the keys were read
			n++
			continue
		}
		dst = append(dst, byte(b.kind))
		dst = binary.AppendUvarint(dst, uint64(b.backend))
		dst = binary.AppendUvarint(dst, uint64(b.at))
		dst = binary.LittleEndian.AppendUint64(dst, b.key)
		n++
	}
	return dst, n
}

// decodeBindings calls f for each record of a kindBindings body with the
// backend's wire key; keys is scratch.
func decodeBindings(b []byte, keys *[]uint64, f func(kind affinity.Kind, backendKey uint64, at int64, key uint64)) error {
	r := reader{b: b}
	nb := r.count(8)
	ks := (*keys)[:0]
	for range nb {
		ks = append(ks, r.u64())
	}
	*keys = ks
	for r.err == nil && len(r.b) > 0 {
		kind := affinity.Kind(r.b[0])
		r.b = r.b[1:]
		bi := r.uvarint()
		at := int64(r.uvarint())
		key := r.u64()
		if r.err != nil {
			break
		}
		if bi >= uint64(len(ks)) {
			r.fail()
			break
		}
		f(kind, ks[bi], at, key)
	}
	return r.err
}

func (a *affinityShare) receive(msg *nats.Msg) {
	n := a.n
	h, body, err := parseHeader(msg.Data)
	if err != nil || h.kind != kindBindings {
		n.m.dropped[dropMalformed].Inc()
		return
	}
	if h.sender == n.id {
		return
	}
	if h.fingerprint != n.fp {
		n.m.dropped[dropMismatch].Inc()
		return
	}
	now := time.Now().UnixMilli()
	err = decodeBindings(body, &a.scratch, func(kind affinity.Kind, bk uint64, at int64, key uint64) {
		m := a.maps[kind]
		i, ok := n.v.Load().index[bk]
		if m == nil || !ok {
			n.m.dropped[dropUnknown].Inc()
			return
		}
		// A peer whose clock runs ahead must not make bindings outlive
		// their TTL here.
		m.Apply(key, i, min(at, now))
		a.applied.Inc()
	})
	if err != nil {
		n.m.dropped[dropMalformed].Inc()
	}
}
