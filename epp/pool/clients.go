package pool

import (
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// NewClients builds the watcher's clients: from the pod's service
// account when kubeconfig is "" (kvca running in the cluster, the usual
// case for a picker), else from that kubeconfig file.
func NewClients(kubeconfig string) (dynamic.Interface, kubernetes.Interface, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("pool: kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = "kvca-epp"
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return dc, cs, nil
}
