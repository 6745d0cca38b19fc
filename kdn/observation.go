package kdn

import "time"

// CacheReplicaObservation records where an artifact was seen, by whom and
// until when the sighting counts (§7.3). ObservationID is derived from every
// other field.
type CacheReplicaObservation struct {
	ObservationID          Opt[string]
	ArtifactID             string
	State                  ObservationState
	Source                 ObservationSource
	EndpointID             string
	EndpointGeneration     int64
	RuntimeProfile         RuntimeProfile
	GatewayProfile         GatewayProfile
	CompatibilityProfileID string
	Adapter                Opt[string]
	Tier                   Opt[string]
	SourceObservedAt       Opt[time.Time]
	ProjectedAt            time.Time
	ExpiresAt              Opt[time.Time]
	Confidence             ObservationConfidence
	LegacyProjection       bool
	CompatibilityUncertain bool
	LegacyKVRelDir         Opt[string]
	LegacyKVDumpedKeys     Opt[int64]
}

// FreshAt reports whether the observation counts at instant t:
// source_observed_at <= t < expires_at; without a source time it never does.
func (o CacheReplicaObservation) FreshAt(t time.Time) bool {
	return freshAt(o.SourceObservedAt, o.ExpiresAt, t)
}

// CanonicalID returns the observation id derived from all other fields.
func (o CacheReplicaObservation) CanonicalID() string {
	var w jw
	w.objStart() // keys in code-point order (§1.4)
	w.key("adapter")
	w.optStr(o.Adapter)
	w.key("artifact_id")
	w.str(o.ArtifactID)
	w.key("compatibility_profile_id")
	w.str(o.CompatibilityProfileID)
	w.key("compatibility_uncertain")
	w.bool(o.CompatibilityUncertain)
	w.key("confidence")
	w.str(string(o.Confidence))
	w.key("endpoint_generation")
	w.int(o.EndpointGeneration)
	w.key("endpoint_id")
	w.str(o.EndpointID)
	w.key("expires_at")
	w.optTime(o.ExpiresAt)
	w.key("gateway_profile")
	w.str(string(o.GatewayProfile))
	w.key("legacy_kv_dumped_keys")
	w.optInt(o.LegacyKVDumpedKeys)
	w.key("legacy_kv_rel_dir")
	w.optStr(o.LegacyKVRelDir)
	w.key("legacy_projection")
	w.bool(o.LegacyProjection)
	w.key("projected_at")
	w.time(o.ProjectedAt)
	w.key("runtime_profile")
	w.str(string(o.RuntimeProfile))
	w.key("source")
	w.str(string(o.Source))
	w.key("source_observed_at")
	w.optTime(o.SourceObservedAt)
	w.key("state")
	w.str(string(o.State))
	w.key("tier")
	w.optStr(o.Tier)
	w.objEnd()
	return canonicalID("observation", string(w.b))
}

// ID returns the supplied observation id, or the derived one when unset.
func (o CacheReplicaObservation) ID() string {
	if id, ok := o.ObservationID.Get(); ok {
		return id
	}
	return o.CanonicalID()
}

func decodeObservation(d *decoder, v jvalue, path string) (CacheReplicaObservation, *ValidationError) {
	o := d.object(v, path, "observation_id", "artifact_id", "state", "source", "endpoint_id",
		"endpoint_generation", "runtime_profile", "gateway_profile", "compatibility_profile_id",
		"adapter", "tier", "source_observed_at", "projected_at", "expires_at", "confidence",
		"legacy_projection", "compatibility_uncertain", "legacy_kv_rel_dir", "legacy_kv_dumped_keys")
	x := CacheReplicaObservation{
		ObservationID:          o.strOpt("observation_id"),
		ArtifactID:             o.str("artifact_id"),
		State:                  ObservationState(o.str("state")),
		Source:                 ObservationSource(o.str("source")),
		EndpointID:             o.str("endpoint_id"),
		EndpointGeneration:     o.int("endpoint_generation"),
		RuntimeProfile:         o.profile("runtime_profile", false),
		GatewayProfile:         GatewayProfile(o.str("gateway_profile")),
		CompatibilityProfileID: o.str("compatibility_profile_id"),
		Adapter:                o.strOpt("adapter"),
		Tier:                   o.strOpt("tier"),
		SourceObservedAt:       o.timeOpt("source_observed_at"),
		ProjectedAt:            o.timeNow("projected_at"),
		ExpiresAt:              o.timeOpt("expires_at"),
		Confidence:             ObservationConfidence(o.strDef("confidence", string(ConfidenceMedium))),
		LegacyProjection:       o.boolDef("legacy_projection", false),
		CompatibilityUncertain: o.boolDef("compatibility_uncertain", false),
		LegacyKVRelDir:         o.strOpt("legacy_kv_rel_dir"),
		LegacyKVDumpedKeys:     o.intOpt("legacy_kv_dumped_keys"),
	}
	if o.err != nil {
		return CacheReplicaObservation{}, o.err
	}
	if !x.ObservationID.IsSet() {
		x.ObservationID = Some(x.CanonicalID())
	}
	return x, nil
}

func (o CacheReplicaObservation) validate(path string) *ValidationError {
	c := checker{base: path}
	c.pattern("artifact_id", o.ArtifactID, prefixArtifact)
	c.enum(o.State.valid(), "state")
	c.enum(o.Source.valid(), "source")
	c.pattern("endpoint_id", o.EndpointID, prefixEndpoint)
	c.atLeast("endpoint_generation", o.EndpointGeneration, 0)
	c.profile("runtime_profile", o.RuntimeProfile)
	c.enum(o.GatewayProfile.valid(), "gateway_profile")
	c.nonBlank("compatibility_profile_id", o.CompatibilityProfileID)
	c.utcOpt("source_observed_at", o.SourceObservedAt)
	c.utc("projected_at", o.ProjectedAt)
	c.utcOpt("expires_at", o.ExpiresAt)
	c.enum(o.Confidence.valid(), "confidence")
	if n, ok := o.LegacyKVDumpedKeys.Get(); ok {
		c.atLeast("legacy_kv_dumped_keys", n, 0)
	}
	if !c.ok() {
		return c.err
	}
	seen, hasSeen := o.SourceObservedAt.Get()
	exp, hasExp := o.ExpiresAt.Get()
	c.rule(!hasSeen || !seen.After(o.ProjectedAt), "source_observed_at", "observation:observed_before_projected",
		"source_observed_at must not be later than projected_at")
	c.rule(o.LegacyProjection || hasSeen, "source_observed_at", "observation:source_time_required",
		"non-legacy observations require source_observed_at")
	c.rule(!hasSeen || hasExp, "expires_at", "observation:expiry_required",
		"expires_at is required when source_observed_at is present")
	c.rule(!hasSeen || !hasExp || exp.After(seen), "expires_at", "observation:expiry_after_source",
		"expires_at must be strictly later than source_observed_at")
	if o.LegacyProjection {
		c.rule(o.RuntimeProfile == ProfileLegacy && o.GatewayProfile == GatewayLegacy &&
			o.Source == SourceLegacyProjection && o.CompatibilityUncertain, "legacy_projection",
			"observation:legacy_projection_shape",
			"legacy projections need runtime legacy, gateway legacy_gateway, source legacy_projection and compatibility_uncertain")
	}
	c.rule(o.Source != SourceLegacyProjection || o.LegacyProjection, "source", "observation:legacy_source",
		"source legacy_projection requires legacy_projection=true")
	c.rule(o.LegacyProjection || (!o.LegacyKVRelDir.IsSet() && !o.LegacyKVDumpedKeys.IsSet()), "legacy_projection",
		"observation:legacy_fields", "legacy_kv_* fields are only allowed on legacy projections")
	c.rule((o.EndpointGeneration == 0) == o.LegacyProjection, "endpoint_generation", "observation:generation_zero",
		"endpoint_generation 0 is required for, and only allowed on, legacy projections")
	if id, ok := o.ObservationID.Get(); ok && c.ok() && id != o.CanonicalID() {
		c.fail(CodeDerivedID, "observation_id", "derived_id", "observation_id must equal the id derived from the other fields")
	}
	return c.err
}

func (o CacheReplicaObservation) write(w *jw) {
	w.objStart()
	w.key("observation_id")
	w.str(o.ID())
	w.key("artifact_id")
	w.str(o.ArtifactID)
	w.key("state")
	w.str(string(o.State))
	w.key("source")
	w.str(string(o.Source))
	w.key("endpoint_id")
	w.str(o.EndpointID)
	w.key("endpoint_generation")
	w.int(o.EndpointGeneration)
	w.key("runtime_profile")
	w.str(string(o.RuntimeProfile))
	w.key("gateway_profile")
	w.str(string(o.GatewayProfile))
	w.key("compatibility_profile_id")
	w.str(o.CompatibilityProfileID)
	w.key("adapter")
	w.optStr(o.Adapter)
	w.key("tier")
	w.optStr(o.Tier)
	w.key("source_observed_at")
	w.optTime(o.SourceObservedAt)
	w.key("projected_at")
	w.time(o.ProjectedAt)
	w.key("expires_at")
	w.optTime(o.ExpiresAt)
	w.key("confidence")
	w.str(string(o.Confidence))
	w.key("legacy_projection")
	w.bool(o.LegacyProjection)
	w.key("compatibility_uncertain")
	w.bool(o.CompatibilityUncertain)
	w.key("legacy_kv_rel_dir")
	w.optStr(o.LegacyKVRelDir)
	w.key("legacy_kv_dumped_keys")
	w.optInt(o.LegacyKVDumpedKeys)
	w.objEnd()
}
