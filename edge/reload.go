package edge

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
	"github.com/kvca/kvca/telemetry"
)

// fleet is the backends in force: the scheduler over them and their
// upstreams, both indexed by slot (Backend.Index). A slot is a backend's
// place in the block table, so a backend keeps its slot for as long as it
// is configured. A removed backend's slot holds it retired (never
// eligible) until a backend added later reuses the slot. A reload builds a
// new fleet and swaps it in whole; a request keeps the fleet it routed on,
// and load is released on the Backend objects the fleets share.
type fleet struct {
	sched *sched.Scheduler
	ups   []*upstream
	pools pools // the backends by role (roles.go)
}

// live returns the upstreams of the backends configured now, in slot order.
func (f *fleet) live() []*upstream {
	out := make([]*upstream, 0, len(f.ups))
	for _, u := range f.ups {
		if !u.b.Retired() {
			out = append(out, u)
		}
	}
	return out
}

func (s *Server) fleet() *fleet { return s.fl.Load() }

// newUpstream builds the upstream of a backend and its series.
func (s *Server) newUpstream(b *sched.Backend, a backendAddr) *upstream {
	u := newUpstream(b, a, s.m.newBackend(s.m.set, b, a.role), s.upTLS)
	if s.nloops > 0 {
		u.idle = make([][]*upConn, s.nloops)
	}
	return u
}

// startUpstream starts what watches u: its address, its health and its
// engine's metrics. Stopping u (removal) stops them.
func (s *Server) startUpstream(u *upstream) {
	ctx, cancel := context.WithCancel(s.bg)
	u.stop = cancel
	if err := u.resolve(); err != nil {
		s.log.Warn("backend address lookup failed; retrying in the background", "backend", u.b.Name, "err", err)
	}
	if !u.literalHost() || u.la.Load() == nil {
		s.loops.Add(1)
		go func() { defer s.loops.Done(); s.reresolve(ctx, u) }()
	}
	s.loops.Add(1)
	go func() { defer s.loops.Done(); s.healthLoop(ctx, u) }()
	s.startScraper(ctx, u)
}

// OnBackends registers f to run after the backends in force changed
// (SetBackends); call before Start.
func (s *Server) OnBackends(f func()) { s.onBackends = append(s.onBackends, f) }

// BackendChange says what SetBackends did.
type BackendChange struct {
	Added, Removed []string // backend URLs
	Kept           int
}

// SetBackends makes backends (as --backend takes them) the backends in
// force, under traffic and keeping the block table: a backend configured
// before and now keeps its slot, its learned locations, its load and its
// health; a removed one takes no new request (those in flight finish) and
// its locations are dropped; an added one starts with no locations and is
// checked like any backend at start. policy and activeWeight change the
// scheduler's too ("" and -1 keep them). Call it after Start.
func (s *Server) SetBackends(backends []string, policy string, activeWeight int) (BackendChange, error) {
	return s.setBackends(backends, nil, policy, activeWeight)
}

// setBackends is SetBackends with the configuration's cache sizes
// (--backend-cache-tokens; nil keeps those in force). With
// --discovery-interval, a backend named by host name stands for one
// backend per address it resolves to.
func (s *Server) setBackends(spec []string, tokens []int64, policy string, activeWeight int) (BackendChange, error) {
	var addrs []backendAddr
	for _, raw := range spec {
		a, err := parseBackend(raw)
		if err != nil {
			return BackendChange{}, err
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return BackendChange{}, fmt.Errorf("at least one backend is required")
	}
	if s.cfg.DiscoveryInterval > 0 {
		addrs = s.disc.expand(s.bg, addrs, s.log)
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	s.spec = slices.Clone(spec)
	if tokens != nil {
		s.cacheTokens = tokens
	}
	return s.apply(addrs, policy, activeWeight)
}

// apply makes addrs the backends in force; reloadMu is held.
func (s *Server) apply(addrs []backendAddr, policy string, activeWeight int) (BackendChange, error) {
	var ch BackendChange
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a.key()] {
			return ch, fmt.Errorf("backend %s is listed twice", a.url)
		}
		seen[a.key()] = true
	}
	if !s.started {
		return ch, fmt.Errorf("the server has not started")
	}
	cur := s.fleet()
	n := len(cur.ups)
	bs := slices.Clone(cur.sched.Backends)
	ups := slices.Clone(cur.ups)
	want := map[string]int{} // key -> position in backends
	for i, a := range addrs {
		want[a.key()] = i
	}
	var retire []*upstream
	for _, u := range ups {
		if u.b.Retired() {
			continue
		}
		if _, ok := want[u.addr.key()]; ok {
			delete(want, u.addr.key())
			ch.Kept++
			continue
		}
		retire = append(retire, u)
	}
	var add []backendAddr
	for _, a := range addrs { // in the order given
		if _, ok := want[a.key()]; ok {
			add = append(add, a)
		}
	}
	if len(add)+len(retire) == 0 && policy == "" && activeWeight < 0 {
		return ch, nil // nothing changes
	}
	// Slots of backends removed earlier whose requests have all ended are
	// reused first; a backend removed now keeps its slot until then.
	var free []int
	for i, u := range ups {
		if u.b.Retired() && u.b.Active() == 0 && u.b.Prefill() == 0 {
			free = append(free, i)
		}
	}
	if n-len(free)+len(add) > chain.MaxBackends {
		return ch, fmt.Errorf("at most %d backends are supported (removed backends keep their slot while requests on them finish)", chain.MaxBackends)
	}
	var added []*upstream
	for _, a := range add {
		i := len(ups)
		if len(free) > 0 {
			i, free = free[0], free[1:]
		}
		b := sched.NewBackend(i, a.url, a.name())
		u := s.newUpstream(b, a)
		if i == len(ups) {
			bs, ups = append(bs, b), append(ups, u)
		} else {
			bs[i], ups[i] = b, u
		}
		added = append(added, u)
		ch.Added = append(ch.Added, a.url)
	}
	next, err := cur.sched.Rebuild(bs, policy, activeWeight)
	if err != nil {
		return BackendChange{}, err
	}
	for _, u := range retire {
		u.b.Retire()
		if u.stop != nil {
			u.stop()
		}
		u.hc.CloseIdleConnections()
		s.forgetSlot(u.b.Index)
		s.table.SetBackendCapacity(u.b.Index, 0)
		s.m.dropBackend(u)
		next.DropSeries(u.b)
		ch.Removed = append(ch.Removed, u.addr.url)
	}
	for _, u := range added {
		// A reused slot may hold locations its last requests learned.
		s.forgetSlot(u.b.Index)
		s.table.SetBackendCapacity(u.b.Index, 0)
	}
	s.adm.SetBackends(bs)
	s.fl.Store(&fleet{sched: next, ups: ups, pools: poolsOf(ups)})
	for _, u := range added {
		s.startUpstream(u)
	}
	s.rebuildModels()
	select {
	case s.modelsWake <- struct{}{}:
	default:
	}
	for _, f := range s.onBackends {
		f()
	}
	if len(ch.Added)+len(ch.Removed) > 0 {
		s.log.Info("backends changed", "added", ch.Added, "removed", ch.Removed, "kept", ch.Kept)
	}
	return ch, nil
}

// Reload applies a new configuration under traffic: the backend list and
// their cache sizes, policy, active weight, TTL, and the certificates
// (re-read). It returns the settings that differ but only take effect at
// a restart. The keys file is watched on its own (--api-keys).
func (s *Server) Reload(cfg Config) (BackendChange, []string, error) {
	if err := cfg.Validate(); err != nil {
		return BackendChange{}, nil, err
	}
	tokens := cfg.Telemetry.BackendCacheTokens
	if tokens == nil {
		tokens = []int64{}
	}
	// The canonicaliser derives session keys only for session-hash,
	// fixed at start: a change to or from it waits for a restart.
	policy, restart := cfg.Routing.Policy, restartOnly(s.cfg, cfg)
	if usesSession(policy) != usesSession(s.cfg.Routing.Policy) {
		policy = ""
		restart = append(restart, "policy (to or from session-hash)")
	}
	ch, err := s.setBackends(cfg.Backends, tokens, policy, cfg.Routing.ActiveWeight)
	if err != nil {
		return ch, nil, err
	}
	if cfg.Table.TTL != s.table.TTL() {
		s.table.SetTTL(cfg.Table.TTL)
		s.sessions.SetTTL(cfg.Table.TTL)
		s.log.Info("ttl changed", "ttl", cfg.Table.TTL)
	}
	s.table.SetPredictTTL(cfg.Table.PredictTTL)
	if sc := s.fleet().sched; cfg.Routing.AffinityEpsilon != sc.AffinityEpsilon() {
		sc.SetAffinityEpsilon(cfg.Routing.AffinityEpsilon)
		s.log.Info("affinity epsilon changed", "affinity_epsilon", cfg.Routing.AffinityEpsilon)
	}
	if err := s.ReloadTLS(); err != nil {
		s.log.Error("certificate reload failed; the previous certificates stay in service", "err", err)
	}
	return ch, restart, nil
}

// restartOnly names the settings of next that differ from cur and that
// Reload does not apply.
func restartOnly(cur, next Config) []string {
	var out []string
	diff := func(name string, differ bool) {
		if differ {
			out = append(out, name)
		}
	}
	diff("listen", cur.Listen != next.Listen)
	diff("admin-listen", cur.AdminListen != next.AdminListen)
	diff("max-body-bytes", cur.MaxBodyBytes != next.MaxBodyBytes)
	diff("retries", cur.Retries != next.Retries)
	diff("health-path", cur.HealthPath != next.HealthPath)
	diff("health-interval", cur.HealthInterval != next.HealthInterval)
	diff("upstream-header-timeout", cur.UpstreamHeaderTimeout != next.UpstreamHeaderTimeout)
	diff("stream-idle-timeout", cur.StreamIdleTimeout != next.StreamIdleTimeout)
	diff("client-read-timeout", cur.ClientReadTimeout != next.ClientReadTimeout)
	diff("header-timeout", cur.HeaderTimeout != next.HeaderTimeout)
	diff("max-client-conns", cur.MaxClientConns != next.MaxClientConns)
	diff("max-conns-per-backend", cur.MaxConnsPerBackend != next.MaxConnsPerBackend)
	diff("preserve-host", cur.PreserveHost != next.PreserveHost)
	diff("stream-usage", cur.StreamUsage != next.StreamUsage)
	diff("api-keys", cur.APIKeys != next.APIKeys)
	diff("backend-api-key", cur.BackendAPIKey != next.BackendAPIKey)
	out = append(out, cur.Tracing.Restart(&next.Tracing)...)
	out = append(out, cur.Admission.Restart(&next.Admission)...)
	diff("loops", cur.Loops != next.Loops)
	diff("prefill-release", cur.PrefillAtHeaders != next.PrefillAtHeaders)
	diff("access-log", cur.AccessLog != next.AccessLog)
	out = append(out, cur.Table.Restart(&next.Table)...)
	diff("route-header", cur.RouteHeader != next.RouteHeader)
	diff("tls-cert", cur.TLSCert != next.TLSCert || cur.TLSKey != next.TLSKey)
	diff("admin-tls-cert", cur.AdminTLSCert != next.AdminTLSCert || cur.AdminTLSKey != next.AdminTLSKey)
	diff("admin-token", cur.AdminToken != next.AdminToken)
	diff("upstream-ca", cur.UpstreamCA != next.UpstreamCA || cur.UpstreamCert != next.UpstreamCert || cur.UpstreamKey != next.UpstreamKey)
	out = append(out, cur.Telemetry.Restart(&next.Telemetry)...)
	diff("discovery-interval", cur.DiscoveryInterval != next.DiscoveryInterval)
	diff("pd-protocol", cur.PD.Protocol != next.PD.Protocol)
	diff("pd-threshold", cur.PD.Threshold != next.PD.Threshold)
	out = append(out, cur.Routing.Restart(&next.Routing)...)
	return out
}

// startScraper scrapes u's engine metrics while ctx lives (--engine-metrics).
func (s *Server) startScraper(ctx context.Context, u *upstream) {
	if !s.scraping {
		if t := s.tokensFor(u); t > 0 {
			s.table.SetBackendCapacity(u.b.Index, s.cal.Blocks("", t, s.cfg.Table.BlockSize))
		}
		return
	}
	sc := telemetry.New([]*sched.Backend{u.b}, s.scraperConfig(s.tokensFor(u)))
	s.loops.Add(1)
	go func() { defer s.loops.Done(); sc.Run(ctx) }()
}

// tokensFor is u's --backend-cache-tokens: the one value for all, or the
// value at u's place in the configured list.
func (s *Server) tokensFor(u *upstream) int64 {
	t := s.cacheTokens
	switch len(t) {
	case 0:
		return 0
	case 1:
		return t[0]
	}
	for i, raw := range s.spec {
		if raw == u.addr.origin && i < len(t) {
			return t[i]
		}
	}
	return 0
}

// key identifies a configured backend across reloads: the same URL with
// the same fixed models, Host and role is the same backend. A backend
// whose role or bootstrap port changes is replaced by a new one (its
// engine restarts for the new role anyway, and with it its cache).
func (a backendAddr) key() string {
	return a.url + "|" + a.authority + "#" + strings.Join(a.models, ",") + "|" + a.role.String() + ":" + strconv.Itoa(a.bootstrapPort)
}

// name is the backend's metrics label: host:port, and the path prefix
// when the backend has one (two engines behind one gateway stay apart).
func (a backendAddr) name() string { return a.host + a.prefix }
