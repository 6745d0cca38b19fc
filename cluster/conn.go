package cluster

import (
	"time"

	"github.com/nats-io/nats.go"
)

// connect opens the NATS connection so that the replica never depends on
// it: the first connection is retried in the background (the replica
// serves alone meanwhile), reconnection never gives up, and what is
// published while disconnected is buffered up to ReconnectBuffer, then
// dropped and counted.
func (n *Node) connect() (*nats.Conn, error) {
	o := &n.o
	opts := []nats.Option{
		nats.Name("kvca " + n.idString()),
		nats.NoEcho(),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.ReconnectBufSize(o.ReconnectBuffer),
		nats.PingInterval(10 * time.Second),
		nats.ConnectHandler(func(c *nats.Conn) { n.log.Info("cluster: connected to NATS", "url", c.ConnectedUrlRedacted()) }),
		nats.ReconnectHandler(func(c *nats.Conn) { n.log.Info("cluster: reconnected to NATS", "url", c.ConnectedUrlRedacted()) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			n.log.Warn("cluster: disconnected from NATS; serving alone until it is back", "err", err)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			n.log.Warn("cluster: NATS error", "err", err)
		}),
	}
	switch {
	case o.CredsFile != "":
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	case o.NKeySeedFile != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, opt)
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	opts = append(opts, o.NATSOptions...)
	return nats.Connect(o.URL, opts...)
}
