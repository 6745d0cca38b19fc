package cluster

import (
	"testing"
	"time"

	"github.com/kvca/kvca/apikeys"
	"github.com/kvca/kvca/cluster/embednats"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/internal/testkit"
	"github.com/kvca/kvca/quota"
)

func quotaNode(t *testing.T, natsURL string) *Node {
	t.Helper()
	cfg := edge.DefaultConfig()
	cfg.Backends = []string{"http://127.0.0.1:1"}
	cfg.Table.HashKey = "000102030405060708090a0b0c0d0e0f"
	srv, err := edge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := Join(srv, Options{URL: natsURL, Name: "quota"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// TestQuotaShared: what one replica admits is charged on the other, so
// the two share the tenant's budget, and tenants stay apart.
func TestQuotaShared(t *testing.T) {
	url, stop, err := embednats.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	frozen := func() int64 { return 1e12 } // no refill during the test
	la, lb := quota.New(quota.Options{Now: frozen}), quota.New(quota.Options{Now: frozen})
	acme := &apikeys.Tenant{Name: "acme", ID: 0, RPM: 10, TPM: 1000}
	other := &apikeys.Tenant{Name: "other", ID: 1, RPM: 10, TPM: 1000}
	for _, l := range []*quota.Limiter{la, lb} {
		l.Ensure(acme)
		l.Ensure(other)
	}
	na, nb := quotaNode(t, url), quotaNode(t, url)
	for _, c := range []struct {
		n *Node
		l *quota.Limiter
	}{{na, la}, {nb, lb}} {
		stop, err := c.n.ShareQuota(c.l, 5*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
	}
	testkit.WaitUntil(t, "both connected", func() bool { return na.Connected() && nb.Connected() })

	var d quota.Decision
	for range 4 {
		if !la.Admit(acme, 100, &d) {
			t.Fatal("refused on A")
		}
		la.Settle(acme, &d, quota.Usage{Prompt: 100, Completion: 50})
	}
	testkit.WaitUntil(t, "B to hear of A's usage", func() bool {
		lb.Peek(acme, 0, &d)
		return d.ReqRemaining == 6 && d.TokRemaining == 400
	})
	lb.Peek(other, 0, &d)
	if d.ReqRemaining != 10 || d.TokRemaining != 1000 {
		t.Fatalf("another tenant was charged: %+v", d)
	}
	// B spends the rest; A then refuses.
	for range 2 {
		if !lb.Admit(acme, 200, &d) {
			t.Fatalf("B refused with budget left: %+v", d)
		}
	}
	if lb.Admit(acme, 1, &d) || d.Limited != quota.LimitTokens {
		t.Fatalf("B admitted past the shared budget: %+v", d)
	}
	testkit.WaitUntil(t, "A to hear of B's usage", func() bool {
		la.Peek(acme, 1, &d)
		return !d.OK && d.TokRemaining == 0 && d.ReqRemaining == 4
	})
}

func TestQuotaWire(t *testing.T) {
	l := quota.New(quota.Options{Now: func() int64 { return 1e12 }})
	var d quota.Decision
	var names []string
	for i := range 40 {
		tn := &apikeys.Tenant{Name: string(rune('a'+i%26)) + "-tenant-with-a-long-name-" + string(rune('a'+i/26)), ID: i, RPM: 100, TPM: 1e6}
		names = append(names, tn.Name)
		l.Admit(tn, int64(i), &d)
	}
	var msgs int
	got := map[string][2]int64{}
	appendQuota(nil, header{sender: 7}, l, 256, func(msg []byte) {
		msgs++
		if len(msg) > 256 {
			t.Errorf("message of %d bytes over 256", len(msg))
		}
		h, body, err := parseHeader(msg)
		if err != nil || h.kind != kindQuota || h.sender != 7 {
			t.Fatalf("header %+v %v", h, err)
		}
		if err := decodeQuota(body, func(n string, r, k int64) { got[n] = [2]int64{r, k} }); err != nil {
			t.Fatal(err)
		}
	})
	if msgs < 2 || len(got) != 40 {
		t.Fatalf("%d messages carried %d tenants", msgs, len(got))
	}
	for i, n := range names {
		if got[n] != [2]int64{1, max(int64(i), 1)} { // at least 1 token is reserved
			t.Errorf("%s: %v", n, got[n])
		}
	}
	for _, bad := range [][]byte{{}, {5}, {1, 0}, {1, 3, 'a', 'b'}, {1, 1, 'a', 2, 2, 9}} {
		if decodeQuota(bad, func(string, int64, int64) {}) == nil {
			t.Errorf("%v decoded", bad)
		}
	}
}
