package edge

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvca/kvca/internal/testkit"
)

// TestPDInvariants plays random requests through random disaggregated
// fleets (either protocol, one to three workers of each role, admission
// on or off) while their workers fail at random (error statuses, broken
// connections) and clients leave at random, then checks what must hold
// whatever happened:
//
//   - no load left behind: every backend's active requests, prefill
//     blocks and admission slots back to zero, no prefill leg running;
//   - no decode leg without its prefill: with vLLM every decode leg
//     carrying a transfer came after a prefill leg of the same request
//     answered it, and carries that leg's transfer; with SGLang every
//     decode leg that answered had its room sent to a prefill worker too,
//     for the same request (one that failed at once may have ended its
//     prefill leg before that reached its worker);
//   - every request answered, or its client gone.
func TestPDInvariants(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 53))
			sglang := seed%2 == 0
			nP, nD := 1+rng.IntN(3), 1+rng.IntN(3)
			admission := rng.IntN(2) == 0
			f := startPD(t, sglang, nP, nD, func(c *Config) {
				c.PD.Threshold = rng.IntN(2) * 40
				// Workers fail on purpose here, request after request: not
				// ejected for it, they stay eligible (an ejected decode
				// worker would only make requests wait in the queue).
				c.HealthInterval = 0
				c.FailThreshold = 1 << 20
				if admission {
					c.Admission.MaxInflightPerBackend = 2
					c.Admission.QueueSize = 16
				}
			})
			workers := append(append([]*pdWorker{}, f.prefills...), f.decodes...)
			for i := range 40 {
				for _, w := range workers {
					w.status.Store(0)
					w.drop.Store(false)
					switch rng.IntN(8) {
					case 0:
						w.status.Store([]int32{500, 503, 429}[rng.IntN(3)])
					case 1:
						w.drop.Store(true)
					}
				}
				body := longChat(1000*int(seed)+rng.IntN(6), rng.IntN(3), rng.IntN(2) == 0)
				if rng.IntN(6) == 0 {
					f.leave(t, body, workers)
					continue
				}
				resp, out := f.chat(t, body)
				if resp.StatusCode == 0 || (resp.StatusCode == 200 && out == "") {
					t.Fatalf("request %d: %d %q", i, resp.StatusCode, out)
				}
			}
			for _, w := range workers {
				w.status.Store(0)
				w.drop.Store(false)
			}
			waitPDIdle(t, f.s)
			checkLegs(t, f, sglang)
		})
	}
}

// leave sends body and closes the connection once it reached a worker,
// every worker holding its answer meanwhile.
func (f *pdFleet) leave(t *testing.T, body string, workers []*pdWorker) {
	var release []func()
	for _, w := range workers {
		release = append(release, w.holdAnswers())
	}
	before := len(f.rec.all())
	conn := dialRaw(t, f.s)
	sendChat(t, conn, body)
	// The request reaches a worker, or kvca answers it itself (every
	// worker failing): either way the client can go.
	testkit.WaitUntil(t, "the request at a worker or answered", func() bool {
		return len(f.rec.all()) > before || f.s.m.pd.running.Load() == 0 && busyNone(f.s)
	})
	conn.Close()
	for _, r := range release {
		r()
	}
}

func busyNone(s *Server) bool {
	for _, b := range s.fleet().sched.Backends {
		if b.Active() != 0 {
			return false
		}
	}
	return true
}

func checkLegs(t *testing.T, f *pdFleet, sglang bool) {
	t.Helper()
	ev := f.rec.all()
	for _, d := range ev {
		if d.worker[0] != 'd' {
			continue
		}
		if sglang {
			room := d.body["bootstrap_room"]
			if room == nil || d.answered != 200 {
				// Aggregated, or failed at once: its prefill leg may have
				// been ended before it reached its worker.
				continue
			}
			found := false
			for _, p := range ev {
				if p.worker[0] == 'p' && p.body["bootstrap_room"] == room && p.rid == d.rid {
					found = true
				}
			}
			if !found {
				t.Errorf("decode leg %d (room %v) without its prefill leg", d.seq, room)
			}
			continue
		}
		kv, _ := d.body["kv_transfer_params"].(map[string]any)
		if kv == nil {
			continue // aggregated
		}
		found := false
		for _, p := range ev {
			if p.worker[0] == 'p' && p.rid == d.rid && p.seq < d.seq && p.answered == 200 && p.worker == kv["remote_engine_id"] {
				found = true
			}
		}
		if !found {
			t.Errorf("decode leg %d with transfer %v without a prefill leg that answered it before", d.seq, kv)
		}
	}
}
