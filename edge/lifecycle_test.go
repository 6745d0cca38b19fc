package edge

import (
	"errors"
	"testing"
	"time"

	"github.com/kvca/kvca/admit"
)

// lifeStep is one event of a request's life and the act it must answer.
type lifeStep struct {
	event string // received, plan, try, retry, stale, timeout, busy, head200, head503, badanswer, left, finish
	want  act
}

// drive plays steps on a fresh request of body to backends, checking
// each act; it returns the call (ended or not) and its status.
func drive(t *testing.T, s *Server, body string, steps []lifeStep) *call {
	t.Helper()
	c := testBegin(s, routeChat)
	for i, st := range steps {
		var got act
		switch st.event {
		case "received":
			got = c.received([]byte(body), len(body))
		case "plan":
			got = c.planned(c.plan([]byte(body)))
		case "try":
			got = c.try()
		case "retry":
			got = c.retry(connFailed, false)
		case "stale":
			got = c.retry(connFailed, true)
		case "timeout":
			got = c.retry(timedOut, false)
		case "busy":
			got = c.retry(connBusy, false)
		case "head200", "head503":
			status := 200
			if st.event == "head503" {
				status = 503
			}
			got, _ = c.head(status, true, true, nil)
		case "badanswer":
			got = c.badAnswer()
		case "left":
			c.left()
			return c
		case "finish":
			c.bodyBegun(true)
			c.finish(nil, false)
			return c
		case "finish-broken":
			c.finish(errors.New("cut"), false)
			return c
		default:
			t.Fatalf("unknown event %q", st.event)
		}
		if got != st.want {
			t.Fatalf("step %d (%s): act %d, want %d", i, st.event, got, st.want)
		}
	}
	return c
}

// TestLifecycle plays the request lifecycle's event sequences without
// sockets: each event's act, the answer kvca gives itself, and every
// backend's load back to zero at the end (released exactly once).
func TestLifecycle(t *testing.T) {
	t.Parallel()
	body := conversation(1, 2, true)
	for _, tc := range []struct {
		name   string
		steps  []lifeStep
		status int // kvca's own answer (0: the backend's)
	}{
		{"answered", []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}, {"head200", actRelay}, {"finish", 0}}, 0},
		{"stream cut", []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}, {"head200", actRelay}, {"finish-broken", 0}}, 0},
		{"stale connection replayed", []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}, {"stale", actReplay}, {"head200", actRelay}, {"finish", 0}}, 0},
		{"retried elsewhere", []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}, {"retry", actTry}, {"try", actSend}, {"head200", actRelay}, {"finish", 0}}, 0},
		{"retries run out", []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}, {"retry", actTry}, {"try", actSend}, {"retry", actReply}}, 502},
		{"busy everywhere", []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}, {"busy", actTry}, {"try", actSend}, {"busy", actReply}}, 503},
		{"timed out", []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}, {"timeout", actReply}}, 504},
		{"503 refused, answered elsewhere", []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}, {"head503", actTry}, {"try", actSend}, {"head200", actRelay}, {"finish", 0}}, 0},
		{"bad answer", []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}, {"badanswer", actReply}}, 502},
		{"client left while sent", []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}, {"left", 0}}, 499},
		{"client left while relayed", []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}, {"head200", actRelay}, {"left", 0}}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := offlineCore(t, 2, nil)
			c := drive(t, s, body, tc.steps)
			if tc.status != 0 {
				if c.life != lifeDone && c.rep.status != tc.status && c.status != tc.status {
					t.Fatalf("answer %d (reply %d), want %d", c.status, c.rep.status, tc.status)
				}
				if c.life != lifeDone {
					c.answering(c.rep.status, true, 0)
					s.done(c)
				}
			}
			for i, b := range s.fleet().sched.Backends {
				if b.Active() != 0 || b.Prefill() != 0 {
					t.Fatalf("backend %d: active %d prefill %d after the end", i, b.Active(), b.Prefill())
				}
			}
		})
	}
}

// TestLifecycleFollowupSticks: a follow-up whose first turn was answered
// goes where the first turn went (the prefix learned at the answer).
func TestLifecycleFollowupSticks(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 4, nil)
	c := drive(t, s, conversation(7, 8, true), []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}, {"head200", actRelay}})
	first := c.u.b.Index
	c.finish(nil, false)
	c = drive(t, s, conversation(7, 9, true), []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}})
	if c.u.b.Index != first {
		t.Fatalf("follow-up on %d, first turn on %d", c.u.b.Index, first)
	}
	c.left()
}

// TestLifecycleQueue: with admission on and the only slot taken, a
// request waits (actQueued); a stale wake is ignored; the wake that
// frees it sends it on; a client that leaves the queue leaves it.
func TestLifecycleQueue(t *testing.T) {
	t.Parallel()
	s := offlineCore(t, 1, func(c *Config) { c.Admission.MaxInflightPerBackend = 1; c.Admission.QueueSize = 4 })
	body := conversation(3, 0, false)
	first := drive(t, s, body, []lifeStep{{"received", actPlan}, {"plan", actTry}, {"try", actSend}})
	woke := make(chan uint64, 1)
	second := testBegin(s, routeChat)
	second.tk.Owner, second.tk.Wake = woke, func(t *admit.Ticket, seq uint64) { t.Owner.(chan uint64) <- seq }
	if a := second.received([]byte(body), len(body)); a != actPlan {
		t.Fatalf("received: %d", a)
	}
	if a := second.planned(second.plan([]byte(body))); a != actTry {
		t.Fatalf("planned: %d", a)
	}
	if a := second.try(); a != actQueued {
		t.Fatalf("try with the slot taken: %d, want queued", a)
	}
	if a := second.admitted(second.tk.Seq() + 99); a != actNone {
		t.Fatalf("stale wake: %d", a)
	}
	first.finish(nil, false)
	var seq uint64
	select {
	case seq = <-woke:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake after the slot was freed")
	}
	if a := second.admitted(seq); a != actSend {
		t.Fatalf("woken: %d, want send", a)
	}
	second.left()
	if b := s.fleet().sched.Backends[0]; b.Active() != 0 {
		t.Fatalf("active %d after both ended", b.Active())
	}
}
