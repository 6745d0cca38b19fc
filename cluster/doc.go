// Package cluster lets several kvca replicas behind one L4 balancer act as
// one router. Over NATS each replica publishes what it learns (where chains
// live, backend resets) and its in-flight load per backend, and applies the
// others'. Everything is best effort: a lost or late message costs hit rate
// or balance, never a request, and nothing here runs on the request path
// except a bounded, non-blocking append (Node.Learned).
package cluster
