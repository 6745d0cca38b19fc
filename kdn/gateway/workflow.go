package gateway

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvca/kvca/kdn"
)

// Step is one checked step of an executable workflow (§10.1, §11.1).
type Step struct {
	Name string // e.g. "10.1/8 prefetch intent"
	Want string // what the specification requires
	Got  string // what the gateway answered
	OK   bool
}

// PrintSteps writes one line per step and returns how many failed.
func PrintSteps(w io.Writer, steps []Step) int {
	failed := 0
	for _, s := range steps {
		mark := "ok  "
		if !s.OK {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "%s %-46s want %-28s got %s\n", mark, s.Name, s.Want, s.Got)
	}
	fmt.Fprintf(w, "%d steps, %d failed\n", len(steps), failed)
	return failed
}

// recorder collects steps; every response it sees must also pass the
// contract (kdn.Encode validates), so a gateway bug fails the workflow.
type recorder struct {
	steps []Step
}

func (r *recorder) add(name, want, got string, ok bool) {
	r.steps = append(r.steps, Step{Name: name, Want: want, Got: got, OK: ok})
}

// request checks that a hand-built request would pass the wire decoder.
func (r *recorder) request(name string, m kdn.Message) {
	if err := kdn.Validate(m); err != nil {
		r.add(name, "valid request", "invalid request: "+err.Error(), false)
	}
}

// response records a step whose answer must be valid, have outcome want
// and satisfy cond.
func (r *recorder) response(name string, want kdn.OutcomeCode, m kdn.Message, base kdn.CacheServiceResponse, cond bool) kdn.CacheServiceResponse {
	got := describe(base)
	ok := cond && base.Outcome == want
	if _, err := kdn.Encode(m); err != nil {
		got = "INVALID RESPONSE " + err.Error()
		ok = false
	}
	r.add(name, string(want), got, ok)
	return base
}

// describe summarises a response in one line.
func describe(r kdn.CacheServiceResponse) string {
	var b strings.Builder
	b.WriteString(string(r.Outcome))
	if e, ok := r.Error.Get(); ok {
		fmt.Fprintf(&b, " %q", e.Message)
		if e.Retryable {
			b.WriteString(" retryable")
		}
		if e.FallbackEligible {
			b.WriteString(" fallback_eligible")
		}
	}
	if a, ok := r.Artifact.Get(); ok {
		fmt.Fprintf(&b, " artifact=%s", a.ID())
	}
	if o, ok := r.Observation.Get(); ok {
		fmt.Fprintf(&b, " observation=%s fresh=%t", o.State, o.FreshAt(r.Timestamp))
	}
	if t, ok := r.Operation.Get(); ok {
		fmt.Fprintf(&b, " task=%s op=%s state=%s attempt=%d", t.TaskID, t.Operation, t.State, t.Attempt)
	}
	if eps, ok := r.Endpoints.Get(); ok {
		fmt.Fprintf(&b, " endpoints=%d", len(eps))
	}
	if c, ok := r.TokenCoverage.Get(); ok {
		fmt.Fprintf(&b, " hit=%t ranges=[", c.WholeRequestHit)
		for i, rg := range c.CoveredRanges {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "[%d,%d]", rg.Start, rg.End)
		}
		fmt.Fprintf(&b, "] total=%d", c.TotalTokens)
	}
	if r.AdapterSummary.IsSet() {
		b.WriteString(" adapter_summary")
	}
	if r.TierSummary.IsSet() {
		b.WriteString(" tier_summary")
	}
	if r.MaintenanceSummary.IsSet() {
		b.WriteString(" maintenance_summary")
	}
	if id, ok := r.CorrelationID.Get(); ok {
		fmt.Fprintf(&b, " request_id=%s correlation_id=%s", r.RequestID, id)
	}
	return b.String()
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
