//go:build !linux

package edge

import (
	"errors"
	"net"
)

const epollSupported = false

// evLoops is the event-loop edge, which needs Linux's epoll.
type evLoops struct{}

func (s *Server) startLoops(net.Listener) (net.Listener, error) {
	return nil, errors.New("--io epoll is only available on Linux")
}

func (el *evLoops) stop(<-chan struct{}) error { return nil }
