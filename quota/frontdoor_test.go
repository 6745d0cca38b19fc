package quota_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/kvca/kvca/h1"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/apikeys"
	"github.com/kvca/kvca/bench/mock"
	"github.com/kvca/kvca/quota"
	"github.com/kvca/kvca/sniff"
)

// exchange sends one request over a fresh connection to the engine and
// reads the raw answer in 7-byte reads, feeding the body to sn as the edge
// does with each piece it relays; it returns the body bytes as relayed.
func exchange(t *testing.T, addr, path, body string, sn *sniff.Sniffer) (status int, raw []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, addr, len(body), body)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var head []byte
	buf := make([]byte, 7)
	clen := -1
	chunked := false
	var cs h1.ChunkScan
	for {
		n, err := c.Read(buf)
		piece := buf[:n]
		if status == 0 && n > 0 {
			head = append(head, piece...)
			i := bytes.Index(head, []byte("\r\n\r\n"))
			if i < 0 {
				piece = nil
			} else {
				h := strings.ToLower(string(head[:i+4]))
				fmt.Sscanf(h, "http/1.1 %d", &status)
				f := sniff.JSON
				if strings.Contains(h, "content-type: text/event-stream") {
					f = sniff.SSE
				}
				if strings.Contains(h, "transfer-encoding: chunked") {
					chunked = true
				} else if j := strings.Index(h, "content-length: "); j >= 0 {
					fmt.Sscanf(h[j+16:], "%d", &clen)
				}
				sn.Reset(f)
				piece = head[i+4:]
			}
		}
		if status != 0 {
			// The piece as relayed to the client; its data to the
			// Sniffer, as the edge's chunk decoder hands it over.
			done := false
			if chunked {
				_, done, _ = cs.ScanTo(piece, feeder{sn})
			} else {
				sn.Feed(piece)
			}
			raw = append(raw, piece...)
			if done || (clen >= 0 && len(raw) >= clen) {
				return status, raw
			}
		}
		if err != nil {
			t.Fatalf("read: %v (got %q)", err, raw)
		}
	}
}

// feeder hands a chunk decoder's data to a Sniffer.
type feeder struct{ s *sniff.Sniffer }

func (f feeder) Data(p []byte) { f.s.Feed(p) }

// TestFrontDoorOverEngine drives the packages as the edge will, against
// the mock engine on loopback: key lookup, admission, the body sniffed
// piece by piece as it passes, settlement from the usage the engine
// reported; the token limit is hit exactly at its bound.
func TestFrontDoorOverEngine(t *testing.T) {
	e := mock.New(mock.Config{TimeScale: 0.001})
	if err := e.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })

	keysFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keysFile, []byte(apikeys.Line([]byte("sk-acme"), "acme", 100, 0)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := apikeys.Open(keysFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1e12)
	lim := quota.New(quota.Options{Now: func() int64 { return now }})
	lim.Attach(keys)

	body := `{"model":"mock","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("hello ", 40) + `"}]}`
	key, ok := apikeys.Credential([]byte("Authorization"), []byte("Bearer sk-acme"))
	tn, found := keys.Lookup(key)
	if !ok || !found {
		t.Fatal("key refused")
	}
	var sn sniff.Sniffer
	var d quota.Decision
	if !lim.Admit(tn, quota.EstimateTokens(len(body)), &d) {
		t.Fatal("first request refused")
	}
	status, raw := exchange(t, e.Addr(), "/v1/chat/completions", body, &sn)
	prompt, completion, got := sn.Usage()
	if status != 200 || !got || completion != 5 {
		t.Fatalf("status %d usage %d+%d (%v) from %q", status, prompt, completion, got, raw)
	}
	// The usage sniffed is the one the engine's final event reports.
	var final struct {
		Usage struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	events := strings.Split(string(dechunk(t, raw)), "\n\n")
	if err := json.Unmarshal([]byte(strings.TrimPrefix(events[len(events)-3], "data: ")), &final); err != nil ||
		final.Usage.Prompt != prompt || final.Usage.Completion != completion {
		t.Fatalf("final event %q: %v %+v, sniffed %d %d", events[len(events)-3], err, final, prompt, completion)
	}
	lim.Settle(tn, &d, quota.Usage{Prompt: prompt, Completion: completion})
	perRequest := prompt + completion

	// The tenant's tokens per minute now hold exactly 3 such requests
	// (the first was not counted: the tenant had no token limit then).
	if err := os.WriteFile(keysFile+".new", []byte(apikeys.Line([]byte("sk-acme"), "acme", 100, 3*perRequest)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Rename(keysFile+".new", keysFile)
	if err := keys.Reload(); err != nil {
		t.Fatal(err)
	}
	tn, _ = keys.Lookup(key)
	if tn.TPM != 3*perRequest {
		t.Fatalf("reloaded tenant %+v", tn)
	}
	admitted := 0
	for range 5 {
		if !lim.Admit(tn, 0, &d) {
			break
		}
		admitted++
		exchange(t, e.Addr(), "/v1/chat/completions", body, &sn)
		p, c, _ := sn.Usage()
		lim.Settle(tn, &d, quota.Usage{Prompt: p, Completion: c})
	}
	if admitted != 3 || d.Limited != quota.LimitTokens || d.TokRemaining != 0 {
		t.Fatalf("admitted %d with 3 requests' worth of tokens: %+v", admitted, d)
	}
	// A third of a minute later, one request's worth is back.
	now += int64(20 * time.Second)
	lim.Peek(tn, 0, &d)
	if !d.OK || d.TokRemaining != perRequest {
		t.Fatalf("after 20 s: %d tokens back, want %d", d.TokRemaining, perRequest)
	}
}

func dechunk(t *testing.T, b []byte) []byte {
	var out []byte
	for {
		i := bytes.Index(b, []byte("\r\n"))
		var n int
		if _, err := fmt.Sscanf(string(b[:i]), "%x", &n); err != nil {
			t.Fatalf("chunk size %q", b[:i])
		}
		if n == 0 {
			return out
		}
		out = append(out, b[i+2:i+2+n]...)
		b = b[i+4+n:]
	}
}
