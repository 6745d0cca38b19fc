package affinity

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

type bound struct {
	kind    Kind
	key     uint64
	backend int
	at      int64
}

type recorder struct {
	mu  sync.Mutex
	got []bound
}

func (r *recorder) Bound(kind Kind, key uint64, backend int, at int64) {
	r.mu.Lock()
	r.got = append(r.got, bound{kind, key, backend, at})
	r.mu.Unlock()
}

func TestLookupBindExpire(t *testing.T) {
	m := New(Sessions, Config{Entries: 1024, TTL: time.Second})
	if _, ok := m.Lookup(42, 0); ok {
		t.Fatal("empty map hit")
	}
	m.Bind(42, 3, 1000)
	if b, ok := m.Lookup(42, 1999); !ok || b != 3 {
		t.Fatalf("lookup %d %v", b, ok)
	}
	m.Bind(42, 5, 1500) // moved
	if b, ok := m.Lookup(42, 2500); !ok || b != 5 {
		t.Fatalf("after rebind %d %v", b, ok)
	}
	if _, ok := m.Lookup(42, 2501); ok {
		t.Fatal("binding outlived its TTL")
	}
	if _, ok := m.Lookup(0, 0); ok {
		t.Fatal("key 0 names nothing")
	}
	st := m.Stats()
	if st.Hits != 2 || st.Misses != 1 || st.Expired != 1 || st.Binds != 2 || st.Entries != 0 {
		t.Fatalf("%v", st)
	}
	var b bytes.Buffer
	m.WritePrometheus(&b)
	if !strings.Contains(b.String(), `kvca_affinity_lookups_total{map="session",result="hit"} 2`) {
		t.Fatalf("metrics:\n%s", b.String())
	}
}

// Keys of one bucket share their shard bits (low 6) and bucket bits.
func sameBucket(i int) uint64 { return uint64(i+1)<<40 | 7 }

func TestBucketEvictsLeastRecentlyBound(t *testing.T) {
	m := New(Responses, Config{Entries: 1, TTL: time.Hour})
	if m.Capacity() != shards*ways {
		t.Fatalf("capacity %d", m.Capacity())
	}
	for i := 0; i < ways; i++ {
		m.Bind(sameBucket(i), i, int64(100+i))
	}
	m.Bind(sameBucket(0), 0, 200) // refreshed: now the newest
	m.Bind(sameBucket(ways), 9, 201)
	if _, ok := m.Lookup(sameBucket(1), 202); ok {
		t.Fatal("the least recently bound key survived")
	}
	for _, i := range []int{0, 2, ways - 1, ways} {
		if _, ok := m.Lookup(sameBucket(i), 202); !ok {
			t.Fatalf("key %d evicted", i)
		}
	}
	if st := m.Stats(); st.Evictions != 1 || st.Entries != ways {
		t.Fatalf("%v", st)
	}
	// An expired slot is reused before anything is evicted.
	m.Bind(sameBucket(ways+1), 1, 200+time.Hour.Milliseconds()+2)
	if st := m.Stats(); st.Evictions != 1 {
		t.Fatalf("%v", st)
	}
}

func TestPeerSharing(t *testing.T) {
	m := New(Sessions, Config{TTL: 4 * time.Second})
	var r recorder
	m.SetPeer(&r)
	m.Bind(7, 1, 1000)  // new: shared
	m.Bind(7, 1, 1999)  // same backend within TTL/4: local only
	m.Bind(7, 2, 2000)  // moved: shared
	m.Bind(7, 2, 2999)  // local
	m.Bind(7, 2, 3000)  // a quarter TTL after the last share: shared
	m.Apply(8, 4, 3000) // from the cluster: never given back
	want := []bound{{Sessions, 7, 1, 1000}, {Sessions, 7, 2, 2000}, {Sessions, 7, 2, 3000}}
	if len(r.got) != len(want) {
		t.Fatalf("shared %v", r.got)
	}
	for i := range want {
		if r.got[i] != want[i] {
			t.Fatalf("shared %v, want %v", r.got, want)
		}
	}
	// Apply keeps the newer binding.
	m.Apply(7, 5, 2500)
	if b, _ := m.Lookup(7, 3001); b != 2 {
		t.Fatalf("an older remote binding replaced a newer one: %d", b)
	}
	m.Apply(7, 5, 3500)
	if b, _ := m.Lookup(7, 3501); b != 5 {
		t.Fatalf("a newer remote binding was ignored: %d", b)
	}
	if st := m.Stats(); st.Applied != 2 {
		t.Fatalf("%v", st)
	}
}

func TestForget(t *testing.T) {
	m := New(Responses, Config{})
	for k := uint64(1); k <= 100; k++ {
		m.Bind(k*0x9e3779b97f4a7c15, int(k%4), 10)
	}
	if n := m.Forget(2); n != 25 {
		t.Fatalf("forgot %d", n)
	}
	for k := uint64(1); k <= 100; k++ {
		b, ok := m.Lookup(k*0x9e3779b97f4a7c15, 11)
		if ok == (k%4 == 2) || (ok && b != int(k%4)) {
			t.Fatalf("key %d: %d %v", k, b, ok)
		}
	}
	if st := m.Stats(); st.Entries != 75 {
		t.Fatalf("%v", st)
	}
}

func TestConcurrent(t *testing.T) {
	m := New(Sessions, Config{Entries: 4096, TTL: time.Minute})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				k := uint64(i%512+1) * 0x9e3779b97f4a7c15
				if b, ok := m.Lookup(k, int64(i)); ok && b != i%512%7 {
					t.Errorf("key %d bound to %d", i%512, b)
					return
				}
				m.Bind(k, i%512%7, int64(i))
			}
		}()
	}
	wg.Wait()
	if st := m.Stats(); st.Entries != 512 || st.Evictions != 0 {
		t.Fatalf("%v", st)
	}
}

func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race")
	}
	m := New(Sessions, Config{})
	m.SetPeer(&recorder{got: make([]bound, 0, 1000)})
	i := uint64(0)
	if n := testing.AllocsPerRun(500, func() {
		i++
		k := i * 0x9e3779b97f4a7c15
		m.Lookup(k, int64(i))
		m.Bind(k, int(i%8), int64(i))
	}); n != 0 {
		t.Fatalf("%v allocs per lookup and bind", n)
	}
}

func BenchmarkLookupBind(b *testing.B) {
	m := New(Sessions, Config{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := uint64(0)
		for pb.Next() {
			i++
			k := (i%100000 + 1) * 0x9e3779b97f4a7c15
			if _, ok := m.Lookup(k, int64(i)); !ok {
				m.Bind(k, int(i%8), int64(i))
			}
		}
	})
}

// Follow: a move from where the caller saw the key succeeds; a move from
// a binding someone else changed meanwhile leaves the key where they put
// it and says so; a request on the key's backend refreshes it.
func TestFollow(t *testing.T) {
	m := New(Sessions, Config{TTL: time.Second})
	if got := m.Follow(7, -1, 2, 1000); got != 2 {
		t.Fatalf("new key: %d", got)
	}
	if got := m.Follow(7, 2, 3, 1100); got != 3 {
		t.Fatalf("move 2->3: %d", got)
	}
	if got := m.Follow(7, 2, 1, 1200); got != 3 {
		t.Fatalf("stale move 2->1: %d, want 3", got)
	}
	if got := m.Follow(7, 0, 3, 1900); got != 3 {
		t.Fatalf("refresh on 3: %d", got)
	}
	if b, ok := m.Lookup(7, 1900+1000); !ok || b != 3 {
		t.Fatalf("refreshed binding expired: %d %v", b, ok)
	}
	if got := m.Follow(7, 0, 1, 1900+1001+10); got != 1 {
		t.Fatalf("move after expiry: %d", got)
	}
	if st := m.Stats(); st.Binds != 3 {
		t.Fatalf("binds %d, want 3 (new, moved, rebound after expiry)", st.Binds)
	}
}

// Claim: the first binds, later claims get its backend; an expired
// binding is claimed anew.
func TestClaim(t *testing.T) {
	m := New(Sessions, Config{TTL: time.Second})
	if got := m.Claim(7, 2, 1000); got != 2 {
		t.Fatalf("first claim: %d", got)
	}
	if got := m.Claim(7, 3, 1500); got != 2 {
		t.Fatalf("second claim: %d, want the first's 2", got)
	}
	if got := m.Claim(7, 3, 1500+1001); got != 3 {
		t.Fatalf("claim after expiry: %d, want 3", got)
	}
	if b, ok := m.Lookup(7, 2600); !ok || b != 3 {
		t.Fatalf("lookup: %d %v", b, ok)
	}
}
