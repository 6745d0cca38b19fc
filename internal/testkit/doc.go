// Package testkit is what kvca's tests share: a bounded wait for a
// condition, starters that tie a server's life to a test, and raw-socket
// helpers for asserting bytes on the wire. It depends on no kvca package,
// so any package's tests (including the mock engine's own) can use it.
//
// Everything that takes a testing.TB fails the test with t.Fatalf and so
// must run on the test goroutine, except where a comment says otherwise.
package testkit
