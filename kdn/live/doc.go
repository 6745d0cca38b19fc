// Package live is kvca's own KDN gateway (runtime profile v1), answering
// the cache-service and knowledge-service contracts of package kdn from what
// the running proxy really knows.
//
// Model:
//   - Endpoint: each backend. Its endpoint id derives from the backend URL
//     (kdn.EndpointIDForName, as edge.EndpointID), its generation is the block table's, bumped on
//     every backend reset (recovery from unhealthy, or an engine restart
//     seen by engine telemetry; one restart seen both ways bumps it once),
//     so a client holding an older generation is answered stale. With --state-dir generations
//     persist, and every kvca start is a new generation for every endpoint
//     (the table is not persisted, so kvca vouches for no engine after a
//     restart). Binding: unknown_future.
//   - Health: an endpoint kvca has ejected is vouched for by nothing: a
//     warm-up or pin fails on the spot without sending anything, lookups
//     and observations are stale with no payload.
//   - Knowledge: a registered item whose revisions each may carry a prefix,
//     an OpenAI chat or completions request body uploaded through kvca's
//     own admin route (PUT /kdn/prefix/<knowledge_id>). Descriptors and
//     prefixes persist under --state-dir, one JSON file per item, written
//     atomically.
//   - Artifact: a revision's cache identity in this deployment (knowledge,
//     revision, model, CBR/API/block size, compatibility profile), with the
//     contract's derived id. Its chain is recomputed at start-up with the
//     current key, never stored.
//   - Observation/lookup: the leading blocks of the artifact's chain each
//     endpoint holds in the block table, when last used and when they
//     expire.
//   - Prefetch/rebuild: the prefix sent to the endpoint with max_tokens 1
//     through Proxy.Warm, which learns its chain on a 2xx; tasks run
//     in the background (pending → running → retry_wait → succeeded/failed,
//     cancellable). Pin/unpin: table pins, bounded by --max-pinned-blocks.
//     Clear: releases the pins and forgets the locations at once.
//
// Every capability kvca cannot honour (tokens, ranges, listing, metrics
// events, batching, leases, adapters) is unsupported in the snapshot and
// answered unsupported by negotiation.
//
// HTTP, on the admin listener only (Mount): POST /kdn/v1/<operation> for
// every operation of gateway.Operations, capability discovery at
// CapabilitiesOp, plus the knowledge routes documented at PrefixPrefix.
package live
