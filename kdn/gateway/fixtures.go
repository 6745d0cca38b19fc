package gateway

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvca/kvca/kdn"
)

// Fixtures is the in-memory state a Mock (all fields) or Legacy adapter
// (Artifacts and Observations) answers from.
type Fixtures struct {
	Artifacts          []kdn.CacheArtifact           // keyed by artifact id
	Observations       []kdn.CacheReplicaObservation // keyed by artifact_id
	Tokens             []TokenFixture
	Endpoints          []kdn.LMCacheEndpoint
	AdapterSummary     kdn.Opt[kdn.AdapterSummary]
	TierSummary        kdn.Opt[kdn.TierSummary]
	MaintenanceSummary kdn.Opt[kdn.MaintenanceSummary]
}

// TokenFixture is a token sequence (by ids or by reference id) and the
// coverage the Mock reports for it.
type TokenFixture struct {
	Tokens   kdn.TokenInput
	Coverage kdn.TokenCoverage
}

// Options tune a gateway for tests and demos.
type Options struct {
	// Clock stamps responses and tasks; defaults to time.Now.
	Clock func() time.Time
	// NewTaskID returns fresh task ids; the default counts up
	// (cacheop_000…001, …) so that runs are reproducible. The Mock calls it
	// with its task-table lock held, so it need not be goroutine-safe.
	NewTaskID func() string
}

func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.NewTaskID == nil {
		n := 0
		o.NewTaskID = func() string {
			n++
			s := strconv.FormatInt(int64(n), 16)
			return "cacheop_" + strings.Repeat("0", 32-len(s)) + s
		}
	}
	return o
}

// fixtureIndex is Fixtures validated, copied and keyed for lookup.
type fixtureIndex struct {
	artifacts    map[string]kdn.CacheArtifact
	observations map[string]kdn.CacheReplicaObservation
	tokens       map[string]kdn.TokenCoverage
	endpoints    []kdn.LMCacheEndpoint
	adapter      kdn.Opt[kdn.AdapterSummary]
	tier         kdn.Opt[kdn.TierSummary]
	maintenance  kdn.Opt[kdn.MaintenanceSummary]
}

func indexFixtures(f Fixtures) (fixtureIndex, error) {
	x := fixtureIndex{
		artifacts:    map[string]kdn.CacheArtifact{},
		observations: map[string]kdn.CacheReplicaObservation{},
		tokens:       map[string]kdn.TokenCoverage{},
		endpoints:    []kdn.LMCacheEndpoint{},
	}
	valid := func(m kdn.Message) bool { return kdn.Validate(m) == nil }
	for _, a := range f.Artifacts {
		if !valid(a) {
			return x, ErrInvalidFixture
		}
		x.artifacts[a.ID()] = a.Clone()
	}
	for _, o := range f.Observations {
		if !valid(o) {
			return x, ErrInvalidFixture
		}
		x.observations[o.ArtifactID] = o
	}
	for _, t := range f.Tokens {
		if !valid(t.Tokens) || !valid(t.Coverage) {
			return x, ErrInvalidFixture
		}
		c := t.Coverage
		c.CoveredRanges = slices.Clone(c.CoveredRanges)
		x.tokens[tokenKey(t.Tokens)] = c
	}
	for _, e := range f.Endpoints {
		if !valid(e) {
			return x, ErrInvalidFixture
		}
		x.endpoints = append(x.endpoints, e)
	}
	if s, ok := f.AdapterSummary.Get(); ok {
		if !valid(s) {
			return x, ErrInvalidFixture
		}
		x.adapter = kdn.Some(s.Clone())
	}
	if s, ok := f.TierSummary.Get(); ok {
		if !valid(s) {
			return x, ErrInvalidFixture
		}
		x.tier = kdn.Some(s.Clone())
	}
	if s, ok := f.MaintenanceSummary.Get(); ok {
		if !valid(s) {
			return x, ErrInvalidFixture
		}
		x.maintenance = kdn.Some(s)
	}
	return x, nil
}

// tokenKey identifies a token input: the id sequence, or the reference id.
func tokenKey(t kdn.TokenInput) string {
	if ids, ok := t.TokenIDs.Get(); ok {
		parts := make([]string, len(ids))
		for i, id := range ids {
			parts[i] = strconv.FormatInt(id, 10)
		}
		return "ids:" + strings.Join(parts, ",")
	}
	return "ref:" + t.TokenReference.Value().ReferenceID
}

// observationMessages lets the Mock and the Legacy adapter share the
// observation rules while keeping their distinct wire messages.
type observationMessages struct {
	absent, provenance, generation, stale string
}

func (x fixtureIndex) lookupArtifact(r kdn.CacheServiceResponse, req kdn.ArtifactRequest) kdn.CacheServiceResponse {
	a, ok := x.artifacts[req.ArtifactID]
	switch {
	case !ok:
		return Refuse(r, Refusal{Outcome: kdn.OutcomeStale, Message: "artifact not observed"})
	case a.RuntimeProfile != req.RuntimeProfile || a.CompatibilityProfileID != req.CompatibilityProfileID:
		return Refuse(r, Refusal{Outcome: kdn.OutcomeIncompatible, Message: "artifact provenance mismatch"})
	}
	r.Artifact = kdn.Some(a.Clone())
	return r
}

// observe answers an observation request; freshness is tested at the
// response's own timestamp, as R7 and the success rule require.
func (x fixtureIndex) observe(r kdn.CacheServiceResponse, req kdn.ArtifactRequest, msg observationMessages) kdn.CacheServiceResponse {
	o, ok := x.observations[req.ArtifactID]
	switch {
	case !ok:
		return Refuse(r, Refusal{Outcome: kdn.OutcomeStale, Message: msg.absent})
	case o.ArtifactID != req.ArtifactID || o.RuntimeProfile != req.RuntimeProfile ||
		o.CompatibilityProfileID != req.CompatibilityProfileID || o.EndpointID != req.EndpointID:
		return Refuse(r, Refusal{Outcome: kdn.OutcomeIncompatible, Message: msg.provenance})
	case o.EndpointGeneration != req.EndpointGeneration:
		return Refuse(r, Refusal{Outcome: kdn.OutcomeStale, Message: msg.generation})
	}
	r.Observation = kdn.Some(o)
	if !o.FreshAt(r.Timestamp) {
		return Refuse(r, Refusal{Outcome: kdn.OutcomeStale, Message: msg.stale})
	}
	return r
}
