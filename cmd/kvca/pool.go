package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/epp/pool"
)

func poolFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "inference-pool", Usage: "take the backends from the ready pods of this InferencePool, `[NAMESPACE/]NAME` (default namespace: kvca's own), watched through the Kubernetes API; --backend is then not needed", EnvVars: env("inference-pool")},
		&cli.StringFlag{Name: "kubeconfig", Usage: "Kubernetes client configuration `FILE` for --inference-pool (default: the pod's service account)", EnvVars: env("kubeconfig")},
	}
}

// serviceAccountNamespace is where a pod finds its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// poolRef splits --inference-pool into its namespace and name.
func poolRef(ref string) (ns, name string) {
	if ns, name, ok := strings.Cut(ref, "/"); ok {
		return ns, name
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), ref
	}
	return "default", ref
}

// poolFeed is the InferencePool watcher's target. Before the server
// exists it keeps the pool's endpoints, so that kvca starts on them;
// after, it hands every change to the server. A pool with no ready pod
// keeps the backends in force (health checks take out those gone).
type poolFeed struct {
	mu    sync.Mutex
	eps   []string
	first chan struct{} // closed at the first non-empty list
	set   func([]string) error
	log   *slog.Logger
}

func (f *poolFeed) SetEndpoints(eps []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(eps) == 0 {
		f.log.Warn("inference pool: no ready pod; the backends in force stay")
		return nil
	}
	if f.set == nil {
		if f.eps == nil {
			close(f.first)
		}
		f.eps = eps
		return nil
	}
	if err := f.set(eps); err != nil {
		f.log.Error("inference pool: endpoints not applied", "err", err)
		return err
	}
	return nil
}

// attach hands the pool's changes to set from now on.
func (f *poolFeed) attach(set func([]string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set = set
}

// startPool watches --inference-pool, if set, and returns the backends
// of its ready pods (http://ip:port) once it has one, with the feed to
// attach to the server; stop ends the watch.
func startPool(c *cli.Context, log *slog.Logger) (backends []string, feed *poolFeed, stop func(), err error) {
	ref := c.String("inference-pool")
	if ref == "" {
		return nil, nil, func() {}, nil
	}
	dyn, pods, err := pool.NewClients(c.String("kubeconfig"))
	if err != nil {
		return nil, nil, nil, cli.Exit("kvca: --inference-pool: "+err.Error(), 1)
	}
	ns, name := poolRef(ref)
	feed = &poolFeed{first: make(chan struct{}), log: log}
	ctx, cancel := context.WithCancel(context.Background())
	w := &pool.Watcher{Dynamic: dyn, Pods: pods, Namespace: ns, Name: name, Target: feed, Logger: log}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	log.Info("inference pool: waiting for a ready pod", "namespace", ns, "name", name)
	select {
	case <-feed.first:
	case err := <-done:
		cancel()
		return nil, nil, nil, cli.Exit("kvca: --inference-pool: "+err.Error(), 1)
	case <-c.Context.Done():
		cancel()
		return nil, nil, nil, c.Context.Err()
	}
	feed.mu.Lock()
	for _, ep := range feed.eps {
		backends = append(backends, "http://"+ep)
	}
	feed.mu.Unlock()
	return backends, feed, cancel, nil
}
