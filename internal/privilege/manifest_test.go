package privilege

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"
	"go.yaml.in/yaml/v3"
)

// manifests are the Kubernetes objects of deploy/kubernetes, by "Kind/name".
type manifests map[string]map[string]any

func loadManifests(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testutil.RepoRoot(), "deploy", "kubernetes", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := manifests{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, f)
			if doc == nil {
				continue
			}
			key := fmt.Sprintf("%s/%s", doc["kind"], get[string](t, doc, "metadata", "name"))
			require.NotContains(t, out, key, "%s defined twice", key)
			out[key] = doc
		}
	}
	return out
}

func (m manifests) object(t *testing.T, kind, name string) map[string]any {
	t.Helper()
	o, ok := m[kind+"/"+name]
	require.True(t, ok, "no %s %s in deploy/kubernetes", kind, name)
	return o
}

// get walks maps by keys and returns the value as a T (failing the test
// when it is missing or of another type).
func get[T any](t *testing.T, v any, keys ...string) T {
	t.Helper()
	for i, k := range keys {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%s is not a map", strings.Join(keys[:i], "."))
		v, ok = m[k]
		require.True(t, ok, "no %s", strings.Join(keys[:i+1], "."))
	}
	out, ok := v.(T)
	require.True(t, ok, "%s is a %T", strings.Join(keys, "."), v)
	return out
}

// lookup is get for optional values.
func lookup(v any, keys ...string) (any, bool) {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

func strs(t *testing.T, v any) []string {
	t.Helper()
	list, ok := v.([]any)
	require.True(t, ok, "%v is not a list", v)
	var out []string
	for _, e := range list {
		s, ok := e.(string)
		require.True(t, ok, "%v is not a string", e)
		out = append(out, s)
	}
	return out
}

func agentContainer(t *testing.T, ds map[string]any) map[string]any {
	t.Helper()
	containers := get[[]any](t, ds, "spec", "template", "spec", "containers")
	require.Len(t, containers, 1)
	return containers[0].(map[string]any)
}

// TestDaemonSetPrivileges checks the agent DaemonSet grants exactly what
// package privilege says the receiver needs on Linux 6.6 and later, and
// nothing that would make it privileged.
func TestDaemonSetPrivileges(t *testing.T) {
	m := loadManifests(t)
	ds := m.object(t, "DaemonSet", "otel-uprobe-agent")
	pod := get[map[string]any](t, ds, "spec", "template", "spec")
	assert.Equal(t, true, pod["hostPID"], "hostPID")
	for _, k := range []string{"hostNetwork", "hostIPC", "hostUsers", "initContainers", "ephemeralContainers"} {
		_, set := pod[k]
		assert.False(t, set, "%s is set", k)
	}
	if psc, ok := pod["securityContext"]; ok {
		_, caps := lookup(psc, "capabilities")
		assert.False(t, caps, "pod-level capabilities")
	}
	for _, v := range get[[]any](t, pod, "volumes") {
		_, host := lookup(v, "hostPath")
		assert.False(t, host, "hostPath volume %v: the agent reaches host files through /proc/PID/root", v)
	}

	c := agentContainer(t, ds)
	sc := get[map[string]any](t, c, "securityContext")
	assert.Equal(t, []string{"ALL"}, strs(t, get[any](t, sc, "capabilities", "drop")))
	var want []string
	for _, cp := range Required(Modern) {
		want = append(want, cp.KubernetesName())
	}
	got := strs(t, get[any](t, sc, "capabilities", "add"))
	assert.ElementsMatch(t, want, got, "capabilities.add must be privilege.Required(privilege.Modern)")
	assert.Len(t, got, len(want), "no capability added twice")
	if p, ok := sc["privileged"]; ok {
		assert.Equal(t, false, p, "privileged")
	}
	assert.Equal(t, false, sc["allowPrivilegeEscalation"])
	assert.Equal(t, 0, sc["runAsUser"], "capabilities added by Kubernetes are effective for root only")
	assert.Equal(t, true, sc["readOnlyRootFilesystem"])
	assert.Equal(t, "RuntimeDefault", get[string](t, sc, "seccompProfile", "type"))
	for _, vm := range get[[]any](t, c, "volumeMounts") {
		assert.Equal(t, true, get[bool](t, vm, "readOnly"), "mount %v", vm)
	}

	ns := m.object(t, "Namespace", get[string](t, ds, "metadata", "namespace"))
	assert.Equal(t, "privileged", get[string](t, ns, "metadata", "labels", "pod-security.kubernetes.io/enforce"))
}

// TestAgentCollectorConfig checks the agent's collector configuration: the
// receiver's targets validate, k8s_attributes associates by container.id on
// its own node, and the spans reach the gateway and Jaeger.
func TestAgentCollectorConfig(t *testing.T) {
	m := loadManifests(t)
	ds := m.object(t, "DaemonSet", "otel-uprobe-agent")
	namespace := get[string](t, ds, "metadata", "namespace")
	pod := get[map[string]any](t, ds, "spec", "template", "spec")
	c := agentContainer(t, ds)
	assert.Contains(t, strs(t, c["args"]), "--config=/etc/otelcol/config.yaml")

	var cmName string
	for _, v := range get[[]any](t, pod, "volumes") {
		if name, ok := lookup(v, "configMap", "name"); ok {
			cmName = name.(string)
		}
	}
	require.NotEmpty(t, cmName, "the config comes from a ConfigMap")
	cm := m.object(t, "ConfigMap", cmName)
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(get[string](t, cm, "data", "config.yaml")), &cfg))

	// The receiver's targets are valid as the receiver reads them.
	targets := get[[]any](t, cfg, "receivers", "uprobe", "targets")
	var parsed struct {
		Targets []config.Target `mapstructure:"targets"`
	}
	require.NoError(t, confmap.NewFromStringMap(map[string]any{"targets": targets}).Unmarshal(&parsed))
	require.NoError(t, config.Validate(parsed.Targets))

	k8s := get[map[string]any](t, cfg, "processors", "k8s_attributes")
	var byContainerID bool
	for _, rule := range get[[]any](t, k8s, "pod_association") {
		for _, src := range get[[]any](t, rule, "sources") {
			if get[string](t, src, "from") == "resource_attribute" && get[string](t, src, "name") == "container.id" {
				byContainerID = true
			}
		}
	}
	assert.True(t, byContainerID, "pod_association by resource_attribute container.id")
	assert.Contains(t, strs(t, get[any](t, k8s, "extract", "metadata")), "container.id",
		"association by container.id needs a container attribute in extract.metadata")

	// The node filter reads the variable the DaemonSet sets from the node name.
	envName := get[string](t, k8s, "filter", "node_from_env_var")
	var fromNode bool
	for _, e := range get[[]any](t, c, "env") {
		if get[string](t, e, "name") == envName {
			fromNode = get[string](t, e, "valueFrom", "fieldRef", "fieldPath") == "spec.nodeName"
		}
	}
	assert.True(t, fromNode, "%s comes from spec.nodeName", envName)

	// k8s_attributes may list the pods and namespaces it watches.
	sa := get[string](t, pod, "serviceAccountName")
	m.object(t, "ServiceAccount", sa)
	binding := m.object(t, "ClusterRoleBinding", sa)
	role := m.object(t, "ClusterRole", get[string](t, binding, "roleRef", "name"))
	subjects := get[[]any](t, binding, "subjects")
	require.Len(t, subjects, 1)
	assert.Equal(t, sa, get[string](t, subjects[0], "name"))
	assert.Equal(t, namespace, get[string](t, subjects[0], "namespace"))
	granted := map[string][]string{}
	for _, r := range get[[]any](t, role, "rules") {
		for _, res := range strs(t, get[any](t, r, "resources")) {
			granted[res] = strs(t, get[any](t, r, "verbs"))
		}
	}
	for _, res := range []string{"pods", "namespaces"} {
		assert.ElementsMatch(t, []string{"get", "watch", "list"}, granted[res], res)
	}

	for _, kind := range []string{"traces", "metrics"} {
		p := get[map[string]any](t, cfg, "service", "pipelines", kind)
		assert.Equal(t, []string{"uprobe"}, strs(t, p["receivers"]), kind)
		assert.Contains(t, strs(t, p["processors"]), "k8s_attributes", kind)
	}

	// Agent → gateway Service → Jaeger Service.
	assertEndpoint(t, m, get[string](t, cfg, "exporters", "otlp_grpc", "endpoint"))
	gw := m.object(t, "Deployment", "otel-uprobe-gateway")
	var gwCfg map[string]any
	gwCM := m.object(t, "ConfigMap", "otel-uprobe-gateway")
	require.NoError(t, yaml.Unmarshal([]byte(get[string](t, gwCM, "data", "config.yaml")), &gwCfg))
	assert.Equal(t, []string{"otlp_grpc"}, strs(t, get[any](t, gwCfg, "service", "pipelines", "traces", "exporters")))
	assertEndpoint(t, m, get[string](t, gwCfg, "exporters", "otlp_grpc", "endpoint"))
	gwSC := get[map[string]any](t, agentContainer(t, gw), "securityContext")
	assert.Equal(t, []string{"ALL"}, strs(t, get[any](t, gwSC, "capabilities", "drop")))
	_, adds := lookup(gwSC, "capabilities", "add")
	assert.False(t, adds, "the gateway needs no capabilities")
	assert.Equal(t, true, gwSC["runAsNonRoot"])
}

// assertEndpoint checks that NAME.NAMESPACE.svc.cluster.local:PORT is a
// Service of the manifests with that port.
func assertEndpoint(t *testing.T, m manifests, endpoint string) {
	t.Helper()
	host, port, ok := strings.Cut(endpoint, ":")
	require.True(t, ok, endpoint)
	parts := strings.Split(host, ".")
	require.Equal(t, []string{"svc", "cluster", "local"}, parts[2:], endpoint)
	svc := m.object(t, "Service", parts[0])
	assert.Equal(t, parts[1], get[string](t, svc, "metadata", "namespace"), endpoint)
	var ports []string
	for _, p := range get[[]any](t, svc, "spec", "ports") {
		ports = append(ports, fmt.Sprint(get[int](t, p, "port")))
	}
	assert.True(t, slices.Contains(ports, port), "%s: Service %s has ports %v", endpoint, parts[0], ports)
}
