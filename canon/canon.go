// Package canon turns a request body (OpenAI chat, completions and
// responses, Anthropic messages) into its canonical byte representation
// (CBR, format 1: docs/cbr.md) and classifies it as a
// bootstrap or a follow-up request.
//
// The CBR is never materialised whole: it is streamed into a Sink (the chain
// hasher) through a small fixed buffer, so a request costs no heap allocation
// once the pooled parsers and scratch space have grown to the traffic's size.
package canon

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/valyala/fastjson"
)

// API names the request family, which decides the CBR preamble and the field
// that carries the prompt.
type API uint8

const (
	Chat API = iota
	Completions
	Responses // POST /v1/responses
	Messages  // POST /v1/messages (Anthropic Messages API)
)

func (a API) String() string {
	switch a {
	case Completions:
		return "completions"
	case Responses:
		return "responses"
	case Messages:
		return "messages"
	}
	return "chat"
}

// preamble starts each API's CBR, so equal bodies of different APIs never
// share blocks.
func (a API) preamble() string {
	switch a {
	case Completions:
		return "completions\n"
	case Responses:
		return "responses\n"
	case Messages:
		return "messages\n"
	}
	return "chat\n"
}

// promptKey is the member that carries the prompt items.
func (a API) promptKey() string {
	switch a {
	case Completions:
		return "prompt"
	case Responses:
		return "input"
	}
	return "messages"
}

// ParseAPI maps the names used on the command line to an API.
func ParseAPI(s string) (API, error) {
	switch s {
	case "chat":
		return Chat, nil
	case "completions":
		return Completions, nil
	case "responses":
		return Responses, nil
	case "messages":
		return Messages, nil
	}
	return Chat, fmt.Errorf("unknown api %q (want chat, completions, responses or messages)", s)
}

// Sink receives the CBR in order, in pieces of any size. The slice is only
// valid during the call.
type Sink interface {
	Write(p []byte)
}

// LiteralSink is a Sink that may already know what the CBR of a long
// string does to it (chain.Hasher with a chain.Memo). Before writing the
// CBR of a string, the Canonicalizer offers the string's JSON literal to
// SkipLiteral; if that returns true, the sink has advanced as if the CBR
// (of the returned length) had been written. Otherwise the CBR is written
// and WroteLiteral follows with the same literal and the CBR's length.
type LiteralSink interface {
	Sink
	SkipLiteral(lit []byte) (int, bool)
	WroteLiteral(lit []byte, cbrLen int)
}

// Info is what routing needs to know about a request besides its chain.
// The zero value is ready; Model is reused across requests.
type Info struct {
	// Followup is true when a chat request carries earlier model output or a
	// tool result, and always for completions (they carry no roles).
	Followup bool
	// Model is the top-level "model" string (last occurrence wins), empty if
	// absent or not a string.
	Model []byte
	// Session is a hash of the conversation's first user message (chat) or
	// of the start of the prompt (completions), for session affinity; 0 if
	// the Canonicalizer was made with Options.NoSession.
	Session uint64
	// Messages counts chat messages (Messages API messages, Responses API
	// input items).
	Messages int
	// CBRLen is the number of CBR bytes written to the sink.
	CBRLen int
	// PreviousResponseID is the Responses API's previous_response_id
	// string (the thread this request continues), empty if absent; reused
	// across requests like Model.
	PreviousResponseID []byte
	// CacheKey is the keyed hash (Canonicalizer.HashSessionKey) of the
	// prompt_cache_key string, 0 if absent or empty: the client's own name
	// for requests that share a prefix.
	CacheKey uint64
	// UserKey is the keyed hash of the end user's id: `user`, else
	// `safety_identifier` (chat, completions, responses), or
	// metadata.user_id (messages); 0 if absent or empty.
	UserKey uint64
	// Priority is the JSON text of the top-level `priority` member when it
	// is a number (vLLM's scheduling priority: lower is served earlier),
	// empty otherwise; reused across requests like Model. admit.ClassOf
	// reads it as the request's class when no X-KVCA-Priority header says.
	Priority []byte
	// PromptEnd is the body offset of the prompt array's closing bracket
	// (messages, input) when the resumer vouched for it, else 0: a body
	// it recorded cold, or one it resumed (docs/cbr.md, "Resuming"). The
	// prompt's key is then the only top-level member of that name, so a
	// reader of the other top-level members may jump from the array's
	// opening bracket to here instead of scanning the prompt.
	PromptEnd int
}

// Error kinds a caller can map to a metric label and an HTTP 400 message.
var (
	ErrMalformed     = errors.New("request body is not valid JSON")
	ErrNotObject     = errors.New("request body must be a JSON object")
	ErrNoMessages    = errors.New("'messages' is required and must be a non-empty array")
	ErrBadMessage    = errors.New("each entry of 'messages' must be an object with a string 'role'")
	ErrNoPrompt      = errors.New("'prompt' is required and must be a string or an array")
	ErrNoInput       = errors.New("'input' is required and must be a string or an array")
	ErrBadNumberText = errors.New("request body contains a number that is not valid JSON")
)

// Reason returns a short, stable label for an error from Canonicalize,
// suitable for metrics.
func Reason(err error) string {
	switch err {
	case ErrMalformed, ErrBadNumberText:
		return "malformed_json"
	case ErrNotObject:
		return "not_object"
	case ErrNoMessages, ErrBadMessage:
		return "bad_messages"
	case ErrNoPrompt, ErrNoInput:
		return "bad_prompt"
	}
	return "other"
}

// generationOnly lists the top-level fields that control decoding but not
// the rendered prompt; they are left out of the CBR header so that changing
// them never costs a cache hit.
var generationOnly = []string{
	"stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature",
	"top_p", "top_k", "min_p", "typical_p", "n", "best_of", "stop", "stop_token_ids",
	"seed", "presence_penalty", "frequency_penalty", "repetition_penalty",
	"length_penalty", "logit_bias", "logprobs", "top_logprobs", "prompt_logprobs",
	"echo", "user", "metadata", "store", "service_tier", "min_tokens", "ignore_eos",
	"skip_special_tokens", "spaces_between_special_tokens",
	"include_stop_str_in_output", "response_format", "guided_json", "guided_regex",
	"guided_choice", "guided_grammar", "guided_decoding_backend",
	"guided_whitespace_pattern", "structured_outputs", "prediction", "priority",
	"request_id", "kv_transfer_params", "return_tokens_as_token_ids",
	"return_token_ids", "logits_processors", "allowed_token_ids", "bad_words",
	"vllm_xargs", "prompt_cache_key", "safety_identifier",
}

// responsesGenerationOnly are the Responses API's own decoding controls,
// excluded (at the top level) from /v1/responses requests besides
// generationOnly. `text` carries the output format, like response_format.
var responsesGenerationOnly = []string{
	"max_output_tokens", "max_tool_calls", "include", "background", "text", "truncation_strategy",
}

// messagesGenerationOnly are the Messages API's own decoding controls,
// excluded (at the top level) from /v1/messages requests besides
// generationOnly (which already holds max_tokens, temperature, top_p,
// top_k, stream, metadata and service_tier).
var messagesGenerationOnly = []string{"stop_sequences"}

// cacheControl is the Messages API's caching hint. Clients move it from
// block to block as a conversation grows (the newest turn carries it), and
// engines do not render it, so it is left out of a messages CBR wherever
// it appears; kept, it would change a resent turn's bytes and end the
// prefix there.
const cacheControl = "cache_control"

// Canonicalizer is safe for concurrent use; per-request state is pooled.
type Canonicalizer struct {
	exclude   map[string]struct{}
	excludeRs map[string]struct{} // Responses API: exclude plus its own controls
	excludeMs map[string]struct{} // Messages API: exclude plus its own controls
	pool      sync.Pool           // *state
	noSession bool
	k0, k1    uint64 // session-key hash key
	// decodeStrings: always decode and re-escape strings (tests only).
	decodeStrings bool
	resume        *Resumer // nil: every body from its start
}

// Options change what a Canonicalizer computes besides the CBR.
type Options struct {
	// NoSession skips Info.Session (left 0): the FNV-1a hash of up to 4 KB
	// of the first user message, a quarter of the cost of canonicalising
	// and hashing a chat body into its chain, which only session-affinity
	// routing uses. The CBR, and so the chain, is the same either way.
	NoSession bool
	// HashKey keys the SipHash-2-4 of session keys (Info.CacheKey,
	// Info.UserKey, HashSessionKey), so they are never kept in clear and
	// cannot be guessed from their hashes. Replicas that share session
	// bindings must use the same key (kvca serve passes --hash-key).
	HashKey [2]uint64
	// ResumeMemoBytes, if positive, gives the Canonicalizer a Resumer of
	// that budget (--resume-memo-bytes): a body that repeats an earlier
	// one's raw bytes is then canonicalised and hashed only from the last
	// message boundary they share, when its sink is a ResumableSink (a
	// chain.Hasher). The CBR, chain and Info are the same either way.
	ResumeMemoBytes int
}

// New returns a Canonicalizer that drops generationOnly plus extraExclude
// from the top level of every request, and computes Info.Session.
func New(extraExclude []string) *Canonicalizer {
	return NewWithOptions(extraExclude, Options{})
}

// NewWithOptions is New with opt.
func NewWithOptions(extraExclude []string, opt Options) *Canonicalizer {
	c := &Canonicalizer{exclude: make(map[string]struct{}, len(generationOnly)+len(extraExclude)), noSession: opt.NoSession,
		k0: opt.HashKey[0], k1: opt.HashKey[1], resume: NewResumer(opt.ResumeMemoBytes)}
	for _, k := range generationOnly {
		c.exclude[k] = struct{}{}
	}
	for _, k := range extraExclude {
		c.exclude[k] = struct{}{}
	}
	c.excludeRs = make(map[string]struct{}, len(c.exclude)+len(responsesGenerationOnly))
	for k := range c.exclude {
		c.excludeRs[k] = struct{}{}
	}
	for _, k := range responsesGenerationOnly {
		c.excludeRs[k] = struct{}{}
	}
	c.excludeMs = make(map[string]struct{}, len(c.exclude)+len(messagesGenerationOnly))
	for k := range c.exclude {
		c.excludeMs[k] = struct{}{}
	}
	for _, k := range messagesGenerationOnly {
		c.excludeMs[k] = struct{}{}
	}
	return c
}

// member is one object member awaiting emission in sorted order.
type member struct {
	key []byte
	val *fastjson.Value
}

// state is the per-request scratch space: the parser, the member stack used
// to sort nested objects, and the output buffer in front of the sink.
type state struct {
	p       fastjson.Parser
	members []member
	roles   []*fastjson.Value // each message's role (validatePrompt)
	num     []byte
	lit     []byte // a scalar's JSON text as fastjson marshals it
	// decodeStrings turns off the literal fast path (tests compare both).
	decodeStrings bool
	// dropCacheControl leaves cache_control members out (messages).
	dropCacheControl bool
	out              [4096]byte
	n                int
	sink             Sink
	lsink            LiteralSink // sink, if it is one; nil otherwise
	total            int
	// FNV-1a over the first sessionBytes written while hashing is on, for
	// Info.Session; never on without session.
	session bool
	hashing bool
	hashed  int
	hash    uint64
	// Line state that a resumed request takes over (lines).
	sessionSet bool   // info.Session is the first user turn's
	firstHash  uint64 // the first line's session hash
	rz         rzScratch
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
	// Conversations that share their first 4 KB of first user message share
	// the cached prefix too, so hashing more would buy no better affinity.
	sessionBytes = 4096
)

// Canonicalize parses body, writes its CBR to sink and fills info.
// On error nothing useful has been written and the request must be rejected.
func (c *Canonicalizer) Canonicalize(api API, body []byte, sink Sink, info *Info) error {
	st, _ := c.pool.Get().(*state)
	if st == nil {
		st = &state{}
	}
	var err error
	if rs, ok := sink.(ResumableSink); ok && c.resume != nil && resumable(api) {
		err = c.canonicalizeResuming(st, api, body, rs, info)
	} else {
		err = c.run(st, api, body, sink, info)
	}
	st.sink, st.lsink = nil, nil
	st.members = st.members[:0]
	clear(st.roles)
	st.roles = st.roles[:0]
	c.pool.Put(st)
	return err
}

func (c *Canonicalizer) run(st *state, api API, body []byte, sink Sink, info *Info) error {
	c.begin(st, api, sink, info)
	v, err := st.p.ParseBytes(body)
	if err != nil {
		return ErrMalformed
	}
	root, err := v.Object()
	if err != nil {
		return ErrNotObject
	}

	// Collect the top-level members, sorted, last duplicate winning.
	base := len(st.members)
	root.Visit(func(k []byte, v *fastjson.Value) {
		st.members = append(st.members, member{k, v})
	})
	promptKey := api.promptKey()
	if st.rz.on {
		st.rzTop(st.members[base:], promptKey) // needs body order
	}
	top := sortMembers(st.members[base:])
	exclude := c.exclude
	switch api {
	case Responses:
		exclude = c.excludeRs
	case Messages:
		exclude = c.excludeMs
	}
	// What fastjson lets through and no backend takes: the members left
	// out of the CBR are checked for number forms ("+1", "NaN") and raw
	// control bytes in strings, the other top-level strings (a prompt
	// given as one string too) for raw control bytes; value checks the
	// rest as it writes it. First, before anything reads a string and
	// decodes it.
	for i := range top {
		k := top[i].key
		if string(k) != promptKey && st.leftOut(k, exclude) {
			if err := st.scalarsValid(top[i].val); err != nil {
				return err
			}
		} else if st.isString(top[i].val) && rawControl(st.num) {
			return ErrMalformed
		}
	}
	var prompt *fastjson.Value
	named := false // the end user named by user, which safety_identifier does not override
	for i := range top {
		switch string(top[i].key) {
		case promptKey:
			prompt = top[i].val
		case "model":
			if top[i].val.Type() == fastjson.TypeString {
				info.Model = append(info.Model, top[i].val.GetStringBytes()...)
			}
		case "previous_response_id":
			// The backend holds the earlier turns: a continuation.
			if api == Responses && top[i].val.Type() == fastjson.TypeString {
				info.Followup = true
				info.PreviousResponseID = append(info.PreviousResponseID, top[i].val.GetStringBytes()...)
			}
		case "prompt_cache_key":
			info.CacheKey = c.hashString(top[i].val)
		case "priority":
			if top[i].val.Type() == fastjson.TypeNumber {
				info.Priority = top[i].val.MarshalTo(info.Priority)
			}
		case "user":
			if api != Messages {
				if k := c.hashString(top[i].val); k != 0 {
					info.UserKey, named = k, true
				}
			}
		case "safety_identifier":
			// OpenAI's successor of user for the end user's id: the
			// same user, where the body does not name one in user.
			if api != Messages && !named {
				if k := c.hashString(top[i].val); k != 0 {
					info.UserKey = k
				}
			}
		case "metadata":
			if o := top[i].val.GetObject(); api == Messages && o != nil {
				info.UserKey = c.hashString(lastMember(o, "user_id"))
			}
		}
	}
	if err := st.validatePrompt(api, prompt); err != nil {
		return err
	}

	st.writeString(api.preamble())
	// Header: every top-level member but the prompt and excluded controls.
	st.writeByte('{')
	first := true
	for i := range top {
		k := top[i].key
		if string(k) == promptKey {
			continue
		}
		if st.leftOut(k, exclude) {
			continue // checked above
		}
		st.writeKey(k, first)
		first = false
		if err := st.value(top[i].val); err != nil {
			return err
		}
	}
	st.writeByte('}')
	st.writeByte('\n')

	switch {
	case api == Chat || api == Messages:
		err = st.lines(prompt.GetArray(), 0, info, api)
	case api == Responses && prompt.Type() == fastjson.TypeArray:
		err = st.lines(prompt.GetArray(), 0, info, api)
	default:
		st.startSession()
		err = st.value(prompt)
		st.hashing = false
		info.Session = st.hash
		st.writeByte('\n')
	}
	if err != nil {
		return err
	}
	st.flush()
	st.members = st.members[:base]
	info.CBRLen = st.total
	return nil
}

// begin resets info and st for a request.
func (c *Canonicalizer) begin(st *state, api API, sink Sink, info *Info) {
	info.Followup = api == Completions
	info.Model = info.Model[:0]
	info.Session = 0
	info.Messages = 0
	info.CBRLen = 0
	info.PreviousResponseID = info.PreviousResponseID[:0]
	info.CacheKey, info.UserKey = 0, 0
	info.Priority = info.Priority[:0]
	info.PromptEnd = 0
	st.dropCacheControl = api == Messages
	st.sink = sink
	st.lsink, _ = sink.(LiteralSink)
	st.n = 0
	st.total = 0
	st.hashing = false
	st.session = !c.noSession
	st.decodeStrings = c.decodeStrings
	st.hash = 0
	st.sessionSet, st.firstHash = false, 0
}

// validatePrompt checks the prompt's shape before anything is written;
// for chat and messages it keeps each message's role in st.roles, where
// lines finds it again.
func (st *state) validatePrompt(api API, prompt *fastjson.Value) error {
	st.roles = st.roles[:0]
	if api == Chat || api == Messages {
		if prompt == nil || prompt.Type() != fastjson.TypeArray || len(prompt.GetArray()) == 0 {
			return ErrNoMessages
		}
		for _, m := range prompt.GetArray() {
			if m.Type() != fastjson.TypeObject {
				return ErrBadMessage
			}
			r := lastMember(m.GetObject(), "role")
			if r == nil || !st.isString(r) {
				return ErrBadMessage
			}
			st.roles = append(st.roles, r)
		}
		return nil
	}
	// A string or an array, told without Type, which would decode a
	// string prompt: value then found a decoded string, which fastjson
	// marshals again rune by rune, instead of the literal as sent (a
	// 128 KB prompt took 0.8 ms). An empty array marshals as "[]".
	if prompt != nil && prompt.GetObject() == nil {
		if prompt.GetArray() != nil {
			return nil
		}
		if st.num = prompt.MarshalTo(st.num[:0]); st.num[0] == '"' || string(st.num) == "[]" {
			return nil
		}
	}
	if api == Responses {
		return ErrNoInput
	}
	return ErrNoPrompt
}

// isString reports whether v is a string without decoding it: a string
// fastjson has decoded is written by value() by escaping it again, which
// costs more than copying its literal (the roles, checked here, are
// written as they came).
func (st *state) isString(v *fastjson.Value) bool {
	if v.GetObject() != nil || v.GetArray() != nil {
		return false
	}
	st.num = v.MarshalTo(st.num[:0])
	return len(st.num) > 0 && st.num[0] == '"'
}

// stringText is the text of v, a string (nil: none), decoded only if its
// literal has an escape. The bytes are valid until st.num is used again.
func (st *state) stringText(v *fastjson.Value) []byte {
	if v == nil {
		return nil
	}
	st.num = v.MarshalTo(st.num[:0])
	if len(st.num) < 2 || st.num[0] != '"' || bytes.IndexByte(st.num, '\\') >= 0 {
		return v.GetStringBytes()
	}
	return st.num[1 : len(st.num)-1]
}

// lines writes one canonical line per element of elems: chat or Messages
// API messages, or Responses API input items, the first of them at index
// idx0 of its array (a resumed request starts past 0, in the line state
// its snapshot restored). Earlier model output makes the request a
// follow-up; the first user turn (else the first line) identifies the
// conversation for session affinity.
func (st *state) lines(elems []*fastjson.Value, idx0 int, info *Info, api API) error {
	for j, m := range elems {
		if j > 0 && st.rz.on {
			st.boundaryBefore(m, info)
		}
		var role *fastjson.Value
		if j < len(st.roles) {
			role = st.roles[j]
		}
		output, isUser := classify(m, st.stringText(role), role != nil, api)
		info.Followup = info.Followup || output
		user := !st.sessionSet && isUser
		first := idx0+j == 0
		if user || first {
			st.startSession()
		}
		if err := st.value(m); err != nil {
			return err
		}
		st.hashing = false
		if user {
			info.Session = st.hash
			st.sessionSet = true
		}
		if first {
			st.firstHash = st.hash
		}
		st.writeByte('\n')
		info.Messages++
	}
	if st.rz.on && len(elems) > 0 {
		st.boundaryLast(info)
	}
	if !st.sessionSet {
		info.Session = st.firstHash
	}
	return nil
}

// classify says whether a message or input item is earlier model output
// (or its answer), and whether it is a user turn. Chat looks at the role;
// Responses API items also by type: function_call, function_call_output,
// reasoning and the like are output, the input_* parts and plain messages
// are not. A Messages API user turn that carries a tool_result block
// answers earlier model output. role is m's role if known (else it is
// looked up).
func classify(m *fastjson.Value, role []byte, known bool, api API) (output, user bool) {
	if m.Type() != fastjson.TypeObject {
		return false, false
	}
	o := m.GetObject()
	if !known {
		role = lastMember(o, "role").GetStringBytes()
	}
	switch string(role) {
	case "assistant", "tool", "function":
		return true, false
	case "user":
		user = true
	}
	if api == Messages {
		for _, b := range lastMember(o, "content").GetArray() {
			if bo := b.GetObject(); bo != nil && string(lastMember(bo, "type").GetStringBytes()) == "tool_result" {
				return true, user
			}
		}
		return false, user
	}
	if api == Responses {
		switch typ := lastMember(o, "type").GetStringBytes(); string(typ) {
		case "", "message", "input_text", "input_image", "input_file", "item_reference":
		default:
			return true, user
		}
	}
	return false, user
}

func lastMember(o *fastjson.Object, key string) *fastjson.Value {
	var found *fastjson.Value
	o.Visit(func(k []byte, v *fastjson.Value) {
		if string(k) == key {
			found = v
		}
	})
	return found
}

// sortMembers sorts by key and keeps only the last of equal keys, as the
// backend's JSON parser would see them. It returns the deduplicated prefix.
func sortMembers(ms []member) []member {
	switch len(ms) {
	case 0, 1:
		return ms
	case 2:
		// Most objects of a chat body (a message: role and content).
		switch bytes.Compare(ms[0].key, ms[1].key) {
		case 0:
			ms[0] = ms[1]
			return ms[:1]
		case 1:
			ms[0], ms[1] = ms[1], ms[0]
		}
		return ms
	}
	slices.SortStableFunc(ms, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	out := ms[:0]
	for i := range ms {
		if i+1 < len(ms) && bytes.Equal(ms[i].key, ms[i+1].key) {
			continue
		}
		out = append(out, ms[i])
	}
	return out
}

// leftOut reports whether top-level member k stays out of the CBR: a
// decoding control, or cache_control where it is dropped.
func (st *state) leftOut(k []byte, exclude map[string]struct{}) bool {
	_, ok := exclude[string(k)]
	return ok || (st.dropCacheControl && string(k) == cacheControl)
}

// keyword reports whether lit, a scalar's literal, is true, false, null
// or an empty array (which GetArray cannot tell from a scalar).
func keyword(lit []byte) bool {
	return string(lit) == "true" || string(lit) == "false" || string(lit) == "null" || string(lit) == "[]"
}

// scalarsValid checks what fastjson lets through under v, a value kvca
// does not write into the CBR: every number against the JSON grammar
// (ErrBadNumberText), every string not yet decoded for raw control bytes
// (ErrMalformed). Like value, it asks no scalar for its Type, which would
// decode a string and hide how it was written.
func (st *state) scalarsValid(v *fastjson.Value) error {
	if o := v.GetObject(); o != nil {
		var err error
		o.Visit(func(_ []byte, e *fastjson.Value) {
			if err == nil {
				err = st.scalarsValid(e)
			}
		})
		return err
	}
	if a := v.GetArray(); len(a) > 0 {
		for _, e := range a {
			if err := st.scalarsValid(e); err != nil {
				return err
			}
		}
		return nil
	}
	st.num = v.MarshalTo(st.num[:0])
	switch lit := st.num; {
	case lit[0] == '"':
		if rawControl(lit) {
			return ErrMalformed
		}
	case keyword(lit):
	default:
		if !validNumber(lit) {
			return ErrBadNumberText
		}
	}
	if cap(st.num) > maxKeptLiteral {
		st.num = nil
	}
	return nil
}

// value writes canon(v).
//
// It never asks a scalar for its Type: fastjson decodes a string the first
// time anything looks at it, and decoding a long prompt only for
// writeQuoted to escape it again was half of the cost of canonicalising a
// chat body. A string nobody has looked at marshals as the literal the
// client sent, which is almost always canonString already (clients escape
// the same few characters); that literal is checked and written as it is.
func (st *state) value(v *fastjson.Value) error {
	// GetObject and GetArray look at the type without decoding (Object and
	// Array would, and allocate an error for every scalar).
	if o := v.GetObject(); o != nil {
		base := len(st.members)
		o.Visit(func(k []byte, v *fastjson.Value) {
			st.members = append(st.members, member{k, v})
		})
		ms := sortMembers(st.members[base:])
		st.writeByte('{')
		first := true
		for i := range ms {
			if st.dropCacheControl && string(ms[i].key) == cacheControl {
				if err := st.scalarsValid(ms[i].val); err != nil {
					return err
				}
				continue
			}
			st.writeKey(ms[i].key, first)
			first = false
			// The recursion may grow st.members; ms aliases the old array,
			// which stays valid because nothing below base+len(ms) moves.
			if err := st.value(ms[i].val); err != nil {
				return err
			}
		}
		st.writeByte('}')
		st.members = st.members[:base]
		return nil
	}
	if a := v.GetArray(); len(a) > 0 {
		st.writeByte('[')
		for i, e := range a {
			if i > 0 {
				st.writeByte(',')
			}
			if err := st.value(e); err != nil {
				return err
			}
		}
		st.writeByte(']')
		return nil
	}
	st.lit = v.MarshalTo(st.lit[:0])
	lit := st.lit
	switch {
	case lit[0] == '"':
		if st.lsink != nil && len(lit) >= minSkipLiteral && !st.hashing {
			// The session hash needs the bytes; nothing else does.
			st.flush()
			if n, ok := st.lsink.SkipLiteral(lit); ok {
				st.total += n
			} else {
				start := st.total
				if !st.writeStringValue(v, lit) {
					return ErrMalformed
				}
				st.flush()
				st.lsink.WroteLiteral(lit, st.total-start)
			}
		} else if !st.writeStringValue(v, lit) {
			return ErrMalformed
		}
		if cap(st.lit) > maxKeptLiteral {
			st.lit = nil // one huge prompt must not pin its size in the pool
		}
	case keyword(lit):
		st.write(lit)
	default:
		if !validNumber(lit) {
			return ErrBadNumberText
		}
		st.write(lit)
	}
	return nil
}

// writeStringValue writes canonString of v, whose literal is lit; false:
// lit holds a raw control byte, which JSON forbids in a string and
// fastjson lets through. (A string decoded before marshals escaped: a
// message's role or a content part's type that held an escape, which
// kvca decoded to route by, is not checked here; top-level strings are,
// before anything decodes them.)
func (st *state) writeStringValue(v *fastjson.Value, lit []byte) bool {
	if !st.decodeStrings && canonicalLiteral(lit) {
		st.write(lit)
		return true
	}
	if rawControl(lit) {
		return false
	}
	st.writeQuoted(v.GetStringBytes())
	return true
}

// minSkipLiteral: shorter strings are not offered to a LiteralSink, whose
// lookup would cost about what it saves (chain.MemoMinLiteral).
const minSkipLiteral = 256

// maxKeptLiteral bounds the literal scratch a pooled state keeps.
const maxKeptLiteral = 1 << 20

// Model appends the body's top-level "model" string (last occurrence) to
// dst; requests kvca only passes through are still kept to backends that
// serve their model. Bodies that are not JSON objects have no model.
func (c *Canonicalizer) Model(body []byte, dst []byte) []byte {
	st, _ := c.pool.Get().(*state)
	if st == nil {
		st = &state{}
	}
	if v, err := st.p.ParseBytes(body); err == nil && v.Type() == fastjson.TypeObject {
		if m := lastMember(v.GetObject(), "model"); m != nil && m.Type() == fastjson.TypeString {
			dst = append(dst, m.GetStringBytes()...)
		}
	}
	c.pool.Put(st)
	return dst
}
