package kdn

// LMCacheEndpoint describes one cache endpoint (§7.5). Its id is derived
// from its name only, so generation changes keep the id.
type LMCacheEndpoint struct {
	EndpointID             Opt[string]
	Name                   string
	RuntimeProfile         RuntimeProfile
	GatewayProfile         GatewayProfile
	CompatibilityProfileID string
	Generation             int64
	Adapter                Opt[string]
	Tier                   Opt[string]
}

// ID returns the supplied endpoint id, or the one derived from Name.
func (e LMCacheEndpoint) ID() string {
	if id, ok := e.EndpointID.Get(); ok {
		return id
	}
	return EndpointIDForName(e.Name)
}

func decodeEndpoint(d *decoder, v jvalue, path string) (LMCacheEndpoint, *ValidationError) {
	o := d.object(v, path, "endpoint_id", "name", "runtime_profile", "gateway_profile",
		"compatibility_profile_id", "generation", "adapter", "tier")
	e := LMCacheEndpoint{
		EndpointID:             o.strOpt("endpoint_id"),
		Name:                   o.str("name"),
		RuntimeProfile:         o.profile("runtime_profile", false),
		GatewayProfile:         GatewayProfile(o.str("gateway_profile")),
		CompatibilityProfileID: o.str("compatibility_profile_id"),
		Generation:             o.intDef("generation", 1),
		Adapter:                o.strOpt("adapter"),
		Tier:                   o.strOpt("tier"),
	}
	if o.err != nil {
		return LMCacheEndpoint{}, o.err
	}
	if !e.EndpointID.IsSet() {
		e.EndpointID = Some(EndpointIDForName(e.Name))
	}
	return e, nil
}

func (e LMCacheEndpoint) validate(path string) *ValidationError {
	c := checker{base: path}
	c.nonBlank("name", e.Name)
	c.profile("runtime_profile", e.RuntimeProfile)
	c.enum(e.GatewayProfile.valid(), "gateway_profile")
	c.nonBlank("compatibility_profile_id", e.CompatibilityProfileID)
	c.atLeast("generation", e.Generation, 1)
	if id, ok := e.EndpointID.Get(); ok && c.ok() && id != EndpointIDForName(e.Name) {
		c.fail(CodeDerivedID, "endpoint_id", "derived_id", "endpoint_id must equal the id derived from name")
	}
	return c.err
}

func (e LMCacheEndpoint) write(w *jw) {
	w.objStart()
	w.key("endpoint_id")
	w.str(e.ID())
	w.key("name")
	w.str(e.Name)
	w.key("runtime_profile")
	w.str(string(e.RuntimeProfile))
	w.key("gateway_profile")
	w.str(string(e.GatewayProfile))
	w.key("compatibility_profile_id")
	w.str(e.CompatibilityProfileID)
	w.key("generation")
	w.int(e.Generation)
	w.key("adapter")
	w.optStr(e.Adapter)
	w.key("tier")
	w.optStr(e.Tier)
	w.objEnd()
}
