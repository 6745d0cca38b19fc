package edge

import (
	"context"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"time"
)

// appendRequestID appends 16 random hex digits: unique enough to find one
// request in the logs of a fleet, and free of any request content.
func appendRequestID(dst []byte) []byte {
	var b [8]byte
	v := rand.Uint64()
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return hex.AppendEncode(dst, b[:])
}

// accessLog writes one line per request (--access-log). It names what
// routing did and how long it took; never body content or credentials.
func (s *Server) accessLog(c *call, status int) {
	model := c.info.Model
	if !c.routed {
		model = c.model
	}
	backend := ""
	if c.dec.Backend != nil {
		backend = c.dec.Backend.Name
	}
	phase := "none"
	if c.dec.Backend != nil {
		phase = c.dec.Phase.String()
	}
	s.access.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("request_id", string(c.rid)),
		slog.String("route", routeNames[c.route]),
		slog.String("model", string(model)),
		slog.String("phase", phase),
		slog.String("backend", backend),
		slog.Int("cached_blocks", c.dec.Cached),
		slog.Int("novel_blocks", c.dec.Novel),
		slog.Int("status", status),
		slog.Float64("upstream_headers_ms", float64(c.ttfb)/float64(time.Millisecond)),
		slog.Float64("duration_ms", float64(time.Since(c.start))/float64(time.Millisecond)),
	)
}
