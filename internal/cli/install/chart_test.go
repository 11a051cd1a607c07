package install

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/annexhq/annex/internal/chart"
	"github.com/annexhq/annex/internal/cli"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the chart")

// goldenCase is an install whose objects testdata/golden/<name>.yaml holds.
type goldenCase struct {
	name            string
	o               Options
	priorityClasses []string // the globalDefault PriorityClasses install found
}

func goldenCases() []goldenCase {
	base := DefaultOptions()
	base.ClusterID, base.Image = "alpha", "example.invalid/annex-agent:test"
	gw := base
	gw.ClusterID, gw.PodCIDR, gw.ServiceCIDR, gw.ExternalCIDR = "beta", "10.201.0.0/16", "10.97.0.0/16", "10.71.0.0/16"
	gw.GatewayEndpoint, gw.GatewayNode = "192.0.2.10", "node-1"
	anyNode := base
	anyNode.GatewayEndpoint = "192.0.2.11"
	local := base
	local.LocalAgent, local.Image = true, ""
	return []goldenCase{
		{name: "default", o: base},
		{name: "gateway", o: gw, priorityClasses: []string{"system-default"}},
		{name: "gateway-any-node", o: anyNode},
		{name: "local-agent", o: local, priorityClasses: []string{"a", "b"}},
	}
}

// TestChartMatchesGolden renders the chart with the values install uses
// and compares the objects with what install applied before the chart
// existed (testdata/golden/README.md).
func TestChartMatchesGolden(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			r, err := chart.Render(context.Background(), chartValues(tc.o, tc.o.ClusterID, tc.priorityClasses))
			if err != nil {
				t.Fatal(err)
			}
			var static, perCase []*unstructured.Unstructured
			known := map[string]bool{}
			for _, name := range []string{"rbac/", "admission/"} {
				static = append(static, r.Objects(name)...)
			}
			for _, name := range []string{"namespace.yaml", "provider-policy.yaml", "cluster-identity.yaml", "deployment.yaml", "fabric.yaml"} {
				perCase = append(perCase, r.Objects(name)...)
				known[name] = true
			}
			for _, tpl := range r.Templates {
				if !known[tpl.Name] && filepath.Dir(tpl.Name) != "rbac" && filepath.Dir(tpl.Name) != "admission" {
					t.Errorf("template %s is in no golden file", tpl.Name)
				}
			}
			compareGolden(t, "static", static)
			compareGolden(t, tc.name, perCase)
		})
	}
}

func compareGolden(t *testing.T, name string, got []*unstructured.Unstructured) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".yaml")
	if *update {
		var out []byte
		for _, u := range got {
			b, err := yaml.Marshal(u.Object)
			if err != nil {
				t.Fatal(err)
			}
			out = append(append(out, "---\n"...), b...)
		}
		if err := os.WriteFile(path, out, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := cli.DecodeYAML(data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(normalize(t, want), normalize(t, got)); diff != "" {
		t.Errorf("%s differs from the chart's rendering (-golden +chart):\n%s", path, diff)
	}
}

// normalize round-trips the objects through their Go types, so that what
// the API server reads the same compares equal (an empty spec, a zero-value
// struct, the order of map keys).
func normalize(t *testing.T, objs []*unstructured.Unstructured) []map[string]any {
	t.Helper()
	out := make([]map[string]any, 0, len(objs))
	for _, u := range objs {
		typed, err := clientgoscheme.Scheme.New(u.GroupVersionKind())
		if err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
		if err != nil {
			t.Fatal(err)
		}
		unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
		out = append(out, m)
	}
	return out
}

// providerPolicy is the provider policy ConfigMap install creates in a
// cluster whose globalDefault PriorityClasses are priorityClasses.
func providerPolicy(t *testing.T, priorityClasses ...string) *corev1.ConfigMap {
	t.Helper()
	o := DefaultOptions()
	o.ClusterID = "test"
	r, err := chart.Render(context.Background(), chartValues(o, o.ClusterID, priorityClasses))
	if err != nil {
		t.Fatal(err)
	}
	objs := r.Objects(providerPolicyTemplate)
	if len(objs) != 1 {
		t.Fatalf("%s rendered %d objects", providerPolicyTemplate, len(objs))
	}
	cm := &corev1.ConfigMap{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, cm); err != nil {
		t.Fatal(err)
	}
	return cm
}
