//go:build !linux

package edge

import (
	"errors"
	"net"
)

const epollSupported = false

// evLoops is the event-loop edge, which needs Linux's epoll.
type evLoops struct{ loops []struct{} }

func (s *Server) startLoops(net.Listener) error {
	return errors.New("kvca serve needs Linux: its event loops use epoll")
}

func (el *evLoops) stop(<-chan struct{}) error { return nil }
