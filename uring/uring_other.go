//go:build !linux

package uring

import (
	"errors"
	"syscall"
)

// ErrUnsupported: io_uring exists only on Linux.
var ErrUnsupported = errors.New("io_uring is not available")

// Result is one queued send's outcome.
type Result struct {
	Tag  uint32
	Err  syscall.Errno
	Rest []byte
}

// Ring is never made outside Linux.
type Ring struct{}

func New(uint32, int) (*Ring, error)                { return nil, ErrUnsupported }
func (*Ring) Close()                                {}
func (*Ring) Send(int, []byte, []byte, uint32) bool { return false }
func (*Ring) Submit() []Result                      { return nil }
