package gateway

import (
	"os"
	"testing"
)

func TestMockWorkflow(t *testing.T) {
	checkSteps(t, MockWorkflow(), 38)
}

func TestLegacyWorkflow(t *testing.T) {
	checkSteps(t, LegacyWorkflow(), 10)
}

func checkSteps(t *testing.T, steps []Step, want int) {
	t.Helper()
	if len(steps) != want {
		t.Errorf("%d steps, want %d", len(steps), want)
	}
	for _, s := range steps {
		if !s.OK {
			t.Errorf("%s: want %s, got %s", s.Name, s.Want, s.Got)
		}
	}
}

// ExampleLegacyWorkflow is the runnable form of §11.1; `kvca kdn workflow
// legacy` prints the same lines.
func ExampleLegacyWorkflow() {
	PrintSteps(os.Stdout, LegacyWorkflow())
	// Output:
	// ok   11.1/1 legacy snapshot                         want valid                        got ok
	// ok   11.1/1 factory builds the Legacy adapter       want ok                           got ok
	// ok   11.1/2 fresh projection                        want success                      got success observation=available fresh=true
	// ok   11.1/2 expired projection                      want stale                        got stale "Legacy observation is stale" observation=available fresh=false
	// ok   11.1/2 projection without source time          want stale                        got stale "Legacy observation is stale" observation=available fresh=false
	// ok   11.1/3 legacy prefetch intent                  want unsupported                  got unsupported "Legacy adapter is read-only and does not provide this capability"
	// ok   11.1/4 same intent as v1                       want incompatible                 got incompatible "request target is incompatible with gateway capabilities"
	// ok   11.1/5 legacy request with generation 1        want stale                        got stale "request endpoint generation is stale" retryable
	// ok   11.1/6 legacy discovery                        want unsupported                  got unsupported "Legacy endpoint discovery is unavailable" request_id=r correlation_id=c
	// ok   11.1/6 v1 discovery                            want incompatible                 got incompatible "discovery runtime profile is incompatible" request_id=r correlation_id=c
	// 10 steps, 0 failed
}
