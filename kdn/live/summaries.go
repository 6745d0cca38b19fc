package live

import (
	"context"
	"fmt"
	"time"

	"github.com/kvca/kvca/kdn"
	"github.com/kvca/kvca/kdn/gateway"
)

// GetLMCacheEndpoints implements gateway.Gateway: every backend, healthy
// or not, named by its URL (from which its endpoint id derives) with its
// current generation.
func (g *Gateway) GetLMCacheEndpoints(_ context.Context, req kdn.GetLMCacheEndpointsRequest) kdn.GetLMCacheEndpointsResponse {
	now := g.now()
	r := gateway.NewDiscoveryReply(req.Envelope, now)
	if f, refused := gateway.NegotiateDiscovery(g.snapshotOf(0, now), req.Envelope); refused {
		return kdn.GetLMCacheEndpointsResponse(gateway.Refuse(r, f))
	}
	bs := g.srv.Scheduler().Backends
	eps := make([]kdn.LMCacheEndpoint, 0, len(bs))
	for _, b := range bs {
		if b.Retired() {
			continue
		}
		eps = append(eps, kdn.LMCacheEndpoint{
			Name:                   b.URL,
			RuntimeProfile:         kdn.ProfileV1,
			GatewayProfile:         kdn.GatewayUnknownFuture,
			CompatibilityProfileID: g.compat,
			Generation:             g.generation(b.Index),
			Tier:                   kdn.Some(tierName),
		})
	}
	r.Endpoints = kdn.Some(eps)
	return kdn.GetLMCacheEndpointsResponse(r)
}

func (g *Gateway) summaryBase(req kdn.GatewayTargetedRequest, ts time.Time, s kdn.SupportState) kdn.SummaryBase {
	return kdn.SummaryBase{
		Source:                 sourceName,
		ObservedAt:             ts,
		RuntimeProfile:         req.RuntimeProfile,
		CompatibilityProfileID: req.CompatibilityProfileID,
		EndpointID:             req.EndpointID,
		EndpointGeneration:     req.EndpointGeneration,
		Support:                s,
	}
}

// GetTierAndAdapterSummary implements gateway.Gateway. kvca does not know
// which adapters a backend has loaded (unsupported). Its one tier is the
// block table, in CBR bytes (blocks × block size): what it can index and
// what it indexes now. The table is shared by all endpoints and the
// backend's own KV memory is not visible, hence partial.
func (g *Gateway) GetTierAndAdapterSummary(_ context.Context, req kdn.GetTierAndAdapterSummaryRequest) kdn.GetTierAndAdapterSummaryResponse {
	r, _, ok := g.begin(req.Envelope, req.Target, kdn.CapTierCapacityUsage)
	if !ok {
		return kdn.GetTierAndAdapterSummaryResponse(r)
	}
	tr := kdn.GatewayTargetedRequest(req)
	st := g.srv.Table().Stats()
	bs := int64(g.srv.BlockSize())
	capBytes := int64(st.Capacity) * bs
	// Pins may hold the table a little over its bound; the wire wants
	// used ≤ capacity, and partial already says the figure is not exact.
	used := min(int64(st.Blocks)*bs, capBytes)
	tier := g.summaryBase(tr, r.Timestamp, kdn.Supported)
	tier.Partial = true
	r.AdapterSummary = kdn.Some(kdn.AdapterSummary{SummaryBase: g.summaryBase(tr, r.Timestamp, kdn.Unsupported), LoadedAdapters: []string{}})
	r.TierSummary = kdn.Some(kdn.TierSummary{
		SummaryBase: tier,
		L1Tiers:     []string{tierName},
		L2Tiers:     []string{},
		Capacity: []kdn.CapacityUsageObservation{{
			SummaryBase:   tier,
			TierName:      tierName,
			TierLevel:     kdn.TierL1,
			CapacityBytes: kdn.Some(capBytes),
			UsedBytes:     kdn.Some(used),
		}},
	})
	return kdn.GetTierAndAdapterSummaryResponse(r)
}

// GetMaintenanceStatus implements gateway.Gateway: the vacuum, which
// reclaims expired locations, and the table's evictions by reason.
func (g *Gateway) GetMaintenanceStatus(_ context.Context, req kdn.GetMaintenanceStatusRequest) kdn.GetMaintenanceStatusResponse {
	r, b, ok := g.begin(req.Envelope, req.Target, kdn.CapMaintenanceEviction)
	if !ok {
		return kdn.GetMaintenanceStatusResponse(r)
	}
	st := g.srv.Table().Stats()
	be := g.srv.Scheduler().Backends[b]
	next := "none"
	if st.VacuumRuns > 0 {
		next = wire(st.VacuumNext).Format(time.RFC3339Nano)
	}
	detail := fmt.Sprintf("vacuum runs=%d next_wake=%s; evicted expired=%d capacity=%d reset=%d; "+
		"table blocks=%d locations=%d capacity=%d ttl=%s; pinned blocks=%d/%d; endpoint healthy=%t active=%d prefill_blocks=%d",
		st.VacuumRuns, next, st.EvictedExpired, st.EvictedCapacity, st.EvictedReset,
		st.Blocks, st.Locations, st.Capacity, g.srv.Table().TTL(), g.pinnedBlocks(), g.maxPins,
		be.Healthy(), be.Active(), be.Prefill())
	r.MaintenanceSummary = kdn.Some(kdn.MaintenanceSummary{
		SummaryBase:        g.summaryBase(kdn.GatewayTargetedRequest(req), r.Timestamp, kdn.Supported),
		Active:             kdn.Some(st.VacuumRuns > 0),
		EvictionObservable: kdn.Some(true),
		Detail:             kdn.Some(detail),
	})
	return kdn.GetMaintenanceStatusResponse(r)
}
