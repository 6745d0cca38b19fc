// Package uring batches socket sends through one io_uring (Linux): an
// event loop queues the small writes a round of events produces and puts
// them all on the wire with one system call, where a send each would cost
// one call each.
//
// Only what that needs is here: a submission ring of sends whose bytes are
// copied into the ring's own arena (so the caller's buffers are free at
// once), flagged MSG_DONTWAIT so that no send ever waits in the kernel,
// and a Submit that returns every send's outcome before it returns.
// A Ring belongs to one goroutine.
package uring
