package pool_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvca/kvca/epp/pool"
)

// A kubeconfig file gives clients without contacting its server; none
// outside a cluster is an error that says so.
func TestNewClients(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if dc, cs, err := pool.NewClients(kc); err != nil || dc == nil || cs == nil {
		t.Fatalf("from a kubeconfig: %v", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, _, err := pool.NewClients(""); err == nil {
		t.Fatal("in-cluster configuration outside a cluster: no error")
	}
}
