package edge

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/kvca/kvca/internal/testkit"
)

// TestBackendOptions: a --backend suffix mixes model names with role= and
// bootstrap-port= options; anything else with = is refused by name.
func TestBackendOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw    string
		role   Role
		port   int
		models []string
		err    string
	}{
		{raw: "http://10.0.0.1:8000", role: RoleBoth, port: DefaultBootstrapPort},
		{raw: "http://10.0.0.1:8000#m1,m2", role: RoleBoth, port: DefaultBootstrapPort, models: []string{"m1", "m2"}},
		{raw: "http://10.0.0.1:8000#role=prefill", role: RolePrefill, port: DefaultBootstrapPort},
		{raw: "http://10.0.0.1:8000#role=decode,llama", role: RoleDecode, port: DefaultBootstrapPort, models: []string{"llama"}},
		{raw: "http://10.0.0.1:8000#llama, role=prefill ,bootstrap-port=9001", role: RolePrefill, port: 9001, models: []string{"llama"}},
		{raw: "http://10.0.0.1:8000#role=both", role: RoleBoth, port: DefaultBootstrapPort},
		{raw: "http://10.0.0.1:8000#role=prefil", err: `role "prefil" is not one of prefill, decode, both`},
		{raw: "http://10.0.0.1:8000#bootstrap-port=0", err: "bootstrap-port"},
		{raw: "http://10.0.0.1:8000#bootstrap-port=70000", err: "bootstrap-port"},
		{raw: "http://10.0.0.1:8000#bootstrap-port=x", err: "bootstrap-port"},
		{raw: "http://10.0.0.1:8000#colour=red", err: `unknown option "colour"`},
		{raw: "http://10.0.0.1:8000#m1,,m2", err: "empty model name"},
	} {
		a, err := parseBackend(tc.raw)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.raw, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.raw, err)
			continue
		}
		if a.role != tc.role || a.bootstrapPort != tc.port || !slices.Equal(a.models, tc.models) {
			t.Errorf("%s: role %v port %d models %q, want %v %d %q", tc.raw, a.role, a.bootstrapPort, a.models, tc.role, tc.port, tc.models)
		}
	}
	// The flag's splitter keeps a suffix's items with their URL.
	got := backendList([]string{"http://a:1#role=prefill,bootstrap-port=9000,http://b:2#role=decode"})
	if want := []string{"http://a:1#role=prefill,bootstrap-port=9000", "http://b:2#role=decode"}; !slices.Equal(got, want) {
		t.Errorf("backendList: %q, want %q", got, want)
	}
}

// TestPDSettingsValidate: the protocol is one of two, the threshold not
// negative.
func TestPDSettingsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p   PDSettings
		err string
	}{
		{PDSettings{}, ""},
		{PDSettings{Protocol: "vllm", Threshold: 10}, ""},
		{PDSettings{Protocol: "sglang"}, ""},
		{PDSettings{Protocol: "nixl"}, "--pd-protocol"},
		{PDSettings{Threshold: -1}, "--pd-threshold"},
	} {
		err := tc.p.Validate()
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: %v, want %q", tc.p, err, tc.err)
		}
	}
}

// startRoles starts a proxy over backends of the given roles ("" for
// both): the fleet a disaggregation test needs.
func startRoles(t *testing.T, mod func(*Config), roles []string, backends ...*testBackend) *Server {
	t.Helper()
	return startProxy(t, func(c *Config) {
		for i, r := range roles {
			if r != "" {
				c.Backends[i] += "#role=" + r
			}
		}
		if mod != nil {
			mod(c)
		}
	}, backends...)
}

// TestPoolsOnStateAndMetrics: /admin/state names each backend's role and
// shows the pools apart; /metrics has the role of each backend and the
// pools' series; a role change on reload replaces the backend.
func TestPoolsOnStateAndMetrics(t *testing.T) {
	t.Parallel()
	p, d, both := newTestBackend(t, "p"), newTestBackend(t, "d"), newTestBackend(t, "x")
	s := startRoles(t, nil, []string{"prefill", "decode", ""}, p, d, both)
	st := s.State()
	roles := map[string]string{}
	for _, b := range st.Backends {
		roles[b.URL] = b.Role
	}
	if roles[p.url()] != "prefill" || roles[d.url()] != "decode" || roles[both.url()] != "both" {
		t.Fatalf("roles %v", roles)
	}
	for _, r := range []string{"prefill", "decode", "both"} {
		if ps := st.Pools[r]; len(ps.Backends) != 1 || ps.Healthy != 1 {
			t.Errorf("pool %s: %+v", r, ps)
		}
	}
	if pl := s.fleet().pools; !pl.split || pl.prefill.Len() != 2 || pl.decode.Len() != 2 || pl.both.Len() != 1 {
		t.Errorf("pools %+v", pl)
	}
	resp, err := http.Get("http://" + s.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`kvca_backend_role{backend="` + strings.TrimPrefix(p.url(), "http://") + `",role="prefill"} 1`,
		`kvca_pool_backends{role="decode"} 1`,
		`kvca_pool_healthy_backends{role="prefill"} 1`,
		`kvca_pool_active_requests{role="both"} 0`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	raw, _ := json.Marshal(st)
	if !bytes.Contains(raw, []byte(`"pools":{`)) {
		t.Errorf("state without pools: %s", raw)
	}

	// The decode worker becomes a prefill worker: a new backend, in the
	// other pool.
	ch, err := s.SetBackends([]string{p.url() + "#role=prefill", d.url() + "#role=prefill", both.url()}, "", -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Added) != 1 || len(ch.Removed) != 1 || ch.Kept != 2 {
		t.Fatalf("change %+v", ch)
	}
	if pl := s.fleet().pools; pl.prefill.Len() != 3 || pl.decode.Len() != 1 {
		t.Errorf("after the reload: pools %+v", pl)
	}
}

// TestReadyNeedsAnAnsweringBackend: prefill workers alone cannot answer a
// request, so /ready fails while only they are healthy.
func TestReadyNeedsAnAnsweringBackend(t *testing.T) {
	t.Parallel()
	p, d := newTestBackend(t, "p"), newTestBackend(t, "d")
	s := startRoles(t, nil, []string{"prefill", "decode"}, p, d)
	if st := readyStatus(t, s); st != 200 {
		t.Fatalf("ready %d with both healthy", st)
	}
	d.close()
	testkit.WaitUntil(t, "/ready failing with only the prefill worker healthy", func() bool { return readyStatus(t, s) == 503 })
	if pp := s.State().Pools["prefill"]; pp.Healthy != 1 {
		t.Fatalf("the prefill pool: %+v", pp)
	}
}
