package edge

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// models answers GET /v1/models with the union of the healthy backends'
// models, asked in parallel; the first backend to list a model owns its
// entry.
func (s *Server) models(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		writeError(ctx, fasthttp.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "use GET")
		return
	}
	type list struct {
		Data []json.RawMessage `json:"data"`
	}
	// Credentials go to the backends as the client sent them; read them
	// here, since the request header is not safe for concurrent use.
	var creds [][2][]byte
	for _, h := range []string{"Authorization", "Api-Key", "X-Api-Key"} {
		if v := ctx.Request.Header.Peek(h); len(v) > 0 {
			creds = append(creds, [2][]byte{[]byte(h), append([]byte(nil), v...)})
		}
	}
	lists := make([][]json.RawMessage, len(s.ups))
	var wg sync.WaitGroup
	for i, u := range s.ups {
		if !u.b.Healthy() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := fasthttp.AcquireRequest()
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(u.addr.url + "/v1/models")
			for _, kv := range creds {
				req.Header.SetBytesKV(kv[0], kv[1])
			}
			if err := u.hc.DoTimeout(req, resp, 5*time.Second); err != nil || resp.StatusCode() != 200 {
				return
			}
			var l list
			if json.Unmarshal(resp.Body(), &l) == nil {
				lists[i] = l.Data
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	out := struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{Object: "list", Data: []json.RawMessage{}}
	for _, l := range lists {
		for _, m := range l {
			var id struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(m, &id) != nil || id.ID == "" || seen[id.ID] {
				continue
			}
			seen[id.ID] = true
			out.Data = append(out.Data, m)
		}
	}
	if len(seen) == 0 && !s.anyHealthy() {
		noBackend(ctx)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

func (s *Server) anyHealthy() bool {
	for _, u := range s.ups {
		if u.b.Healthy() {
			return true
		}
	}
	return false
}
