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

// ExampleMockWorkflow is the runnable form of §10.1; `kvca kdn workflow
// mock` prints the same lines.
func ExampleMockWorkflow() {
	PrintSteps(os.Stdout, MockWorkflow())
	// Output:
	// ok   10.1/1 build compatibility profile             want valid                        got ok
	// ok   10.1/2 build snapshot                          want valid                        got ok
	// ok   10.1/2 v1 snapshot with a mock binding         want invalid                      got code=rule_violation field=adapter_bindings[0].transport_kind rule=bindings:runtime_isolation: transport kind is not allowed for this runtime profile
	// ok   10.1/3 factory builds the Mock                 want ok                           got ok
	// ok   10.1/4 endpoint discovery                      want success                      got success endpoints=1 request_id=wf-disc correlation_id=wf-corr
	// ok   10.1/5 lookup fixture artifact                 want success                      got success artifact=artifact_7e99384e0e335946bdedac0a30827564
	// ok   10.1/6 observation while fresh                 want success                      got success observation=available fresh=true
	// ok   10.1/6 observation at expires_at               want stale                        got stale "observation is stale" observation=available fresh=false
	// ok   10.1/7 token lookup (range_coverage)           want success                      got success hit=false ranges=[[0,2]] total=3
	// ok   10.1/7 token lookup (no range_coverage)        want success                      got success hit=false ranges=[] total=3
	// ok   10.1/7 token lookup (token_lookup unsupported) want unsupported                  got unsupported "gateway capability is unsupported or unknown"
	// ok   10.1/7 unknown tokens                          want text_fallback                got text_fallback "tokens are not cached" fallback_eligible
	// ok   10.1/8 prefetch intent                         want success                      got success task=cacheop_00000000000000000000000000000001 op=prefetch state=pending attempt=0
	// ok   10.1/9 same intent again                       want success                      got success task=cacheop_00000000000000000000000000000001 op=prefetch state=pending attempt=0
	// ok   10.1/10 same key, other artifact               want idempotency_conflict         got idempotency_conflict "idempotency key was used for a different logical request"
	// ok   10.1/10 same key, other operation type         want idempotency_conflict         got idempotency_conflict "idempotency key was used for a different logical request"
	// ok   10.1/11 status pending                         want success                      got success task=cacheop_00000000000000000000000000000001 op=prefetch state=pending attempt=0
	// ok   10.1/11 start hook                             want ok                           got ok
	// ok   10.1/11 status running                         want success                      got success task=cacheop_00000000000000000000000000000001 op=prefetch state=running attempt=1
	// ok   10.1/11 complete hook                          want ok                           got ok
	// ok   10.1/11 status succeeded                       want success                      got success task=cacheop_00000000000000000000000000000001 op=prefetch state=succeeded attempt=1
	// ok   10.1/12 cancel pending task                    want cancelled                    got cancelled "operation cancelled" task=cacheop_00000000000000000000000000000002 op=pin state=cancelled attempt=0
	// ok   10.1/13 cancel already-cancelled task          want success                      got success task=cacheop_00000000000000000000000000000002 op=pin state=cancelled attempt=0
	// ok   10.1/13 cancel succeeded task                  want success                      got success task=cacheop_00000000000000000000000000000001 op=prefetch state=succeeded attempt=1
	// ok   10.1/14 generation 2                           want stale                        got stale "request endpoint generation is stale" retryable
	// ok   10.1/15 other compatibility profile            want incompatible                 got incompatible "request target is incompatible with gateway capabilities"
	// ok   10.1/15 legacy runtime                         want incompatible                 got incompatible "request target is incompatible with gateway capabilities"
	// ok   10.1/16 write to Legacy                        want unsupported                  got unsupported "Legacy adapter is read-only and does not provide this capability"
	// ok   10.1/17 v1 work to Legacy                      want incompatible                 got incompatible "request target is incompatible with gateway capabilities"
	// ok   10.1/18 extra key password                     want rejected                     got code=unknown_field field=password rule=extra_forbidden: unknown fields are not allowed
	// ok   10.1/18 extra key api_key                      want rejected                     got code=unknown_field field=api_key rule=extra_forbidden: unknown fields are not allowed
	// ok   10.1/18 extra key redis_key                    want rejected                     got code=unknown_field field=redis_key rule=extra_forbidden: unknown fields are not allowed
	// ok   10.1/18 extra key kv_bytes                     want rejected                     got code=unknown_field field=kv_bytes rule=extra_forbidden: unknown fields are not allowed
	// ok   10.1/18 extra key tensor                       want rejected                     got code=unknown_field field=tensor rule=extra_forbidden: unknown fields are not allowed
	// ok   10.1/18 extra key device_pointer               want rejected                     got code=unknown_field field=device_pointer rule=extra_forbidden: unknown fields are not allowed
	// ok   10.1/18 extra key chunk_index                  want rejected                     got code=unknown_field field=chunk_index rule=extra_forbidden: unknown fields are not allowed
	// ok   10.1/18 extra key block_index                  want rejected                     got code=unknown_field field=block_index rule=extra_forbidden: unknown fields are not allowed
	// ok   10.1/19 build mp_http_api                      want not implemented              got gateway: production transports are not implemented
	// 38 steps, 0 failed
}
