// Package affinity remembers which backend a conversation is bound to: the
// backend that produced a Responses API response (the only one that stores
// it, so a request continuing it with previous_response_id must go there),
// or the backend that serves a session the client named (prompt_cache_key,
// a session header, a user id). Keys are 64-bit keyed hashes, never the
// names themselves.
//
// A Map is bounded (a fixed number of slots allocated once), entries expire
// after a TTL, and it is lock-striped: a key's shard is chosen by its low
// bits, each shard a mutex over set-associative buckets. Lookup and Bind
// allocate nothing.
package affinity

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Kind says what a Map's keys name; it labels the metrics and the cluster's
// messages.
type Kind uint8

const (
	// Responses maps a response id's hash to the backend that produced it.
	Responses Kind = 1
	// Sessions maps a session key's hash to the backend serving it.
	Sessions Kind = 2
)

func (k Kind) String() string {
	switch k {
	case Responses:
		return "response"
	case Sessions:
		return "session"
	}
	return "unknown"
}

// Peer shares a Map's bindings with other replicas (clustering). Bound is
// called on the request path, so it must only copy and return.
type Peer interface {
	// Bound: key (a hash of kind) was bound to backend at at (Unix ms).
	Bound(kind Kind, key uint64, backend int, at int64)
}

// Config sizes a Map.
type Config struct {
	// Entries bounds the bindings kept; rounded up to a power of two of at
	// least shards × ways. Default 1<<18.
	Entries int
	// TTL: a binding not refreshed for this long is forgotten. Default 1h.
	TTL time.Duration
}

const (
	shards = 64 // a power of two
	ways   = 8  // slots per bucket: a key lives in one bucket of one shard
)

type entry struct {
	key     uint64 // 0: empty
	at      int64  // Unix ms of the latest bind
	pub     int64  // Unix ms the binding was last given to the peer
	backend int32
}

type shard struct {
	mu    sync.Mutex
	slots []entry  // buckets of ways slots
	_     [32]byte // one shard per cache line
}

// Map is a bounded, TTL'd, lock-striped map from a key hash to a backend
// index. It is safe for concurrent use.
type Map struct {
	kind    Kind
	ttl     atomic.Int64 // ms; SetTTL changes it live
	bmask   uint64
	sh      [shards]shard
	peer    Peer
	entries atomic.Int64

	set                   *metrics.Set
	hits, misses, expired *metrics.Counter
	unavailable           *metrics.Counter
	binds, applied        *metrics.Counter
	evictions             *metrics.Counter
}

// New returns an empty Map of kind.
func New(kind Kind, cfg Config) *Map {
	if cfg.Entries <= 0 {
		cfg.Entries = 1 << 18
	}
	if cfg.TTL <= 0 {
		cfg.TTL = time.Hour
	}
	perShard := ways
	for perShard*shards < cfg.Entries {
		perShard <<= 1
	}
	m := &Map{kind: kind, bmask: uint64(perShard/ways - 1)}
	m.SetTTL(cfg.TTL)
	for i := range m.sh {
		m.sh[i].slots = make([]entry, perShard)
	}
	s := metrics.NewSet()
	m.set = s
	l := `{map="` + kind.String() + `"`
	m.hits = s.NewCounter(`kvca_affinity_lookups_total` + l + `,result="hit"}`)
	m.misses = s.NewCounter(`kvca_affinity_lookups_total` + l + `,result="miss"}`)
	m.expired = s.NewCounter(`kvca_affinity_lookups_total` + l + `,result="expired"}`)
	m.unavailable = s.NewCounter(`kvca_affinity_unavailable_total` + l + `}`)
	m.binds = s.NewCounter(`kvca_affinity_binds_total` + l + `}`)
	m.applied = s.NewCounter(`kvca_affinity_applied_total` + l + `}`)
	m.evictions = s.NewCounter(`kvca_affinity_evictions_total` + l + `}`)
	s.NewGauge(`kvca_affinity_entries`+l+`}`, func() float64 { return float64(m.entries.Load()) })
	s.NewGauge(`kvca_affinity_capacity`+l+`}`, func() float64 { return float64(m.Capacity()) })
	return m
}

// Kind returns what the map's keys name.
func (m *Map) Kind() Kind { return m.kind }

// TTL returns the binding lifetime.
func (m *Map) TTL() time.Duration { return time.Duration(m.ttl.Load()) * time.Millisecond }

// SetTTL changes the binding lifetime, for every binding at once.
func (m *Map) SetTTL(d time.Duration) { m.ttl.Store(max(d.Milliseconds(), 1)) }

// Capacity is the number of slots.
func (m *Map) Capacity() int { return shards * len(m.sh[0].slots) }

// SetPeer installs clustering; call before the map is used.
func (m *Map) SetPeer(p Peer) { m.peer = p }

// WritePrometheus writes the map's series (for /metrics on the admin
// listener).
func (m *Map) WritePrometheus(w io.Writer) { m.set.WritePrometheus(w) }

func (m *Map) bucket(key uint64) (*shard, []entry) {
	sh := &m.sh[key&(shards-1)]
	b := int((key>>6)&m.bmask) * ways
	return sh, sh.slots[b : b+ways]
}

// Lookup returns the backend key is bound to, if the binding is younger
// than the TTL at now (Unix ms). Hits and misses are counted.
func (m *Map) Lookup(key uint64, now int64) (backend int, ok bool) {
	if key == 0 {
		return 0, false
	}
	sh, bk := m.bucket(key)
	sh.mu.Lock()
	for i := range bk {
		e := &bk[i]
		if e.key != key {
			continue
		}
		if now-e.at > m.ttl.Load() {
			*e = entry{}
			sh.mu.Unlock()
			m.entries.Add(-1)
			m.expired.Inc()
			return 0, false
		}
		backend = int(e.backend)
		sh.mu.Unlock()
		m.hits.Inc()
		return backend, true
	}
	sh.mu.Unlock()
	m.misses.Inc()
	return 0, false
}

// Bind binds key to backend as of now (Unix ms), replacing any earlier
// binding, and gives it to the peer when it is new, moved, or last given
// a quarter of the TTL ago (so peers' copies never expire while it is in
// use, and a busy session costs few messages).
func (m *Map) Bind(key uint64, backend int, now int64) {
	if key == 0 {
		return
	}
	m.binds.Inc()
	sh, bk := m.bucket(key)
	sh.mu.Lock()
	e, fresh := m.slot(bk, key, now)
	share := fresh || e.backend != int32(backend) || now-e.pub >= m.ttl.Load()/4
	e.key, e.backend, e.at = key, int32(backend), now
	if share {
		e.pub = now
	}
	sh.mu.Unlock()
	if share && m.peer != nil {
		m.peer.Bound(m.kind, key, backend, now)
	}
}

// Claim binds key to backend unless it is already bound (and not
// expired), and returns the backend it is bound to after the call: the
// first of requests racing to bind a new key wins, and the others can
// follow it.
func (m *Map) Claim(key uint64, backend int, now int64) int {
	return m.Follow(key, -1, backend, now)
}

// Follow moves key's binding from backend from to backend to (from < 0:
// key was not bound when the caller looked) and returns where key is
// bound after the call. The move is a compare-and-swap: when another
// request moved or claimed key since the caller looked, key stays where
// that request put it and its backend is returned, so siblings that
// overflow their session's backend at once follow the first of them
// instead of scattering. An unbound or expired key is bound to to; a key
// already on to is refreshed.
func (m *Map) Follow(key uint64, from, to int, now int64) int {
	if key == 0 {
		return to
	}
	sh, bk := m.bucket(key)
	sh.mu.Lock()
	e, fresh := m.slot(bk, key, now)
	live := !fresh && now-e.at <= m.ttl.Load()
	if live && int(e.backend) != to && int(e.backend) != from {
		b := int(e.backend)
		e.at = now
		sh.mu.Unlock()
		return b
	}
	moved := !live || int(e.backend) != to
	share := moved || now-e.pub >= m.ttl.Load()/4
	e.key, e.backend, e.at = key, int32(to), now
	if share {
		e.pub = now
	}
	sh.mu.Unlock()
	if moved {
		m.binds.Inc()
	}
	if share && m.peer != nil {
		m.peer.Bound(m.kind, key, to, now)
	}
	return to
}

// Apply records a binding another replica made at at (Unix ms), unless
// this map knows a newer one. It is not given back to the peer.
func (m *Map) Apply(key uint64, backend int, at int64) {
	if key == 0 {
		return
	}
	sh, bk := m.bucket(key)
	sh.mu.Lock()
	e, fresh := m.slot(bk, key, at)
	if fresh || at >= e.at {
		e.key, e.backend, e.at = key, int32(backend), at
		// Heard from the cluster: no need to repeat it soon.
		e.pub = at
		m.applied.Inc()
	}
	sh.mu.Unlock()
}

// slot finds key's entry in its bucket, or takes an empty or expired slot,
// or evicts the bucket's least recently bound one; fresh reports that the
// entry did not hold key. The caller holds the shard's lock.
func (m *Map) slot(bk []entry, key uint64, now int64) (e *entry, fresh bool) {
	var free, oldest *entry
	for i := range bk {
		s := &bk[i]
		switch {
		case s.key == key:
			return s, false
		case s.key == 0 || now-s.at > m.ttl.Load():
			if free == nil {
				free = s
			}
		case oldest == nil || s.at < oldest.at:
			oldest = s
		}
	}
	if free != nil {
		if free.key == 0 {
			m.entries.Add(1)
		}
		*free = entry{}
		return free, true
	}
	m.evictions.Inc()
	*oldest = entry{}
	return oldest, true
}

// Unavailable counts a hit whose backend could not take the request (it
// was unhealthy or excluded, so the request was routed elsewhere).
func (m *Map) Unavailable() { m.unavailable.Inc() }

// Forget drops every binding to backend (it was removed, or lost the
// state the bindings point at).
func (m *Map) Forget(backend int) int {
	n := 0
	for i := range m.sh {
		sh := &m.sh[i]
		sh.mu.Lock()
		for j := range sh.slots {
			if e := &sh.slots[j]; e.key != 0 && e.backend == int32(backend) {
				*e = entry{}
				n++
			}
		}
		sh.mu.Unlock()
	}
	m.entries.Add(int64(-n))
	return n
}

// Stats are a map's counters since New.
type Stats struct {
	Hits, Misses, Expired, Unavailable uint64
	Binds, Applied, Evictions          uint64
	Entries, Capacity                  int
}

// Stats returns the map's counters.
func (m *Map) Stats() Stats {
	return Stats{
		Hits: m.hits.Get(), Misses: m.misses.Get(), Expired: m.expired.Get(), Unavailable: m.unavailable.Get(),
		Binds: m.binds.Get(), Applied: m.applied.Get(), Evictions: m.evictions.Get(),
		Entries: int(m.entries.Load()), Capacity: m.Capacity(),
	}
}

func (s Stats) String() string {
	return fmt.Sprintf("hits %d misses %d expired %d unavailable %d binds %d applied %d evictions %d entries %d/%d",
		s.Hits, s.Misses, s.Expired, s.Unavailable, s.Binds, s.Applied, s.Evictions, s.Entries, s.Capacity)
}
