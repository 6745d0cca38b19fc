package testkit

import (
	"testing"
	"time"
)

// WaitTimeout bounds WaitUntil. It is generous because a loaded CI machine
// can stall a goroutine for seconds; a condition that holds returns at
// once, so a passing test never pays for it.
const WaitTimeout = 15 * time.Second

// WaitUntil polls cond until it returns true, and fails the test naming
// what it waited for if WaitTimeout passes first. Polls start 1 ms apart
// and back off to 20 ms, so quick conditions cost little and slow ones do
// not spin. cond runs on the calling goroutine.
func WaitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !poll(WaitTimeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", WaitTimeout, what)
	}
}

// poll is WaitUntil without the test, so its bound can be tested.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
	return true
}
