// Package pool gives the picker an InferencePool's endpoints: it watches
// the pool and its pods through the Kubernetes API and hands the ready
// pods' "podIP:port" (one per target port) to Proxy.SetEndpoints.
package pool

import (
	"fmt"
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GVR is the InferencePool resource of the Gateway API Inference
// Extension, version v1.
var GVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// Spec is what the watcher reads of an InferencePool: the pods it
// selects and the ports their model servers listen on.
type Spec struct {
	Selector labels.Set
	Ports    []int32
}

// parseSpec reads spec.selector.matchLabels and spec.targetPorts[].number.
// A pool selecting nothing is an error: an empty selector would select
// every pod of the namespace.
func parseSpec(u *unstructured.Unstructured) (Spec, error) {
	ml, _, err := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
	if err != nil {
		return Spec{}, fmt.Errorf("inferencepool %s: spec.selector.matchLabels: %w", u.GetName(), err)
	}
	if len(ml) == 0 {
		return Spec{}, fmt.Errorf("inferencepool %s: spec.selector.matchLabels is empty", u.GetName())
	}
	tps, _, err := unstructured.NestedSlice(u.Object, "spec", "targetPorts")
	if err != nil {
		return Spec{}, fmt.Errorf("inferencepool %s: spec.targetPorts: %w", u.GetName(), err)
	}
	s := Spec{Selector: labels.Set(ml)}
	for _, tp := range tps {
		m, _ := tp.(map[string]any)
		n, ok := portNumber(m["number"])
		if !ok {
			return Spec{}, fmt.Errorf("inferencepool %s: targetPorts entry %v has no port number", u.GetName(), tp)
		}
		if !slices.Contains(s.Ports, n) {
			s.Ports = append(s.Ports, n)
		}
	}
	if len(s.Ports) == 0 {
		return Spec{}, fmt.Errorf("inferencepool %s: no spec.targetPorts", u.GetName())
	}
	return s, nil
}

// portNumber accepts the number types JSON decoding gives unstructured
// objects (int64 from the API, float64 from hand-built ones).
func portNumber(v any) (int32, bool) {
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case int:
		n = int64(x)
	case int32:
		n = int64(x)
	case float64:
		n = int64(x)
	default:
		return 0, false
	}
	return int32(n), n > 0 && n < 65536
}

// ready: a pod takes traffic when Kubernetes says it is Ready, it has an
// address and it is not being deleted (its server is draining).
func ready(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// RoleLabel is the pod label naming a model server's part in a
// disaggregated pool (llm-d's convention): prefill, decode, or both (the
// default, also for a pod without it).
const RoleLabel = "llm-d.ai/role"

// endpoints lists the ready selected pods' endpoints, sorted so that an
// unchanged pool gives an equal list. A pod labelled a prefill or decode
// worker (RoleLabel) gives endpoints with that role as a backend option
// ("10.0.0.7:8000#role=prefill").
func endpoints(s Spec, pods []*corev1.Pod) []string {
	sel := s.Selector.AsSelectorPreValidated()
	eps := []string{}
	for _, p := range pods {
		if !sel.Matches(labels.Set(p.Labels)) || !ready(p) {
			continue
		}
		suffix := ""
		if r := p.Labels[RoleLabel]; r == "prefill" || r == "decode" {
			suffix = "#role=" + r
		}
		for _, port := range s.Ports {
			eps = append(eps, net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port)))+suffix)
		}
	}
	slices.Sort(eps)
	return slices.Compact(eps)
}
