package edge

import "github.com/kvca/kvca/internal/kdnid"

// EndpointID is a backend's KDN endpoint id, derived from its URL as the
// contracts derive endpoint ids from a name (docs/kdn.md, "Endpoints"):
// stable across restarts and across replicas that name the backend the
// same way.
func EndpointID(url string) string { return kdnid.Endpoint(url) }
