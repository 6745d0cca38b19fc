package canon_test

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
)

type vector struct {
	Name      string   `json:"name"`
	API       string   `json:"api"`
	BlockSize int      `json:"block_size"`
	KeyHex    string   `json:"key_hex"`
	Request   string   `json:"request"`
	Followup  *bool    `json:"followup"`
	CBR       string   `json:"cbr"`
	Chain     []string `json:"chain"`
}

// vectorFiles: cbr_chain.json for chat and completions, cbr_messages.json
// for the Messages API and Responses API continuations.
var vectorFiles = []string{"testdata/cbr_chain.json", "testdata/cbr_messages.json"}

func loadVectors(t testing.TB) []vector {
	var all []vector
	for _, name := range vectorFiles {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var f struct{ Vectors []vector }
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		if len(f.Vectors) == 0 {
			t.Fatalf("%s: no vectors", name)
		}
		all = append(all, f.Vectors...)
	}
	return all
}

// tee records the CBR and feeds the hasher, as `kvca inspect` does.
type tee struct {
	b []byte
	h *chain.Hasher
}

func (t *tee) Write(p []byte) { t.b = append(t.b, p...); t.h.Write(p) }

func TestVectors(t *testing.T) {
	t.Parallel()
	c := canon.New(nil)
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			api, err := canon.ParseAPI(v.API)
			if err != nil {
				t.Fatal(err)
			}
			key, err := chain.ParseKey(v.KeyHex)
			if err != nil {
				t.Fatal(err)
			}
			s := &tee{h: chain.NewHasher(key, v.BlockSize)}
			var info canon.Info
			if err := c.Canonicalize(api, []byte(v.Request), s, &info); err != nil {
				t.Fatal(err)
			}
			if string(s.b) != v.CBR {
				t.Fatalf("cbr\n got %q\nwant %q", s.b, v.CBR)
			}
			if info.CBRLen != len(v.CBR) {
				t.Fatalf("CBRLen %d, want %d", info.CBRLen, len(v.CBR))
			}
			got := make([]string, 0)
			for _, h := range s.h.Sum() {
				got = append(got, fmt.Sprintf("%016x", h))
			}
			if fmt.Sprint(got) != fmt.Sprint(v.Chain) {
				t.Fatalf("chain\n got %v\nwant %v", got, v.Chain)
			}
			wantFollow := true // completions are routed as follow-ups
			if v.Followup != nil {
				wantFollow = *v.Followup
			}
			if info.Followup != wantFollow {
				t.Fatalf("followup %v, want %v", info.Followup, wantFollow)
			}
		})
	}
}
