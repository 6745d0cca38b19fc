// Package sdk_test drives a real kvca proxy with the official OpenAI Go SDK,
// against mock engines on loopback. The proxy's own tests speak raw HTTP;
// these check that what an operator's clients actually do (typed requests,
// SSE decoding, stream accumulation, error unwrapping) survives the proxy.
package sdk_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/internal/testkit"
)

// testTimeout bounds every test: a hung proxy must fail the test, not the
// CI job.
const testTimeout = 30 * time.Second

// maxTokens is what every request asks for: the mock answers exactly that
// many 4-byte words, so content length is known without timing anything.
const maxTokens = 8

// fixture is one proxy in front of fresh mock engines. Each test gets its
// own, so that engine caches and the block table start empty and a cached
// token count can only come from that test's earlier turns.
type fixture struct {
	engines []*mock.Engine
	proxy   *edge.Server
	client  openai.Client
}

func newFixture(t *testing.T, n int) *fixture {
	t.Helper()
	f := &fixture{}
	var urls []string
	for i := range n {
		name := fmt.Sprintf("e%d", i)
		e := testkit.Start(t, mock.New(mock.Config{
			Name: name,
			// A shared model plus one per engine, so /v1/models shows the
			// union rather than one engine's list.
			Models:          []string{"mock", "mock-" + name},
			DecodePerToken:  time.Millisecond,
			PrefillPerToken: time.Microsecond,
			RecordBodies:    true,
		}))
		f.engines = append(f.engines, e)
		urls = append(urls, e.URL())
	}
	cfg := edge.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.AdminListen = "127.0.0.1:0"
	cfg.Backends = urls
	// Small blocks so that short test conversations span several blocks
	// and a follow-up has a prefix to find.
	cfg.Table.BlockSize = 64
	cfg.Table.HashKey = "000102030405060708090a0b0c0d0e0f"
	p, err := edge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.proxy = testkit.Serve(t, p)
	f.client = openai.NewClient(
		option.WithBaseURL("http://"+p.Addr()+"/v1/"),
		option.WithAPIKey("sk-kvca-test"),
		// The SDK retries 408/409/429/5xx with backoff by default; a
		// retry would hide which answer kvca gave and add waits.
		option.WithMaxRetries(0),
		option.WithRequestTimeout(testTimeout),
	)
	return f
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// requests returns how many completion requests each engine accepted.
func (f *fixture) requests() []uint64 {
	out := make([]uint64, len(f.engines))
	for i, e := range f.engines {
		out[i] = e.Stats().Requests
	}
	return out
}

// servedBy runs do and returns the index of the one engine that accepted a
// request meanwhile; tests call it sequentially, so exactly one moves.
func (f *fixture) servedBy(t *testing.T, do func()) int {
	t.Helper()
	before := f.requests()
	do()
	after := f.requests()
	got := -1
	for i := range after {
		switch after[i] - before[i] {
		case 0:
		case 1:
			if got >= 0 {
				t.Fatalf("two engines served one request: %v -> %v", before, after)
			}
			got = i
		default:
			t.Fatalf("engine %d served %d requests for one call", i, after[i]-before[i])
		}
	}
	if got < 0 {
		t.Fatalf("no engine served the request: %v -> %v", before, after)
	}
	return got
}

// lastBody is the last request body engine i received, byte for byte as
// kvca forwarded it.
func (f *fixture) lastBody(t *testing.T, i int) []byte {
	t.Helper()
	b := f.engines[i].Bodies()
	if len(b) == 0 {
		t.Fatalf("engine %d received no body", i)
	}
	return b[len(b)-1]
}

// metric reads one sample from kvca's admin /metrics; series is the full
// series name with labels as Prometheus prints it, e.g.
// `kvca_routed_blocks_total{kind="cached"}`. A missing series reads 0.
func (f *fixture) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + f.proxy.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return 0
}

// systemPrompt is long enough to span several kvca blocks (64 bytes) and
// several mock cache blocks (16 tokens of 4 bytes), so a repeated turn has
// whole cached blocks to report.
var systemPrompt = strings.Repeat("You are a careful assistant for the kvca SDK tests. ", 12)

// wantContentLen is the length of a mock answer: maxTokens words of 4
// bytes each (bench/mock/respond.go).
const wantContentLen = maxTokens * 4
