package edge

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvca/kvca/chain"
)

// Role is what a backend does in a fleet that splits prefill from decode
// (docs/disaggregation.md): a prefill worker computes prompts and hands
// their KV cache over, a decode worker generates from a KV cache it was
// handed (or, aggregated, from a prompt it computes itself), and a
// backend of both roles is an ordinary, aggregated engine.
type Role uint8

const (
	RoleBoth    Role = iota // aggregated: prefill and decode (the default)
	RolePrefill             // prefill worker: takes prefill legs only
	RoleDecode              // decode worker: decode legs, and aggregated requests
	numRoles
)

var roleNames = [numRoles]string{"both", "prefill", "decode"}

func (r Role) String() string { return roleNames[r] }

// Prefills reports whether a backend of role r takes prefill legs.
func (r Role) Prefills() bool { return r != RoleDecode }

// Decodes reports whether a backend of role r takes decode legs and
// requests run aggregated.
func (r Role) Decodes() bool { return r != RolePrefill }

func parseRole(s string) (Role, error) {
	for i, n := range roleNames {
		if s == n {
			return Role(i), nil
		}
	}
	return 0, fmt.Errorf("role %q is not one of prefill, decode, both", s)
}

// DefaultBootstrapPort is where an SGLang prefill worker serves the KV
// transfer's bootstrap unless its backend says otherwise.
const DefaultBootstrapPort = 8998

// backendOptions parses a --backend URL's fragment: comma-separated items,
// each a model name or an option NAME=VALUE (role=prefill|decode|both,
// bootstrap-port=N). Strict: an unknown option or a bad value is an error.
func backendOptions(raw, frag string, a *backendAddr) error {
	a.bootstrapPort = DefaultBootstrapPort
	if frag == "" {
		return nil
	}
	for _, item := range strings.Split(frag, ",") {
		item = strings.TrimSpace(item)
		name, val, opt := strings.Cut(item, "=")
		switch {
		case item == "":
			return fmt.Errorf("backend %q: empty model name after #", raw)
		case !opt:
			a.models = append(a.models, item)
		case name == "role":
			r, err := parseRole(val)
			if err != nil {
				return fmt.Errorf("backend %q: %v", raw, err)
			}
			a.role = r
		case name == "bootstrap-port":
			p, err := strconv.Atoi(val)
			if err != nil || p < 1 || p > 65535 {
				return fmt.Errorf("backend %q: bootstrap-port %q is not a port number (1-65535)", raw, val)
			}
			a.bootstrapPort = p
		default:
			return fmt.Errorf("backend %q: unknown option %q after # (options are role= and bootstrap-port=; anything else without = is a model name)", raw, name)
		}
	}
	return nil
}

// pools are a fleet's backends by what they may take: prefill legs
// (prefill), decode legs and aggregated requests (decode), and the
// aggregated engines among them (both). split: some backend has a role
// of its own, so requests may be disaggregated.
type pools struct {
	prefill, decode, both chain.Set
	split                 bool
}

func poolsOf(ups []*upstream) pools {
	var p pools
	for _, u := range ups {
		if u.b.Retired() {
			continue
		}
		r := u.addr.role
		if r.Prefills() {
			p.prefill.Add(u.b.Index)
		}
		if r.Decodes() {
			p.decode.Add(u.b.Index)
		}
		if r == RoleBoth {
			p.both.Add(u.b.Index)
		}
		if r != RoleBoth {
			p.split = true
		}
	}
	return p
}

// PDSettings are the settings of a disaggregated fleet
// (docs/disaggregation.md).
type PDSettings struct {
	// Protocol is how the legs speak to the workers: "vllm" (vLLM's
	// NixlConnector: kv_transfer_params, prefill then decode) or "sglang"
	// (SGLang's bootstrap fields, both legs at once).
	Protocol string
	// Threshold: a request of which fewer prompt tokens than this are
	// uncached on its prefill worker runs aggregated, on a decode worker,
	// without a prefill leg (--pd-threshold).
	Threshold int
}

// The protocols.
const (
	ProtocolVLLM   = "vllm"
	ProtocolSGLang = "sglang"
)

// DefaultPDSettings are the defaults of --pd-protocol and --pd-threshold.
func DefaultPDSettings() PDSettings {
	return PDSettings{Protocol: ProtocolVLLM, Threshold: DefaultPDThreshold}
}

// DefaultPDThreshold is --pd-threshold's default, in prompt tokens
// (docs/disaggregation.md says how it was measured).
const DefaultPDThreshold = 256

// Validate fills the default protocol and reports a mistake.
func (p *PDSettings) Validate() error {
	switch p.Protocol {
	case "":
		p.Protocol = ProtocolVLLM
	case ProtocolVLLM, ProtocolSGLang:
	default:
		return fmt.Errorf("--pd-protocol must be vllm or sglang, got %q", p.Protocol)
	}
	if p.Threshold < 0 {
		return fmt.Errorf("--pd-threshold must not be negative, got %d", p.Threshold)
	}
	return nil
}

// PoolState is one role's backends in /admin/state.
type PoolState struct {
	Backends      []string `json:"backends"`
	Healthy       int      `json:"healthy"`
	Active        int64    `json:"active"`
	PrefillBlocks int64    `json:"prefill_blocks"`
}

// poolStates is the fleet's backends by role, for /admin/state.
func (f *fleet) poolStates() map[string]PoolState {
	out := map[string]PoolState{}
	for _, u := range f.live() {
		r := u.addr.role.String()
		p := out[r]
		p.Backends = append(p.Backends, u.b.Name)
		if u.b.Healthy() {
			p.Healthy++
		}
		p.Active += u.b.Active()
		p.PrefillBlocks += u.b.Prefill()
		out[r] = p
	}
	return out
}

// writePoolMetrics writes the pools' health and load by role.
func (s *Server) writePoolMetrics(w io.Writer) {
	var healthy, total [numRoles]int
	var active, prefill [numRoles]int64
	for _, u := range s.fleet().live() {
		r := u.addr.role
		total[r]++
		if u.b.Healthy() {
			healthy[r]++
		}
		active[r] += u.b.Active()
		prefill[r] += u.b.Prefill()
	}
	for r := range numRoles {
		n := roleNames[r]
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`kvca_pool_backends{role=%q}`, n), uint64(total[r]))
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`kvca_pool_healthy_backends{role=%q}`, n), uint64(healthy[r]))
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`kvca_pool_active_requests{role=%q}`, n), uint64(max(active[r], 0)))
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`kvca_pool_prefill_blocks{role=%q}`, n), uint64(max(prefill[r], 0)))
	}
}
