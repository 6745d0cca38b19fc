package edge

import "github.com/kvca/kvca/kdn"

// EndpointID is a backend's KDN endpoint id, derived from its URL as the
// contracts derive endpoint ids from a name (§1.4): stable across restarts
// and across replicas that name the backend the same way.
func EndpointID(url string) string { return kdn.EndpointIDForName(url) }
