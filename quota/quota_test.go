package quota

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvca/kvca/apikeys"
)

type clock struct{ ns atomic.Int64 }

func (c *clock) now() int64          { return c.ns.Load() }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newLimiter() (*Limiter, *clock) {
	c := &clock{}
	c.ns.Store(1e12)
	return New(Options{Now: c.now}), c
}
func tn(id int, rpm, tpm int64) *apikeys.Tenant {
	return &apikeys.Tenant{Name: "t" + string(rune('a'+id)), ID: id, RPM: rpm, TPM: tpm}
}

func TestAppendDuration(t *testing.T) {
	for _, ms := range []int64{0, 1, 17, 999, 1000, 1001, 1500, 2400, 59999, 60000, 61000, 63600, 360000, 3599999, 3600000, 3723004, 90061010} {
		want := (time.Duration(ms) * time.Millisecond).String()
		if got := string(AppendDuration(nil, ms*1e6)); got != want {
			t.Errorf("%d ms: %q, want %q", ms, got, want)
		}
	}
	if got := string(AppendDuration(nil, 1)); got != "1ms" {
		t.Errorf("1 ns rounds up to %q, want 1ms", got)
	}
}

// TestRequestsExact: a limit of 5 admits exactly 5 at once, then one per
// 12 s, not a nanosecond earlier.
func TestRequestsExact(t *testing.T) {
	l, c := newLimiter()
	ten := tn(0, 5, 0)
	var d Decision
	for i := range 5 {
		if !l.Admit(ten, 0, &d) {
			t.Fatalf("request %d refused", i+1)
		}
		if d.ReqRemaining != int64(4-i) {
			t.Fatalf("request %d: remaining %d, want %d", i+1, d.ReqRemaining, 4-i)
		}
	}
	if l.Admit(ten, 0, &d) || d.Limited != LimitRequests {
		t.Fatal("the 6th request was admitted")
	}
	if d.RetryAfter != 12e9 || d.ReqReset != 60e9 || d.RetryAfterSeconds() != 12 {
		t.Fatalf("retry after %d ns, reset %d ns; want 12 s and 60 s", d.RetryAfter, d.ReqReset)
	}
	c.add(12*time.Second - 1)
	if l.Admit(ten, 0, &d) {
		t.Fatal("admitted 1 ns early")
	}
	if d.RetryAfter != 1 || d.RetryAfterSeconds() != 1 {
		t.Fatalf("retry after %d ns, want 1 (Retry-After 1)", d.RetryAfter)
	}
	c.add(1)
	if !l.Admit(ten, 0, &d) || d.ReqRemaining != 0 {
		t.Fatalf("not admitted after 12 s (remaining %d)", d.ReqRemaining)
	}
}

// TestRequestsExactOddRate: with 7 per minute the interval is not a whole
// number of ns, and an hour still admits exactly 7 + 7*60.
func TestRequestsExactOddRate(t *testing.T) {
	l, c := newLimiter()
	ten := tn(0, 7, 0)
	var d Decision
	n := 0
	for step := 0; step <= 36000; step++ {
		for l.Admit(ten, 0, &d) {
			n++
		}
		if step < 36000 {
			c.add(100 * time.Millisecond)
		}
	}
	if n != 427 {
		t.Fatalf("admitted %d in an hour at 7/min, want 427", n)
	}
}

func TestTokensExactAndHeaders(t *testing.T) {
	l, _ := newLimiter()
	ten := tn(0, 60, 1000)
	var d Decision
	if !l.Admit(ten, 100, &d) {
		t.Fatal("refused")
	}
	want := "x-ratelimit-limit-requests: 60\r\nx-ratelimit-remaining-requests: 59\r\nx-ratelimit-reset-requests: 1s\r\n" +
		"x-ratelimit-limit-tokens: 1000\r\nx-ratelimit-remaining-tokens: 900\r\nx-ratelimit-reset-tokens: 6s\r\n"
	if got := string(d.AppendHeaders(nil)); got != want {
		t.Fatalf("headers:\n%s\nwant:\n%s", got, want)
	}
	l.Settle(ten, &d, Usage{Prompt: 100, Completion: 150})
	// 250 of 1000 used; 3 more of 250 fit exactly, the 4th does not.
	for i := range 3 {
		if !l.Admit(ten, 250, &d) {
			t.Fatalf("request %d of 250 tokens refused", i+2)
		}
		l.Settle(ten, &d, Usage{Prompt: 200, Completion: 50})
	}
	if d.TokRemaining != 0 {
		t.Fatalf("remaining after the last admission %d, want 0", d.TokRemaining)
	}
	if l.Admit(ten, 1, &d) || d.Limited != LimitTokens {
		t.Fatal("admitted with the tokens spent")
	}
	// 1000 tokens owed at 1000 per minute: 1 token back after 60 ms.
	want = "x-ratelimit-limit-requests: 60\r\nx-ratelimit-remaining-requests: 56\r\nx-ratelimit-reset-requests: 4s\r\n" +
		"x-ratelimit-limit-tokens: 1000\r\nx-ratelimit-remaining-tokens: 0\r\nx-ratelimit-reset-tokens: 1m0s\r\nRetry-After: 1\r\nretry-after-ms: 60\r\n"
	if got := string(d.AppendHeaders(nil)); got != want || d.RetryAfter != 60e6 {
		t.Fatalf("headers (retry after %d ns):\n%s\nwant:\n%s", d.RetryAfter, got, want)
	}
	wall := time.Date(2026, 12, 1, 10, 0, 0, 500e6, time.UTC)
	want = "anthropic-ratelimit-requests-limit: 60\r\nanthropic-ratelimit-requests-remaining: 56\r\nanthropic-ratelimit-requests-reset: 2026-12-01T10:00:05Z\r\n" +
		"anthropic-ratelimit-tokens-limit: 1000\r\nanthropic-ratelimit-tokens-remaining: 0\r\nanthropic-ratelimit-tokens-reset: 2026-12-01T10:01:01Z\r\nretry-after: 1\r\n"
	if got := string(d.AppendAnthropicHeaders(nil, wall)); got != want {
		t.Fatalf("anthropic headers:\n%s\nwant:\n%s", got, want)
	}
	body := string(d.AppendErrorBody(nil, false))
	if body != `{"error":{"message":"Rate limit reached for tokens per minute: limit 1000. Please try again in 60ms.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`+"\n" {
		t.Fatalf("body %s", body)
	}
	if !strings.Contains(string(d.AppendErrorBody(nil, true)), `"type":"rate_limit_error"`) {
		t.Fatal("anthropic body")
	}
}

// TestStreamOverrun: a stream admitted with a small reservation that used
// far more than was left is charged in full; later requests wait until
// the debt is paid back.
func TestStreamOverrun(t *testing.T) {
	l, c := newLimiter()
	ten := tn(0, 0, 100)
	var d Decision
	if !l.Admit(ten, 10, &d) || d.Reserved != 10 || d.TokRemaining != 90 {
		t.Fatalf("admit: %+v", d)
	}
	l.Settle(ten, &d, Usage{Prompt: 10, Completion: 240})
	if got := l.tenantFor(ten).overrun.Get(); got != 150 {
		t.Fatalf("overrun counted %d, want 150 (240 more than reserved, 90 of them were left)", got)
	}
	// 250 tokens owed at 100 per minute: 150 s until the bucket is full;
	// the next request needs 1 token, 151 owed beyond the minute's 100
	// are paid back in 90.6 s.
	if l.Admit(ten, 0, &d) || d.RetryAfter != 90_600e6 || d.TokReset != 150e9 || d.RetryAfterSeconds() != 91 {
		t.Fatalf("after the overrun: ok %v retry %d reset %d", d.OK, d.RetryAfter, d.TokReset)
	}
	c.add(90_600*time.Millisecond - 1)
	if l.Admit(ten, 0, &d) {
		t.Fatal("admitted 1 ns before the debt allowed")
	}
	c.add(1)
	if !l.Admit(ten, 0, &d) || d.TokRemaining != 0 || d.Reserved != 1 {
		t.Fatalf("not admitted once the debt allowed: %+v", d)
	}
	l.Settle(ten, &d, Usage{Prompt: 0, Completion: 0})
}

func TestRefundAndEstimate(t *testing.T) {
	l, _ := newLimiter()
	ten := tn(0, 0, 1000)
	var d Decision
	l.Admit(ten, 600, &d)
	l.Settle(ten, &d, Usage{Prompt: 40, Completion: 60})
	l.Admit(ten, 0, &d)
	if d.TokRemaining != 899 || d.Reserved != 1 {
		t.Fatalf("remaining after a refund and a reservation of 1: %d, want 899", d.TokRemaining)
	}
	l.Settle(ten, &d, Usage{Prompt: EstimateTokens(401), Estimated: true})
	st := l.tenantFor(ten)
	if st.estimated.Get() != 101 || st.prompt.Get() != 40 || st.completion.Get() != 60 {
		t.Fatalf("estimated %d prompt %d completion %d", st.estimated.Get(), st.prompt.Get(), st.completion.Get())
	}
	// An estimate above the whole limit is capped, so the request can go
	// from a full bucket.
	l2, _ := newLimiter()
	if !l2.Admit(ten, 5000, &d) || d.Reserved != 1000 {
		t.Fatalf("a request estimated above the limit: %+v", d)
	}
}

// TestConcurrentExact: many goroutines on one tenant at one instant admit
// exactly the limit.
func TestConcurrentExact(t *testing.T) {
	l, _ := newLimiter()
	ten := tn(3, 100, 0)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d Decision
			for range 50 {
				if l.Admit(ten, 0, &d) {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 100 {
		t.Fatalf("admitted %d of 400 at a limit of 100", ok.Load())
	}
}

func TestShareUsage(t *testing.T) {
	a, _ := newLimiter()
	b, _ := newLimiter()
	ten := tn(0, 10, 1000)
	b.Ensure(ten)
	var d Decision
	for range 4 {
		a.Admit(ten, 50, &d)
		a.Settle(ten, &d, Usage{Prompt: 50, Completion: 50})
	}
	var got []string
	a.TakeUsage(func(name string, r, k int64) {
		got = append(got, name)
		if !b.ChargeRemote(name, r, k) {
			t.Errorf("tenant %s unknown", name)
		}
		if r != 4 || k != 400 {
			t.Errorf("usage %d requests %d tokens, want 4 and 400", r, k)
		}
	})
	if len(got) != 1 {
		t.Fatalf("usage reported for %v", got)
	}
	a.TakeUsage(func(string, int64, int64) { t.Error("usage reported twice") })
	b.Peek(ten, 0, &d)
	if d.ReqRemaining != 6 || d.TokRemaining != 600 {
		t.Fatalf("after the remote charge: %d requests %d tokens left, want 6 and 600", d.ReqRemaining, d.TokRemaining)
	}
	if b.ChargeRemote("nobody", 1, 1) {
		t.Fatal("unknown tenant charged")
	}
	var m bytes.Buffer
	b.WritePrometheus(&m)
	if !strings.Contains(m.String(), `kvca_tenant_remote_requests_total{tenant="ta"} 4`) {
		t.Fatalf("metrics:\n%s", m.String())
	}
}

func TestAdmitAllocatesNothing(t *testing.T) {
	l, c := newLimiter()
	ten := tn(0, 1000, 100000)
	l.Ensure(ten)
	var d Decision
	hdr := make([]byte, 0, 1024)
	wall := time.Now()
	if n := testing.AllocsPerRun(200, func() {
		l.Admit(ten, 10, &d)
		hdr = d.AppendHeaders(hdr[:0])
		hdr = d.AppendAnthropicHeaders(hdr, wall)
		l.Settle(ten, &d, Usage{Prompt: 10, Completion: 5})
		c.add(time.Second)
	}); n != 0 {
		t.Fatalf("%v allocs per request", n)
	}
}

func BenchmarkAdmitSettle(b *testing.B) {
	l := New(Options{})
	ten := tn(0, 1e8, 1e8)
	l.Ensure(ten)
	var d Decision
	var hdr []byte
	b.ReportAllocs()
	for b.Loop() {
		l.Admit(ten, 10, &d)
		hdr = d.AppendHeaders(hdr[:0])
		l.Settle(ten, &d, Usage{Prompt: 10, Completion: 5})
	}
}
