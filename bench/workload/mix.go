package workload

import (
	"math/rand/v2"
	"sort"
	"strconv"
)

// Admission headers: the class and the tenant kvca's admission queue
// serves a request by (docs/admission.md).
const (
	PriorityHeader = "X-KVCA-Priority"
	TenantHeader   = "X-KVCA-Tenant"
)

// SetClass gives a share of w's conversations (chosen by seed, each
// conversation whole) the priority class class, sent as X-KVCA-Priority.
// A conversation keeps one class, as a client of one kind sends it.
func SetClass(w *Workload, class string, share float64, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x70726973))
	chosen := map[int]bool{}
	for i := range w.Requests {
		r := &w.Requests[i]
		pick, seen := chosen[r.Session]
		if !seen {
			pick = rng.Float64() < share
			chosen[r.Session] = pick
		}
		if pick {
			r.Class = class
		}
	}
}

// SetBodyPriority adds `"priority": prio` (vLLM's field: lower is served
// first) to the body of each request of w of class class, for engines
// that schedule by it; kvca reads the X-KVCA-Priority header first.
func SetBodyPriority(w *Workload, class string, prio int) {
	for i := range w.Requests {
		r := &w.Requests[i]
		if r.Class != class {
			continue
		}
		r.Body = withPriority(r.Body, prio)
		if r.Full != nil {
			r.Full = withPriority(r.Full, prio)
		}
	}
}

// withPriority puts the member first in the JSON object body.
func withPriority(body []byte, prio int) []byte {
	if len(body) < 2 || body[0] != '{' {
		return body
	}
	out := append([]byte(`{"priority":`), strconv.Itoa(prio)...)
	if body[1] != '}' {
		out = append(out, ',')
	}
	return append(out, body[1:]...)
}

// SpreadTenants names n tenants prefix0 … prefix<n-1> and gives each
// conversation of w one of them in turn, sent as X-KVCA-Tenant.
func SpreadTenants(w *Workload, prefix string, n int) {
	n = max(n, 1)
	for i := range w.Requests {
		r := &w.Requests[i]
		r.Tenant = prefix + strconv.Itoa(r.Session%n)
	}
}

// SetTenant makes every request of w tenant name's.
func SetTenant(w *Workload, name string) {
	for i := range w.Requests {
		w.Requests[i].Tenant = name
	}
}

// Merge interleaves b's requests into a by arrival time; b's conversations
// are renumbered after a's. Responses API continuations (Continues) are
// not carried over, so neither workload may hold any.
func Merge(name string, a, b *Workload) *Workload {
	base := 0
	for _, r := range a.Requests {
		base = max(base, r.Session+1)
	}
	out := &Workload{Name: name, Requests: make([]Request, 0, len(a.Requests)+len(b.Requests))}
	out.Requests = append(out.Requests, a.Requests...)
	for _, r := range b.Requests {
		r.Session += base
		out.Requests = append(out.Requests, r)
	}
	sort.SliceStable(out.Requests, func(i, j int) bool { return out.Requests[i].At < out.Requests[j].At })
	return out
}
