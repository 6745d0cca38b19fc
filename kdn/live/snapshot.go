package live

import (
	"strconv"
	"time"

	"github.com/kvca/kvca/kdn"
)

// Names kvca uses on the wire for itself and for its one cache tier: the
// block table, kvca's record of which prefixes each backend's KV cache
// holds (the backend's own GPU memory is not observable from here).
const (
	sourceName = "kvca"
	bindingID  = "kvca-edge"
	tierName   = "kvca-block-table"
)

// flags is what kvca can honour. Everything else is declared unsupported
// and answered unsupported by negotiation, never approximated: kvca hashes
// request bytes, not tokens (token lookup, range coverage), lists no cache
// objects, emits no metrics events, batches nothing and leases nothing.
func flags() kdn.Flags {
	f := kdn.AllFlags(kdn.Unsupported)
	for _, c := range []kdn.Capability{
		kdn.CapObjectDeletion,      // clear: forget the locations
		kdn.CapWarmPrefetch,        // prefetch, rebuild: one-token warm-up
		kdn.CapOperationStatus,     // task table
		kdn.CapPinUnpin,            // table pins, bounded
		kdn.CapTierCapacityUsage,   // table capacity and use
		kdn.CapMaintenanceEviction, // the vacuum
		kdn.CapAsyncCompletion,     // warm-ups run in the background
		kdn.CapCancellation,        // cancel a live task
		kdn.CapArtifactLookup,      // registered prefixes
		kdn.CapCacheObservation,    // block table coverage
	} {
		f[c] = kdn.Supported
	}
	return f
}

// snapshotOf is backend b's capability snapshot at now: its endpoint id is
// derived from the backend URL and its generation is the one the table
// bumps on every reset of that backend.
func (g *Gateway) snapshotOf(b int, now time.Time) kdn.CapabilitySnapshot {
	be := g.srv.Scheduler().Backends[b]
	return kdn.CapabilitySnapshot{
		ContractVersion: kdn.GatewayContractVersion,
		RuntimeProfile:  kdn.ProfileV1,
		AdapterBindings: []kdn.GatewayAdapterBinding{{TransportKind: kdn.TransportUnknownFuture, BindingID: bindingID}},
		CompatibilityProfile: kdn.LMCacheCompatibilityProfile{
			CompatibilityProfileID: g.compat,
			KeyHashProfile:         kdn.Some("kvca-cbr1-siphash24-b" + strconv.Itoa(g.srv.BlockSize())),
		},
		EndpointID:         kdn.EndpointIDForName(be.URL),
		EndpointGeneration: g.generation(b),
		RuntimeMode:        kdn.Some("kvca-edge"),
		ObservedAt:         now,
		Source:             sourceName,
		LoadedAdapters:     []string{},
		L1Tiers:            []string{tierName},
		L2Tiers:            []string{},
		Flags:              flags(),
	}
}

// Snapshot implements gateway.Gateway with the first backend's snapshot;
// Snapshots has one per backend.
func (g *Gateway) Snapshot() kdn.CapabilitySnapshot { return g.snapshotOf(0, g.now()) }

// SnapshotFor implements EndpointSnapshots: the snapshot of the backend
// whose endpoint id is id.
func (g *Gateway) SnapshotFor(id string) (kdn.CapabilitySnapshot, bool) {
	b, ok := g.endpoint(id)
	if !ok {
		return kdn.CapabilitySnapshot{}, false
	}
	return g.snapshotOf(b, g.now()), true
}

// Snapshots returns every configured backend's snapshot, in backend order.
func (g *Gateway) Snapshots() []kdn.CapabilitySnapshot {
	now := g.now()
	var out []kdn.CapabilitySnapshot
	for _, b := range g.srv.Scheduler().Backends {
		if !b.Retired() {
			out = append(out, g.snapshotOf(b.Index, now))
		}
	}
	return out
}
