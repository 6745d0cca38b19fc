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

// rejection is the error an invalid vector must be rejected with
// (testdata/rejections.json): the vector's reason, as kvca names it.
type rejection struct {
	Code  string `json:"code"`
	Field string `json:"field"`
	Rule  string `json:"rule"`
}

func loadRejections(t testing.TB) map[string]rejection {
	data, err := os.ReadFile("testdata/rejections.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Rejections map[string]rejection `json:"rejections"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	return file.Rejections
}

// TestRejectionsCoverEveryInvalidVector keeps the expectations and the
// vectors in step: no invalid vector goes unchecked, no expectation is
// left over from a vector that no longer exists or became valid.
func TestRejectionsCoverEveryInvalidVector(t *testing.T) {
	want := loadRejections(t)
	invalid := 0
	for _, c := range loadVectors(t) {
		_, listed := want[c.Name]
		switch {
		case !c.Valid && !listed:
			t.Errorf("invalid vector %s has no expected rejection", c.Name)
		case c.Valid && listed:
			t.Errorf("valid vector %s has an expected rejection", c.Name)
		}
		if !c.Valid {
			invalid++
		}
	}
	if len(want) != invalid {
		t.Errorf("%d expected rejections for %d invalid vectors", len(want), invalid)
	}
}

func TestVectors(t *testing.T) {
	rejections := loadRejections(t)
	for _, c := range loadVectors(t) {
		t.Run(c.Name, func(t *testing.T) {
			msg, err := Decode(c.Model, c.Input(t))
			if !c.Valid {
				if err == nil {
					out, _ := Encode(msg)
					t.Fatalf("accepted invalid vector (%s); got %s", c.Reason, out)
				}
				ve, ok := err.(*ValidationError)
				if !ok {
					t.Fatalf("error is %T, want *ValidationError", err)
				}
				want, listed := rejections[c.Name]
				if !listed {
					t.Fatalf("no expected rejection for this vector (reason: %s)", c.Reason)
				}
				if got := (rejection{ve.Code, ve.Field, ve.Rule}); got != want {
					t.Fatalf("rejected as %+v, want %+v (reason: %s)", got, want, c.Reason)
				}
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
