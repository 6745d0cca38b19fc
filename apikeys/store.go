package apikeys

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// DefaultPoll is how often Watch checks the keys file for a change.
const DefaultPoll = 2 * time.Second

// Store is the keys file in force. Lookups read it through an atomic
// pointer; a reload parses the whole file first and swaps only a file
// that parsed, so a bad edit keeps the previous keys serving.
type Store struct {
	path string
	log  *slog.Logger
	cur  atomic.Pointer[Set]

	mu      sync.Mutex // serialises reloads; guards reg, stamp, onLoad
	reg     ids
	stamp   fileStamp
	onLoad  []func(*Set)
	metrics *metrics.Set
	reloads *metrics.Counter
	failed  *metrics.Counter
	missing *metrics.Counter
	invalid *metrics.Counter
	keys    atomic.Int64
}

// fileStamp is what tells a changed file from an unchanged one without
// reading it: size, modification time, inode (a rename-over changes it),
// and the digest of the content last loaded.
type fileStamp struct {
	size  int64
	mtime int64
	ino   uint64
	sum   [sha256.Size]byte
}

// Open loads the keys file at path. log may be nil.
func Open(path string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{path: path, log: log, metrics: metrics.NewSet()}
	s.reloads = s.metrics.NewCounter(`kvca_apikeys_reloads_total{result="ok"}`)
	s.failed = s.metrics.NewCounter(`kvca_apikeys_reloads_total{result="error"}`)
	s.missing = s.metrics.NewCounter(`kvca_apikeys_refused_total{reason="missing"}`)
	s.invalid = s.metrics.NewCounter(`kvca_apikeys_refused_total{reason="invalid"}`)
	s.metrics.NewGauge(`kvca_apikeys_keys`, func() float64 { return float64(s.keys.Load()) })
	if _, err := s.reload(true); err != nil {
		return nil, err
	}
	return s, nil
}

// Current returns the set in force.
func (s *Store) Current() *Set { return s.cur.Load() }

// Lookup finds the tenant of a presented key in the set in force; it
// allocates nothing.
func (s *Store) Lookup(key []byte) (*Tenant, bool) { return s.cur.Load().Lookup(key) }

// Refused counts a request answered 401: missing (no key presented) or
// invalid (a key the file does not list).
func (s *Store) Refused(missing bool) {
	if missing {
		s.missing.Inc()
	} else {
		s.invalid.Inc()
	}
}

// OnLoad registers f to be called with every set about to come into
// force (and at once with the current one), before lookups can see it:
// per-tenant state sized from it is in place when a request of a new
// tenant arrives.
func (s *Store) OnLoad(f func(*Set)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onLoad = append(s.onLoad, f)
	f(s.cur.Load())
}

// WritePrometheus writes the store's metrics (reloads and key count; never
// a key or digest).
func (s *Store) WritePrometheus(w interface{ Write([]byte) (int, error) }) {
	s.metrics.WritePrometheus(w)
}

// Reload re-reads the file now, whether or not it looks changed. On error
// the set in force stays.
func (s *Store) Reload() error {
	_, err := s.reload(true)
	return err
}

// reload re-reads the file if it changed (or always if force) and reports
// whether a new set came into force.
func (s *Store) reload(force bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before, err := stat(s.path)
	if err != nil {
		return false, s.fail(err)
	}
	if !force && before.size == s.stamp.size && before.mtime == s.stamp.mtime && before.ino == s.stamp.ino {
		return false, nil
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return false, s.fail(err)
	}
	after, err := stat(s.path)
	if err != nil {
		return false, s.fail(err)
	}
	if after.size != before.size || after.mtime != before.mtime || after.ino != before.ino || int64(len(data)) != after.size {
		// Written to while we read: the next poll reads it whole. (Write
		// a new file and rename it over the old one to never be seen
		// half-written.)
		return false, nil
	}
	after.sum = sha256.Sum256(data)
	if !force && after.sum == s.stamp.sum && s.cur.Load() != nil {
		s.stamp = after // touched, not changed
		return false, nil
	}
	reg := s.reg // parse into a copy: a file that fails assigns no IDs
	reg.byName = make(map[string]int, len(s.reg.byName))
	for k, v := range s.reg.byName {
		reg.byName[k] = v
	}
	reg.names = append([]string(nil), s.reg.names...)
	set, err := parse(bytes.NewReader(data), &reg)
	if err != nil {
		s.stamp = after // do not re-parse the same bad bytes each poll
		return false, s.fail(err)
	}
	s.reg, s.stamp = reg, after
	for _, f := range s.onLoad {
		f(set)
	}
	s.cur.Store(set)
	s.keys.Store(int64(set.keys))
	s.reloads.Inc()
	s.log.Info("api keys loaded", "file", s.path, "keys", set.keys, "tenants", len(set.Tenants()))
	return true, nil
}

func (s *Store) fail(err error) error {
	s.failed.Inc()
	err = fmt.Errorf("api keys %s: %w", s.path, err)
	if s.cur.Load() != nil {
		s.log.Error("api keys not reloaded; the previous keys stay in force", "err", err)
	}
	return err
}

func stat(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st, nil
}

// Watch re-reads the file when it changes (checked every poll; 0 means
// DefaultPoll) and on SIGHUP, until stop is called.
func (s *Store) Watch(poll time.Duration) (stop func()) {
	if poll <= 0 {
		poll = DefaultPoll
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-hup:
				_ = s.Reload()
			case <-t.C:
				_, _ = s.reload(false)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(hup)
			close(done)
			wg.Wait()
		})
	}
}
