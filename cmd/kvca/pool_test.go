package main

import (
	"io"
	"log/slog"
	"slices"
	"testing"
)

// TestPoolFeed: before the server exists the pool's first ready pods are
// kept for start-up; an empty list never empties the fleet; after attach
// every change goes to the server.
func TestPoolFeed(t *testing.T) {
	f := &poolFeed{first: make(chan struct{}), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.SetEndpoints(nil)
	select {
	case <-f.first:
		t.Fatal("an empty pool started kvca")
	default:
	}
	f.SetEndpoints([]string{"10.0.0.1:8000"})
	f.SetEndpoints([]string{"10.0.0.1:8000", "10.0.0.2:8000"})
	select {
	case <-f.first:
	default:
		t.Fatal("no start after the first ready pod")
	}
	if !slices.Equal(f.eps, []string{"10.0.0.1:8000", "10.0.0.2:8000"}) {
		t.Fatalf("kept %v", f.eps)
	}
	var got [][]string
	f.attach(func(eps []string) error { got = append(got, eps); return nil })
	f.SetEndpoints([]string{"10.0.0.3:8000"})
	f.SetEndpoints(nil)
	if len(got) != 1 || !slices.Equal(got[0], []string{"10.0.0.3:8000"}) {
		t.Fatalf("server given %v", got)
	}
}

func TestPoolRef(t *testing.T) {
	if ns, name := poolRef("llm/vllm-pool"); ns != "llm" || name != "vllm-pool" {
		t.Fatalf("%s/%s", ns, name)
	}
	if ns, name := poolRef("vllm-pool"); ns == "" || name != "vllm-pool" {
		t.Fatalf("%s/%s", ns, name)
	}
}
