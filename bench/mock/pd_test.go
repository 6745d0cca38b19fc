package mock

import (
	"strings"
	"testing"
)

// TestDisaggregatedLegs: a prefill for a remote decode answers one token
// and the transfer naming this engine and the prompt's blocks, and does
// not stream; a decode of a remote prefill is served (its prompt read,
// not computed, and cached like any).
func TestDisaggregatedLegs(t *testing.T) {
	e := startEngine(t, Config{Name: "p0", BlockTokens: 16})
	prompt := strings.Repeat("tok ", 100)
	prefill := `{"model":"mock","max_tokens":1,"stream":false,"messages":[{"role":"user","content":"` + prompt + `"}],` +
		`"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}`
	st, out := post(t, e, PathChat, prefill)
	if st != 200 {
		t.Fatalf("prefill: %d %v", st, out)
	}
	kv, _ := out["kv_transfer_params"].(map[string]any)
	if kv["remote_engine_id"] != "p0" || kv["do_remote_prefill"] != true || kv["remote_host"] == nil || len(kv["remote_block_ids"].([]any)) == 0 {
		t.Fatalf("transfer %v", kv)
	}
	st, out = post(t, e, PathChat, strings.Replace(prefill, `"stream":false`, `"stream":true`, 1))
	if st != 400 {
		t.Fatalf("a streamed prefill: %d %v", st, out)
	}
	d := startEngine(t, Config{Name: "d0", BlockTokens: 16})
	decode := `{"model":"mock","max_tokens":4,"messages":[{"role":"user","content":"` + prompt + `"}],` +
		`"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":"p0","remote_block_ids":[0],"remote_host":"127.0.0.1","remote_port":1}}`
	st, out = post(t, d, PathChat, decode)
	if st != 200 || out["kv_transfer_params"] != nil {
		t.Fatalf("decode: %d %v", st, out)
	}
	if d.Stats().CachedBlocks == 0 {
		t.Fatal("the decode worker did not cache the prompt it read")
	}
}
