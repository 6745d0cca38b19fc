package testkit

import (
	"context"
	"testing"
	"time"
)

// Listener is a server that listens where it is told, such as the mock
// engine (bench/mock.Engine).
type Listener interface {
	Start(addr string) error
	Close() error
}

// Start starts s on 127.0.0.1 at an ephemeral port and closes it when the
// test ends; it returns s so that a caller can write
// e := testkit.Start(t, mock.New(cfg)).
func Start[S Listener](t testing.TB, s S) S {
	t.Helper()
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatalf("start on 127.0.0.1:0: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// Service is a server configured with its addresses beforehand, started
// once and shut down gracefully, such as edge.Server.
type Service interface {
	Start() error
	Shutdown(ctx context.Context) error
}

// ShutdownTimeout bounds the graceful shutdown Serve registers.
const ShutdownTimeout = 10 * time.Second

// Serve starts s and shuts it down (within ShutdownTimeout) when the test
// ends, failing the test if that shutdown fails. Tests that shut s down
// themselves may still use it: a second Shutdown must then be harmless.
func Serve[S Service](t testing.TB, s S) S {
	t.Helper()
	if err := s.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s
}
