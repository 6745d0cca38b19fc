package kdn

import (
	"slices"
	"time"
)

// CacheArtifact is one compatible cache identity of a knowledge revision
// (§7.2). ArtifactID is derived from the identity fields; leave it unset to
// have it filled in, or set it and it must equal the derived value.
type CacheArtifact struct {
	ArtifactID             Opt[string]
	KnowledgeID            string
	ArtifactVersion        string
	ModelProfile           string
	TokenizerProfile       string
	Adapters               []string
	CacheDataProfile       string
	CompatibilityProfileID string
	RuntimeProfile         RuntimeProfile
	SchemaVersion          string
	CreatedAt              time.Time // any offset; not part of the identity
}

// CanonicalID returns the artifact id derived from the identity fields.
func (a CacheArtifact) CanonicalID() string {
	var w jw
	w.objStart() // keys in code-point order, as §1.4 requires
	w.key("adapters")
	w.strs(a.Adapters)
	w.key("artifact_version")
	w.str(a.ArtifactVersion)
	w.key("cache_data_profile")
	w.str(a.CacheDataProfile)
	w.key("compatibility_profile_id")
	w.str(a.CompatibilityProfileID)
	w.key("knowledge_id")
	w.str(a.KnowledgeID)
	w.key("model_profile")
	w.str(a.ModelProfile)
	w.key("runtime_profile")
	w.str(string(a.RuntimeProfile))
	w.key("schema_version")
	w.str(a.SchemaVersion)
	w.key("tokenizer_profile")
	w.str(a.TokenizerProfile)
	w.objEnd()
	return canonicalID("artifact", string(w.b))
}

// ID returns the supplied artifact id, or the derived one when unset.
func (a CacheArtifact) ID() string {
	if id, ok := a.ArtifactID.Get(); ok {
		return id
	}
	return a.CanonicalID()
}

// Clone returns a copy that shares no slices with a.
func (a CacheArtifact) Clone() CacheArtifact {
	a.Adapters = slices.Clone(a.Adapters)
	return a
}

func decodeArtifact(d *decoder, v jvalue, path string) (CacheArtifact, *ValidationError) {
	o := d.object(v, path, "artifact_id", "knowledge_id", "artifact_version", "model_profile",
		"tokenizer_profile", "adapters", "cache_data_profile", "compatibility_profile_id",
		"runtime_profile", "schema_version", "created_at")
	a := CacheArtifact{
		ArtifactID:             o.strOpt("artifact_id"),
		KnowledgeID:            o.str("knowledge_id"),
		ArtifactVersion:        o.strDef("artifact_version", "1"),
		ModelProfile:           o.str("model_profile"),
		TokenizerProfile:       o.str("tokenizer_profile"),
		Adapters:               listDef(o, "adapters", decString),
		CacheDataProfile:       o.str("cache_data_profile"),
		CompatibilityProfileID: o.str("compatibility_profile_id"),
		RuntimeProfile:         o.profile("runtime_profile", false),
		SchemaVersion:          o.strDef("schema_version", "v1"),
		CreatedAt:              o.timeNow("created_at"),
	}
	if o.err != nil {
		return CacheArtifact{}, o.err
	}
	if !a.ArtifactID.IsSet() {
		a.ArtifactID = Some(a.CanonicalID())
	}
	return a, nil
}

func (a CacheArtifact) validate(path string) *ValidationError {
	c := checker{base: path}
	c.nonBlank("knowledge_id", a.KnowledgeID)
	c.nonBlank("artifact_version", a.ArtifactVersion)
	c.nonBlank("model_profile", a.ModelProfile)
	c.nonBlank("tokenizer_profile", a.TokenizerProfile)
	c.uniqueNonBlank("adapters", a.Adapters)
	c.nonBlank("cache_data_profile", a.CacheDataProfile)
	c.nonBlank("compatibility_profile_id", a.CompatibilityProfileID)
	c.profile("runtime_profile", a.RuntimeProfile)
	c.nonBlank("schema_version", a.SchemaVersion)
	if !inWireRange(a.CreatedAt) {
		c.fail(CodeInvalidDatetime, "created_at", "datetime:range", "datetime is outside the representable range")
	}
	if id, ok := a.ArtifactID.Get(); ok && c.ok() && id != a.CanonicalID() {
		c.fail(CodeDerivedID, "artifact_id", "derived_id", "artifact_id must equal the id derived from the identity fields")
	}
	return c.err
}

func (a CacheArtifact) write(w *jw) {
	w.objStart()
	w.key("artifact_id")
	w.str(a.ID())
	w.key("knowledge_id")
	w.str(a.KnowledgeID)
	w.key("artifact_version")
	w.str(a.ArtifactVersion)
	w.key("model_profile")
	w.str(a.ModelProfile)
	w.key("tokenizer_profile")
	w.str(a.TokenizerProfile)
	w.key("adapters")
	w.strs(a.Adapters)
	w.key("cache_data_profile")
	w.str(a.CacheDataProfile)
	w.key("compatibility_profile_id")
	w.str(a.CompatibilityProfileID)
	w.key("runtime_profile")
	w.str(string(a.RuntimeProfile))
	w.key("schema_version")
	w.str(a.SchemaVersion)
	w.key("created_at")
	w.time(a.CreatedAt)
	w.objEnd()
}
