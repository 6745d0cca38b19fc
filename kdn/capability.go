package kdn

import (
	"slices"
	"time"
)

// GatewayAdapterBinding names a transport a gateway is bound to.
type GatewayAdapterBinding struct {
	TransportKind TransportKind
	BindingID     string
}

func decodeBinding(d *decoder, v jvalue, path string) (GatewayAdapterBinding, *ValidationError) {
	o := d.object(v, path, "transport_kind", "binding_id")
	b := GatewayAdapterBinding{TransportKind: TransportKind(o.str("transport_kind")), BindingID: o.str("binding_id")}
	return b, o.err
}

func (b GatewayAdapterBinding) validate(path string) *ValidationError {
	c := checker{base: path}
	c.enum(b.TransportKind.valid(), "transport_kind")
	c.min1("binding_id", b.BindingID)
	return c.err
}

func (b GatewayAdapterBinding) write(w *jw) {
	w.objStart()
	w.key("transport_kind")
	w.str(string(b.TransportKind))
	w.key("binding_id")
	w.str(b.BindingID)
	w.objEnd()
}

// LMCacheCompatibilityProfile is the compatibility identity of a deployment;
// it is deliberately separate from the transport kind.
type LMCacheCompatibilityProfile struct {
	CompatibilityProfileID string
	LMCacheVersion         Opt[string]
	LMCacheBuild           Opt[string]
	ConfigProfile          Opt[string]
	LayoutProfile          Opt[string]
	SerdeProfile           Opt[string]
	ChunkSize              Opt[int64]
	ConnectorProfile       Opt[string]
	KeyHashProfile         Opt[string]
}

func decodeCompatProfile(d *decoder, v jvalue, path string) (LMCacheCompatibilityProfile, *ValidationError) {
	o := d.object(v, path, "compatibility_profile_id", "lmcache_version", "lmcache_build", "config_profile",
		"layout_profile", "serde_profile", "chunk_size", "connector_profile", "key_hash_profile")
	p := LMCacheCompatibilityProfile{
		CompatibilityProfileID: o.str("compatibility_profile_id"),
		LMCacheVersion:         o.strOpt("lmcache_version"),
		LMCacheBuild:           o.strOpt("lmcache_build"),
		ConfigProfile:          o.strOpt("config_profile"),
		LayoutProfile:          o.strOpt("layout_profile"),
		SerdeProfile:           o.strOpt("serde_profile"),
		ChunkSize:              o.intOpt("chunk_size"),
		ConnectorProfile:       o.strOpt("connector_profile"),
		KeyHashProfile:         o.strOpt("key_hash_profile"),
	}
	return p, o.err
}

func (p LMCacheCompatibilityProfile) validate(path string) *ValidationError {
	c := checker{base: path}
	c.min1("compatibility_profile_id", p.CompatibilityProfileID)
	if n, ok := p.ChunkSize.Get(); ok {
		c.atLeast("chunk_size", n, 1)
	}
	return c.err
}

func (p LMCacheCompatibilityProfile) write(w *jw) {
	w.objStart()
	w.key("compatibility_profile_id")
	w.str(p.CompatibilityProfileID)
	for _, f := range []struct {
		k string
		v Opt[string]
	}{{"lmcache_version", p.LMCacheVersion}, {"lmcache_build", p.LMCacheBuild}, {"config_profile", p.ConfigProfile},
		{"layout_profile", p.LayoutProfile}, {"serde_profile", p.SerdeProfile}} {
		w.key(f.k)
		w.optStr(f.v)
	}
	w.key("chunk_size")
	w.optInt(p.ChunkSize)
	w.key("connector_profile")
	w.optStr(p.ConnectorProfile)
	w.key("key_hash_profile")
	w.optStr(p.KeyHashProfile)
	w.objEnd()
}

// Flags holds the 16 capability flags, indexed by Capability.
type Flags [NumCapabilities]SupportState

// AllFlags returns Flags with every capability set to s.
func AllFlags(s SupportState) Flags {
	var f Flags
	for i := range f {
		f[i] = s
	}
	return f
}

// CapabilitySnapshot is what a gateway declares about itself (§7.7,
// contract lmcache-gateway.v1). Negotiation compares requests against it.
type CapabilitySnapshot struct {
	ContractVersion      string // always GatewayContractVersion
	RuntimeProfile       RuntimeProfile
	AdapterBindings      []GatewayAdapterBinding
	CompatibilityProfile LMCacheCompatibilityProfile
	EndpointID           string
	EndpointGeneration   int64
	RuntimeMode          Opt[string]
	ObservedAt           time.Time
	Source               string
	LoadedAdapters       []string
	L1Tiers              []string
	L2Tiers              []string
	Flags                Flags
}

// Supports reports whether capability c is exactly "supported"; unknown
// never counts.
func (s CapabilitySnapshot) Supports(c Capability) bool { return s.Flags[c] == Supported }

// HasTransport reports whether kind is among the snapshot's bindings.
func (s CapabilitySnapshot) HasTransport(kind TransportKind) bool {
	return slices.ContainsFunc(s.AdapterBindings, func(b GatewayAdapterBinding) bool { return b.TransportKind == kind })
}

// Clone returns a copy that shares no slices with s.
func (s CapabilitySnapshot) Clone() CapabilitySnapshot {
	s.AdapterBindings = slices.Clone(s.AdapterBindings)
	s.LoadedAdapters = slices.Clone(s.LoadedAdapters)
	s.L1Tiers = slices.Clone(s.L1Tiers)
	s.L2Tiers = slices.Clone(s.L2Tiers)
	return s
}

func decodeSnapshot(d *decoder, v jvalue, path string) (CapabilitySnapshot, *ValidationError) {
	allowed := []string{"contract_version", "runtime_profile", "adapter_bindings", "compatibility_profile",
		"endpoint_id", "endpoint_generation", "runtime_mode", "observed_at", "source",
		"loaded_adapters", "l1_tiers", "l2_tiers"}
	for c := Capability(0); int(c) < NumCapabilities; c++ {
		allowed = append(allowed, c.String())
	}
	o := d.object(v, path, allowed...)
	s := CapabilitySnapshot{
		ContractVersion:      o.strDef("contract_version", GatewayContractVersion),
		RuntimeProfile:       o.profile("runtime_profile", true),
		AdapterBindings:      listReq(o, "adapter_bindings", decodeBinding),
		CompatibilityProfile: nested(o, "compatibility_profile", decodeCompatProfile),
		EndpointID:           o.str("endpoint_id"),
		EndpointGeneration:   o.int("endpoint_generation"),
		RuntimeMode:          o.strOpt("runtime_mode"),
		ObservedAt:           o.timeNow("observed_at"),
		Source:               o.str("source"),
		LoadedAdapters:       listDef(o, "loaded_adapters", decString),
		L1Tiers:              listDef(o, "l1_tiers", decString),
		L2Tiers:              listDef(o, "l2_tiers", decString),
	}
	for c := Capability(0); int(c) < NumCapabilities; c++ {
		s.Flags[c] = SupportState(o.strDef(c.String(), string(Unknown)))
	}
	return s, o.err
}

func (s CapabilitySnapshot) validate(path string) *ValidationError {
	c := checker{base: path}
	if s.ContractVersion != GatewayContractVersion {
		c.fail(CodeContractVersion, "contract_version", "const:lmcache-gateway.v1",
			"capability snapshot contract_version must be exactly lmcache-gateway.v1")
	}
	c.profile("runtime_profile", s.RuntimeProfile)
	if len(s.AdapterBindings) == 0 {
		c.fail(CodeTooShort, "adapter_bindings", "min_length:1", "adapter_bindings must not be empty")
	}
	seen := map[TransportKind]bool{}
	for i, b := range s.AdapterBindings {
		f := indexPath("adapter_bindings", i)
		c.sub(b.validate(c.at(f)))
		if seen[b.TransportKind] {
			c.fail(CodeDuplicateItem, f, "bindings:unique_transport", "adapter bindings must be unique by transport_kind")
		}
		seen[b.TransportKind] = true
	}
	c.sub(s.CompatibilityProfile.validate(c.at("compatibility_profile")))
	c.pattern("endpoint_id", s.EndpointID, prefixEndpoint)
	c.generation("endpoint_generation", s.EndpointGeneration, s.RuntimeProfile)
	c.utc("observed_at", s.ObservedAt)
	c.min1("source", s.Source)
	c.uniqueNonBlank("loaded_adapters", s.LoadedAdapters)
	c.uniqueNonBlank("l1_tiers", s.L1Tiers)
	c.uniqueNonBlank("l2_tiers", s.L2Tiers)
	for i, f := range s.Flags {
		c.enum(f.valid(), Capability(i).String())
	}
	if !c.ok() {
		return c.err
	}
	for i, b := range s.AdapterBindings {
		c.rule(b.TransportKind.allowedFor(s.RuntimeProfile), indexPath("adapter_bindings", i)+".transport_kind",
			"bindings:runtime_isolation", "transport kind is not allowed for this runtime profile")
	}
	return c.err
}

func (s CapabilitySnapshot) write(w *jw) {
	w.objStart()
	w.key("contract_version")
	w.str(s.ContractVersion)
	w.key("runtime_profile")
	w.str(string(s.RuntimeProfile))
	w.key("adapter_bindings")
	w.arrStart()
	for _, b := range s.AdapterBindings {
		b.write(w)
	}
	w.arrEnd()
	w.key("compatibility_profile")
	s.CompatibilityProfile.write(w)
	w.key("endpoint_id")
	w.str(s.EndpointID)
	w.key("endpoint_generation")
	w.int(s.EndpointGeneration)
	w.key("runtime_mode")
	w.optStr(s.RuntimeMode)
	w.key("observed_at")
	w.time(s.ObservedAt)
	w.key("source")
	w.str(s.Source)
	w.key("loaded_adapters")
	w.strs(s.LoadedAdapters)
	w.key("l1_tiers")
	w.strs(s.L1Tiers)
	w.key("l2_tiers")
	w.strs(s.L2Tiers)
	for i, f := range s.Flags {
		w.key(Capability(i).String())
		w.str(string(f))
	}
	w.objEnd()
}
