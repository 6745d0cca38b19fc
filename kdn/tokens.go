package kdn

// TokenReference points at a token sequence held elsewhere (§3.4).
type TokenReference struct {
	ReferenceID string
	TokenCount  Opt[int64]
}

func decodeTokenReference(d *decoder, v jvalue, path string) (TokenReference, *ValidationError) {
	o := d.object(v, path, "reference_id", "token_count")
	r := TokenReference{ReferenceID: o.str("reference_id"), TokenCount: o.intOpt("token_count")}
	return r, o.err
}

func (r TokenReference) validate(path string) *ValidationError {
	c := checker{base: path}
	c.min1("reference_id", r.ReferenceID)
	if n, ok := r.TokenCount.Get(); ok {
		c.atLeast("token_count", n, 0)
	}
	return c.err
}

func (r TokenReference) write(w *jw) {
	w.objStart()
	w.key("reference_id")
	w.str(r.ReferenceID)
	w.key("token_count")
	w.optInt(r.TokenCount)
	w.objEnd()
}

// TokenInput carries exactly one of inline token ids or a reference.
type TokenInput struct {
	TokenIDs       Opt[[]int64]
	TokenReference Opt[TokenReference]
}

func decodeTokenInput(d *decoder, v jvalue, path string) (TokenInput, *ValidationError) {
	o := d.object(v, path, "token_ids", "token_reference")
	t := TokenInput{
		TokenIDs:       listOpt(o, "token_ids", decInt),
		TokenReference: nestedOpt(o, "token_reference", decodeTokenReference),
	}
	return t, o.err
}

func (t TokenInput) validate(path string) *ValidationError {
	c := checker{base: path}
	if ids, ok := t.TokenIDs.Get(); ok {
		if len(ids) == 0 {
			c.fail(CodeTooShort, "token_ids", "min_length:1", "token_ids must not be empty")
		}
		for i, id := range ids {
			c.atLeast(indexPath("token_ids", i), id, 0)
		}
	}
	if ref, ok := t.TokenReference.Get(); ok {
		c.sub(ref.validate(c.at("token_reference")))
	}
	c.rule(t.TokenIDs.IsSet() != t.TokenReference.IsSet(), "", "token_input:exactly_one",
		"exactly one of token_ids or token_reference must be given")
	return c.err
}

func (t TokenInput) write(w *jw) {
	w.objStart()
	w.key("token_ids")
	if ids, ok := t.TokenIDs.Get(); ok {
		w.arrStart()
		for _, id := range ids {
			w.int(id)
		}
		w.arrEnd()
	} else {
		w.null()
	}
	w.key("token_reference")
	optObj(w, t.TokenReference, TokenReference.write)
	w.objEnd()
}

// TokenRange is a half-open [Start, End) token range.
type TokenRange struct {
	Start, End int64
}

// TokenCoverage reports how much of a token sequence is cached (§7.1).
type TokenCoverage struct {
	WholeRequestHit bool
	CoveredRanges   []TokenRange
	TotalTokens     int64
}

func decodeRange(_ *decoder, v jvalue, path string) (TokenRange, *ValidationError) {
	if v.kind != jArray || len(v.arr) != 2 {
		return TokenRange{}, verr(CodeInvalidType, path, "type:pair", "a range must be a two-element integer array")
	}
	s, e := jsonInt(v.arr[0], indexPath(path, 0))
	if e != nil {
		return TokenRange{}, e
	}
	n, e := jsonInt(v.arr[1], indexPath(path, 1))
	return TokenRange{Start: s, End: n}, e
}

func decodeTokenCoverage(d *decoder, v jvalue, path string) (TokenCoverage, *ValidationError) {
	o := d.object(v, path, "whole_request_hit", "covered_ranges", "total_tokens")
	t := TokenCoverage{
		WholeRequestHit: o.boolean("whole_request_hit"),
		CoveredRanges:   listDef(o, "covered_ranges", decodeRange),
		TotalTokens:     o.int("total_tokens"),
	}
	return t, o.err
}

func (t TokenCoverage) validate(path string) *ValidationError {
	c := checker{base: path}
	c.atLeast("total_tokens", t.TotalTokens, 0)
	prevEnd := int64(0)
	for i, r := range t.CoveredRanges {
		f := indexPath("covered_ranges", i)
		c.rule(r.Start >= 0 && r.Start < r.End && r.End <= t.TotalTokens, f, "range:bounds",
			"each range needs 0 <= start < end <= total_tokens")
		c.rule(i == 0 || r.Start >= prevEnd, f, "range:ordered",
			"ranges must be ascending and non-overlapping (start >= previous end)")
		prevEnd = r.End
	}
	return c.err
}

func (t TokenCoverage) write(w *jw) {
	w.objStart()
	w.key("whole_request_hit")
	w.bool(t.WholeRequestHit)
	w.key("covered_ranges")
	w.arrStart()
	for _, r := range t.CoveredRanges {
		w.arrStart()
		w.int(r.Start)
		w.int(r.End)
		w.arrEnd()
	}
	w.arrEnd()
	w.key("total_tokens")
	w.int(t.TotalTokens)
	w.objEnd()
}

// ContractErrorDetail is the safe structured error every non-success
// response carries (§4.1; wire alias ContractError).
type ContractErrorDetail struct {
	Code             OutcomeCode
	Message          string
	ContractVersion  string // always KDNContractVersion
	Retryable        bool
	FallbackEligible bool
}

// NewErrorDetail returns a detail for code with the contract version set.
func NewErrorDetail(code OutcomeCode, message string) ContractErrorDetail {
	return ContractErrorDetail{Code: code, Message: message, ContractVersion: KDNContractVersion}
}

func decodeErrorDetail(d *decoder, v jvalue, path string) (ContractErrorDetail, *ValidationError) {
	o := d.object(v, path, "code", "message", "contract_version", "retryable", "fallback_eligible")
	e := ContractErrorDetail{
		Code:             OutcomeCode(o.str("code")),
		Message:          o.str("message"),
		ContractVersion:  o.strDef("contract_version", KDNContractVersion),
		Retryable:        o.boolDef("retryable", false),
		FallbackEligible: o.boolDef("fallback_eligible", false),
	}
	return e, o.err
}

func (e ContractErrorDetail) validate(path string) *ValidationError {
	c := checker{base: path}
	c.enum(e.Code.valid(), "code")
	c.min1("message", e.Message)
	if e.ContractVersion != KDNContractVersion {
		c.fail(CodeContractVersion, "contract_version", "const:kdn.v1", "error contract_version must be exactly kdn.v1")
	}
	return c.err
}

func (e ContractErrorDetail) write(w *jw) {
	w.objStart()
	w.key("code")
	w.str(string(e.Code))
	w.key("message")
	w.str(e.Message)
	w.key("contract_version")
	w.str(e.ContractVersion)
	w.key("retryable")
	w.bool(e.Retryable)
	w.key("fallback_eligible")
	w.bool(e.FallbackEligible)
	w.objEnd()
}

// checkOutcome applies O1–O3 (§4.2) at the message root.
func checkOutcome(c *checker, outcome OutcomeCode, errDetail Opt[ContractErrorDetail]) {
	c.enum(outcome.valid(), "outcome")
	e, has := errDetail.Get()
	if outcome == OutcomeSuccess {
		c.rule(!has, "error", "O1", "a success outcome must not carry an error")
		return
	}
	c.rule(has, "error", "O2", "a non-success outcome must carry an error")
	c.rule(!has || e.Code == outcome, "error.code", "O2", "error.code must equal the outcome")
	c.rule(outcome != OutcomeTextFallback || e.FallbackEligible, "error.fallback_eligible", "O3",
		"text_fallback requires error.fallback_eligible=true")
}
