package live

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
)

// APIPrefix is where the contract operations live: POST APIPrefix+<name>,
// one route per request model (gateway.Operations names them).
const APIPrefix = "/kdn/v1/"

// CapabilitiesOp is the capability discovery route of lmcache-gateway.v1:
// GET (or POST) APIPrefix+CapabilitiesOp[?endpoint_id=ID] answers the
// CapabilitySnapshot of that endpoint, or of the gateway's first one
// without endpoint_id. It has no request model; a POST body, if any, may
// only be {} or {"endpoint_id":ID}.
const CapabilitiesOp = "discover_capabilities"

// EndpointSnapshots is a gateway with one snapshot per endpoint; without
// it, the discovery route knows only Snapshot's endpoint.
type EndpointSnapshots interface {
	SnapshotFor(endpointID string) (kdn.CapabilitySnapshot, bool)
}

// APIHandler serves the KDN operations of gw and ks (either may be nil) on
// the admin listener: the body is decoded strictly as the route's request
// model (invalid → 400 with a ContractErrorDetail), the call answers its
// dedicated response model, encoded canonically with status 200 whatever
// the outcome (the outcome is in the body).
func APIHandler(gw gateway.Gateway, ks gateway.KnowledgeService, clock func() time.Time, log *slog.Logger) fasthttp.RequestHandler {
	if clock == nil {
		clock = time.Now
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ops := map[string]gateway.Operation{}
	for _, op := range gateway.Operations() {
		if op.Knowledge && ks == nil || !op.Knowledge && gw == nil {
			continue
		}
		ops[op.Name] = op
	}
	codec := kdn.Codec{Now: clock}
	return func(ctx *fasthttp.RequestCtx) {
		name := strings.TrimPrefix(string(ctx.Path()), APIPrefix)
		if name == CapabilitiesOp && gw != nil {
			serveCapabilities(ctx, gw, log)
			return
		}
		op, ok := ops[name]
		if !ok {
			writeDetail(ctx, fasthttp.StatusNotFound, kdn.OutcomeUnsupported, "no such KDN operation")
			return
		}
		if !ctx.IsPost() {
			ctx.Response.Header.Set("Allow", "POST")
			writeDetail(ctx, fasthttp.StatusMethodNotAllowed, kdn.OutcomeUnsupported, "use POST")
			return
		}
		req, err := codec.Decode(op.RequestModel, ctx.PostBody())
		if err != nil {
			writeInvalid(ctx, err)
			return
		}
		resp, err := gateway.Call(ctx, gw, ks, req)
		if err != nil {
			writeDetail(ctx, fasthttp.StatusNotFound, kdn.OutcomeUnsupported, "no such KDN operation")
			return
		}
		out, err := kdn.Encode(resp)
		if err != nil {
			// A gateway bug: the answer broke a contract rule. Never send it.
			log.Error("kdn: gateway produced an invalid answer", "operation", op.Name, "err", err)
			writeDetail(ctx, fasthttp.StatusInternalServerError, kdn.OutcomeFailed, "the gateway could not form a valid answer")
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(out)
	}
}

// serveCapabilities answers the discovery route (CapabilitiesOp).
func serveCapabilities(ctx *fasthttp.RequestCtx, gw gateway.Gateway, log *slog.Logger) {
	if !ctx.IsGet() && !ctx.IsPost() {
		ctx.Response.Header.Set("Allow", "GET, POST")
		writeDetail(ctx, fasthttp.StatusMethodNotAllowed, kdn.OutcomeUnsupported, "use GET or POST")
		return
	}
	id := string(ctx.QueryArgs().Peek("endpoint_id"))
	if body := bytes.TrimSpace(ctx.PostBody()); ctx.IsPost() && len(body) > 0 {
		var sel struct {
			EndpointID *string `json:"endpoint_id"`
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sel); err != nil || dec.More() {
			writeDetail(ctx, fasthttp.StatusBadRequest, kdn.OutcomeFailed, "invalid request: the body may only be {} or {\"endpoint_id\":ID}")
			return
		}
		if sel.EndpointID != nil {
			if id != "" && id != *sel.EndpointID {
				writeDetail(ctx, fasthttp.StatusBadRequest, kdn.OutcomeFailed, "invalid request: two different endpoint ids")
				return
			}
			id = *sel.EndpointID
		}
	}
	var snap kdn.CapabilitySnapshot
	switch es, ok := gw.(EndpointSnapshots); {
	case id != "" && ok:
		s, found := es.SnapshotFor(id)
		if !found {
			writeDetail(ctx, fasthttp.StatusNotFound, kdn.OutcomeIncompatible, "no such endpoint")
			return
		}
		snap = s
	default:
		snap = gw.Snapshot()
		if id != "" && id != snap.EndpointID {
			writeDetail(ctx, fasthttp.StatusNotFound, kdn.OutcomeIncompatible, "no such endpoint")
			return
		}
	}
	out, err := kdn.Encode(snap)
	if err != nil {
		log.Error("kdn: gateway produced an invalid capability snapshot", "err", err)
		writeDetail(ctx, fasthttp.StatusInternalServerError, kdn.OutcomeFailed, "the gateway could not form a valid answer")
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(out)
}

// writeInvalid answers a request that broke a contract rule. The code is
// incompatible for a wrong contract version or runtime profile, failed
// otherwise; the message names the rule, never the input's values.
func writeInvalid(ctx *fasthttp.RequestCtx, err error) {
	var ve *kdn.ValidationError
	if !errors.As(err, &ve) {
		writeDetail(ctx, fasthttp.StatusBadRequest, kdn.OutcomeFailed, "request is not a valid KDN message")
		return
	}
	code := kdn.OutcomeFailed
	if ve.Code == kdn.CodeContractVersion || ve.Code == kdn.CodeInvalidProfile {
		code = kdn.OutcomeIncompatible
	}
	writeDetail(ctx, fasthttp.StatusBadRequest, code, "invalid request: "+ve.Line())
}

func writeDetail(ctx *fasthttp.RequestCtx, status int, code kdn.OutcomeCode, msg string) {
	out, err := kdn.Encode(kdn.NewErrorDetail(code, msg))
	if err != nil { // unreachable: the code is a valid outcome and msg is not empty
		out = []byte(`{"code":"failed","message":"error","contract_version":"kdn.v1","retryable":false,"fallback_eligible":false}`)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(out)
}

// Mount mounts the contract operations and kvca's own knowledge routes
// (see PrefixPrefix) on the admin listener of the gateway's server.
func (g *Gateway) Mount() {
	g.srv.HandleAdmin(APIPrefix, APIHandler(g, g, g.clock, g.log))
	g.srv.HandleAdmin(PrefixPrefix, g.handlePrefix)
	g.srv.HandleAdmin(KnowledgePrefix, g.handleKnowledge)
}
