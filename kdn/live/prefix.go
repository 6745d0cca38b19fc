package live

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/kdn"
)

// kvca's own knowledge routes, outside the contracts (the contracts carry
// descriptors, never content):
//
//	PUT /kdn/prefix/<knowledge_id>[?revision=R][&api=chat|completions]
//	    body: an OpenAI chat or completions request whose prompt is the
//	    prefix; stored for revision R (default: the current one) of a
//	    registered knowledge item; answers the artifact it derives to.
//	GET /kdn/prefix/<knowledge_id>[?revision=R]
//	    the stored body, as uploaded.
//	GET /kdn/knowledge/<knowledge_id>
//	    revisions, prefixes, artifact ids, reported outcomes.
const (
	PrefixPrefix    = "/kdn/prefix/"
	KnowledgePrefix = "/kdn/knowledge/"
)

// PrefixAnswer is the answer to a prefix upload.
type PrefixAnswer struct {
	KnowledgeID string          `json:"knowledge_id"`
	Revision    string          `json:"revision"`
	API         string          `json:"api"`
	Model       string          `json:"model"`
	Blocks      int             `json:"blocks"`
	ArtifactID  string          `json:"artifact_id"`
	Artifact    json.RawMessage `json:"artifact"` // the CacheArtifact, canonical
}

func (g *Gateway) handlePrefix(ctx *fasthttp.RequestCtx) {
	id, ok := pathID(ctx, PrefixPrefix)
	if !ok {
		adminError(ctx, fasthttp.StatusNotFound, "not_found", "knowledge id missing from the path")
		return
	}
	rev := string(ctx.QueryArgs().Peek("revision"))
	switch {
	case ctx.IsPut():
		p, err := g.cat.putPrefix(id, rev, string(ctx.QueryArgs().Peek("api")), ctx.PostBody(), g.now())
		if err != nil {
			prefixError(ctx, err)
			return
		}
		art, _ := kdn.Encode(p.artifact) // validated when derived
		writeJSON(ctx, PrefixAnswer{
			KnowledgeID: p.knowledgeID, Revision: p.revision, API: p.api.String(),
			Model: p.artifact.ModelProfile, Blocks: len(p.chain), ArtifactID: p.artifact.ID(), Artifact: art,
		})
	case ctx.IsGet():
		body, err := g.cat.prefixBody(id, rev)
		if err != nil {
			prefixError(ctx, err)
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	default:
		ctx.Response.Header.Set("Allow", "GET, PUT")
		adminError(ctx, fasthttp.StatusMethodNotAllowed, "method_not_allowed", "use PUT to upload, GET to read")
	}
}

func (g *Gateway) handleKnowledge(ctx *fasthttp.RequestCtx) {
	id, ok := pathID(ctx, KnowledgePrefix)
	if !ok || !ctx.IsGet() {
		adminError(ctx, fasthttp.StatusNotFound, "not_found", "use GET /kdn/knowledge/<knowledge_id>")
		return
	}
	d, err := g.cat.describe(id)
	if err != nil {
		prefixError(ctx, err)
		return
	}
	writeJSON(ctx, d)
}

// pathID takes the knowledge id from the raw path, so that ids containing
// "/" or "%" survive when percent-encoded.
func pathID(ctx *fasthttp.RequestCtx, prefix string) (string, bool) {
	raw, ok := strings.CutPrefix(string(ctx.URI().PathOriginal()), prefix)
	if !ok || raw == "" {
		return "", false
	}
	id, err := url.PathUnescape(raw)
	return id, err == nil && id != ""
}

func prefixError(ctx *fasthttp.RequestCtx, err error) {
	switch {
	case errors.Is(err, errUnknownKnowledge), errors.Is(err, errUnknownRevision):
		adminError(ctx, fasthttp.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, errPersist):
		adminError(ctx, fasthttp.StatusInternalServerError, "store_failed", err.Error())
	default:
		// canon errors and the prefix errors are fixed texts about the body.
		msg := err.Error()
		if r := canon.Reason(err); r == "other" && !isPrefixErr(err) {
			msg = "the body is not a usable OpenAI request (malformed, or for a model no backend serves)"
		}
		adminError(ctx, fasthttp.StatusBadRequest, "invalid_prefix", msg)
	}
}

func isPrefixErr(err error) bool {
	for _, e := range []error{errPrefixAPI, errPrefixModel, errPrefixShort, errPrefixIdent, errPrefixReshape} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// adminError answers in the OpenAI error shape the rest of kvca uses.
func adminError(ctx *fasthttp.RequestCtx, status int, code, msg string) {
	ctx.SetStatusCode(status)
	writeJSONStatus(ctx, status, map[string]any{"error": map[string]any{
		"message": msg, "type": "invalid_request_error", "param": nil, "code": code,
	}})
}

func writeJSON(ctx *fasthttp.RequestCtx, v any) { writeJSONStatus(ctx, fasthttp.StatusOK, v) }

func writeJSONStatus(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = fasthttp.StatusInternalServerError, []byte(`{"error":{"message":"could not encode the answer","type":"server_error","param":null,"code":"encode"}}`)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}
