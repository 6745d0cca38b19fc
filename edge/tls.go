package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/kvca/kvca/internal/tick"
)

// certSource serves a certificate pair from disk and swaps in a new pair
// when the files change, without a restart. A bad new pair is refused: the
// old one stays in service and the failure is logged and counted.
type certSource struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
	certPEM, keyPEM   []byte // last pair loaded (to notice changes)
	loaded            atomic.Uint64
	failed            atomic.Uint64
	log               *slog.Logger
	name              string
}

func newCertSource(name, certFile, keyFile string, log *slog.Logger) (*certSource, error) {
	cs := &certSource{certFile: certFile, keyFile: keyFile, log: log, name: name}
	if _, err := cs.reload(); err != nil {
		return nil, err
	}
	return cs, nil
}

// reload reads the files and installs the pair if it changed and is valid.
// It reports whether a new pair went into service.
func (cs *certSource) reload() (bool, error) {
	certPEM, err := os.ReadFile(cs.certFile)
	if err != nil {
		return false, cs.fail(err)
	}
	keyPEM, err := os.ReadFile(cs.keyFile)
	if err != nil {
		return false, cs.fail(err)
	}
	if bytes.Equal(certPEM, cs.certPEM) && bytes.Equal(keyPEM, cs.keyPEM) {
		return false, nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// Often a half-written rotation: the next poll retries.
		return false, cs.fail(err)
	}
	if pair.Leaf != nil && time.Now().After(pair.Leaf.NotAfter) {
		return false, cs.fail(fmt.Errorf("certificate expired on %s", pair.Leaf.NotAfter.Format(time.RFC3339)))
	}
	cs.certPEM, cs.keyPEM = certPEM, keyPEM
	cs.cur.Store(&pair)
	cs.loaded.Add(1)
	if pair.Leaf != nil {
		cs.log.Info("tls certificate loaded", "listener", cs.name, "subject", pair.Leaf.Subject.String(),
			"not_after", pair.Leaf.NotAfter.Format(time.RFC3339))
	}
	return true, nil
}

func (cs *certSource) fail(err error) error {
	cs.failed.Add(1)
	err = fmt.Errorf("%s tls certificate: %w", cs.name, err)
	if cs.cur.Load() != nil {
		cs.log.Error("tls certificate reload failed; keeping the certificate in service", "err", err)
	}
	return err
}

func (cs *certSource) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := cs.cur.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("no certificate")
}

// watch polls the files every interval until ctx ends.
func (cs *certSource) watch(ctx context.Context, interval time.Duration) {
	tick.Every(ctx.Done(), interval, func() { _, _ = cs.reload() })
}

// serverTLS is the listeners' TLS configuration: TLS 1.2 and up, Go's
// default (modern, AEAD-only for 1.2) cipher suites, HTTP/1.1 only since
// fasthttp does not serve HTTP/2.
func serverTLS(cs *certSource) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: cs.get,
		NextProtos:     []string{"http/1.1"},
	}
}

// upstreamTLS builds the client TLS configuration for https:// backends:
// the system roots unless --upstream-ca names a private CA, an optional
// client certificate for mutual TLS, SNI set per backend by the caller.
func upstreamTLS(cfg *Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.UpstreamCA != "" {
		pem, err := os.ReadFile(cfg.UpstreamCA)
		if err != nil {
			return nil, fmt.Errorf("--upstream-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--upstream-ca %s: no PEM certificate found", cfg.UpstreamCA)
		}
		tc.RootCAs = pool
	}
	if (cfg.UpstreamCert == "") != (cfg.UpstreamKey == "") {
		return nil, errors.New("--upstream-cert and --upstream-key go together")
	}
	if cfg.UpstreamCert != "" {
		pair, err := tls.LoadX509KeyPair(cfg.UpstreamCert, cfg.UpstreamKey)
		if err != nil {
			return nil, fmt.Errorf("--upstream-cert/--upstream-key: %v", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	tc.InsecureSkipVerify = cfg.UpstreamInsecure
	return tc, nil
}
