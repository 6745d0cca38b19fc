package kdn

import (
	"slices"
	"time"
)

// SummaryBase holds the fields every summary starts with (§7.6). Its
// runtime_profile is a plain enum: not normalised, and auto is accepted
// here (a response can still never carry it, R8).
type SummaryBase struct {
	Source                 string
	ObservedAt             time.Time
	RuntimeProfile         RuntimeProfile
	CompatibilityProfileID string
	EndpointID             string
	EndpointGeneration     int64
	Support                SupportState
	Partial                bool
}

func summaryBaseKeys() []string {
	return []string{"source", "observed_at", "runtime_profile", "compatibility_profile_id",
		"endpoint_id", "endpoint_generation", "support", "partial"}
}

func decodeSummaryBase(o *obj) SummaryBase {
	return SummaryBase{
		Source:                 o.str("source"),
		ObservedAt:             o.timeNow("observed_at"),
		RuntimeProfile:         RuntimeProfile(o.str("runtime_profile")),
		CompatibilityProfileID: o.str("compatibility_profile_id"),
		EndpointID:             o.str("endpoint_id"),
		EndpointGeneration:     o.int("endpoint_generation"),
		Support:                SupportState(o.str("support")),
		Partial:                o.boolDef("partial", false),
	}
}

func (s SummaryBase) checkBase(c *checker) {
	c.min1("source", s.Source)
	c.utc("observed_at", s.ObservedAt)
	c.enum(s.RuntimeProfile.resolved() || s.RuntimeProfile == ProfileAuto, "runtime_profile")
	c.min1("compatibility_profile_id", s.CompatibilityProfileID)
	c.pattern("endpoint_id", s.EndpointID, prefixEndpoint)
	c.generation("endpoint_generation", s.EndpointGeneration, s.RuntimeProfile)
	c.enum(s.Support.valid(), "support")
}

func (s SummaryBase) write(w *jw) {
	w.key("source")
	w.str(s.Source)
	w.key("observed_at")
	w.time(s.ObservedAt)
	w.key("runtime_profile")
	w.str(string(s.RuntimeProfile))
	w.key("compatibility_profile_id")
	w.str(s.CompatibilityProfileID)
	w.key("endpoint_id")
	w.str(s.EndpointID)
	w.key("endpoint_generation")
	w.int(s.EndpointGeneration)
	w.key("support")
	w.str(string(s.Support))
	w.key("partial")
	w.bool(s.Partial)
}

// sameTarget reports whether the summary belongs to the given target.
func (s SummaryBase) sameTarget(p RuntimeProfile, compat, endpoint string, gen int64) bool {
	return s.RuntimeProfile == p && s.CompatibilityProfileID == compat && s.EndpointID == endpoint && s.EndpointGeneration == gen
}

func decodeSummaryBaseModel(d *decoder, v jvalue, path string) (SummaryBase, *ValidationError) {
	o := d.object(v, path, summaryBaseKeys()...)
	s := decodeSummaryBase(o)
	return s, o.err
}

func (s SummaryBase) validate(path string) *ValidationError {
	c := checker{base: path}
	s.checkBase(&c)
	return c.err
}

func (s SummaryBase) writeObj(w *jw) {
	w.objStart()
	s.write(w)
	w.objEnd()
}

// AdapterSummary lists the adapters an endpoint has loaded.
type AdapterSummary struct {
	SummaryBase
	LoadedAdapters []string
}

// Clone returns a copy that shares no slices with s.
func (s AdapterSummary) Clone() AdapterSummary {
	s.LoadedAdapters = slices.Clone(s.LoadedAdapters)
	return s
}

func decodeAdapterSummary(d *decoder, v jvalue, path string) (AdapterSummary, *ValidationError) {
	o := d.object(v, path, append(summaryBaseKeys(), "loaded_adapters")...)
	s := AdapterSummary{SummaryBase: decodeSummaryBase(o), LoadedAdapters: listDef(o, "loaded_adapters", decString)}
	return s, o.err
}

func (s AdapterSummary) validate(path string) *ValidationError {
	c := checker{base: path}
	s.checkBase(&c)
	c.uniqueNonBlank("loaded_adapters", s.LoadedAdapters)
	c.rule(s.Support == Supported || len(s.LoadedAdapters) == 0, "loaded_adapters", "summary:unsupported_empty",
		"a summary that is not supported cannot list adapters")
	return c.err
}

func (s AdapterSummary) writeObj(w *jw) {
	w.objStart()
	s.write(w)
	w.key("loaded_adapters")
	w.strs(s.LoadedAdapters)
	w.objEnd()
}

// CapacityUsageObservation reports one tier's capacity and use.
type CapacityUsageObservation struct {
	SummaryBase
	TierName      string
	TierLevel     TierLevel
	CapacityBytes Opt[int64]
	UsedBytes     Opt[int64]
}

func decodeCapacity(d *decoder, v jvalue, path string) (CapacityUsageObservation, *ValidationError) {
	o := d.object(v, path, append(summaryBaseKeys(), "tier_name", "tier_level", "capacity_bytes", "used_bytes")...)
	s := CapacityUsageObservation{
		SummaryBase:   decodeSummaryBase(o),
		TierName:      o.str("tier_name"),
		TierLevel:     TierLevel(o.str("tier_level")),
		CapacityBytes: o.intOpt("capacity_bytes"),
		UsedBytes:     o.intOpt("used_bytes"),
	}
	return s, o.err
}

func (s CapacityUsageObservation) validate(path string) *ValidationError {
	c := checker{base: path}
	s.checkBase(&c)
	c.min1("tier_name", s.TierName)
	c.enum(s.TierLevel.valid(), "tier_level")
	capacity, hasCap := s.CapacityBytes.Get()
	used, hasUsed := s.UsedBytes.Get()
	if hasCap {
		c.atLeast("capacity_bytes", capacity, 0)
	}
	if hasUsed {
		c.atLeast("used_bytes", used, 0)
	}
	c.rule(!hasCap || !hasUsed || used <= capacity, "used_bytes", "capacity:used_le_capacity",
		"used_bytes must not exceed capacity_bytes")
	c.rule(s.Support == Supported || (!hasCap && !hasUsed), "support", "summary:unsupported_empty",
		"a capacity observation that is not supported cannot carry measurements")
	return c.err
}

func (s CapacityUsageObservation) writeObj(w *jw) {
	w.objStart()
	s.write(w)
	w.key("tier_name")
	w.str(s.TierName)
	w.key("tier_level")
	w.str(string(s.TierLevel))
	w.key("capacity_bytes")
	w.optInt(s.CapacityBytes)
	w.key("used_bytes")
	w.optInt(s.UsedBytes)
	w.objEnd()
}

// TierSummary lists an endpoint's tiers and their capacity.
type TierSummary struct {
	SummaryBase
	L1Tiers  []string
	L2Tiers  []string
	Capacity []CapacityUsageObservation
}

// Clone returns a copy that shares no slices with s.
func (s TierSummary) Clone() TierSummary {
	s.L1Tiers = slices.Clone(s.L1Tiers)
	s.L2Tiers = slices.Clone(s.L2Tiers)
	s.Capacity = slices.Clone(s.Capacity)
	return s
}

func decodeTierSummary(d *decoder, v jvalue, path string) (TierSummary, *ValidationError) {
	o := d.object(v, path, append(summaryBaseKeys(), "l1_tiers", "l2_tiers", "capacity")...)
	s := TierSummary{
		SummaryBase: decodeSummaryBase(o),
		L1Tiers:     listDef(o, "l1_tiers", decString),
		L2Tiers:     listDef(o, "l2_tiers", decString),
		Capacity:    listDef(o, "capacity", decodeCapacity),
	}
	return s, o.err
}

func (s TierSummary) validate(path string) *ValidationError {
	c := checker{base: path}
	s.checkBase(&c)
	c.uniqueNonBlank("l1_tiers", s.L1Tiers)
	c.uniqueNonBlank("l2_tiers", s.L2Tiers)
	for i, cu := range s.Capacity {
		c.sub(cu.validate(c.at(indexPath("capacity", i))))
	}
	if !c.ok() {
		return c.err
	}
	c.rule(s.Support == Supported || (len(s.L1Tiers) == 0 && len(s.L2Tiers) == 0 && len(s.Capacity) == 0),
		"support", "summary:unsupported_empty", "a tier summary that is not supported must have empty tier lists and capacity")
	for i, cu := range s.Capacity {
		f := indexPath("capacity", i)
		listed := s.L1Tiers
		if cu.TierLevel == TierL2 {
			listed = s.L2Tiers
		}
		c.rule(slices.Contains(listed, cu.TierName), f, "tier:capacity_tier_listed",
			"each capacity entry must name a tier listed at the same level")
		c.rule(cu.sameTarget(s.RuntimeProfile, s.CompatibilityProfileID, s.EndpointID, s.EndpointGeneration), f,
			"tier:capacity_provenance", "capacity entries must share the tier summary's runtime, compatibility profile, endpoint and generation")
	}
	return c.err
}

func (s TierSummary) writeObj(w *jw) {
	w.objStart()
	s.write(w)
	w.key("l1_tiers")
	w.strs(s.L1Tiers)
	w.key("l2_tiers")
	w.strs(s.L2Tiers)
	w.key("capacity")
	w.arrStart()
	for _, cu := range s.Capacity {
		cu.writeObj(w)
	}
	w.arrEnd()
	w.objEnd()
}

// MaintenanceSummary reports maintenance/eviction activity.
type MaintenanceSummary struct {
	SummaryBase
	Active             Opt[bool]
	EvictionObservable Opt[bool]
	Detail             Opt[string]
}

func decodeMaintenanceSummary(d *decoder, v jvalue, path string) (MaintenanceSummary, *ValidationError) {
	o := d.object(v, path, append(summaryBaseKeys(), "active", "eviction_observable", "detail")...)
	s := MaintenanceSummary{
		SummaryBase:        decodeSummaryBase(o),
		Active:             o.boolOpt("active"),
		EvictionObservable: o.boolOpt("eviction_observable"),
		Detail:             o.strOpt("detail"),
	}
	return s, o.err
}

func (s MaintenanceSummary) validate(path string) *ValidationError {
	c := checker{base: path}
	s.checkBase(&c)
	c.rule(s.Support == Supported || (!s.Active.IsSet() && !s.EvictionObservable.IsSet()), "support",
		"summary:unsupported_empty", "a maintenance summary that is not supported cannot carry active/eviction_observable")
	return c.err
}

func (s MaintenanceSummary) writeObj(w *jw) {
	w.objStart()
	s.write(w)
	w.key("active")
	w.optBool(s.Active)
	w.key("eviction_observable")
	w.optBool(s.EvictionObservable)
	w.key("detail")
	w.optStr(s.Detail)
	w.objEnd()
}
