package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestRetiredIO: --io auto and --io epoll start with a warning; --io
// fasthttp and any other value are refused with a sentence; no --io, no
// word.
func TestRetiredIO(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		refused string // "" when accepted
		warned  bool
	}{
		{nil, "", false},
		{[]string{"--io", "auto"}, "", true},
		{[]string{"--io", "epoll"}, "", true},
		{[]string{"--io", "fasthttp"}, "--io fasthttp is gone", false},
		{[]string{"--io", "uring"}, "--io is retired", false},
	} {
		var logged bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logged, nil))
		var err error
		app := &cli.App{Flags: retiredFlags(), Action: func(c *cli.Context) error { err = checkRetired(c, log); return nil }}
		if e := app.Run(append([]string{"kvca"}, tc.args...)); e != nil {
			t.Fatal(e)
		}
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%v: refused: %v", tc.args, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%v: %v, want a refusal saying %q", tc.args, err, tc.refused)
		}
		if got := strings.Contains(logged.String(), "--io is retired"); got != tc.warned {
			t.Errorf("%v: warned %v, want %v (%q)", tc.args, got, tc.warned, logged.String())
		}
	}
}
