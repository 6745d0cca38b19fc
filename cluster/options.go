package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Options configure a Node. Only URL is required.
type Options struct {
	// URL is the NATS server, or a comma-separated list of them.
	URL string
	// Credentials, as nats.go takes them; at most one kind.
	CredsFile    string // JWT + nkey .creds file
	NKeySeedFile string
	User         string
	Password     string
	Token        string
	// TLS: CA file to verify the server; a client certificate and its key
	// for mutual TLS.
	TLSCA, TLSCert, TLSKey string

	// Subject prefix and cluster name: messages go to
	// <Subject>.<Name>.{loc,load,reset}; replicas with the same pair share
	// state, so several fleets can use one NATS.
	Subject string // default "kvca"
	Name    string // default "default"

	// FlushInterval bounds how often learned locations are published: the
	// first after a quiet spell goes out at once, later ones are batched
	// for this long. Default 50ms.
	FlushInterval time.Duration
	// LoadInterval is how often in-flight counts are published. Default
	// 200ms; a replica silent for 3 of its intervals is aged out.
	LoadInterval time.Duration
	// Refresh is the least time between two publications of the same
	// (block, backend). Default TTL/4.
	Refresh time.Duration
	// MaxPendingBlocks bounds what Learned buffers between flushes;
	// beyond it learned chains are dropped and counted. Default 262144
	// (2 MiB).
	MaxPendingBlocks int
	// DedupEntries sizes the refresh cache. Default 262144 (4 MiB).
	DedupEntries int
	// MaxMessageBytes splits location batches. Default 256 KiB (NATS'
	// default max_payload is 1 MiB).
	MaxMessageBytes int
	// ReconnectBuffer is what nats.go keeps while disconnected; beyond it
	// publications are dropped and counted. Default 4 MiB.
	ReconnectBuffer int

	Logger *slog.Logger
	// NATSOptions are appended to the connection options (tests, tuning).
	NATSOptions []nats.Option
}

// Defaults of Options, also the CLI's.
const (
	DefaultFlushInterval = 50 * time.Millisecond
	DefaultLoadInterval  = 200 * time.Millisecond
)

func (o *Options) defaults(ttl time.Duration) error {
	if strings.TrimSpace(o.URL) == "" {
		return errors.New("cluster: no NATS URL")
	}
	if o.Subject == "" {
		o.Subject = "kvca"
	}
	if o.Name == "" {
		o.Name = "default"
	}
	for _, tok := range []struct{ flag, v string }{{"subject", o.Subject}, {"name", o.Name}} {
		if strings.ContainsAny(tok.v, " \t\r\n*>") || strings.HasPrefix(tok.v, ".") ||
			strings.HasSuffix(tok.v, ".") || strings.Contains(tok.v, "..") {
			return fmt.Errorf("--cluster-%s %q is not a valid NATS subject part (no spaces, wildcards or empty tokens)", tok.flag, tok.v)
		}
	}
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&o.FlushInterval, DefaultFlushInterval)
	set(&o.LoadInterval, DefaultLoadInterval)
	set(&o.Refresh, ttl/4)
	if o.Refresh <= 0 {
		o.Refresh = time.Millisecond
	}
	seti := func(d *int, v int) {
		if *d <= 0 {
			*d = v
		}
	}
	seti(&o.MaxPendingBlocks, 1<<18)
	seti(&o.DedupEntries, 1<<18)
	seti(&o.MaxMessageBytes, 256<<10)
	o.MaxMessageBytes = max(o.MaxMessageBytes, 128) // room for a header and a block
	seti(&o.ReconnectBuffer, 4<<20)
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return errors.New("--cluster-nats-tls-cert and --cluster-nats-tls-key go together")
	}
	kinds := 0
	for _, v := range []string{o.CredsFile, o.NKeySeedFile, o.User + o.Password, o.Token} {
		if v != "" {
			kinds++
		}
	}
	if kinds > 1 {
		return errors.New("give one kind of NATS credentials: a creds file, an nkey seed, user/password or a token")
	}
	if o.Password != "" && o.User == "" {
		return errors.New("--cluster-nats-password needs --cluster-nats-user")
	}
	return nil
}

func (o *Options) subjectBase() string { return o.Subject + "." + o.Name }
