package edge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/internal/testkit"
)

// liveGoroutines counts goroutines, leaving out fasthttp's bounded
// background ones: process-wide singletons (the date updater, the dialer's
// address-cache cleaner) and each HostClient's idle-connection cleaner,
// which exits on its next wake once its pool is empty.
func liveGoroutines() (int, string) {
	buf := make([]byte, 4<<20)
	all := string(buf[:runtime.Stack(buf, true)])
	n := 0
	var kept []string
	for _, g := range strings.Split(all, "\n\n") {
		if strings.Contains(g, "updateServerDate") || strings.Contains(g, "tcpAddrsClean") || strings.Contains(g, "connsCleaner") {
			continue
		}
		n++
		kept = append(kept, g)
	}
	return n, strings.Join(kept, "\n\n")
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// TestSoak runs mixed streaming and non-streaming multi-turn traffic at high
// concurrency while backends are killed and restarted. Every request that
// did not hit an injected fault must succeed; a stream cut by a kill must
// end with an error event; no goroutine, descriptor or load unit may leak.
// KVCA_SOAK sets the duration (make soak: minutes; make test: seconds).
func TestSoak(t *testing.T) {
	dur := 4 * time.Second
	if v := os.Getenv("KVCA_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("KVCA_SOAK: %v", err)
		}
		dur = d
	}
	runtime.GC()
	goroutinesBefore, _ := liveGoroutines()
	fdsBefore := openFDs()

	engines := make([]*mock.Engine, 3)
	var urls []string
	for i := range engines {
		engines[i] = mock.New(mock.Config{
			Name: fmt.Sprintf("e%d", i), CacheTokens: 200_000, MaxSeqs: 64,
			PrefillOverhead: time.Millisecond, PrefillPerToken: time.Microsecond, DecodePerToken: 2 * time.Millisecond,
		})
		if err := engines[i].Start("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		urls = append(urls, engines[i].URL())
	}
	cfg := DefaultConfig()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", ""
	cfg.Backends = urls
	cfg.HealthInterval = 100 * time.Millisecond
	cfg.Retries = 2
	// Health decisions are kept to explain a failure: every backend out at
	// once is the one way a request not cut by a kill can fail here.
	var logs testkit.LogBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if os.Getenv("KVCA_SOAK_DEBUG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}

	var (
		ok, broken, failed, kills atomic.Int64
		firstFailure              atomic.Value
	)
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var wg sync.WaitGroup
	// Chaos: one engine at a time goes down, loses its cache, comes back.
	// One at a time for kvca as well: a killed engine stays ejected for
	// its 1 s cool-down and until a probe passes, so the next kill waits
	// longer than that, and two engines are never out at once (with two
	// out, one probe slowed past its timeout on a loaded machine would
	// leave no backend at all).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(1100 * time.Millisecond):
			}
			e := engines[i%len(engines)]
			if e.Down() == nil {
				kills.Add(1)
				time.Sleep(250 * time.Millisecond)
				e.Restart()
				if err := e.Up(); err != nil {
					t.Errorf("engine did not come back: %v", err)
				}
			}
		}
	}()
	const clients = 48
	for g := 0; g < clients; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for conv := 0; ctx.Err() == nil; conv++ {
				for turn := 0; turn < 4 && ctx.Err() == nil; turn++ {
					stream := (g+conv+turn)%2 == 0
					body := mockChat(g*100000+conv, turn, stream, 6)
					resp, err := hc.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(body))
					if err != nil {
						failed.Add(1)
						firstFailure.CompareAndSwap(nil, err.Error())
						continue
					}
					if resp.StatusCode != 200 {
						out, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						failed.Add(1)
						firstFailure.CompareAndSwap(nil, fmt.Sprintf("status %d: %s", resp.StatusCode, out))
						continue
					}
					if !stream {
						_, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						if err != nil {
							// A body cut by a kill: an injected fault, visible to the client.
							broken.Add(1)
						} else {
							ok.Add(1)
						}
						continue
					}
					events, err := readAllEvents(resp.Body)
					resp.Body.Close()
					all := strings.Join(events, "\n")
					switch {
					case err == nil && len(events) > 0 && events[len(events)-1] == "data: [DONE]":
						ok.Add(1)
					case strings.Contains(all, "event: error") || err != nil:
						broken.Add(1) // cut by a kill, and the client could tell
					default:
						failed.Add(1)
						firstFailure.CompareAndSwap(nil, "stream ended cleanly without [DONE]: "+all)
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, e := range engines {
		_ = e.Up()
	}
	waitIdle(t, s)
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range engines {
		e.Close()
	}
	hc.CloseIdleConnections()

	// Let closed connections' goroutines finish before counting.
	var goroutinesAfter, fdsAfter int
	var stacks string
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		goroutinesAfter, stacks = liveGoroutines()
		fdsAfter = openFDs()
		if (goroutinesAfter <= goroutinesBefore+2 && fdsAfter <= fdsBefore+2) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("soak %v: %d ok, %d cut by %d injected kills, %d failed; goroutines %d→%d, fds %d→%d",
		dur, ok.Load(), broken.Load(), kills.Load(), failed.Load(), goroutinesBefore, goroutinesAfter, fdsBefore, fdsAfter)
	if failed.Load() != 0 {
		var health []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "backend healthy") || strings.Contains(l, "backend unhealthy") {
				health = append(health, l)
			}
		}
		t.Fatalf("%d requests failed without an injected fault; first: %v\nhealth decisions:\n%s",
			failed.Load(), firstFailure.Load(), strings.Join(health, "\n"))
	}
	if ok.Load() == 0 {
		t.Fatal("no request succeeded")
	}
	if goroutinesAfter > goroutinesBefore+2 {
		t.Fatalf("goroutines leaked: %d → %d\n%s", goroutinesBefore, goroutinesAfter, stacks)
	}
	if fdsAfter > fdsBefore+2 {
		ents, _ := os.ReadDir("/proc/self/fd")
		var names []string
		for _, e := range ents {
			l, _ := os.Readlink("/proc/self/fd/" + e.Name())
			names = append(names, e.Name()+"→"+l)
		}
		t.Fatalf("file descriptors leaked: %d → %d: %v", fdsBefore, fdsAfter, names)
	}
}
