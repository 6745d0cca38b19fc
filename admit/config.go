package admit

import (
	"errors"
	"hash/maphash"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/sched"
)

// Defaults the command line offers.
const (
	DefaultQueueSize       = 1024
	DefaultQueueTimeout    = 10 * time.Second
	DefaultHolderWait      = 250 * time.Millisecond
	DefaultStarvationLimit = 8
	DefaultTenantReserve   = 2
)

// Config sets up an Admitter.
type Config struct {
	// Backends are the scheduler's backends, in Index order: admission
	// grants only healthy ones, and labels its metrics with their names.
	Backends []*sched.Backend
	// MaxInflight is each backend's concurrency limit; 0 is unlimited,
	// and then the admitter is bypassed (Admit, Take and Done return at
	// once and count nothing).
	MaxInflight int
	// QueueSize bounds the waiters; 0 with a limit means no queue: a
	// request no backend has room for is shed at once.
	QueueSize int
	// QueueTimeout is the longest a request waits; 0: DefaultQueueTimeout.
	QueueTimeout time.Duration
	// HolderWait is how long a request with preferred backends (the
	// holders of its prefix) waits for one of them before it may take any
	// eligible backend; 0: it never waits for them.
	HolderWait time.Duration
	// StarvationLimit is K in the starvation rule: a class that has
	// waiters is passed over by at most K grants to higher classes in a
	// row; 0: DefaultStarvationLimit.
	StarvationLimit int
	// EngineAware lets AdaptToEngine lower a backend's limit while its
	// engine reports a queue of its own.
	EngineAware bool
	// MaxPrefill bounds the prefill a request may find waiting ahead of it
	// on a backend: while kvca's requests sent there and not yet at their
	// first byte would take longer than this to prefill (at the backend's
	// learned rate), it takes no request but of class High; 0: no bound.
	// The edge calls PrefillDone as answers begin.
	MaxPrefill time.Duration
	// HighReserve is how many of each backend's MaxInflight slots only
	// class High may take: a lower class is granted a slot there only
	// while more than HighReserve stay free; 0: none.
	HighReserve int
	// TenantReserve is how many of the fleet's free slots the tenants that
	// are not spared (holding at least half the busiest tenant's slots)
	// may not take while the queue sheds and a spared tenant holds slots:
	// they wait for the spared tenants' next requests, which would
	// otherwise wait for a release behind the heavy tenants' waiters;
	// class High is never held back; 0: none.
	TenantReserve int
	// HighPool is how many of the fleet's free slots only class High may
	// take: a lower class is granted a slot only while more than HighPool
	// of the fleet's slots stay free, so that a high-priority request
	// under overload finds a slot at once instead of waiting for the
	// next release; 0: none.
	HighPool int
	// HighPreempts says that the engines preempt a running sequence of
	// lower priority for a high-priority one (SGLang's
	// --enable-priority-scheduling, with the priority in the request's
	// body): a class High request may then take a slot past a backend's
	// limit while fewer than the limit of class High requests hold slots
	// there, since the engine then runs a lower-class sequence it can set
	// aside for it.
	HighPreempts bool
	// Metrics receives the admission metrics; nil: none.
	Metrics *metrics.Set
	// Clock returns unix nanoseconds; nil: the real clock. With a Clock
	// no timer runs, and the caller drives deadlines with Sweep.
	Clock func() int64
}

// New builds an admitter.
func New(cfg Config) (*Admitter, error) {
	if len(cfg.Backends) == 0 || len(cfg.Backends) > chain.MaxBackends {
		return nil, errors.New("admit: backends must be between 1 and the maximum number of backends")
	}
	if cfg.MaxInflight < 0 || cfg.QueueSize < 0 || cfg.QueueTimeout < 0 || cfg.HolderWait < 0 || cfg.StarvationLimit < 0 {
		return nil, errors.New("admit: limits, sizes and durations must not be negative")
	}
	if cfg.MaxInflight > 1<<30 {
		return nil, errors.New("admit: max in-flight per backend is too large")
	}
	if cfg.HighReserve < 0 || cfg.MaxInflight > 0 && cfg.HighReserve >= cfg.MaxInflight {
		return nil, errors.New("admit: the high-priority reserve must be below the in-flight limit")
	}
	if cfg.TenantReserve < 0 || cfg.HighPool < 0 {
		return nil, errors.New("admit: the tenant reserve and the high-priority pool must not be negative")
	}
	if cfg.MaxInflight > 0 && cfg.HighPool >= cfg.MaxInflight*len(cfg.Backends) {
		return nil, errors.New("admit: the high-priority pool must be below the fleet's slots (backends times the in-flight limit)")
	}
	if cfg.QueueTimeout == 0 {
		cfg.QueueTimeout = DefaultQueueTimeout
	}
	if cfg.StarvationLimit == 0 {
		cfg.StarvationLimit = DefaultStarvationLimit
	}
	a := &Admitter{
		cfg:        cfg,
		limited:    cfg.MaxInflight > 0,
		now:        cfg.Clock,
		timeout:    int64(cfg.QueueTimeout),
		holderWait: int64(cfg.HolderWait),
		maxPrefill: cfg.MaxPrefill,
		reserve:    int32(cfg.HighReserve),
		tenantRes:  int32(cfg.TenantReserve),
		pool:       int32(cfg.HighPool),
		k:          cfg.StarvationLimit,
		size:       cfg.QueueSize,
		seed:       maphash.MakeSeed(),
		// Every slot exists from the start, so backends added later
		// (SetBackends) need no resizing under traffic.
		slots: make([]backendSlots, chain.MaxBackends),
	}
	for i, b := range cfg.Backends {
		if b.Index != i {
			return nil, errors.New("admit: backends must be in index order")
		}
	}
	for c := range a.q {
		a.q[c].flows = map[uint64]*flow{}
	}
	if a.now == nil {
		a.now = func() int64 { return time.Now().UnixNano() }
		if a.limited {
			a.timer = time.AfterFunc(time.Hour, a.onTimer)
			a.timer.Stop()
		}
	}
	if cfg.Metrics != nil {
		a.m = newMeters(a, cfg.Metrics)
	}
	a.SetBackends(cfg.Backends)
	return a, nil
}
