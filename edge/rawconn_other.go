//go:build !linux

package edge

import "net"

// wrapConn returns c: raw-syscall socket I/O (rawconn_linux.go) is Linux only.
func wrapConn(c net.Conn) net.Conn { return c }

type rawListener struct{ net.Listener }
