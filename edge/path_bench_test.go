package edge

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/internal/bodies"
)

// newOfflineServer builds a server that is never started: the in-process
// hot path (body → canon → chain → sched → learn) without the network.
func newOfflineServer(t testing.TB, policy string) *Server {
	cfg := DefaultConfig()
	cfg.Backends = []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", "http://127.0.0.1:4"}
	cfg.Routing.Policy = policy
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// routeOnce is one request's in-process path: plan, pick and reserve,
// release prefill at "headers", learn, release active at "end".
func routeOnce(s *Server, body []byte) error {
	c := s.getCall()
	if err := s.plan(c, canon.Chat, body); err != nil {
		s.putCall(c)
		return err
	}
	if !s.fleet().sched.Route(&c.req, &c.dec, &c.res) {
		s.putCall(c)
		return fmt.Errorf("no backend")
	}
	c.res.ReleasePrefill()
	s.table.Touch(c.req.Chain, c.dec.Backend.Index, c.req.Now)
	c.res.ReleaseActive()
	s.putCall(c)
	return nil
}

func pathBodies() (names []string, bs [][]byte) {
	for _, n := range []int{1 << 10, 4 << 10, 16 << 10, 128 << 10} {
		names = append(names, fmt.Sprintf("%dKB", n>>10))
		bs = append(bs, bodies.Chat(n))
	}
	conv := bodies.Conversation(40, 300)
	names = append(names, "turn40")
	bs = append(bs, conv[len(conv)-1])
	return names, bs
}

func BenchmarkRoutePath(b *testing.B) {
	names, bs := pathBodies()
	for _, policy := range []string{"kvca", "cost"} {
		s := newOfflineServer(b, policy)
		for i, body := range bs {
			b.Run(policy+"/"+names[i], func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if err := routeOnce(s, body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func TestRoutePathNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race")
	}
	names, bs := pathBodies()
	for _, policy := range []string{"kvca-cost", "kvca", "cost", "round-robin", "least-loaded", "random", "session-hash", "ttft"} {
		s := newOfflineServer(t, policy)
		for i, body := range bs {
			// Warm the pools, and the table: baselines spread a chain over
			// every backend before its locations reach their steady size.
			for range 200 {
				_ = routeOnce(s, body)
			}
			if n := testing.AllocsPerRun(50, func() { _ = routeOnce(s, body) }); n != 0 {
				t.Errorf("%s/%s: %v allocs per request", policy, names[i], n)
			}
		}
	}
}

// TestMemoInThePath: a repeated long prompt is looked up in the server's
// memo, and the chain routed on is the one computed without the memo.
func TestMemoInThePath(t *testing.T) {
	t.Parallel()
	// The resumer off in both: it would serve the repeated bodies whole,
	// before any string of theirs reached the memo.
	on := DefaultConfig()
	on.Backends = []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", "http://127.0.0.1:4"}
	on.Table.ResumeMemoBytes = 0
	s, err := New(on)
	if err != nil {
		t.Fatal(err)
	}
	off := on
	off.Table.CBRMemoBytes = 0
	plain, err := New(off)
	if err != nil {
		t.Fatal(err)
	}
	plain.key = s.key
	_, bs := pathBodies()
	for pass := range 3 {
		for i, body := range bs {
			c, p := s.getCall(), plain.getCall()
			if err := s.plan(c, canon.Chat, body); err != nil {
				t.Fatal(err)
			}
			if err := plain.plan(p, canon.Chat, body); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.req.Chain, p.req.Chain) || len(c.req.Chain) == 0 {
				t.Fatalf("pass %d body %d: chain with the memo differs", pass, i)
			}
			s.putCall(c)
			plain.putCall(p)
		}
	}
	if st := s.memo.Stats(); st.Hits == 0 || st.Literals == 0 {
		t.Fatalf("memo not used: %+v", st)
	}
	if plain.memo != nil {
		t.Fatal("--cbr-memo-bytes 0 still made a memo")
	}
}

// BenchmarkReplayPath replays an agent session's 40 growing turns in order,
// over and over, as a benchmark client replaying one session does: each
// request resends the last one's history, found by the resumer, and its
// chain extends the one the last answer confirmed.
func BenchmarkReplayPath(b *testing.B) {
	session := bodies.Conversation(40, 10000) // 10 KB a message, 800 KB at the end
	for _, policy := range []string{"kvca", "kvca-cost"} {
		s := newOfflineServer(b, policy)
		b.Run(policy, func(b *testing.B) {
			var n int64
			for _, body := range session {
				n += int64(len(body))
			}
			b.SetBytes(n / int64(len(session)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := routeOnce(s, session[i%len(session)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
