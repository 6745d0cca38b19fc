package cluster

import (
	"testing"
	"time"

	"github.com/kvca/kvca/affinity"
	"github.com/kvca/kvca/internal/testkit"
)

// TestBindingsPropagate: a binding made on one replica is applied on the
// other to the same engine, whatever index each gives it, for both maps.
func TestBindingsPropagate(t *testing.T) {
	f := newFleet(t, 3, 2, true)
	ra, rb := f.replicas[0], f.replicas[1]
	for _, r := range f.replicas {
		testkit.WaitUntil(t, "the replicas to connect", r.node.Connected)
	}
	maps := func(r *replica) (resp, sess *affinity.Map) {
		resp = affinity.New(affinity.Responses, affinity.Config{TTL: time.Hour})
		sess = affinity.New(affinity.Sessions, affinity.Config{TTL: time.Hour})
		if err := r.node.ShareAffinity(resp, sess); err != nil {
			t.Fatal(err)
		}
		return resp, sess
	}
	respA, sessA := maps(ra)
	respB, sessB := maps(rb)
	url := f.engines[2].URL()
	ia, ib := indexOf(ra.srv, url), indexOf(rb.srv, url)
	if ia == ib {
		t.Fatal("test wants the replicas to list the engine at different indexes")
	}
	now := time.Now().UnixMilli()
	respA.Bind(0xabc, ia, now)
	sessA.Bind(0xdef, ia, now)
	for _, c := range []struct {
		m   *affinity.Map
		key uint64
	}{{respB, 0xabc}, {sessB, 0xdef}} {
		testkit.WaitUntil(t, "the peer to apply the "+c.m.Kind().String()+" binding", func() bool {
			b, ok := c.m.Lookup(c.key, time.Now().UnixMilli())
			return ok && b == ib
		})
	}
	// Kinds stay apart, and nothing echoes back.
	if _, ok := sessB.Lookup(0xabc, now); ok {
		t.Fatal("a response binding reached the session map")
	}
	if st := respA.Stats(); st.Applied != 0 {
		t.Fatalf("a replica applied its own binding: %v", st)
	}
	// A binding moved on b reaches a.
	ja := indexOf(ra.srv, f.engines[0].URL())
	sessB.Bind(0xdef, indexOf(rb.srv, f.engines[0].URL()), now+1)
	testkit.WaitUntil(t, "the moved binding to reach the replica", func() bool {
		b, ok := sessA.Lookup(0xdef, time.Now().UnixMilli())
		return ok && b == ja
	})
}

func TestBindingsWire(t *testing.T) {
	keys := []uint64{11, 22, 33}
	in := []binding{{affinity.Sessions, 2, 1000, 0xfeed}, {affinity.Responses, 0, 1001, 0xbeef}, {affinity.Sessions, 1, 1002, 7}}
	msg, n := appendBindings(nil, header{fingerprint: 9, sender: 5}, keys, in, 1<<20)
	if n != 3 {
		t.Fatal(n)
	}
	h, body, err := parseHeader(msg)
	if err != nil || h.kind != kindBindings || h.sender != 5 || h.fingerprint != 9 {
		t.Fatal(h, err)
	}
	var got []binding
	var scratch []uint64
	err = decodeBindings(body, &scratch, func(kind affinity.Kind, bk uint64, at int64, key uint64) {
		got = append(got, binding{kind, int32(bk), at, key})
	})
	want := []binding{{affinity.Sessions, 33, 1000, 0xfeed}, {affinity.Responses, 11, 1001, 0xbeef}, {affinity.Sessions, 22, 1002, 7}}
	if err != nil || len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("%v %v", got, err)
	}
	// A small limit splits the batch, one record at least per message.
	if _, n := appendBindings(nil, header{}, keys, in, 1); n != 1 {
		t.Fatalf("split %d", n)
	}
	if err := decodeBindings(body[:len(body)-3], &scratch, func(affinity.Kind, uint64, int64, uint64) {}); err == nil {
		t.Fatal("a truncated message decoded")
	}
}

func FuzzDecodeBindings(f *testing.F) {
	msg, _ := appendBindings(nil, header{}, []uint64{1, 2}, []binding{{affinity.Sessions, 1, 5, 9}}, 1<<20)
	f.Add(msg[headerSize:])
	f.Fuzz(func(t *testing.T, b []byte) {
		var scratch []uint64
		_ = decodeBindings(b, &scratch, func(_ affinity.Kind, bk uint64, _ int64, _ uint64) {
			found := false
			for _, k := range scratch {
				found = found || k == bk
			}
			if !found {
				t.Fatal("a record named a backend outside the message's keys")
			}
		})
	})
}
