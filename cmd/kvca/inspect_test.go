package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestInspectVectors runs every CBR/chain vector through `kvca inspect` as
// an operator would (body on stdin, JSON on stdout).
func TestInspectVectors(t *testing.T) {
	raw, err := os.ReadFile("../../canon/testdata/cbr_chain.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors []struct {
			Name, API, Request, CBR string
			KeyHex                  string `json:"key_hex"`
			BlockSize               int    `json:"block_size"`
			Followup                *bool
			Chain                   []string
		}
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	for _, v := range f.Vectors {
		dir := t.TempDir()
		in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
		os.WriteFile(in, []byte(v.Request), 0o600)
		stdin, _ := os.Open(in)
		stdout, _ := os.Create(out)
		oldIn, oldOut := os.Stdin, os.Stdout
		os.Stdin, os.Stdout = stdin, stdout
		err := newApp().Run([]string{"kvca", "inspect", "--api", v.API, "--block-size", strconv.Itoa(v.BlockSize), "--hash-key", v.KeyHex})
		os.Stdin, os.Stdout = oldIn, oldOut
		stdin.Close()
		stdout.Close()
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		var got struct {
			API      string   `json:"api"`
			Followup bool     `json:"followup"`
			CBR      string   `json:"cbr"`
			Chain    []string `json:"chain"`
		}
		b, _ := os.ReadFile(out)
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v in %q", v.Name, err, b)
		}
		want := v.Followup == nil || *v.Followup
		if got.API != v.API || got.CBR != v.CBR || got.Followup != want || len(got.Chain) != len(v.Chain) {
			t.Fatalf("%s: got %+v", v.Name, got)
		}
		for i := range v.Chain {
			if got.Chain[i] != v.Chain[i] {
				t.Fatalf("%s: chain[%d] %s want %s", v.Name, i, got.Chain[i], v.Chain[i])
			}
		}
	}
}
