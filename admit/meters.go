package admit

import (
	"fmt"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// meters are the admission metrics; a nil *meters counts nothing.
type meters struct {
	immediate [NumClasses]*metrics.Counter
	queued    [NumClasses]*metrics.Counter
	shedN     [NumClasses][numReasons]*metrics.Counter
	cancel    [NumClasses]*metrics.Counter
	wait      [NumClasses]*metrics.PrometheusHistogram
	decisions [numRules]*metrics.Counter // by the rule that decided
	set       *metrics.Set
}

// waitBuckets span a few milliseconds to the longest sensible timeout.
var waitBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

func newMeters(a *Admitter, set *metrics.Set) *meters {
	m := &meters{}
	for c := High; c < NumClasses; c++ {
		q := &a.q[c]
		set.NewGauge(fmt.Sprintf(`kvca_admission_queue_length{class=%q}`, c), func() float64 { return float64(q.length.Load()) })
		m.wait[c] = set.NewPrometheusHistogramExt(fmt.Sprintf(`kvca_admission_wait_seconds{class=%q}`, c), waitBuckets)
		m.immediate[c] = set.NewCounter(fmt.Sprintf(`kvca_admission_admitted_total{class=%q,how="immediate"}`, c))
		m.queued[c] = set.NewCounter(fmt.Sprintf(`kvca_admission_admitted_total{class=%q,how="queued"}`, c))
		for r := ReasonQueueFull; r < numReasons; r++ {
			m.shedN[c][r] = set.NewCounter(fmt.Sprintf(`kvca_admission_shed_total{class=%q,reason=%q}`, c, r.Code()))
		}
		m.cancel[c] = set.NewCounter(fmt.Sprintf(`kvca_admission_cancelled_total{class=%q}`, c))
	}
	for r := RuleNone + 1; r < numRules; r++ {
		if r == RuleUnlimited {
			continue // without a limit nothing is counted
		}
		m.decisions[r] = set.NewCounter(fmt.Sprintf(`kvca_admission_decisions_total{rule=%q,decision=%q}`, r, r.Decision()))
	}
	m.set = set
	return m
}

// backend adds the series of the backend now in slot s.
func (m *meters) backend(s *backendSlots, name string) {
	if m == nil {
		return
	}
	m.set.GetOrCreateGauge(fmt.Sprintf(`kvca_admission_inflight{backend=%q}`, name), func() float64 { return float64(s.inflight.Load()) })
	m.set.GetOrCreateGauge(fmt.Sprintf(`kvca_admission_limit{backend=%q}`, name), func() float64 { return float64(s.limit.Load()) })
}

// dropBackend removes a removed backend's series.
func (m *meters) dropBackend(name string) {
	if m == nil {
		return
	}
	m.set.UnregisterMetric(fmt.Sprintf(`kvca_admission_inflight{backend=%q}`, name))
	m.set.UnregisterMetric(fmt.Sprintf(`kvca_admission_limit{backend=%q}`, name))
}

func (m *meters) admitted(t *Ticket) {
	if m == nil {
		return
	}
	if t.fromQueue {
		m.queued[t.Class%NumClasses].Inc()
	} else {
		m.immediate[t.Class%NumClasses].Inc()
	}
}

func (m *meters) granted(c Class, waited int64) {
	if m != nil {
		m.wait[c%NumClasses].Update(time.Duration(waited).Seconds())
	}
}

func (m *meters) shed(c Class, r Reason) {
	if m != nil {
		m.shedN[c%NumClasses][r].Inc()
	}
}

func (m *meters) cancelled(c Class) {
	if m != nil {
		m.cancel[c%NumClasses].Inc()
	}
}

func (m *meters) decided(r Rule) {
	if m != nil && r < numRules && m.decisions[r] != nil {
		m.decisions[r].Inc()
	}
}
