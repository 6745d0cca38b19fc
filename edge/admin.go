package edge

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"

	"github.com/kvca/kvca/admit"
	"github.com/kvca/kvca/sched"
	"github.com/kvca/kvca/telemetry"
)

// BackendState is one backend in /admin/state.
type BackendState struct {
	// Index is the backend's slot: its index in the block table, in
	// metrics of the scheduler and in the KDN API. Removed backends are
	// not listed, so after a reload it may differ from the position.
	Index      int    `json:"index"`
	URL        string `json:"url"`
	EndpointID string `json:"endpoint_id"`
	// Role is the backend's part in a disaggregated fleet (prefill,
	// decode, both); BootstrapPort its SGLang bootstrap port.
	Role          string `json:"role"`
	BootstrapPort int    `json:"bootstrap_port,omitempty"`
	Generation    uint32 `json:"generation"`
	Healthy       bool   `json:"healthy"`
	Active        int64  `json:"active"`
	PrefillBlocks int64  `json:"prefill_blocks"`
	Load          int64  `json:"load"`
	// Engine is what the engine's own metrics say (--engine-metrics).
	Engine *telemetry.BackendState `json:"engine,omitempty"`
	// CacheCheck is how the answers' cached-token counts compared with
	// what kvca predicted (--cache-check), and the trust it earns.
	CacheCheck sched.FeedbackState `json:"cache_check"`
}

// TableState is the block table in /admin/state.
type TableState struct {
	Blocks    int `json:"blocks"`
	Locations int `json:"locations"`
	Capacity  int `json:"capacity"`
}

// State is the /admin/state document.
type State struct {
	Backends []BackendState `json:"backends"`
	Table    TableState     `json:"table"`
	// TTFT is the ttft policy's learned model per backend.
	TTFT sched.TTFTState `json:"ttft"`
	// Admission is the admission queue and the backends' slots.
	Admission *admit.State `json:"admission,omitempty"`
	// Pools is the backends by role (prefill, decode, both), each pool's
	// health and load apart.
	Pools map[string]PoolState `json:"pools"`
}

// State snapshots the backends and the table.
func (s *Server) State() State {
	fl := s.fleet()
	st := State{Backends: make([]BackendState, 0, len(fl.ups))}
	now := time.Now()
	for _, u := range fl.live() {
		b := u.b
		a, p := b.Active(), b.Prefill()
		st.Backends = append(st.Backends, BackendState{
			Index:         b.Index,
			URL:           b.URL,
			EndpointID:    u.endpoint,
			Role:          u.addr.role.String(),
			BootstrapPort: u.bootstrapPort(s.cfg.PD.Protocol),
			Generation:    s.table.Generation(b.Index),
			Healthy:       b.Healthy(),
			Active:        a,
			PrefillBlocks: p,
			Load:          a*int64(fl.sched.ActiveWeight) + p,
			Engine:        s.engineState(b.Index),
			CacheCheck:    fl.sched.Feedback(b, now),
		})
	}
	ts := s.table.Stats()
	st.Table = TableState{Blocks: ts.Blocks, Locations: ts.Locations, Capacity: ts.Capacity}
	st.TTFT = fl.sched.TTFTSnapshot()
	st.Pools = fl.poolStates()
	if s.adm.Limited() {
		a := s.adm.Snapshot()
		st.Admission = &a
	}
	return st
}

// handleAdmin serves the admin listener, which must never be the public one:
// it exposes cache state and, with the KDN API, cache operations.
func (s *Server) handleAdmin(ctx *fasthttp.RequestCtx) {
	if s.cfg.AdminToken != "" && !s.adminAuthorized(ctx) {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="kvca-admin"`)
		writeError(ctx, fasthttp.StatusUnauthorized, "authentication_error", "unauthorized", "the admin listener requires a bearer token")
		return
	}
	path := string(ctx.Path())
	switch {
	case path == "/metrics":
		ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		var buf bytes.Buffer
		s.m.set.WritePrometheus(&buf)
		metrics.WriteProcessMetrics(&buf)
		metrics.WriteFDMetrics(&buf)
		writeWithHelp(ctx, buf.Bytes())
		return
	case path == "/admin/state":
		writeJSON(ctx, fasthttp.StatusOK, s.State())
		return
	case path == "/health":
		ctx.SetBodyString("ok\n")
		return
	case s.cfg.Pprof && strings.HasPrefix(path, "/debug/pprof"):
		pprofhandler.PprofHandler(ctx)
		return
	}
	if h, ok := s.adminRoutes[path]; ok {
		h(ctx)
		return
	}
	for p, h := range s.adminRoutes {
		if strings.HasSuffix(p, "/") && strings.HasPrefix(path, p) {
			h(ctx)
			return
		}
	}
	writeError(ctx, fasthttp.StatusNotFound, "invalid_request_error", "not_found", "unknown admin path")
}

// adminAuthorized checks the bearer token in constant time.
func (s *Server) adminAuthorized(ctx *fasthttp.RequestCtx) bool {
	got, ok := bytes.CutPrefix(ctx.Request.Header.Peek("Authorization"), []byte("Bearer "))
	return ok && subtle.ConstantTimeCompare(got, []byte(s.cfg.AdminToken)) == 1
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, "server_error", "encode", "could not encode the answer")
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}

// writeError answers an admin request in OpenAI's error shape.
func writeError(ctx *fasthttp.RequestCtx, status int, typ, code, msg string) {
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyRaw(appendErrorBody(make([]byte, 0, 128+len(msg)), typ, code, msg))
}
