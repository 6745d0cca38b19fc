package edge

import (
	"strings"
	"testing"

	"github.com/kvca/kvca/canon"
)

// TestSessionOnlyForSessionHash: the session hash is computed for the
// policy that routes by it and skipped for the others, with the same chain.
func TestSessionOnlyForSessionHash(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"` + strings.Repeat("hello ", 200) + `"}]}`)
	var chains [][]uint64
	for _, policy := range []string{"session-hash", "kvca"} {
		cfg := DefaultConfig()
		cfg.Backends = []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}
		cfg.Routing.Policy = policy
		cfg.Table.HashKey = "000102030405060708090a0b0c0d0e0f"
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := s.getCall()
		if err := s.plan(c, canon.Chat, body); err != nil {
			t.Fatal(err)
		}
		if got := c.req.Session != 0; got != (policy == "session-hash") {
			t.Errorf("%s: session %x", policy, c.req.Session)
		}
		chains = append(chains, append([]uint64(nil), c.req.Chain...))
		s.putCall(c)
	}
	if len(chains[0]) == 0 || len(chains[0]) != len(chains[1]) || chains[0][0] != chains[1][0] {
		t.Errorf("chains differ: %x vs %x", chains[0], chains[1])
	}
}
