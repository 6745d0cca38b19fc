package admit

// State is the admission's picture for /admin/state.
type State struct {
	MaxInflight int `json:"max_inflight_per_backend"` // 0: unlimited
	QueueSize   int `json:"queue_size"`
	// HighPool is the fleet's free slots only class High may take, and
	// Free the free slots of the healthy backends.
	HighPool int            `json:"high_pool,omitempty"`
	Free     int            `json:"free"`
	Queued   int            `json:"queued"`
	Classes  []ClassState   `json:"classes"`
	Backends []BackendState `json:"backends"`
	// ReleaseRate is the smoothed rate at which slots were freed (per
	// second), what Retry-After is computed from.
	ReleaseRate float64 `json:"release_rate"`
}

// ClassState is one class's queue.
type ClassState struct {
	Class   string  `json:"class"`
	Queued  int     `json:"queued"`
	Tenants int     `json:"tenants"`
	Oldest  float64 `json:"oldest_wait_seconds"`
	Passed  int     `json:"passed_over"`
}

// BackendState is one backend's slots.
type BackendState struct {
	Index    int `json:"index"`
	Inflight int `json:"inflight"`
	Limit    int `json:"limit"`
	// High is how many of the slots class High holds (with engines that
	// preempt for it only).
	High int `json:"high,omitempty"`
}

// Snapshot returns the current state (it allocates: for the admin API).
func (a *Admitter) Snapshot() State {
	st := State{MaxInflight: a.cfg.MaxInflight, QueueSize: a.cfg.QueueSize, HighPool: a.cfg.HighPool}
	if a.limited {
		st.Free = int(a.fleetFree(0))
	}
	for i := range int(a.used.Load()) {
		st.Backends = append(st.Backends, BackendState{Index: i, Inflight: a.Inflight(i), Limit: a.Limit(i), High: int(a.slots[i].high.Load())})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	st.Queued = a.n
	st.ReleaseRate = a.rate
	for c := High; c < NumClasses; c++ {
		q := &a.q[c]
		cs := ClassState{Class: c.String(), Queued: q.n, Tenants: q.tenants.n, Passed: a.passed[c]}
		if q.head != nil {
			cs.Oldest = float64(now-q.head.enq) / 1e9
		}
		st.Classes = append(st.Classes, cs)
	}
	return st
}
