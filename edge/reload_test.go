package edge

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
)

// chatOn posts a conversation's turn and returns the backend that answered.
func chatOn(t *testing.T, s *Server, id, turn int) string {
	t.Helper()
	// Each conversation has a system prompt of its own, so where one goes
	// says nothing of where the others go.
	body := strings.Replace(conversation(id, turn, false), "You are a helpful", fmt.Sprintf("You are assistant %d, a helpful", id), 1)
	resp, out := post(t, s, "/v1/chat/completions", body)
	if resp.StatusCode != 200 {
		t.Fatalf("conversation %d turn %d: %d %s", id, turn, resp.StatusCode, out)
	}
	return resp.Header.Get("X-Backend")
}

func backendByURL(s *Server, url string) *upstream {
	for _, u := range s.fleet().ups {
		if u.addr.url == url && !u.b.Retired() {
			return u
		}
	}
	return nil
}

// A backend added by SetBackends takes traffic, a removed one takes none
// and loses its locations, and the backend kept keeps its slot, its
// locations and its conversations.
func TestSetBackendsKeepsTheTable(t *testing.T) {
	t.Parallel()
	a, b, c := newTestBackend(t, "a"), newTestBackend(t, "b"), newTestBackend(t, "c")
	s := startProxy(t, nil, a, b)
	home := map[int]string{}
	for id := range 8 {
		home[id] = chatOn(t, s, id, 0)
	}
	waitIdle(t, s)
	ua, ub := backendByURL(s, a.url()), backendByURL(s, b.url())
	heldA := s.table.Held(ua.b.Index)
	if heldA == 0 || s.table.Held(ub.b.Index) == 0 {
		t.Fatalf("before: a holds %d blocks, b %d; want both some", heldA, s.table.Held(ub.b.Index))
	}
	genB := s.table.Generation(ub.b.Index)

	ch, err := s.SetBackends([]string{a.url(), c.url()}, "", -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Added) != 1 || ch.Added[0] != c.url() || len(ch.Removed) != 1 || ch.Removed[0] != b.url() || ch.Kept != 1 {
		t.Fatalf("change %+v", ch)
	}
	if got := backendByURL(s, a.url()); got != ua || got.b.Index != 0 {
		t.Fatalf("a is no longer the same backend in slot 0")
	}
	if !ub.b.Retired() || ub.b.Healthy() {
		t.Fatalf("b not retired")
	}
	if got := s.table.Held(ua.b.Index); got != heldA {
		t.Fatalf("a holds %d blocks after the reload, want %d", got, heldA)
	}
	if got := s.table.Held(ub.b.Index); got != 0 {
		t.Fatalf("removed b still holds %d blocks", got)
	}
	if s.table.Generation(ub.b.Index) == genB {
		t.Fatalf("b's generation did not move")
	}
	uc := backendByURL(s, c.url())
	if uc == nil || uc.b.Index != 2 {
		t.Fatalf("c not in a new slot (b's is still b's): %+v", uc)
	}
	testkit.WaitUntil(t, "c healthy and its models known", func() bool { return uc.b.Healthy() && uc.models.Load() != nil })
	// Conversations at home on a stay there; b's move to a or c.
	for id, h := range home {
		got := chatOn(t, s, id, 1)
		switch {
		case h == "a" && got != "a":
			t.Errorf("conversation %d left a for %s", id, got)
		case got == "b":
			t.Errorf("conversation %d went to removed b", id)
		}
	}
	// New conversations reach c.
	seen := map[string]int{}
	for id := 100; id < 116; id++ {
		seen[chatOn(t, s, id, 0)]++
	}
	if seen["c"] == 0 || seen["b"] != 0 {
		t.Fatalf("new conversations went %v; want some on c, none on b", seen)
	}
	st := s.State()
	if len(st.Backends) != 2 || st.Backends[0].URL != a.url() || st.Backends[1].URL != c.url() || st.Backends[1].Index != 2 {
		t.Fatalf("/admin/state backends %+v", st.Backends)
	}
	m := scrape(t, s)
	if strings.Contains(m, `backend="`+ub.b.Name+`"`) {
		t.Errorf("/metrics still has series of removed backend %s", ub.b.Name)
	}
	if !strings.Contains(m, `kvca_backend_healthy{backend="`+uc.b.Name+`"} 1`) {
		t.Errorf("/metrics lacks added backend %s", uc.b.Name)
	}
	waitIdle(t, s)
}

// A removed backend's slot is reused once its last request ended; the
// backend that takes it starts with no locations of the old one.
func TestSetBackendsReusesAFreedSlot(t *testing.T) {
	t.Parallel()
	a, b, d := newTestBackend(t, "a"), newTestBackend(t, "b"), newTestBackend(t, "d")
	s := startProxy(t, nil, a, b)
	for id := range 6 {
		chatOn(t, s, id, 0)
	}
	waitIdle(t, s)
	if _, err := s.SetBackends([]string{a.url()}, "", -1); err != nil {
		t.Fatal(err)
	}
	atB := len(b.received())
	if _, err := s.SetBackends([]string{a.url(), d.url()}, "", -1); err != nil {
		t.Fatal(err)
	}
	ud := backendByURL(s, d.url())
	if ud == nil || ud.b.Index != 1 {
		t.Fatalf("d did not take b's freed slot 1: %+v", ud)
	}
	if got := s.table.Held(1); got != 0 {
		t.Fatalf("d's slot holds %d blocks of b's", got)
	}
	if n := len(s.fleet().ups); n != 2 {
		t.Fatalf("%d slots, want 2", n)
	}
	testkit.WaitUntil(t, "d healthy", func() bool { return ud.b.Healthy() })
	// b's conversations are not routed to d as if d held them.
	for id := range 6 {
		resp, _ := post(t, s, "/v1/chat/completions", conversation(id, 1, false))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if got := len(b.received()); got != atB {
		t.Fatalf("b received %d requests after its removal", got-atB)
	}
	if len(d.received()) == 0 {
		t.Fatalf("d received nothing")
	}
	waitIdle(t, s)
}

// Backends added and removed while requests stream through: every request
// gets its whole answer, and every backend, removed ones included, ends
// with no load.
func TestSetBackendsUnderTraffic(t *testing.T) {
	t.Parallel()
	bs := []*testBackend{newTestBackend(t, "a"), newTestBackend(t, "b"), newTestBackend(t, "c")}
	s := startProxy(t, nil, bs[0], bs[1])
	var wg sync.WaitGroup
	var failures atomic.Int32
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := conversation(w*1000+i%10, i%3, true)
				resp, err := client.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					failures.Add(1)
					continue
				}
				out := new(strings.Builder)
				_, err = fmt.Fprint(out, readAll(resp))
				if err != nil || resp.StatusCode != 200 || !strings.Contains(out.String(), "[DONE]") {
					failures.Add(1)
				}
			}
		}()
	}
	lists := [][]string{
		{bs[0].url(), bs[1].url(), bs[2].url()},
		{bs[0].url(), bs[2].url()},
		{bs[2].url()},
		{bs[1].url(), bs[2].url()},
		{bs[0].url(), bs[1].url()},
	}
	for round := range 10 {
		if _, err := s.SetBackends(lists[round%len(lists)], "", -1); err != nil {
			t.Fatal(err)
		}
		// Let traffic reach the new set before changing it again.
		n := totalReceived(bs)
		testkit.WaitUntil(t, "traffic after the change", func() bool { return totalReceived(bs) >= n+4 })
	}
	close(stop)
	wg.Wait()
	if f := failures.Load(); f != 0 {
		t.Fatalf("%d requests failed while backends changed", f)
	}
	testkit.WaitUntil(t, "every backend idle", func() bool {
		for _, u := range s.fleet().ups {
			if u.b.Active() != 0 || u.b.Prefill() != 0 {
				return false
			}
		}
		return s.adm.Inflight(0) == 0
	})
}

func totalReceived(bs []*testBackend) int {
	n := 0
	for _, b := range bs {
		n += len(b.received())
	}
	return n
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}

// With --discovery-interval, a backend named by host name is one backend
// per address; addresses that appear and disappear are added and removed,
// and a failed lookup keeps the last ones.
func TestDiscoveryOneBackendPerAddress(t *testing.T) {
	t.Parallel()
	a := newTestBackend(t, "a")
	_, port, _ := net.SplitHostPort(a.ln.Addr().String())
	ln2, err := net.Listen("tcp", "127.0.0.2:"+port)
	if err != nil {
		t.Skipf("no 127.0.0.2 on this loopback: %v", err)
	}
	b := newTestBackendOn(t, "b", ln2)
	var mu sync.Mutex
	answer := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	var fail error
	s := startProxy(t, func(c *Config) {
		c.Backends = []string{"http://engines.kvca.test:" + port}
		c.DiscoveryInterval = time.Hour // the test drives the lookups
	})
	s.disc.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		if host != "engines.kvca.test" {
			return nil, fmt.Errorf("unexpected lookup of %q", host)
		}
		return answer, fail
	}
	set := func(ips []string, err error) {
		mu.Lock()
		answer, fail = nil, err
		for _, ip := range ips {
			answer = append(answer, netip.MustParseAddr(ip))
		}
		mu.Unlock()
		s.reloadMu.Lock()
		spec := s.spec
		s.reloadMu.Unlock()
		if _, err := s.setBackends(spec, nil, "", -1); err != nil {
			t.Fatal(err)
		}
	}
	urls := func() []string {
		var out []string
		for _, b := range s.State().Backends {
			out = append(out, b.URL)
		}
		slices.Sort(out)
		return out
	}
	ipA, ipB := "http://127.0.0.1:"+port, "http://127.0.0.2:"+port

	set([]string{"127.0.0.1"}, nil)
	if got := urls(); len(got) != 1 || got[0] != ipA {
		t.Fatalf("backends %v, want [%s]", got, ipA)
	}
	set([]string{"127.0.0.2", "127.0.0.1"}, nil)
	if got := urls(); len(got) != 2 || got[0] != ipA || got[1] != ipB {
		t.Fatalf("backends %v, want [%s %s]", got, ipA, ipB)
	}
	ub := backendByURL(s, ipB)
	testkit.WaitUntil(t, "the second address healthy", func() bool { return ub.b.Healthy() })
	seen := map[string]int{}
	for id := range 12 {
		seen[chatOn(t, s, id, 0)]++
	}
	if seen["a"] == 0 || seen["b"] == 0 {
		t.Fatalf("conversations went %v; want both addresses used", seen)
	}
	// The Host header stays the configured name.
	if h := b.lastHeaders(); !strings.Contains(h, "Host: engines.kvca.test:"+port) {
		t.Fatalf("backend b saw headers %q; want the configured Host", h)
	}
	set(nil, fmt.Errorf("server misbehaving"))
	if got := urls(); len(got) != 2 {
		t.Fatalf("a failed lookup changed the backends to %v", got)
	}
	set([]string{"127.0.0.2"}, nil)
	if got := urls(); len(got) != 1 || got[0] != ipB {
		t.Fatalf("backends %v, want [%s]", got, ipB)
	}
	waitIdle(t, s)
}

// Reload applies a policy change live, except to or from session-hash,
// whose session keys the canonicaliser derives only when started with it.
func TestReloadPolicy(t *testing.T) {
	t.Parallel()
	a := newTestBackend(t, "a")
	s := startProxy(t, nil, a)
	cfg := s.Config()
	cfg.Routing.Policy = "least-loaded"
	if _, restart, err := s.Reload(cfg); err != nil || len(restart) != 0 {
		t.Fatalf("restart %v, err %v", restart, err)
	}
	if got := s.Scheduler().Policy.Name(); got != "least-loaded" {
		t.Fatalf("policy %s after the reload, want least-loaded", got)
	}
	cfg.Routing.Policy = "session-hash"
	_, restart, err := s.Reload(cfg)
	if err != nil || len(restart) != 1 || !strings.HasPrefix(restart[0], "policy") {
		t.Fatalf("restart %v, err %v; want the policy named", restart, err)
	}
	if got := s.Scheduler().Policy.Name(); got != "least-loaded" {
		t.Fatalf("policy %s; a change to session-hash must wait for a restart", got)
	}
}
