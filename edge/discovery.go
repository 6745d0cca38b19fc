package edge

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/kvca/kvca/internal/tick"
)

// discovery expands backends named by host name into one backend per
// address (--discovery-interval). A name that fails to resolve keeps the
// addresses it last had: a DNS outage must not empty the fleet, and
// health checks take out addresses that stopped answering.
type discovery struct {
	mu   sync.Mutex
	last map[string][]netip.Addr // by --backend entry
	// lookup resolves a host name; tests replace it.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

var errNoAddresses = errors.New("no addresses")

// lookupTimeout bounds one name's resolution.
const lookupTimeout = 5 * time.Second

func (d *discovery) expand(ctx context.Context, addrs []backendAddr, log *slog.Logger) []backendAddr {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		d.last = map[string][]netip.Addr{}
	}
	lookup := d.lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	var out []backendAddr
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a.host)
		if err != nil || net.ParseIP(host) != nil {
			out = append(out, a)
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		ips, err := lookup(lctx, host)
		cancel()
		if err == nil && len(ips) == 0 {
			err = errNoAddresses
		}
		if err != nil {
			ips = d.last[a.origin]
			if len(ips) == 0 {
				log.Warn("backend discovery: lookup failed; the name stays one backend", "backend", a.origin, "err", err)
				out = append(out, a)
				continue
			}
			log.Warn("backend discovery: lookup failed; keeping the last addresses", "backend", a.origin, "addresses", len(ips), "err", err)
		}
		ips = slices.Clone(ips)
		for i := range ips {
			ips[i] = ips[i].Unmap()
		}
		slices.SortFunc(ips, func(x, y netip.Addr) int { return x.Compare(y) })
		ips = slices.Compact(ips)
		if old := d.last[a.origin]; !slices.Equal(old, ips) {
			log.Info("backend discovery", "backend", a.origin, "addresses", addrStrings(ips))
		}
		d.last[a.origin] = ips
		for _, ip := range ips {
			out = append(out, a.at(ip, port))
		}
	}
	return out
}

// at is a's backend at one of its name's addresses: connections go to
// ip, the Host header and TLS name stay the configured ones.
func (a backendAddr) at(ip netip.Addr, port string) backendAddr {
	hp := net.JoinHostPort(ip.String(), port)
	scheme := "http://"
	if a.tls {
		scheme = "https://"
	}
	a.host = hp
	a.url = scheme + hp + a.prefix
	return a
}

func addrStrings(ips []netip.Addr) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// discoverLoop re-resolves the configured backends every
// --discovery-interval and applies what changed.
func (s *Server) discoverLoop(ctx context.Context) {
	tick.Every(ctx.Done(), s.cfg.DiscoveryInterval, func() {
		s.reloadMu.Lock()
		spec := s.spec
		s.reloadMu.Unlock()
		if _, err := s.setBackends(spec, nil, "", -1); err != nil {
			s.log.Error("backend discovery: the new addresses were not applied", "err", err)
		}
	})
}
