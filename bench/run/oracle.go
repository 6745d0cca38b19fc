package run

import (
	"bytes"
	"fmt"
	"io"
	"strconv"

	"github.com/kvca/kvca/bench/workload"
)

// OraclePolicy is no proxy at all: the client pins each conversation to
// one engine, dealt in turn as conversations start, which is what a
// perfectly sticky router with perfectly even placement would do.
const OraclePolicy = "sticky-oracle"

type oracle struct{}

func (oracle) URL() string  { return "" }
func (oracle) Close() error { return nil }

// oracleBases returns, for the oracle, each request's engine; nil otherwise.
func oracleBases(policy string, w *workload.Workload, backends []string) []string {
	if policy != OraclePolicy {
		return nil
	}
	home := map[int]string{}
	out := make([]string, len(w.Requests))
	for i, r := range w.Requests {
		b, ok := home[r.Session]
		if !ok {
			b = backends[len(home)%len(backends)]
			home[r.Session] = b
		}
		out[i] = b
	}
	return out
}

var cachedKey = []byte(`"cached_tokens":`)

// cachedTokens reads prompt_tokens_details.cached_tokens from a usage event.
func cachedTokens(payload []byte) (int, bool) {
	i := bytes.Index(payload, cachedKey)
	if i < 0 {
		return 0, false
	}
	rest := payload[i+len(cachedKey):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.Atoi(string(rest[:j]))
	return n, err == nil
}

// coldFirstTurns counts the answered first turns with a known shared
// prefix, and those whose engine had less than half of it cached (the
// template's opening is shared by every prompt, so "any hit" would not do).
func coldFirstTurns(w *workload.Workload, outs []outcome) (first, cold int) {
	for i, r := range w.Requests {
		o := outs[i]
		if r.Turn != 0 || r.Prefix == 0 || o.err != nil || o.cached < 0 {
			continue
		}
		first++
		if o.cached < r.PrefixTokens/2 {
			cold++
		}
	}
	return first, cold
}

// distinctPrefixes is how many shared prefixes the first turns start with.
func distinctPrefixes(w *workload.Workload) int {
	seen := map[int]bool{}
	for _, r := range w.Requests {
		if r.Turn == 0 && r.Prefix != 0 {
			seen[r.Prefix] = true
		}
	}
	return len(seen)
}

func writeCold(w io.Writer, r *Report) {
	if r.Workload.DistinctPrefixes == 0 {
		return
	}
	for _, res := range r.Results {
		fmt.Fprintf(w, "%s: %d cold first turns of %d (distinct prefixes %d)\n",
			res.Policy, res.ColdFirstTurns, res.FirstTurns, r.Workload.DistinctPrefixes)
	}
}
