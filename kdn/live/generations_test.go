package live

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/sched"
)

func genBackends(urls ...string) []*sched.Backend {
	var bs []*sched.Backend
	for i, u := range urls {
		bs = append(bs, sched.NewBackend(i, u, u))
	}
	return bs
}

func readGenFile(t *testing.T, dir string) map[string]genRecord {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, GenerationsFile))
	if err != nil {
		t.Fatal(err)
	}
	var f genFile
	if err := json.Unmarshal(data, &f); err != nil || f.Format != generationsFormat {
		t.Fatalf("generations file %s: %v", data, err)
	}
	out := map[string]genRecord{}
	for _, r := range f.Endpoints {
		out[r.Name] = r
	}
	return out
}

// TestGenerationsKeepRemovedEndpoints: an endpoint left out of one run's
// configuration keeps its record, so when it returns it continues past
// its old generations instead of starting again at 1.
func TestGenerationsKeepRemovedEndpoints(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	open := func(urls ...string) (*generations, *chain.Table) {
		t.Helper()
		tb := chain.NewTable(chain.Config{TTL: time.Minute, MaxBlocks: 64})
		gs, err := openGenerations(dir, tb, genBackends(urls...), log)
		if err != nil {
			t.Fatal(err)
		}
		return gs, tb
	}
	gs, tb := open("http://a:1", "http://b:1")
	gs.note(1, tb.Reset(1)) // b: 2
	gs.note(1, tb.Reset(1)) // b: 3
	gs.note(0, 1)           // no change: nothing to write
	if got := readGenFile(t, dir); got["http://a:1"].Generation != 1 || got["http://b:1"].Generation != 3 {
		t.Fatalf("after the first run: %+v", got)
	}
	_, tb = open("http://a:1") // b removed
	if tb.Generation(0) != 2 {
		t.Fatalf("a on the second run: %d", tb.Generation(0))
	}
	_, tb = open("http://b:1", "http://a:1") // b back, first this time
	if tb.Generation(0) != 4 || tb.Generation(1) != 3 {
		t.Fatalf("third run: b %d, a %d", tb.Generation(0), tb.Generation(1))
	}
	got := readGenFile(t, dir)
	if r := got["http://b:1"]; r.Generation != 4 || r.EndpointID != edge.EndpointID("http://b:1") {
		t.Fatalf("b's record %+v", r)
	}
}

// TestGenerationsRefuseForeignFile: a generations file kvca did not write
// stops start-up: guessing would risk reusing a generation.
func TestGenerationsRefuseForeignFile(t *testing.T) {
	for _, content := range []string{`{"format":9}`, `not json`, `{"format":1,"endpoints":[{"endpoint_id":"x","name":"n","generation":0}]}`} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, GenerationsFile), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		tb := chain.NewTable(chain.Config{TTL: time.Minute, MaxBlocks: 64})
		if _, err := openGenerations(dir, tb, genBackends("http://a:1"), slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%s was accepted", content)
		}
	}
}

// TestGenerationsFollowReloads: an endpoint that a reload brings back, in
// another slot than it had, continues past every generation it had; the
// endpoint whose slot it takes keeps its record for its own return.
func TestGenerationsFollowReloads(t *testing.T) {
	dir := t.TempDir()
	tb := chain.NewTable(chain.Config{TTL: time.Minute, MaxBlocks: 64})
	bs := genBackends("http://a:1", "http://b:1")
	gs, err := openGenerations(dir, tb, bs, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		gs.note(1, tb.Reset(1)) // b: 5
	}
	// b removed; later c takes a new slot and b returns in a's freed slot.
	bs[1].Retire()
	gs.follow(tb, bs)
	bs[0].Retire()
	gs.note(0, tb.Reset(0)) // a's removal reset: a 2
	next := []*sched.Backend{sched.NewBackend(0, "http://b:1", "b"), bs[1], sched.NewBackend(2, "http://c:1", "c")}
	gs.follow(tb, next)
	if g := tb.Generation(0); g != 6 {
		t.Fatalf("b back in slot 0 at generation %d, want 6 (past its 5)", g)
	}
	got := readGenFile(t, dir)
	if got["http://b:1"].Generation != 6 || got["http://a:1"].Generation != 2 || got["http://c:1"].Generation != tb.Generation(2) {
		t.Fatalf("records %+v", got)
	}
	// Notes for slot 0 now count for b, not a.
	gs.note(0, tb.Reset(0))
	if got := readGenFile(t, dir); got["http://b:1"].Generation != 7 || got["http://a:1"].Generation != 2 {
		t.Fatalf("after a reset of slot 0: %+v", got)
	}
}
