package kdn

import "slices"

// CacheServiceResponse is the one field set shared by every cache-service
// response (§8.1). The dedicated response types are defined on it and
// differ only in their validation rules.
type CacheServiceResponse struct {
	Envelope
	CompatibilityProfileID Opt[string]
	EndpointID             Opt[string]
	EndpointGeneration     Opt[int64]
	Outcome                OutcomeCode
	Artifact               Opt[CacheArtifact]
	Observation            Opt[CacheReplicaObservation]
	Operation              Opt[CacheOperationTask]
	Endpoints              Opt[[]LMCacheEndpoint]
	TokenCoverage          Opt[TokenCoverage]
	AdapterSummary         Opt[AdapterSummary]
	TierSummary            Opt[TierSummary]
	MaintenanceSummary     Opt[MaintenanceSummary]
	Error                  Opt[ContractErrorDetail]
}

// Clone returns a copy that shares no slices with r.
func (r CacheServiceResponse) Clone() CacheServiceResponse {
	if a, ok := r.Artifact.Get(); ok {
		r.Artifact = Some(a.Clone())
	}
	if e, ok := r.Endpoints.Get(); ok {
		r.Endpoints = Some(slices.Clone(e))
	}
	if tc, ok := r.TokenCoverage.Get(); ok {
		tc.CoveredRanges = slices.Clone(tc.CoveredRanges)
		r.TokenCoverage = Some(tc)
	}
	if s, ok := r.AdapterSummary.Get(); ok {
		r.AdapterSummary = Some(s.Clone())
	}
	if s, ok := r.TierSummary.Get(); ok {
		r.TierSummary = Some(s.Clone())
	}
	return r
}

// respKind selects the dedicated rules of one response model (§8.3).
type respKind uint8

const (
	respBase respKind = iota // CacheServiceResponse: untargeted, no success payload
	respEndpoints
	respTargeted
	respLookupArtifact
	respObservation
	respTokens
	respOperation
	respIntent
	respCancel
	respTierAdapter
	respMaintenance
)

type respRules struct {
	kind   respKind
	intent CacheOperationType // for respIntent
}

func (r respRules) targeted() bool { return r.kind != respBase && r.kind != respEndpoints }

func decodeCacheResponse(d *decoder, v jvalue, path string) (CacheServiceResponse, *ValidationError) {
	o := d.object(v, path, append(envelopeKeys(), "compatibility_profile_id", "endpoint_id", "endpoint_generation",
		"outcome", "artifact", "observation", "operation", "endpoints", "token_coverage", "adapter_summary",
		"tier_summary", "maintenance_summary", "error")...)
	r := CacheServiceResponse{
		Envelope:               decodeEnvelope(o),
		CompatibilityProfileID: o.strOpt("compatibility_profile_id"),
		EndpointID:             o.strOpt("endpoint_id"),
		EndpointGeneration:     o.intOpt("endpoint_generation"),
		Outcome:                OutcomeCode(o.strDef("outcome", string(OutcomeSuccess))),
		Artifact:               nestedOpt(o, "artifact", decodeArtifact),
		Observation:            nestedOpt(o, "observation", decodeObservation),
		Operation:              nestedOpt(o, "operation", decodeTask),
		Endpoints:              listOpt(o, "endpoints", decodeEndpoint),
		TokenCoverage:          nestedOpt(o, "token_coverage", decodeTokenCoverage),
		AdapterSummary:         nestedOpt(o, "adapter_summary", decodeAdapterSummary),
		TierSummary:            nestedOpt(o, "tier_summary", decodeTierSummary),
		MaintenanceSummary:     nestedOpt(o, "maintenance_summary", decodeMaintenanceSummary),
		Error:                  nestedOpt(o, "error", decodeErrorDetail),
	}
	return r, o.err
}

func (r CacheServiceResponse) validate(path string, rules respRules) *ValidationError {
	c := checker{base: path}
	r.Envelope.check(&c)
	compat, hasCompat := r.CompatibilityProfileID.Get()
	endpoint, hasEndpoint := r.EndpointID.Get()
	gen, hasGen := r.EndpointGeneration.Get()
	if rules.targeted() {
		for _, f := range []struct {
			name string
			set  bool
		}{{"compatibility_profile_id", hasCompat}, {"endpoint_id", hasEndpoint}, {"endpoint_generation", hasGen}} {
			if !f.set {
				c.fail(CodeMissingField, f.name, "targeted:required", "targeted responses require target fields for every outcome")
			}
		}
		c.min1("compatibility_profile_id", compat)
		c.pattern("endpoint_id", endpoint, prefixEndpoint)
	}
	if hasGen {
		c.atLeast("endpoint_generation", gen, 0)
	}
	r.checkNested(&c)
	if !c.ok() {
		return c.err
	}
	art, hasArt := r.Artifact.Get()
	obs, hasObs := r.Observation.Get()
	op, hasOp := r.Operation.Get()
	eps, hasEps := r.Endpoints.Get()
	as, hasAS := r.AdapterSummary.Get()
	ts, hasTS := r.TierSummary.Get()
	ms, hasMS := r.MaintenanceSummary.Get()
	payload := hasArt || hasObs || hasOp || r.TokenCoverage.IsSet() || hasAS || hasTS || hasMS
	c.rule(!payload || (hasCompat && hasEndpoint && hasGen), "", "R1",
		"a response carrying a payload needs compatibility_profile_id, endpoint_id and endpoint_generation")
	c.rule(!hasGen || gen != 0 || r.RuntimeProfile == ProfileLegacy, "endpoint_generation", "R2",
		"endpoint_generation 0 is only valid with runtime_profile legacy")
	checkOutcome(&c, r.Outcome, r.Error)
	c.rule(r.Outcome != OutcomeCancelled || (hasOp && op.State == StateCancelled), "operation", "R6",
		"a cancelled outcome requires an operation whose state is cancelled")
	c.rule(r.Outcome != OutcomeStale || !hasObs || !obs.FreshAt(r.Timestamp), "observation", "R7",
		"a stale outcome must not carry an observation that is fresh at the response timestamp")
	for _, s := range []struct {
		name string
		set  bool
		base SummaryBase
	}{{"adapter_summary", hasAS, as.SummaryBase}, {"tier_summary", hasTS, ts.SummaryBase}, {"maintenance_summary", hasMS, ms.SummaryBase}} {
		c.rule(!s.set || s.base.sameTarget(r.RuntimeProfile, compat, endpoint, gen), s.name, "R8",
			"summary runtime, compatibility profile, endpoint and generation must equal the envelope")
	}
	c.rule(!hasObs || (hasGen && obs.EndpointGeneration == gen), "observation.endpoint_generation", "R9",
		"observation endpoint_generation must equal the envelope")
	if hasCompat {
		c.rule(!hasArt || (art.RuntimeProfile == r.RuntimeProfile && art.CompatibilityProfileID == compat), "artifact", "R10",
			"artifact runtime and compatibility profile must equal the envelope")
		c.rule(!hasObs || (obs.RuntimeProfile == r.RuntimeProfile && obs.CompatibilityProfileID == compat &&
			obs.EndpointID == endpoint && hasGen && obs.EndpointGeneration == gen), "observation", "R11",
			"observation runtime, compatibility profile, endpoint and generation must equal the envelope")
		c.rule(!hasOp || (op.RuntimeProfile == r.RuntimeProfile && op.CompatibilityProfileID == compat &&
			op.EndpointID == Some(endpoint) && hasEndpoint && hasGen && op.EndpointGeneration == Some(gen)), "operation", "R12",
			"operation runtime, compatibility profile, endpoint and generation must equal the envelope")
	}
	for i, e := range eps {
		c.rule(e.RuntimeProfile == r.RuntimeProfile, indexPath("endpoints", i)+".runtime_profile", "R13",
			"every listed endpoint's runtime_profile must equal the envelope runtime_profile")
	}
	if c.ok() && r.Outcome == OutcomeSuccess {
		r.checkSuccess(&c, rules, hasEps)
	}
	return c.err
}

func (r CacheServiceResponse) checkNested(c *checker) {
	c.enum(r.Outcome.valid(), "outcome")
	if a, ok := r.Artifact.Get(); ok {
		c.sub(a.validate(c.at("artifact")))
	}
	if o, ok := r.Observation.Get(); ok {
		c.sub(o.validate(c.at("observation")))
	}
	if t, ok := r.Operation.Get(); ok {
		c.sub(t.validate(c.at("operation")))
	}
	for i, e := range r.Endpoints.Value() {
		c.sub(e.validate(c.at(indexPath("endpoints", i))))
	}
	if t, ok := r.TokenCoverage.Get(); ok {
		c.sub(t.validate(c.at("token_coverage")))
	}
	if s, ok := r.AdapterSummary.Get(); ok {
		c.sub(s.validate(c.at("adapter_summary")))
	}
	if s, ok := r.TierSummary.Get(); ok {
		c.sub(s.validate(c.at("tier_summary")))
	}
	if s, ok := r.MaintenanceSummary.Get(); ok {
		c.sub(s.validate(c.at("maintenance_summary")))
	}
	if e, ok := r.Error.Get(); ok {
		c.sub(e.validate(c.at("error")))
	}
}

// checkSuccess applies the §8.3 payload requirements of a success answer.
func (r CacheServiceResponse) checkSuccess(c *checker, rules respRules, hasEps bool) {
	op, hasOp := r.Operation.Get()
	switch rules.kind {
	case respLookupArtifact:
		c.rule(r.Artifact.IsSet(), "artifact", "success:artifact", "a successful artifact lookup must carry artifact")
	case respObservation:
		obs, ok := r.Observation.Get()
		c.rule(ok, "observation", "success:observation", "a successful observation response must carry observation")
		c.rule(!ok || obs.FreshAt(r.Timestamp), "observation", "success:observation_fresh",
			"success needs an observation fresh at the response timestamp (source_observed_at <= timestamp < expires_at)")
	case respTokens:
		c.rule(r.TokenCoverage.IsSet(), "token_coverage", "success:token_coverage", "a successful token lookup must carry token_coverage")
	case respOperation:
		c.rule(hasOp, "operation", "success:operation", "a successful operation response must carry operation")
	case respIntent:
		c.rule(hasOp, "operation", "success:operation", "a successful intent response must carry operation")
		c.rule(!hasOp || op.Operation == rules.intent, "operation.operation", "success:intent_type",
			"a successful intent response must carry an operation of the intent's type")
	case respCancel:
		c.rule(hasOp, "operation", "success:operation", "a successful cancel response must carry operation")
		c.rule(!hasOp || op.State.Terminal(), "operation.state", "success:cancel_terminal",
			"success on cancel is only a no-op for already-terminal operations")
	case respEndpoints:
		c.rule(hasEps, "endpoints", "success:endpoints", "a successful discovery response must carry endpoints")
	case respTierAdapter:
		c.rule(r.AdapterSummary.IsSet(), "adapter_summary", "success:adapter_summary", "a successful tier/adapter response must carry adapter_summary")
		c.rule(r.TierSummary.IsSet(), "tier_summary", "success:tier_summary", "a successful tier/adapter response must carry tier_summary")
	case respMaintenance:
		c.rule(r.MaintenanceSummary.IsSet(), "maintenance_summary", "success:maintenance_summary",
			"a successful maintenance response must carry maintenance_summary")
	}
}

func (r CacheServiceResponse) write(w *jw) {
	w.objStart()
	r.Envelope.write(w)
	w.key("compatibility_profile_id")
	w.optStr(r.CompatibilityProfileID)
	w.key("endpoint_id")
	w.optStr(r.EndpointID)
	w.key("endpoint_generation")
	w.optInt(r.EndpointGeneration)
	w.key("outcome")
	w.str(string(r.Outcome))
	w.key("artifact")
	optObj(w, r.Artifact, CacheArtifact.write)
	w.key("observation")
	optObj(w, r.Observation, CacheReplicaObservation.write)
	w.key("operation")
	optObj(w, r.Operation, CacheOperationTask.write)
	w.key("endpoints")
	optObj(w, r.Endpoints, func(eps []LMCacheEndpoint, w *jw) {
		w.arrStart()
		for _, e := range eps {
			e.write(w)
		}
		w.arrEnd()
	})
	w.key("token_coverage")
	optObj(w, r.TokenCoverage, TokenCoverage.write)
	w.key("adapter_summary")
	optObj(w, r.AdapterSummary, AdapterSummary.writeObj)
	w.key("tier_summary")
	optObj(w, r.TierSummary, TierSummary.writeObj)
	w.key("maintenance_summary")
	optObj(w, r.MaintenanceSummary, MaintenanceSummary.writeObj)
	w.key("error")
	optObj(w, r.Error, ContractErrorDetail.write)
	w.objEnd()
}
