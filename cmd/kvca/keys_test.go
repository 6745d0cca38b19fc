package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kvca/kvca/apikeys"
)

func TestKeysHash(t *testing.T) {
	app := newApp()
	var out, errs bytes.Buffer
	app.Reader = strings.NewReader("sk-test-123\n")
	app.Writer = &out
	app.ErrWriter = &errs
	if err := app.Run([]string{"kvca", "keys", "hash", "--tenant", "acme", "--rpm", "60"}); err != nil {
		t.Fatal(err)
	}
	// sha256("sk-test-123"), computed independently with sha256sum.
	want := "sha256:e0dbaa0c6455768bf812d8345ec96a2677d1e3bf17dbb0020b115c80092811e6 tenant=acme rpm=60"
	line := strings.TrimSpace(out.String())
	if line != want {
		t.Fatalf("printed %q, want %q", line, want)
	}
	set, err := apikeys.Parse(strings.NewReader(line))
	if err != nil {
		t.Fatalf("printed line %q does not parse: %v", line, err)
	}
	tn, ok := set.Lookup([]byte("sk-test-123"))
	if !ok || tn.Name != "acme" || tn.RPM != 60 || tn.TPM != 0 {
		t.Fatalf("line %q: got %+v %v", line, tn, ok)
	}
	if strings.Contains(out.String()+errs.String(), "sk-test-123") {
		t.Fatal("the key itself was printed")
	}
	if !strings.Contains(errs.String(), "shorter than 20 bytes") {
		t.Fatalf("no warning for a short key: %q", errs.String())
	}
	if err := app.Run([]string{"kvca", "keys", "hash", "--tenant", "acme", "sk-test-123"}); err == nil {
		t.Fatal("a key given as an argument was accepted")
	}
}
