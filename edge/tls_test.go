package edge

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvca/kvca/internal/testkit"
)

// testCA issues throwaway certificates; nothing is committed.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kvca test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns PEM cert and key for 127.0.0.1 with the given common name.
func (ca *testCA) issue(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writePair(t *testing.T, dir, name string, c, k []byte) (string, string) {
	cf, kf := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	// Write to temp names and rename, as a rotation tool would.
	for _, f := range [][2]any{{cf, c}, {kf, k}} {
		tmp := f[0].(string) + ".tmp"
		if err := os.WriteFile(tmp, f[1].([]byte), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f[0].(string)); err != nil {
			t.Fatal(err)
		}
	}
	return cf, kf
}

func tlsClient(ca *testCA) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true,
	}}
}

func peerCN(t *testing.T, addr string, ca *testCA) string {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

func TestTLSEdgeStreamingAndRotation(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	dir := t.TempDir()
	c1, k1 := ca.issue(t, "first")
	cf, kf := writePair(t, dir, "edge", c1, k1)
	b := newTestBackend(t, "a")
	b.gate = make(chan struct{})
	b.events = 3
	s := startProxy(t, func(c *Config) {
		c.TLSCert, c.TLSKey = cf, kf
		c.TLSReloadInterval = 50 * time.Millisecond
	}, b)
	hc := tlsClient(ca)
	url := "https://" + s.Addr() + "/v1/chat/completions"

	// A stream opened on the first certificate...
	resp, err := hc.Post(url, "application/json", strings.NewReader(conversation(1, 0, true)))
	if err != nil {
		t.Fatal(err)
	}
	if resp.TLS.PeerCertificates[0].Subject.CommonName != "first" {
		t.Fatal("wrong certificate")
	}
	r := bufio.NewReader(resp.Body)
	if ev, err := readEvent(r); err != nil || !strings.Contains(ev, "tok0") {
		t.Fatalf("first event %q %v", ev, err)
	}
	// ...keeps going while the certificate rotates under it.
	c2, k2 := ca.issue(t, "second")
	writePair(t, dir, "edge", c2, k2)
	testkit.WaitUntil(t, "rotated certificate served", func() bool { return peerCN(t, s.Addr(), ca) == "second" })
	b.gate <- struct{}{}
	b.gate <- struct{}{}
	events, err := readAllEvents(r)
	resp.Body.Close()
	if err != nil || events[len(events)-1] != "data: [DONE]" {
		t.Fatalf("old stream cut by rotation: %v %q", err, events)
	}
	// A bad pair keeps the current one in service and is counted.
	os.WriteFile(cf, []byte("not a certificate"), 0o600)
	testkit.WaitUntil(t, "reload failure counted", func() bool { return s.tlsPub.failed.Load() > 0 })
	if peerCN(t, s.Addr(), ca) != "second" {
		t.Fatal("bad pair replaced the good one")
	}
	if err := s.ReloadTLS(); err == nil {
		t.Fatal("ReloadTLS accepted a bad pair")
	}
	// Plain HTTP on the TLS port fails; a client not trusting the CA is refused.
	if _, err := (&http.Client{Timeout: 2 * time.Second}).Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("plain HTTP accepted on the TLS listener")
	}
	if _, err := tlsClient(newTestCA(t)).Post(url, "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("client with another CA accepted the certificate")
	}
	waitIdle(t, s)
}

// tlsBackend serves testBackend's handler over TLS with the given pair.
func tlsBackend(t *testing.T, name string, certPEM, keyPEM []byte, clientCAs *x509.CertPool) *testBackend {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{pair}}
	if clientCAs != nil {
		tc.ClientCAs = clientCAs
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return newTestBackendOn(t, name, tls.NewListener(listenLocal(t), tc))
}

func TestHTTPSBackends(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	dir := t.TempDir()
	cp, kp := ca.issue(t, "backend")
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.pem, 0o600)
	b := tlsBackend(t, "secure", cp, kp, nil)
	url := "https://" + b.ln.Addr().String()

	// Unknown CA: refused by default (the request fails, nothing leaks).
	s := startProxy(t, func(c *Config) { c.Backends = []string{url}; c.HealthInterval = time.Hour; c.Retries = 0 })
	if resp, out := post(t, s, "/v1/chat/completions", conversation(1, 0, false)); resp.StatusCode != 502 {
		t.Fatalf("unknown CA: %d %s", resp.StatusCode, out)
	}
	if b.hits.Load() != 0 {
		t.Fatal("request reached a backend whose certificate was not verified")
	}
	// Private CA: works, streaming included.
	s = startProxy(t, func(c *Config) { c.Backends = []string{url}; c.UpstreamCA = caFile })
	if resp, out := post(t, s, "/v1/chat/completions", conversation(1, 0, false)); resp.StatusCode != 200 {
		t.Fatalf("private CA: %d %s", resp.StatusCode, out)
	}
	resp, err := client.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(conversation(2, 0, true)))
	if err != nil {
		t.Fatal(err)
	}
	events, err := readAllEvents(resp.Body)
	resp.Body.Close()
	if err != nil || events[len(events)-1] != "data: [DONE]" {
		t.Fatalf("stream over TLS: %v %q", err, events)
	}
	// Insecure: explicit opt-in works without the CA.
	s = startProxy(t, func(c *Config) { c.Backends = []string{url}; c.UpstreamInsecure = true })
	if resp, _ := post(t, s, "/v1/chat/completions", conversation(3, 0, false)); resp.StatusCode != 200 {
		t.Fatalf("insecure: %d", resp.StatusCode)
	}

	// Mutual TLS: the backend requires a client certificate from the CA.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	mb := tlsBackend(t, "mtls", cp, kp, pool)
	murl := "https://" + mb.ln.Addr().String()
	s = startProxy(t, func(c *Config) {
		c.Backends = []string{murl}
		c.UpstreamCA = caFile
		c.HealthInterval = time.Hour
		c.Retries = 0
	})
	if resp, _ := post(t, s, "/v1/chat/completions", conversation(4, 0, false)); resp.StatusCode != 502 {
		t.Fatalf("mTLS without client cert: %d", resp.StatusCode)
	}
	cc, ck := ca.issue(t, "kvca-client")
	ccf, ckf := writePair(t, dir, "client", cc, ck)
	s = startProxy(t, func(c *Config) {
		c.Backends = []string{murl}
		c.UpstreamCA, c.UpstreamCert, c.UpstreamKey = caFile, ccf, ckf
	})
	if resp, out := post(t, s, "/v1/chat/completions", conversation(5, 0, false)); resp.StatusCode != 200 {
		t.Fatalf("mTLS: %d %s", resp.StatusCode, out)
	}
}

func TestAdminTokenAndTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	c1, k1 := ca.issue(t, "admin")
	cf, kf := writePair(t, t.TempDir(), "admin", c1, k1)
	b := newTestBackend(t, "a")
	s := startProxy(t, func(c *Config) {
		c.AdminToken = "s3cret-token"
		c.AdminTLSCert, c.AdminTLSKey = cf, kf
	}, b)
	hc := tlsClient(ca)
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"s3cret-token", 401}, {"Bearer s3cret-token", 200}} {
		req, _ := http.NewRequest("GET", "https://"+s.AdminAddr()+"/admin/state", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("auth %q: %d, want %d", tc.auth, resp.StatusCode, tc.want)
		}
	}
}
