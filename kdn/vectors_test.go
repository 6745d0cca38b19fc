package kdn

import (
	"encoding/json"
	"os"
	"testing"
)

// vectorCase is one golden vector from testdata/vectors.json.
type vectorCase struct {
	Name      string          `json:"name"`
	Model     string          `json:"model"`
	JSON      json.RawMessage `json:"json"`
	Valid     bool            `json:"valid"`
	Reason    string          `json:"reason"`
	Canonical *string         `json:"canonical"`
}

// Input returns the raw wire bytes: a JSON string in the file carries raw
// (possibly malformed) input, anything else is the wire object itself.
func (c vectorCase) Input(t testing.TB) []byte {
	if len(c.JSON) > 0 && c.JSON[0] == '"' {
		var s string
		if err := json.Unmarshal(c.JSON, &s); err != nil {
			t.Fatalf("%s: bad raw input: %v", c.Name, err)
		}
		return []byte(s)
	}
	return c.JSON
}

func loadVectors(t testing.TB) []vectorCase {
	data, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []vectorCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("no vectors")
	}
	return file.Cases
}

func TestVectors(t *testing.T) {
	for _, c := range loadVectors(t) {
		t.Run(c.Name, func(t *testing.T) {
			msg, err := Decode(c.Model, c.Input(t))
			if !c.Valid {
				if err == nil {
					out, _ := Encode(msg)
					t.Fatalf("accepted invalid vector (%s); got %s", c.Reason, out)
				}
				if _, ok := err.(*ValidationError); !ok {
					t.Fatalf("error is %T, want *ValidationError", err)
				}
				t.Logf("rejected: %v (reason: %s)", err, c.Reason)
				return
			}
			if err != nil {
				t.Fatalf("rejected valid vector: %v", err)
			}
			out, err := Encode(msg)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if c.Canonical != nil && string(out) != *c.Canonical {
				t.Fatalf("canonical mismatch\n got: %s\nwant: %s", out, *c.Canonical)
			}
			again, err := Canonical(c.Model, out)
			if err != nil || string(again) != string(out) {
				t.Fatalf("canonical form is not a fixed point: %v\n%s\n%s", err, out, again)
			}
		})
	}
}
