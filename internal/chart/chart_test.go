package chart

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/annexhq/annex/charts"
	"github.com/annexhq/annex/internal/version"
)

// TestValuesRefused checks that the chart refuses, through its schema or its
// templates, what `annexctl install` refuses (install.Options.Validate).
func TestValuesRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		values  map[string]any
		wantErr string // "" renders
	}{
		{name: "cluster ID", values: map[string]any{"clusterID": "alpha-1"}},
		{name: "no cluster ID and no cluster", values: map[string]any{}, wantErr: "clusterID is required"},
		{name: "cluster ID not a DNS label", values: map[string]any{"clusterID": "Alpha_1"}, wantErr: "/clusterID"},
		{name: "cluster ID too long", values: map[string]any{"clusterID": strings.Repeat("a", 33)}, wantErr: "/clusterID"},
		{name: "cluster ID of 32", values: map[string]any{"clusterID": strings.Repeat("a", 32)}},
		{name: "pod CIDR garbage", values: map[string]any{"clusterID": "a", "podCIDR": "ten"}, wantErr: "/podCIDR"},
		{name: "pod CIDR octet", values: map[string]any{"clusterID": "a", "podCIDR": "10.256.0.0/16"}, wantErr: "/podCIDR"},
		{name: "prefix length", values: map[string]any{"clusterID": "a", "serviceCIDR": "10.96.0.0/33"}, wantErr: "/serviceCIDR"},
		{name: "host bits", values: map[string]any{"clusterID": "a", "externalCIDR": "10.70.1.0/16"}, wantErr: `externalCIDR "10.70.1.0/16" has host bits set; did you mean 10.70.0.0/16?`},
		{name: "host bits /32", values: map[string]any{"clusterID": "a", "externalCIDR": "10.70.1.1/32"}},
		{name: "overlap", values: map[string]any{"clusterID": "a", "podCIDR": "10.96.0.0/16"}, wantErr: "serviceCIDR 10.96.0.0/12 overlaps podCIDR 10.96.0.0/16"},
		{name: "overlap contained", values: map[string]any{"clusterID": "a", "externalCIDR": "10.0.0.0/8"}, wantErr: "overlaps"},
		{name: "adjacent", values: map[string]any{"clusterID": "a", "podCIDR": "10.112.0.0/16", "externalCIDR": "10.95.0.0/16"}},
		{name: "IPv6", values: map[string]any{"clusterID": "a", "podCIDR": "fd00:10::/64", "serviceCIDR": "fd00:20::/108"}},
		{name: "IPv6 garbage", values: map[string]any{"clusterID": "a", "podCIDR": "fd00::zz/64"}, wantErr: "/podCIDR"},
		{name: "unknown value", values: map[string]any{"clusterID": "a", "clusterId": "a"}, wantErr: "clusterId"},
		{name: "pull policy", values: map[string]any{"clusterID": "a", "image": map[string]any{"pullPolicy": "Sometimes"}}, wantErr: "/image/pullPolicy"},
		{name: "no image", values: map[string]any{"clusterID": "a", "image": map[string]any{"repository": ""}}, wantErr: "/image/repository"},
		{name: "gateway", values: map[string]any{"clusterID": "a", "gateway": map[string]any{"endpoint": "192.0.2.10", "node": "node-1"}}},
		{name: "gateway endpoint not an IP", values: map[string]any{"clusterID": "a", "gateway": map[string]any{"endpoint": "gw.example.com"}}, wantErr: "/gateway/endpoint"},
		{name: "gateway endpoint IPv6", values: map[string]any{"clusterID": "a", "gateway": map[string]any{"endpoint": "fd00::1"}}, wantErr: "/gateway/endpoint"},
		{name: "gateway without agent", values: map[string]any{"clusterID": "a", "agent": map[string]any{"enabled": false}, "gateway": map[string]any{"endpoint": "192.0.2.10"}}, wantErr: "agent.enabled=false"},
		{name: "gateway node without endpoint", values: map[string]any{"clusterID": "a", "gateway": map[string]any{"node": "node-1"}}, wantErr: "gateway.node needs gateway.endpoint"},
		{name: "agent resources", values: map[string]any{"clusterID": "a", "agent": map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": 1, "memory": "1.5Gi"}, "limits": map[string]any{"memory": "2e9"}}}}},
		{name: "agent resources garbage", values: map[string]any{"clusterID": "a", "agent": map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "lots"}}}}, wantErr: "/agent/resources/limits/memory"},
		{name: "agent resources unknown", values: map[string]any{"clusterID": "a", "agent": map[string]any{"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": 1}}}}, wantErr: "nvidia.com/gpu"},
		{name: "agent arg not a flag", values: map[string]any{"clusterID": "a", "agent": map[string]any{"extraArgs": []any{"x"}}}, wantErr: "/agent/extraArgs"},
		{name: "policy name with a comma", values: map[string]any{"clusterID": "a", "providerPolicy": map[string]any{"allowedRuntimeClasses": []any{"a,b"}}}, wantErr: "/providerPolicy/allowedRuntimeClasses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(context.Background(), tc.values)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSplitImage(t *testing.T) {
	for _, tc := range []struct{ ref, repo, tag, digest string }{
		{"ghcr.io/annexhq/annex-agent:v1", "ghcr.io/annexhq/annex-agent", "v1", ""},
		{"annex-agent", "annex-agent", "latest", ""},
		{"localhost:5000/annex-agent", "localhost:5000/annex-agent", "latest", ""},
		{"localhost:5000/annex-agent:dev", "localhost:5000/annex-agent", "dev", ""},
		{"r.example/a@sha256:0123", "r.example/a", "", "sha256:0123"},
		{"r.example/a:v1@sha256:0123", "r.example/a", "v1", "sha256:0123"},
	} {
		repo, tag, digest := SplitImage(tc.ref)
		if diff := cmp.Diff([]string{tc.repo, tc.tag, tc.digest}, []string{repo, tag, digest}); diff != "" {
			t.Errorf("SplitImage(%q) (-want +got):\n%s", tc.ref, diff)
		}
	}
}

// TestImage checks the image the Deployment gets from Values.Image.
func TestImage(t *testing.T) {
	for _, ref := range []string{"example.invalid/annex-agent:test", "localhost:5000/annex-agent@sha256:0123456789abcdef0123456789abcdef", "annex-agent:latest"} {
		r, err := Render(context.Background(), Values{ClusterID: "a", Agent: true, Image: ref})
		if err != nil {
			t.Fatal(err)
		}
		d := r.Objects("deployment.yaml")
		if len(d) != 1 {
			t.Fatalf("%d objects in deployment.yaml", len(d))
		}
		containers, _, err := unstructured.NestedSlice(d[0].Object, "spec", "template", "spec", "containers")
		if err != nil || len(containers) == 0 {
			t.Fatalf("containers: %v, %v", containers, err)
		}
		if got := containers[0].(map[string]any)["image"]; got != ref {
			t.Errorf("image %v, want %s", got, ref)
		}
	}
}

// TestChartVersion keeps Chart.yaml's appVersion in step with the version
// annexctl records (internal/version; a release sets both).
func TestChartVersion(t *testing.T) {
	data, err := fs.ReadFile(charts.FS, Dir+"/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.AppVersion != version.Version || "v"+meta.Version != version.Version {
		t.Errorf("Chart.yaml has version %s and appVersion %s; internal/version.Version is %s: set version (without the v) and appVersion to it",
			meta.Version, meta.AppVersion, version.Version)
	}
}
