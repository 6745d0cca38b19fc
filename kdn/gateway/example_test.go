package gateway_test

import (
	"context"
	"fmt"
	"time"

	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
)

// Example shows the whole request path an HTTP handler follows: decode the
// body by the route's request model, call the gateway, encode the answer.
func Example() {
	clock := func() time.Time { return time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC) }
	g, err := gateway.New(gateway.MockSnapshot(), kdn.TransportMock, gateway.MockFixtures(), gateway.Options{Clock: clock})
	if err != nil {
		panic(err)
	}
	body := `{"runtime_profile":"mock","request_id":"req-1","compatibility_profile_id":"cpu-test",` +
		`"endpoint_id":"` + kdn.EndpointIDForName("mock-node-a") + `","endpoint_generation":2,` +
		`"artifact_id":"artifact_00000000000000000000000000000000"}`

	req, err := kdn.Decode("LookupArtifactRequest", []byte(body)) // invalid → HTTP 400
	if err != nil {
		panic(err)
	}
	resp, err := gateway.Call(context.Background(), g, nil, req) // ErrNoRoute → HTTP 404
	if err != nil {
		panic(err)
	}
	out, err := kdn.Encode(resp) // an error here is a gateway bug → HTTP 500
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.ModelName())
	fmt.Println(string(out))
	// Output:
	// LookupArtifactResponse
	// {"contract_version":"kdn.v1","runtime_profile":"test/mock","request_id":"req-1","correlation_id":null,"timestamp":"2025-06-01T12:00:00Z","compatibility_profile_id":"cpu-test","endpoint_id":"endpoint_07283b717d9356a9aad19ba158c1cdbb","endpoint_generation":2,"outcome":"stale","artifact":null,"observation":null,"operation":null,"endpoints":null,"token_coverage":null,"adapter_summary":null,"tier_summary":null,"maintenance_summary":null,"error":{"code":"stale","message":"request endpoint generation is stale","contract_version":"kdn.v1","retryable":true,"fallback_eligible":false}}
}
