package cluster

import (
	"testing"
	"time"
)

func TestDedupRefreshAndReset(t *testing.T) {
	d := newDedup(1024)
	const key, refresh = 42, 1000
	got := d.filter(nil, []uint64{1, 2, 3}, key, 10_000, refresh, 0)
	if len(got) != 3 {
		t.Fatalf("first sight kept %v", got)
	}
	if got = d.filter(nil, []uint64{1, 2, 3, 4}, key, 10_500, refresh, 0); len(got) != 1 || got[0] != 4 {
		t.Fatalf("within refresh kept %v, want only the new block", got)
	}
	if got = d.filter(nil, []uint64{1}, 43, 10_500, refresh, 0); len(got) != 1 {
		t.Fatal("another backend's location was deduplicated")
	}
	if got = d.filter(nil, []uint64{1, 4}, key, 11_100, refresh, 0); len(got) != 1 || got[0] != 1 {
		t.Fatalf("after refresh kept %v, want block 1 (told at 10000) only", got)
	}
	// After a reset at 11200 everything told before it is news again.
	if got = d.filter(nil, []uint64{1, 4}, key, 11_300, refresh, 11_200); len(got) != 2 {
		t.Fatalf("after reset kept %v", got)
	}
	// What a peer said need not be repeated.
	d.heard([]uint64{9}, key, 20_000)
	if got = d.filter(nil, []uint64{9}, key, 20_100, refresh, 0); len(got) != 0 {
		t.Fatalf("repeated a peer's news: %v", got)
	}
}

func TestPeerLoadsSumAndAgeOut(t *testing.T) {
	p := newPeerLoads(3)
	idx := func(k uint64) (int, bool) { return int(k) - 100, k >= 100 && k < 103 }
	t0 := time.Unix(1000, 0)
	iv := 100 * time.Millisecond
	p.update(1, t0, iv, []loadEntry{{key: 100, active: 2, prefill: 10}, {key: 999, active: 50}}, idx)
	p.update(2, t0.Add(250*time.Millisecond), iv, []loadEntry{{key: 100, active: 1}, {key: 102, active: 4, prefill: 1}}, idx)
	act, pre := make([]uint32, 3), make([]uint32, 3)
	if n := p.sum(t0.Add(260*time.Millisecond), act, pre); n != 2 || act[0] != 3 || pre[0] != 10 || act[1] != 0 || act[2] != 4 || pre[2] != 1 {
		t.Fatalf("sum: %d peers, active %v prefill %v", n, act, pre)
	}
	// Peer 1 is silent for more than 3 of its intervals: aged out.
	if n := p.sum(t0.Add(301*time.Millisecond), act, pre); n != 1 || act[0] != 1 || pre[0] != 0 {
		t.Fatalf("after ageing: %d peers, active %v prefill %v", n, act, pre)
	}
	// A new snapshot replaces the old one whole (absent backends: idle).
	p.update(2, t0.Add(310*time.Millisecond), iv, nil, idx)
	if p.sum(t0.Add(320*time.Millisecond), act, pre); act[0]+act[2]+pre[2] != 0 {
		t.Fatalf("stale counts kept: %v %v", act, pre)
	}
}

func TestLearnBufIsBounded(t *testing.T) {
	b := newLearnBuf(8)
	if ok, pending := b.add([]uint64{1, 2, 3}, 0, 1); !ok || pending != 3 {
		t.Fatal("first add")
	}
	chainIn := []uint64{4, 5, 6, 7, 8}
	if ok, _ := b.add(chainIn, 1, 2); !ok {
		t.Fatal("second add should fit exactly")
	}
	chainIn[0] = 99 // the buffer must have copied
	if ok, _ := b.add([]uint64{9}, 0, 3); ok {
		t.Fatal("add beyond the bound accepted")
	}
	got := b.swap(learnBatch{})
	if len(got.recs) != 2 || got.hashes[3] != 4 || got.recs[1].n != 5 || got.recs[1].backend != 1 {
		t.Fatalf("swapped %+v", got)
	}
	if ok, pending := b.add([]uint64{9}, 0, 3); !ok || pending != 1 {
		t.Fatal("buffer not emptied by swap")
	}
}
