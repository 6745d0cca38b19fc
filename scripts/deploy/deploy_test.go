// Package deploy checks the deployment files next to it: that every YAML and
// JSON file parses, that the Kubernetes objects agree with each other
// (labels, port names, ConfigMap and Secret references), that every KVCA_*
// variable names a real flag, and that the dashboard asks for metrics kvca
// really exports. Nothing here talks to a cluster.
package deploy

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/kvca/kvca/edge"
)

// obj is one decoded YAML or JSON document.
type obj = map[string]any

// at walks obj along keys (map keys, or "#n" for the n-th list element)
// and returns what is there, or nil.
func at(v any, keys ...string) any {
	for _, k := range keys {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			n, ok := strings.CutPrefix(k, "#")
			i, err := strconv.Atoi(n)
			if !ok || err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func str(v any, keys ...string) string {
	s, _ := at(v, keys...).(string)
	return s
}

func list(v any, keys ...string) []any {
	l, _ := at(v, keys...).([]any)
	return l
}

// readYAML decodes every document of a YAML file.
func readYAML(t *testing.T, path string) []obj {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []obj
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(d) == "" {
			continue
		}
		var o obj
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if o != nil {
			docs = append(docs, o)
		}
	}
	return docs
}

// manifests returns the Kubernetes objects of k8s/ and of the
// k8s-prometheus-operator/ overlay by kind; the overlay's Kustomization is
// "Kustomization/prometheus-operator".
func manifests(t *testing.T) map[string]obj {
	t.Helper()
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	overlay, _ := filepath.Glob("k8s-prometheus-operator/*.yaml")
	out := map[string]obj{}
	for _, f := range append(files, overlay...) {
		for _, o := range readYAML(t, f) {
			kind := str(o, "kind")
			if str(o, "apiVersion") == "" || kind == "" {
				t.Errorf("%s: object without apiVersion or kind", f)
				continue
			}
			if kind == "Kustomization" {
				if filepath.Dir(f) != "k8s" {
					kind += "/prometheus-operator"
				}
				out[kind] = o
				continue
			}
			if str(o, "metadata", "name") == "" {
				t.Errorf("%s: %s without metadata.name", f, kind)
			}
			if _, dup := out[kind]; dup {
				t.Errorf("%s: a second %s", f, kind)
			}
			out[kind] = o
		}
	}
	return out
}

// flagNames are the flags of kvca's commands, read from cmd/kvca's source:
// the package is a main package, so it cannot be imported, and a KVCA_*
// variable naming no flag is silently ignored at run time. The list is
// the union over all commands, which is enough to catch a misspelling.
func flagNames(t *testing.T) map[string]bool {
	t.Helper()
	// serve's flags are defined by the parts they configure.
	var files []string
	for _, dir := range []string{"cmd/kvca", "edge", "chain", "sched", "admit", "apikeys", "tracing", "telemetry", "cluster"} {
		f, _ := filepath.Glob("../../" + dir + "/*.go")
		files = append(files, f...)
	}
	re := regexp.MustCompile(`cli\.\w+Flag\{\s*Name:\s*"([a-z0-9-]+)"`)
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
	}
	if !names["backend"] || !names["hash-key"] {
		t.Fatalf("could not read the flags of cmd/kvca (found %d)", len(names))
	}
	return names
}

// checkVar fails unless name is KVCA_<FLAG> for a real flag.
func checkVar(t *testing.T, flags map[string]bool, where, name string) {
	t.Helper()
	flag, ok := strings.CutPrefix(name, "KVCA_")
	if !ok {
		return
	}
	if !flags[strings.ReplaceAll(strings.ToLower(flag), "_", "-")] {
		t.Errorf("%s: %s names no kvca flag", where, name)
	}
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return port
}

func TestKubernetesManifests(t *testing.T) {
	m := manifests(t)
	flags := flagNames(t)
	for _, kind := range []string{"Kustomization", "Kustomization/prometheus-operator", "Namespace", "ConfigMap", "Secret", "Deployment", "Service", "NetworkPolicy", "PodMonitor"} {
		if m[kind] == nil {
			t.Fatalf("no %s in k8s/", kind)
		}
	}
	cm, secret, dep := m["ConfigMap"], m["Secret"], m["Deployment"]

	// Every manifest but the placeholder Secret is applied by kustomize.
	var res []string
	for _, r := range list(m["Kustomization"], "resources") {
		res = append(res, r.(string))
	}
	for _, f := range []string{"namespace.yaml", "configmap.yaml", "deployment.yaml", "service.yaml", "networkpolicy.yaml"} {
		if !slices.Contains(res, f) {
			t.Errorf("kustomization.yaml does not list %s", f)
		}
	}
	if slices.Contains(res, "secret.yaml") {
		t.Error("kustomization.yaml applies secret.yaml: its placeholders would overwrite the real Secret")
	}
	// The PodMonitor needs the Prometheus Operator's CRDs: it is in the
	// overlay only, so that the base applies on any cluster.
	var overlayRes []string
	for _, r := range list(m["Kustomization/prometheus-operator"], "resources") {
		overlayRes = append(overlayRes, r.(string))
	}
	if !slices.Equal(overlayRes, []string{"../k8s", "podmonitor.yaml"}) {
		t.Errorf("k8s-prometheus-operator/kustomization.yaml resources %v, want the base and the PodMonitor", overlayRes)
	}

	// The ConfigMap holds flags only, as strings.
	data, _ := at(cm, "data").(map[string]any)
	for k, v := range data {
		if !strings.HasPrefix(k, "KVCA_") {
			t.Errorf("ConfigMap key %s is not a KVCA_ variable", k)
		}
		checkVar(t, flags, "ConfigMap", k)
		if _, ok := v.(string); !ok {
			t.Errorf("ConfigMap %s is %T, want a string", k, v)
		}
	}
	for _, k := range []string{"KVCA_BACKEND", "KVCA_LISTEN", "KVCA_ADMIN_LISTEN"} {
		if data[k] == nil {
			t.Errorf("ConfigMap has no %s", k)
		}
	}
	if _, ok := data["KVCA_HASH_KEY"]; ok {
		t.Error("the hash key belongs in the Secret, not the ConfigMap")
	}
	// The policy the bench chose is the default: the deploy files leave it.
	if p, ok := data["KVCA_POLICY"]; ok && p != edge.DefaultConfig().Routing.Policy {
		t.Errorf("ConfigMap KVCA_POLICY %v, the default is %s", p, edge.DefaultConfig().Routing.Policy)
	}
	// The admin port is kvca's own, not one that common neighbours use.
	checkAdminPort(t, "ConfigMap KVCA_ADMIN_LISTEN", data["KVCA_ADMIN_LISTEN"].(string))

	podLabels, _ := at(dep, "spec", "template", "metadata", "labels").(map[string]any)
	if len(podLabels) == 0 {
		t.Fatal("Deployment pods have no labels")
	}
	matches := func(what string, sel any) {
		t.Helper()
		s, _ := sel.(map[string]any)
		if len(s) == 0 {
			t.Errorf("%s selects nothing", what)
		}
		for k, v := range s {
			if podLabels[k] != v {
				t.Errorf("%s selector %s=%v does not match the pods' labels", what, k, v)
			}
		}
	}
	matches("Deployment", at(dep, "spec", "selector", "matchLabels"))
	matches("Service", at(m["Service"], "spec", "selector"))
	matches("NetworkPolicy", at(m["NetworkPolicy"], "spec", "podSelector", "matchLabels"))
	matches("PodMonitor", at(m["PodMonitor"], "spec", "selector", "matchLabels"))

	pod := at(dep, "spec", "template", "spec")
	c := at(pod, "containers", "#0")
	ports := map[string]string{}
	for _, p := range list(c, "ports") {
		ports[str(p, "name")] = jsonNumber(at(p, "containerPort"))
	}
	if ports["http"] != portOf(t, data["KVCA_LISTEN"].(string)) {
		t.Errorf("container port http %s, KVCA_LISTEN %v", ports["http"], data["KVCA_LISTEN"])
	}
	if ports["admin"] != portOf(t, data["KVCA_ADMIN_LISTEN"].(string)) {
		t.Errorf("container port admin %s, KVCA_ADMIN_LISTEN %v", ports["admin"], data["KVCA_ADMIN_LISTEN"])
	}

	// Probes: readiness on /ready, liveness on /health, both on the public
	// port (the admin one is closed to the kubelet by the NetworkPolicy).
	for probe, path := range map[string]string{"readinessProbe": "/ready", "livenessProbe": "/health"} {
		if got := str(c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path %q, want %q", probe, got, path)
		}
		if got := str(c, probe, "httpGet", "port"); got != "http" {
			t.Errorf("%s port %q, want http", probe, got)
		}
	}

	// Configuration: all of the ConfigMap, secrets from the Secret.
	if got := str(c, "envFrom", "#0", "configMapRef", "name"); got != str(cm, "metadata", "name") {
		t.Errorf("envFrom ConfigMap %q", got)
	}
	secretKeys, _ := at(secret, "stringData").(map[string]any)
	fromSecret := map[string]bool{}
	for _, e := range list(c, "env") {
		name := str(e, "name")
		checkVar(t, flags, "Deployment env", name)
		if ref := at(e, "valueFrom", "secretKeyRef"); ref != nil {
			if str(ref, "name") != str(secret, "metadata", "name") || secretKeys[str(ref, "key")] == nil {
				t.Errorf("env %s refers to secret %s key %s, which secret.yaml does not define", name, str(ref, "name"), str(ref, "key"))
			}
			fromSecret[name] = true
		}
	}
	for _, name := range []string{"KVCA_HASH_KEY", "KVCA_ADMIN_TOKEN"} {
		if !fromSecret[name] {
			t.Errorf("%s does not come from the Secret", name)
		}
	}

	// Non-root, read-only, no privileges.
	if at(pod, "securityContext", "runAsNonRoot") != true {
		t.Error("pod is not runAsNonRoot")
	}
	if at(c, "securityContext", "readOnlyRootFilesystem") != true || at(c, "securityContext", "allowPrivilegeEscalation") != false {
		t.Error("container is not read-only without privilege escalation")
	}
	if drop := list(c, "securityContext", "capabilities", "drop"); len(drop) != 1 || drop[0] != "ALL" {
		t.Errorf("capabilities drop %v, want ALL", drop)
	}

	// Shutdown: the grace period covers the preStop pause and the drain.
	grace, _ := at(pod, "terminationGracePeriodSeconds").(float64)
	drain, err := time.ParseDuration(data["KVCA_SHUTDOWN_TIMEOUT"].(string))
	if err != nil {
		t.Fatal(err)
	}
	pause, _ := at(c, "lifecycle", "preStop", "sleep", "seconds").(float64)
	if time.Duration(grace)*time.Second <= drain+time.Duration(pause)*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v does not cover preStop %vs + KVCA_SHUTDOWN_TIMEOUT %v", grace, pause, drain)
	}

	// The Service publishes the public port only.
	svcPorts := list(m["Service"], "spec", "ports")
	if len(svcPorts) != 1 || str(svcPorts[0], "targetPort") != "http" {
		t.Errorf("Service ports %v, want the http port only", svcPorts)
	}

	// PodMonitor: the admin port's /metrics, with the admin token.
	ep := at(m["PodMonitor"], "spec", "podMetricsEndpoints", "#0")
	if str(ep, "port") != "admin" || str(ep, "path") != "/metrics" {
		t.Errorf("PodMonitor endpoint %v", ep)
	}
	if str(ep, "authorization", "credentials", "name") != str(secret, "metadata", "name") ||
		secretKeys[str(ep, "authorization", "credentials", "key")] == nil {
		t.Errorf("PodMonitor does not send the admin token from the Secret: %v", at(ep, "authorization"))
	}

	// The admin listener binds beyond loopback inside the pod, so a
	// NetworkPolicy must admit only chosen peers to it.
	if host, _, _ := net.SplitHostPort(data["KVCA_ADMIN_LISTEN"].(string)); host != "127.0.0.1" && host != "localhost" {
		adminRule := false
		for _, r := range list(m["NetworkPolicy"], "spec", "ingress") {
			for _, p := range list(r, "ports") {
				if str(p, "port") == "admin" {
					adminRule = true
					if len(list(r, "from")) == 0 {
						t.Error("NetworkPolicy admits everyone to the admin port")
					}
				}
			}
		}
		if !adminRule {
			t.Error("no NetworkPolicy rule names the admin port")
		}
		if types := list(m["NetworkPolicy"], "spec", "policyTypes"); !slices.Contains(types, any("Ingress")) {
			t.Errorf("NetworkPolicy policyTypes %v do not restrict ingress", types)
		}
	}
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("kvca.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, line := range []string{
		"User=kvca",
		"EnvironmentFile=/etc/kvca/kvca.env",
		"ExecStart=/usr/local/bin/kvca serve",
		"Restart=on-failure",
		"LimitNOFILE=",
		"NoNewPrivileges=yes",
		"ProtectSystem=strict",
		"CapabilityBoundingSet=",
	} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line)).MatchString(unit) {
			t.Errorf("kvca.service lacks %q", line)
		}
	}
	flags := flagNames(t)
	env, err := os.ReadFile("kvca.env")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	vars := map[string]string{}
	for _, line := range strings.Split(string(env), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(name, "KVCA_") {
			t.Errorf("kvca.env: %q is not KVCA_NAME=value", line)
			continue
		}
		checkVar(t, flags, "kvca.env", name)
		vars[name] = value
		seen++
	}
	if seen == 0 {
		t.Error("kvca.env sets nothing")
	}
	if p, ok := vars["KVCA_POLICY"]; ok && p != edge.DefaultConfig().Routing.Policy {
		t.Errorf("kvca.env KVCA_POLICY=%s, the default is %s", p, edge.DefaultConfig().Routing.Policy)
	}
	// kvca refuses a hash key set but empty: the template must leave it
	// out (commented) or set one.
	if k, ok := vars["KVCA_HASH_KEY"]; ok && k == "" {
		t.Error("kvca.env sets KVCA_HASH_KEY empty, which kvca refuses")
	}
	checkAdminPort(t, "kvca.env KVCA_ADMIN_LISTEN", vars["KVCA_ADMIN_LISTEN"])
}

// commonPorts are the defaults of what runs beside kvca: its monitoring,
// its inference servers and their exporters, and the usual alternates of
// HTTP. kvca's admin port must be none of them.
var commonPorts = map[string]string{
	"80": "HTTP", "443": "HTTPS", "3000": "Grafana, TGI", "3100": "Loki", "4222": "NATS",
	"4317": "OTLP gRPC", "4318": "OTLP HTTP", "6222": "NATS routes", "6379": "Redis",
	"8000": "vLLM, Triton", "8001": "Triton gRPC", "8002": "Triton metrics", "8008": "HTTP alternate",
	"8080": "kvca's public listener, llama.cpp, TGI", "8081": "HTTP alternate", "8222": "NATS monitoring",
	"8265": "Ray dashboard", "8443": "HTTPS alternate", "8888": "Jupyter", "9000": "MinIO",
	"9090": "Prometheus", "9091": "Pushgateway", "9093": "Alertmanager", "9094": "Alertmanager cluster",
	"9901": "Envoy admin", "10250": "kubelet", "11434": "Ollama", "30000": "SGLang",
}

// checkAdminPort: the admin listener uses kvca's default admin port, which
// collides with no common service and lies outside 9100-9999, the range
// Prometheus allocates to exporters.
func checkAdminPort(t *testing.T, where, addr string) {
	t.Helper()
	port := portOf(t, addr)
	if want := portOf(t, edge.DefaultConfig().AdminListen); port != want {
		t.Errorf("%s port %s, kvca's default admin port is %s", where, port, want)
	}
	if what, ok := commonPorts[port]; ok {
		t.Errorf("%s port %s is %s's", where, port, what)
	}
	if n, _ := strconv.Atoi(port); n >= 9100 && n <= 9999 {
		t.Errorf("%s port %s is in the Prometheus exporter range 9100-9999", where, port)
	}
}

func TestContainerfile(t *testing.T) {
	b, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	var from []string
	user := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "FROM" {
			from = append(from, f[1])
		}
		if len(f) >= 2 && f[0] == "USER" {
			user = f[1]
		}
	}
	if len(from) != 2 || !strings.Contains(from[0], "golang:1.26") || !strings.Contains(from[1], "distroless/static") {
		t.Errorf("stages %v, want a golang:1.26 builder and a distroless/static runtime", from)
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		t.Errorf("runtime USER %q is not a non-root user", user)
	}
	expose := regexp.MustCompile(`(?m)^EXPOSE (.*)$`).FindStringSubmatch(string(b))
	if expose == nil {
		t.Fatal("Containerfile exposes no port")
	}
	ports := strings.Fields(expose[1])
	for _, addr := range []string{edge.DefaultConfig().Listen, edge.DefaultConfig().AdminListen} {
		if !slices.Contains(ports, portOf(t, addr)) {
			t.Errorf("EXPOSE %v lacks %s (default %s)", ports, portOf(t, addr), addr)
		}
	}
	// The image is the proxy alone: kvca-bench (bench and demo, with the
	// embedded NATS server and the plotting library) stays out.
	if !regexp.MustCompile(`go build [^\n]*(\\\n[^\n]*)*\./cmd/kvca\s*$`).MatchString(strings.Split(string(b), "FROM ")[1]) {
		t.Error("the build stage does not build ./cmd/kvca")
	}
	if strings.Contains(string(b), "cmd/kvca-bench") {
		t.Error("the image builds kvca-bench")
	}
}

// TestContainerIgnore: the build context (the repository root) leaves out
// what the image does not need, and keeps everything it builds from.
func TestContainerIgnore(t *testing.T) {
	b, err := os.ReadFile("../../.containerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []*regexp.Regexp
	var raw []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			t.Fatalf("exception %q: this check does not model exceptions", line)
		}
		raw = append(raw, line)
		patterns = append(patterns, ignoreRE(line))
	}
	ignored := func(path string) bool {
		// A pattern that matches a directory excludes all below it.
		for p := path; p != "." && p != "/"; p = filepath.Dir(p) {
			for _, re := range patterns {
				if re.MatchString(p) {
					return true
				}
			}
		}
		return false
	}
	for _, want := range []string{".git", "bin", "bench/results", "bench/testdata", "edge/proxy_test.go"} {
		if !ignored(want) {
			t.Errorf("%s is sent to the image build (patterns %v)", want, raw)
		}
	}
	keep := []string{"go.mod", "go.sum"}
	out, err := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{end}}`, "../../cmd/kvca").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	root, _ := filepath.Abs("../..")
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], root+string(filepath.Separator)) {
			continue // the standard library, or a module from the proxy
		}
		rel, _ := filepath.Rel(root, f[0])
		for _, name := range f[1:] {
			keep = append(keep, filepath.ToSlash(filepath.Join(rel, name)))
		}
	}
	if len(keep) < 20 {
		t.Fatalf("found only %d source files of cmd/kvca", len(keep))
	}
	for _, path := range keep {
		if ignored(path) {
			t.Errorf("%s is needed by the image build but ignored", path)
		}
	}
}

// ignoreRE compiles one .containerignore pattern: paths relative to the
// context, * and ? within a path element, ** across elements.
func ignoreRE(pattern string) *regexp.Regexp {
	pattern = strings.TrimPrefix(strings.TrimSuffix(pattern, "/"), "/")
	var re strings.Builder
	re.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; {
		case strings.HasPrefix(pattern[i:], "**/"):
			re.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(pattern[i:], "**"):
			re.WriteString(".*")
			i++
		case c == '*':
			re.WriteString("[^/]*")
		case c == '?':
			re.WriteString("[^/]")
		default:
			re.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String())
}

// TestKustomizeBuilds builds both kustomizations as kubectl apply -k would:
// the base holds only core Kubernetes objects (it applies on a cluster
// without the Prometheus Operator), the overlay adds the PodMonitor, and
// every namespaced object lands in the kvca namespace.
func TestKustomizeBuilds(t *testing.T) {
	core := map[string]bool{"v1": true, "apps/v1": true, "networking.k8s.io/v1": true}
	build := func(dir string) map[string]string {
		t.Helper()
		resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
		if err != nil {
			t.Fatalf("kustomize build %s: %v", dir, err)
		}
		kinds := map[string]string{}
		for _, r := range resMap.Resources() {
			kinds[r.GetKind()] = r.GetApiVersion()
			if r.GetKind() != "Namespace" && r.GetNamespace() != "kvca" {
				t.Errorf("%s: %s %s in namespace %q", dir, r.GetKind(), r.GetName(), r.GetNamespace())
			}
		}
		return kinds
	}
	base := build("k8s")
	for kind, api := range base {
		if !core[api] {
			t.Errorf("the base applies %s (%s), which needs a CRD", kind, api)
		}
	}
	for _, kind := range []string{"Namespace", "ConfigMap", "Deployment", "Service", "NetworkPolicy"} {
		if base[kind] == "" {
			t.Errorf("the base has no %s", kind)
		}
	}
	if base["Secret"] != "" {
		t.Error("the base applies the placeholder Secret")
	}
	withOperator := build("k8s-prometheus-operator")
	if withOperator["PodMonitor"] != "monitoring.coreos.com/v1" {
		t.Errorf("the overlay's PodMonitor: %q", withOperator["PodMonitor"])
	}
	for kind := range base {
		if withOperator[kind] == "" {
			t.Errorf("the overlay lacks the base's %s", kind)
		}
	}
}

// exportedMetrics starts a kvca server (in front of a backend that is never
// contacted) and returns the metric names its admin /metrics serves,
// histogram series under their base name. API keys are on, with one
// tenant, because per-tenant series exist only for the tenants of a keys
// file.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "keys.txt")
	line := "sha256:" + strings.Repeat("ab", 32) + " tenant=dashboard rpm=60 tpm=1000\n"
	if err := os.WriteFile(keys, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := edge.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.AdminListen = "127.0.0.1:0"
	cfg.Backends = []string{"http://127.0.0.1:9"}
	cfg.HealthInterval = 0
	cfg.APIKeys = keys
	s, err := edge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + s.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line+" ", "{ ")]
		names[name] = true
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok {
				names[base] = true
			}
		}
	}
	return names
}

var metricRE = regexp.MustCompile(`\bkvca_[a-z0-9_]+`)

// designMetrics are the metric names operators' dashboards and alerts
// rely on (docs/metrics.md): the dashboard must cover every one.
var designMetrics = []string{
	"kvca_requests_total", "kvca_request_duration_seconds", "kvca_upstream_first_byte_seconds",
	"kvca_routed_blocks_total", "kvca_backend_active_requests", "kvca_backend_prefill_blocks",
	"kvca_backend_healthy", "kvca_table_blocks", "kvca_table_evictions_total",
	"kvca_upstream_errors_total", "kvca_client_disconnects_total", "kvca_bad_requests_total",
}

func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana-kvca.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash obj
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana-kvca.json: %v", err)
	}
	if str(dash, "uid") == "" || str(dash, "title") == "" {
		t.Error("dashboard without uid or title")
	}
	exported := exportedMetrics(t)
	used := map[string]bool{}
	ids := map[float64]bool{}
	for _, p := range list(dash, "panels") {
		title := str(p, "title")
		id, _ := at(p, "id").(float64)
		if ids[id] {
			t.Errorf("panel %q: duplicate id %v", title, id)
		}
		ids[id] = true
		targets := list(p, "targets")
		if len(targets) == 0 {
			t.Errorf("panel %q has no query", title)
		}
		for _, tg := range targets {
			expr := str(tg, "expr")
			if !balanced(expr) {
				t.Errorf("panel %q: unbalanced brackets in %s", title, expr)
			}
			for _, name := range metricRE.FindAllString(expr, -1) {
				base := name
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					base = strings.TrimSuffix(base, suf)
				}
				used[base] = true
				if !exported[name] {
					t.Errorf("panel %q queries %s, which kvca does not export", title, name)
				}
			}
		}
	}
	for _, name := range designMetrics {
		if !used[name] {
			t.Errorf("no panel shows %s", name)
		}
	}
}

// balanced reports whether (), {} and [] pair up outside quoted strings:
// a cheap guard against a broken query without a PromQL parser.
func balanced(s string) bool {
	var stack []rune
	quoted := false
	for i, c := range s {
		if c == '"' && (i == 0 || s[i-1] != '\\') {
			quoted = !quoted
			continue
		}
		if quoted {
			continue
		}
		switch c {
		case '(', '{', '[':
			stack = append(stack, c)
		case ')', '}', ']':
			want := map[rune]rune{')': '(', '}': '{', ']': '['}[c]
			if len(stack) == 0 || stack[len(stack)-1] != want {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0 && !quoted
}

func TestPrometheusConfig(t *testing.T) {
	docs := readYAML(t, "prometheus.yml")
	if len(docs) != 1 {
		t.Fatalf("prometheus.yml: %d documents", len(docs))
	}
	found := false
	for _, sc := range list(docs[0], "scrape_configs") {
		if str(sc, "job_name") != "kvca" {
			continue
		}
		found = true
		if str(sc, "metrics_path") != "/metrics" || str(sc, "authorization", "type") != "Bearer" {
			t.Errorf("kvca job: metrics_path %q, authorization %v", str(sc, "metrics_path"), at(sc, "authorization"))
		}
		for _, target := range list(sc, "static_configs", "#0", "targets") {
			if _, _, err := net.SplitHostPort(target.(string)); err != nil {
				t.Errorf("target %v: %v", target, err)
				continue
			}
			checkAdminPort(t, "prometheus.yml target", target.(string))
		}
	}
	if !found {
		t.Error("prometheus.yml has no kvca job")
	}
}
