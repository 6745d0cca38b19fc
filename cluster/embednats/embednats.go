// Package embednats runs a NATS server inside the process, for tests and
// the bench that start several clustered replicas without an external NATS.
// It lives apart from package cluster so that kvca serve, which only
// connects to NATS, does not link the server.
package embednats

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Start runs a NATS server on addr (host:port; "" means 127.0.0.1 on a
// free port). It returns the client URL and a stop function that waits for
// the server to be gone.
func Start(addr string) (url string, stop func(), err error) {
	host, port := "127.0.0.1", -1 // -1: the server picks a free port
	if addr != "" {
		h, p, err := net.SplitHostPort(addr)
		if err != nil {
			return "", nil, fmt.Errorf("embedded NATS address %q: %w", addr, err)
		}
		if port, err = strconv.Atoi(p); err != nil {
			return "", nil, fmt.Errorf("embedded NATS port %q: %w", p, err)
		}
		if h != "" {
			host = h
		}
	}
	ns, err := server.NewServer(&server.Options{
		Host:            host,
		Port:            port,
		NoLog:           true,
		NoSigs:          true,
		MaxPayload:      2 << 20,
		WriteDeadline:   5 * time.Second,
		NoSystemAccount: true,
	})
	if err != nil {
		return "", nil, fmt.Errorf("embedded NATS: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return "", nil, errors.New("embedded NATS did not start within 10s")
	}
	return ns.ClientURL(), func() { ns.Shutdown(); ns.WaitForShutdown() }, nil
}
