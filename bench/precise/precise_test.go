package precise

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/bench/workload"
	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

func TestPreciseFollowsTheTrueCache(t *testing.T) {
	w := workload.Synthetic{Seed: 3, Sessions: 1, MinTurns: 3, MaxTurns: 3, SystemPrompts: 1, SystemPromptTokens: 256, UserTokens: 64, OutputTokens: 8, ToolRate: -1}.Generate()
	engines := make([]*mock.Engine, 3)
	for i := range engines {
		engines[i] = mock.New(mock.Config{Name: "e", DecodePerToken: time.Microsecond, PrefillPerToken: time.Nanosecond})
		if err := engines[i].Start("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		defer engines[i].Close()
	}
	// Engine 2 has served the first turn; the others know nothing.
	resp, err := http.Post(engines[2].URL()+w.Requests[0].Path, "application/json", bytes.NewReader(w.Requests[0].Body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	key := chain.RandomKey()
	p, err := New(engines, w, key, 64)
	if err != nil {
		t.Fatal(err)
	}
	backends := make([]*sched.Backend, 3)
	for i := range backends {
		backends[i] = sched.NewBackend(i, engines[i].URL(), engines[i].Addr())
	}
	// Backend 2 is the most loaded, and the table knows nothing: only
	// the engines' true contents can send the follow-up there.
	s, err := sched.New(backends, chain.NewTable(chain.Config{TTL: time.Minute, MaxBlocks: 1 << 12}), 4, "kvca-cost")
	if err != nil {
		t.Fatal(err)
	}
	s.Policy = p
	var busy sched.Reservation
	s.ReserveOn(backends[2], 0, &busy)
	defer busy.ReleaseActive()

	h := chain.NewHasher(key, 64)
	var info canon.Info
	if err := canon.New(nil).Canonicalize(canon.Chat, w.Requests[1].Body, h, &info); err != nil {
		t.Fatal(err)
	}
	r := &sched.Request{Chain: h.Sum(), Followup: info.Followup}
	var d sched.Decision
	var res sched.Reservation
	if !s.Route(r, &d, &res) {
		t.Fatal("no backend")
	}
	defer res.ReleaseActive()
	if d.Backend.Index != 2 || d.Phase != sched.PhaseFollowup || d.Cached == 0 || d.Cached >= len(r.Chain) {
		t.Fatalf("decision %+v on backend %d of a %d-block chain", d, d.Backend.Index, len(r.Chain))
	}
	// A request the workload does not hold is all novel, routed by load.
	r2 := &sched.Request{Chain: []uint64{1, 2, 3}}
	var d2 sched.Decision
	var res2 sched.Reservation
	if !s.Route(r2, &d2, &res2) {
		t.Fatal("no backend")
	}
	defer res2.ReleaseActive()
	if d2.Cached != 0 || d2.Backend.Index == 2 {
		t.Fatalf("unknown request: %+v on %d", d2, d2.Backend.Index)
	}
}
