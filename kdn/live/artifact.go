package live

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/kdn"
)

// Paths a prefix is warmed through, by API.
const (
	pathChat        = "/v1/chat/completions"
	pathCompletions = "/v1/completions"
)

// prefixInfo is a stored prefix made usable: its chain under this
// process's key and block size, the body that warms it, and the artifact
// (cache identity) it stands for in this deployment.
type prefixInfo struct {
	knowledgeID string
	revision    string
	api         canon.API
	warm        []byte
	chain       []uint64
	artifact    kdn.CacheArtifact
}

func (p *prefixInfo) path() string {
	if p.api == canon.Completions {
		return pathCompletions
	}
	return pathChat
}

// deriver turns a stored prefix into a prefixInfo for this deployment.
type deriver struct {
	compat    string
	blockSize int
	chain     func(api canon.API, body []byte) ([]uint64, canon.Info, error)
}

// Reasons a prefix is refused; they are shown to the operator who
// uploaded it, so they describe the body, never echo it.
var (
	errPrefixAPI     = errors.New("the body is neither a chat request (messages) nor a completions request (prompt)")
	errPrefixModel   = errors.New("the body must name a model")
	errPrefixShort   = errors.New("the prefix is shorter than one cache block")
	errPrefixIdent   = errors.New("knowledge_id and revision must be non-blank to name a cache artifact")
	errPrefixReshape = errors.New("the one-token warm-up body does not reproduce the prefix's chain")
)

// apiOf infers the API from the body's prompt field when not given.
func apiOf(name string, body []byte) (canon.API, error) {
	if name != "" {
		a, err := canon.ParseAPI(name)
		if err != nil || (a != canon.Chat && a != canon.Completions) {
			return canon.Chat, errPrefixAPI
		}
		return a, nil
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(body, &probe) != nil {
		return canon.Chat, canon.ErrMalformed
	}
	_, chat := probe["messages"]
	_, comp := probe["prompt"]
	switch {
	case chat && !comp:
		return canon.Chat, nil
	case comp && !chat:
		return canon.Completions, nil
	}
	return canon.Chat, errPrefixAPI
}

func (d deriver) derive(id, rev string, px *prefix) (*prefixInfo, error) {
	if strings.TrimSpace(id) == "" || strings.TrimSpace(rev) == "" {
		return nil, errPrefixIdent
	}
	api, err := apiOf(px.API, px.Body)
	if err != nil {
		return nil, err
	}
	chain, info, err := d.chain(api, px.Body)
	if err != nil {
		return nil, err
	}
	model := string(info.Model)
	if strings.TrimSpace(model) == "" {
		return nil, errPrefixModel
	}
	if len(chain) == 0 {
		return nil, errPrefixShort
	}
	warm, err := warmBody(px.Body)
	if err != nil {
		return nil, err
	}
	// Generation-only fields are outside the CBR, so this holds by design;
	// checking it here means a prefetch can never learn a chain other than
	// the one observations look for.
	if wc, _, err := d.chain(api, warm); err != nil || !slices.Equal(wc, chain) {
		return nil, errPrefixReshape
	}
	a := kdn.CacheArtifact{
		KnowledgeID:      id,
		ArtifactVersion:  rev,
		ModelProfile:     model,
		TokenizerProfile: model, // the backend tokenises with the model's own tokenizer
		Adapters:         []string{},
		// What makes kvca's view of the cache reusable: CBR format, API and
		// block size. The hash key is secret and deliberately left out.
		CacheDataProfile:       "kvca-cbr1-" + api.String() + "-b" + strconv.Itoa(d.blockSize),
		CompatibilityProfileID: d.compat,
		RuntimeProfile:         kdn.ProfileV1,
		SchemaVersion:          "v1",
		CreatedAt:              px.UploadedAt.UTC(),
	}
	a.ArtifactID = kdn.Some(a.CanonicalID())
	if kdn.Validate(a) != nil {
		return nil, errPrefixIdent
	}
	return &prefixInfo{knowledgeID: id, revision: rev, api: api, warm: warm, chain: chain, artifact: a}, nil
}

// warmBody is body asking for one output token, unstreamed: the cheapest
// request that makes the backend prefill (and cache) the whole prompt.
func warmBody(body []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, canon.ErrNotObject
	}
	m["max_tokens"] = json.RawMessage("1")
	if _, ok := m["max_completion_tokens"]; ok {
		m["max_completion_tokens"] = json.RawMessage("1")
	}
	m["stream"] = json.RawMessage("false")
	delete(m, "stream_options")
	if _, ok := m["n"]; ok {
		m["n"] = json.RawMessage("1")
	}
	return json.Marshal(m)
}
