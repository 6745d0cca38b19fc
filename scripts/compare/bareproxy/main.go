// Command bareproxy is the floor target of scripts/compare-proxies.sh: the
// smallest forwarding proxy one can build from Go and fasthttp, with the
// same server and upstream pool options as kvca serve and none of its
// routing work (no body parsing, no canonicalisation, no hashing, no table,
// no scheduler, no metrics). Whatever it costs per request is the cost of
// Go's runtime and fasthttp on this machine; the difference to kvca is
// kvca's own work.
//
//	bareproxy -listen 127.0.0.1:8081 -backend 127.0.0.1:8000
//
// Each request goes to the backend over a keep-alive HostClient pool with
// HostClient.Do (fasthttp reads the whole response, then the server writes
// it), with the hop-by-hop headers removed both ways, and no upstream
// timeouts (kvca sets one socket deadline per upstream request).
package main

import (
	"flag"
	"log"
	"time"

	"github.com/valyala/fasthttp"
)

var hop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Upgrade",
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	backend := flag.String("backend", "127.0.0.1:8000", "backend host:port (plain HTTP)")
	maxConns := flag.Int("max-conns", 1024, "keep-alive connections to the backend (kvca's --max-conns-per-backend default)")
	flag.Parse()

	// The upstream pool as kvca's edge/upstream.go builds it.
	hc := &fasthttp.HostClient{
		Addr:                          *backend,
		MaxConns:                      *maxConns,
		MaxIdleConnDuration:           90 * time.Second,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		MaxIdemponentCallAttempts:     1,
		ReadBufferSize:                16 << 10,
		WriteBufferSize:               16 << 10,
	}
	handler := func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/health" {
			ctx.SetBodyString(`{"status":"ok"}`)
			return
		}
		req := &ctx.Request
		for _, k := range hop {
			req.Header.Del(k)
		}
		clientClose := req.Header.ConnectionClose()
		req.Header.ResetConnectionClose()
		req.Header.SetHost(*backend)
		if err := hc.Do(req, &ctx.Response); err != nil {
			ctx.ResetBody()
			ctx.Error("bad gateway: "+err.Error(), fasthttp.StatusBadGateway)
			return
		}
		for _, k := range hop {
			ctx.Response.Header.Del(k)
		}
		ctx.Response.Header.ResetConnectionClose()
		if clientClose {
			ctx.SetConnectionClose()
		}
	}
	// The public server as kvca's edge/server.go builds it.
	srv := &fasthttp.Server{
		Handler:                       handler,
		Name:                          "bareproxy",
		MaxRequestBodySize:            8 << 20,
		ReadTimeout:                   30 * time.Second,
		IdleTimeout:                   2 * time.Minute,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		NoDefaultDate:                 true,
		DisableHeaderNamesNormalizing: true,
		DisablePreParseMultipartForm:  true,
		ReadBufferSize:                16 << 10,
		WriteBufferSize:               16 << 10,
	}
	log.Fatal(srv.ListenAndServe(*listen))
}
