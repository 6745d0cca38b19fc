package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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
	// Subtests in sequence: each swaps the process's stdin and stdout.
	for _, v := range f.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			dir := t.TempDir()
			in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
			if err := os.WriteFile(in, []byte(v.Request), 0o600); err != nil {
				t.Fatal(err)
			}
			stdin, err := os.Open(in)
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			stdout, err := os.Create(out)
			if err != nil {
				t.Fatal(err)
			}
			oldIn, oldOut := os.Stdin, os.Stdout
			os.Stdin, os.Stdout = stdin, stdout
			err = newApp().Run([]string{"kvca", "inspect", "--api", v.API, "--block-size", strconv.Itoa(v.BlockSize), "--hash-key", v.KeyHex})
			os.Stdin, os.Stdout = oldIn, oldOut
			if cerr := stdout.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				API      string   `json:"api"`
				Followup bool     `json:"followup"`
				CBR      string   `json:"cbr"`
				Chain    []string `json:"chain"`
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("%v in %q", err, b)
			}
			want := v.Followup == nil || *v.Followup
			if got.API != v.API || got.CBR != v.CBR || got.Followup != want || !slices.Equal(got.Chain, v.Chain) {
				t.Fatalf("got %+v\nwant api %s cbr %q followup %v chain %v", got, v.API, v.CBR, want, v.Chain)
			}
		})
	}
}
