package deploy

import (
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// inferenceGateway builds the k8s-inference-gateway overlay as kubectl
// apply -k would and returns its objects by kind/name.
func inferenceGateway(t *testing.T) map[string]obj {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "k8s-inference-gateway")
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	out := map[string]obj{}
	for _, r := range resMap.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var o obj
		if err := yaml.Unmarshal(b, &o); err != nil {
			t.Fatal(err)
		}
		out[r.GetKind()+"/"+r.GetName()] = o
	}
	return out
}

func findPort(ports []any, name string) obj {
	for _, p := range ports {
		if str(p, "name") == name {
			return p.(obj)
		}
	}
	return nil
}

// TestInferenceGatewayOverlay: the picker overlay's objects agree with
// each other: the InferencePool names the picker's Service and port, the
// Service reaches the container port kvca's --ext-proc listens on, the
// route sends to the pool through the Gateway, the network policy lets
// the gateway in, and everything lives in the pool's namespace.
func TestInferenceGatewayOverlay(t *testing.T) {
	m := inferenceGateway(t)
	flags := flagNames(t)
	for key, o := range m {
		if strings.HasPrefix(key, "Namespace/") {
			t.Errorf("the overlay applies %s: the pool's namespace is the model servers'", key)
		}
		if ns := str(o, "metadata", "namespace"); ns != "llm" {
			t.Errorf("%s in namespace %q, want llm", key, ns)
		}
	}
	pool, svc, cm, dep := m["InferencePool/vllm"], m["Service/kvca-epp"], m["ConfigMap/kvca"], m["Deployment/kvca"]
	route, gw, np := m["HTTPRoute/llm"], m["Gateway/inference-gateway"], m["NetworkPolicy/kvca"]
	for name, o := range map[string]obj{"InferencePool": pool, "picker Service": svc, "ConfigMap": cm, "Deployment": dep, "HTTPRoute": route, "Gateway": gw, "NetworkPolicy": np} {
		if o == nil {
			t.Fatalf("no %s in the overlay", name)
		}
	}

	// The pool: v1, a selector, a port, kvca's Service as its picker.
	if str(pool, "apiVersion") != "inference.networking.k8s.io/v1" {
		t.Errorf("InferencePool apiVersion %q", str(pool, "apiVersion"))
	}
	if ml, _ := at(pool, "spec", "selector", "matchLabels").(obj); len(ml) == 0 {
		t.Error("InferencePool selects no pods")
	}
	if n := jsonNumber(at(pool, "spec", "targetPorts", "#0", "number")); n == "" {
		t.Error("InferencePool has no target port")
	}
	ref := at(pool, "spec", "endpointPickerRef")
	if str(ref, "name") != str(svc, "metadata", "name") {
		t.Errorf("endpointPickerRef names %q, not the picker's Service", str(ref, "name"))
	}
	svcPort := findPort(list(svc, "spec", "ports"), "grpc")
	if svcPort == nil || jsonNumber(at(ref, "port", "number")) != jsonNumber(svcPort["port"]) {
		t.Errorf("endpointPickerRef port %v, Service port %v", at(ref, "port", "number"), svcPort)
	}
	if str(ref, "failureMode") != "FailClose" {
		t.Errorf("failureMode %q, want FailClose", str(ref, "failureMode"))
	}

	// The Service reaches kvca's pods on the port --ext-proc listens on.
	podLabels, _ := at(dep, "spec", "template", "metadata", "labels").(obj)
	for k, v := range at(svc, "spec", "selector").(obj) {
		if podLabels[k] != v {
			t.Errorf("picker Service selects %s=%v, which kvca's pods lack", k, v)
		}
	}
	c := at(dep, "spec", "template", "spec", "containers", "#0")
	cport := findPort(list(c, "ports"), str(svcPort, "targetPort"))
	if cport == nil {
		t.Fatalf("no container port %q for the picker Service", str(svcPort, "targetPort"))
	}
	if findPort(list(c, "ports"), "http") == nil {
		t.Error("the patch lost the base's http port")
	}
	data, _ := at(cm, "data").(obj)
	addr, _ := data["KVCA_EXT_PROC"].(string)
	if addr == "" || portOf(t, addr) != jsonNumber(cport["containerPort"]) {
		t.Errorf("KVCA_EXT_PROC %q, container port %v", addr, cport["containerPort"])
	}
	if _, ok := data["KVCA_BACKEND"]; ok {
		t.Error("the overlay keeps --backend beside --inference-pool, which kvca refuses")
	}
	if data["KVCA_INFERENCE_POOL"] != str(pool, "metadata", "name") {
		t.Errorf("KVCA_INFERENCE_POOL %v, the pool is %q", data["KVCA_INFERENCE_POOL"], str(pool, "metadata", "name"))
	}
	if data["KVCA_LISTEN"] == nil {
		t.Error("the patch lost the base's ConfigMap data")
	}
	// The pool is read as a service account allowed to read it and its pods.
	sa := str(dep, "spec", "template", "spec", "serviceAccountName")
	if m["ServiceAccount/"+sa] == nil || at(dep, "spec", "template", "spec", "automountServiceAccountToken") != true {
		t.Errorf("kvca runs as service account %q (token mounted: %v), which the overlay does not define", sa, at(dep, "spec", "template", "spec", "automountServiceAccountToken"))
	}
	role, rb := m["Role/kvca-inference-pool"], m["RoleBinding/kvca-inference-pool"]
	if role == nil || rb == nil || str(rb, "subjects", "#0", "name") != sa || str(rb, "roleRef", "name") != str(role, "metadata", "name") {
		t.Error("no role binding lets kvca's service account read the pool")
	}
	can := map[string]bool{}
	for _, r := range list(role, "rules") {
		for _, res := range list(r, "resources") {
			can[res.(string)] = true
		}
	}
	if !can["inferencepools"] || !can["pods"] {
		t.Errorf("the role reads %v, want inferencepools and pods", can)
	}
	for k := range data {
		checkVar(t, flags, "ConfigMap", k)
	}

	// The route: through the Gateway, to the pool.
	if str(route, "spec", "parentRefs", "#0", "name") != str(gw, "metadata", "name") {
		t.Error("HTTPRoute is not attached to the Gateway")
	}
	be := at(route, "spec", "rules", "#0", "backendRefs", "#0")
	if str(be, "group") != "inference.networking.k8s.io" || str(be, "kind") != "InferencePool" || str(be, "name") != str(pool, "metadata", "name") {
		t.Errorf("HTTPRoute backend %v, want the InferencePool", be)
	}

	// The network policy admits the gateway to the picker's port and
	// keeps the base's rules.
	ports := map[string]bool{}
	for _, rule := range list(np, "spec", "ingress") {
		for _, p := range list(rule, "ports") {
			ports[str(p, "port")] = true
		}
	}
	for _, p := range []string{"http", "admin", str(svcPort, "targetPort")} {
		if !ports[p] {
			t.Errorf("NetworkPolicy admits nobody to port %s", p)
		}
	}
}
