package pool_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kvca/kvca/epp/pool"
)

const ns = "llm"

// recorder is the watcher's target: every endpoint list it is given.
type recorder chan []string

func (r recorder) SetEndpoints(eps []string) error { r <- eps; return nil }

// next returns the next list given, failing the test after a while.
func (r recorder) next(t *testing.T) []string {
	t.Helper()
	select {
	case eps := <-r:
		return eps
	case <-time.After(10 * time.Second):
		t.Fatal("no endpoints given")
		return nil
	}
}

// expect waits for a given list equal to want, skipping the ones before
// (an informer may deliver one change as two events).
func (r recorder) expect(t *testing.T, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	var got []string
	for range 10 {
		if got = r.next(t); slices.Equal(got, want) {
			return
		}
	}
	t.Fatalf("endpoints %v, want %v", got, want)
}

func inferencePool(name string, labels map[string]any, ports ...int64) *unstructured.Unstructured {
	tps := make([]any, len(ports))
	for i, p := range ports {
		tps[i] = map[string]any{"number": p}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1",
		"kind":       "InferencePool",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": labels},
			"targetPorts":       tps,
			"endpointPickerRef": map[string]any{"name": "kvca-epp", "port": map[string]any{"number": int64(9002)}},
		},
	}}
}

func pod(name, ip string, labels map[string]string, isReady bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if isReady {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}},
		},
	}
}

var vllm = map[string]string{"app": "vllm"}

func start(t *testing.T, objs []runtime.Object, pods ...runtime.Object) (recorder, *dynamicfake.FakeDynamicClient, *fake.Clientset) {
	t.Helper()
	dc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{pool.GVR: "InferencePoolList"}, objs...)
	cs := fake.NewClientset(pods...)
	rec := make(recorder, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	w := &pool.Watcher{Dynamic: dc, Pods: cs, Namespace: ns, Name: "pool", Target: rec}
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
	})
	return rec, dc, cs
}

// The ready pods the pool selects give one endpoint per target port,
// and every change of pods or pool gives the list anew.
func TestWatcher(t *testing.T) {
	ctx := context.Background()
	rec, dc, cs := start(t,
		[]runtime.Object{inferencePool("pool", map[string]any{"app": "vllm"}, 8000, 8001), inferencePool("other", map[string]any{"app": "x"}, 1)},
		pod("a", "10.0.0.1", vllm, true),
		pod("b", "10.0.0.2", vllm, false),
		pod("c", "10.0.0.3", map[string]string{"app": "other"}, true),
		pod("d", "fd00::4", vllm, true),
	)
	rec.expect(t, "10.0.0.1:8000", "10.0.0.1:8001", "[fd00::4]:8000", "[fd00::4]:8001")

	pods := cs.CoreV1().Pods(ns)
	if _, err := pods.UpdateStatus(ctx, pod("b", "10.0.0.2", vllm, true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.expect(t, "10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.2:8000", "10.0.0.2:8001", "[fd00::4]:8000", "[fd00::4]:8001")

	if err := pods.Delete(ctx, "d", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.expect(t, "10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.2:8000", "10.0.0.2:8001")

	// A terminating pod is drained at once.
	gone := pod("a", "10.0.0.1", vllm, true)
	now := metav1.Now()
	gone.DeletionTimestamp = &now
	if _, err := pods.Update(ctx, gone, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.expect(t, "10.0.0.2:8000", "10.0.0.2:8001")

	// The pool's selector and ports change: the pods are watched anew.
	pools := dc.Resource(pool.GVR).Namespace(ns)
	if _, err := pools.Update(ctx, inferencePool("pool", map[string]any{"app": "other"}, 9000), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.expect(t, "10.0.0.3:9000")

	if err := pools.Delete(ctx, "pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.expect(t)
}

// A pool that is not there yet, or selects nothing, gives no endpoints;
// the pool's creation gives them.
func TestWatcherPoolLater(t *testing.T) {
	rec, dc, _ := start(t, nil, pod("a", "10.0.0.1", vllm, true))
	rec.expect(t)
	pools := dc.Resource(pool.GVR).Namespace(ns)
	bad := inferencePool("pool", map[string]any{}, 8000)
	if _, err := pools.Create(context.Background(), bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case eps := <-rec:
		t.Fatalf("endpoints %v from a pool without a selector", eps)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := pools.Update(context.Background(), inferencePool("pool", map[string]any{"app": "vllm"}, 8000), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.expect(t, "10.0.0.1:8000")
}

// A pod labelled a prefill or decode worker gives endpoints with that
// role; "both", another value or no label gives plain endpoints.
func TestWatcherRoles(t *testing.T) {
	role := func(r string) map[string]string { return map[string]string{"app": "vllm", pool.RoleLabel: r} }
	rec, _, _ := start(t,
		[]runtime.Object{inferencePool("pool", map[string]any{"app": "vllm"}, 8000)},
		pod("p", "10.0.0.1", role("prefill"), true),
		pod("d", "10.0.0.2", role("decode"), true),
		pod("b", "10.0.0.3", role("both"), true),
		pod("x", "10.0.0.4", role("other"), true),
		pod("n", "10.0.0.5", vllm, true),
	)
	rec.expect(t, "10.0.0.1:8000#role=prefill", "10.0.0.2:8000#role=decode", "10.0.0.3:8000", "10.0.0.4:8000", "10.0.0.5:8000")
}
