package testkit

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// Gate is an HTTP server on a loopback port in front of a target server,
// which it forwards every request to, except requests for the paths it
// is told to refuse: those it answers 503 itself. It counts the requests
// that arrive for each path, refused or not, so a test can wait until a
// component that asks a path periodically (a health check, a metrics
// scraper) has asked again: it has then done with its previous answer.
// It can also hold a path's requests unanswered until told to go on.
type Gate struct {
	url     string
	mu      sync.Mutex
	refused map[string]bool
	once    map[string]bool          // forward the next request, then refuse
	held    map[string]chan struct{} // closed on Release
	seen    map[string]int
}

// StartGate serves a Gate for target (a base URL, http://host:port) on
// 127.0.0.1:<ephemeral> until the test ends.
func StartGate(t testing.TB, target string) *Gate {
	t.Helper()
	to, err := url.Parse(target)
	if err != nil {
		t.Fatalf("gate target %q: %v", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen 127.0.0.1:0: %v", err)
	}
	g := &Gate{url: "http://" + ln.Addr().String(), refused: map[string]bool{}, once: map[string]bool{},
		held: map[string]chan struct{}{}, seen: map[string]int{}}
	tr := &http.Transport{}
	fwd := httputil.NewSingleHostReverseProxy(to)
	fwd.Transport = tr
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.seen[r.URL.Path]++
		if hold := g.held[r.URL.Path]; hold != nil {
			g.mu.Unlock()
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
			g.mu.Lock()
		}
		refused := g.refused[r.URL.Path]
		if g.once[r.URL.Path] {
			g.once[r.URL.Path], g.refused[r.URL.Path] = false, true
		}
		g.mu.Unlock()
		if refused {
			http.Error(w, "refused by the test gate", http.StatusServiceUnavailable)
			return
		}
		fwd.ServeHTTP(w, r)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
		tr.CloseIdleConnections()
	})
	return g
}

// URL is where to send requests instead of the target.
func (g *Gate) URL() string { return g.url }

// Refuse answers requests for path 503 until Allow.
func (g *Gate) Refuse(path string) { g.set(path, true, false) }

// Allow forwards requests for path again.
func (g *Gate) Allow(path string) { g.set(path, false, false) }

// AllowOnce forwards the next request for path, and refuses the ones after
// it until Allow.
func (g *Gate) AllowOnce(path string) { g.set(path, false, true) }

func (g *Gate) set(path string, refused, once bool) {
	g.mu.Lock()
	g.refused[path], g.once[path] = refused, once
	g.mu.Unlock()
}

// Hold keeps requests for path waiting, unanswered, until Release; they
// are then refused or forwarded as the gate is set at that moment.
func (g *Gate) Hold(path string) {
	g.mu.Lock()
	if g.held[path] == nil {
		g.held[path] = make(chan struct{})
	}
	g.mu.Unlock()
}

// Release lets the requests Hold kept waiting go on, and the ones after.
func (g *Gate) Release(path string) {
	g.mu.Lock()
	if hold := g.held[path]; hold != nil {
		close(hold)
		delete(g.held, path)
	}
	g.mu.Unlock()
}

// Seen is how many requests for path have arrived so far.
func (g *Gate) Seen(path string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seen[path]
}
