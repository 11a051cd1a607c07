package kubeletserver

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/annexhq/annex/internal/virtualnode"
)

var t0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

func TestCounters(t *testing.T) {
	key := counterKey{Node: "n", Namespace: "ns", Pod: "p", Container: "c"}
	type step struct {
		after   time.Duration // agent clock since t0
		rate    float64
		sampled time.Duration // provider clock since t0
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  []float64
	}{
		{name: "the latest rate over each interval", steps: []step{{0, 0.5, 0}, {10 * time.Second, 0.5, 5 * time.Second}, {20 * time.Second, 0.1, 15 * time.Second}},
			want: []float64{counterStart, counterStart + 5, counterStart + 6}},
		{name: "an old sample served again changes no rate", steps: []step{{0, 0.5, 10 * time.Second}, {10 * time.Second, 4, 5 * time.Second}},
			want: []float64{counterStart, counterStart + 5}},
		{name: "the agent's clock going back integrates nothing", steps: []step{{10 * time.Second, 1, 0}, {5 * time.Second, 1, time.Second}, {12 * time.Second, 1, 2 * time.Second}},
			want: []float64{counterStart, counterStart, counterStart + 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCounters()
			var got []float64
			for _, s := range tc.steps {
				v, started := c.advance(key, t0.Add(s.after), s.rate, t0.Add(s.sampled))
				if started.IsZero() {
					t.Error("no start time")
				}
				got = append(got, v)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
		})
	}
	c := newCounters()
	other := counterKey{Node: "m", Pod: "q"}
	c.advance(key, t0, 1, t0)
	c.advance(other, t0, 1, t0)
	c.prune("n", map[counterKey]bool{})
	if _, ok := c.m[key]; ok {
		t.Error("prune kept a counter of node n not asked for")
	}
	if _, ok := c.m[other]; !ok {
		t.Error("prune removed another node's counter")
	}
}

func TestBounded(t *testing.T) {
	q := func(s string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(s)}
	}
	for _, tc := range []struct {
		name                    string
		usage, limits, capacity corev1.ResourceList
		want                    float64
	}{
		{"within the limit", q("250m"), q("500m"), q("4"), 0.25},
		{"above the limit", q("3"), q("500m"), q("4"), 0.5},
		{"no limit: the node's capacity", q("9"), nil, q("4"), 4},
		{"negative", q("-1"), q("500m"), q("4"), 0},
		{"not reported", nil, q("500m"), q("4"), 0},
	} {
		if got := bounded(tc.usage, tc.limits, tc.capacity, corev1.ResourceCPU); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestResourceMetrics drives /metrics/resource/<node> as metrics-server
// does: two scrapes 10 s apart, against a provider that reports more than
// it may.
func TestResourceMetrics(t *testing.T) {
	s, seen := newTestServer(t, fakeRemotes{"beta": &rest.Config{Host: "https://beta.invalid"}, "down": errors.New("peer down is unreachable")})
	clk := clocktesting.NewFakeClock(t0)
	s.clock, s.counters = clk, newCounters()
	objs := localObjects()
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			p.Status.Phase = corev1.PodRunning
			p.UID = types.UID("uid-" + p.Name)
			p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}
		}
		if n, ok := o.(*corev1.Node); ok {
			n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}
		}
	}
	s.local = fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).Build()
	failing := false
	s.listPodMetrics = func(_ context.Context, cfg *rest.Config, ns string) ([]metricsv1beta1.PodMetrics, error) {
		if failing {
			return nil, errors.New("the metrics API is not available")
		}
		if cfg.Host != "https://beta.invalid" || ns != "shop-alpha" {
			return nil, errors.New("unexpected provider or namespace")
		}
		pm := func(name string, containers ...metricsv1beta1.ContainerMetrics) metricsv1beta1.PodMetrics {
			return metricsv1beta1.PodMetrics{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Timestamp: metav1.NewTime(clk.Now().Add(-3 * time.Second)),
				Window: metav1.Duration{Duration: 10 * time.Second}, Containers: containers}
		}
		usage := func(name, cpu, mem string) metricsv1beta1.ContainerMetrics {
			return metricsv1beta1.ContainerMetrics{Name: name, Usage: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
		}
		return []metricsv1beta1.PodMetrics{
			// 5 cores claimed of a 200m limit; a sidecar the pod does not have.
			pm("web", usage("c", "5", "10Mi"), usage("sidecar", "1", "1Gi")),
			// No such pod on this node.
			pm("ghost", usage("c", "1", "1Mi")),
		}, nil
	}
	const metricsUser = "system:metrics-server"
	h := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, http.NotFoundHandler()) }))
	s.authz = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		*seen = append(*seen, a)
		if a.GetUser().GetName() == metricsUser && a.GetResource() == "nodes" && a.GetSubresource() == "metrics" && a.GetVerb() == "get" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionDeny, "no", nil
	})

	scrape := func() map[string]float64 {
		t.Helper()
		code, body := get(t, h, metricsUser, "/metrics/resource/annex-beta")
		if code != http.StatusOK {
			t.Fatalf("status %d: %s", code, body)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, err := p.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			t.Fatalf("not the text format: %v\n%s", err, body)
		}
		got := map[string]float64{}
		for name, f := range families {
			for _, m := range f.Metric {
				key := name
				for _, l := range m.Label {
					key += "," + l.GetName() + "=" + l.GetValue()
				}
				switch {
				case m.Counter != nil:
					got[key] = m.Counter.GetValue()
				case m.Gauge != nil:
					got[key] = m.Gauge.GetValue()
				}
				if name != "scrape_error" && m.GetTimestampMs() != clk.Now().UnixMilli() {
					t.Errorf("%s: timestamp %d, want the agent's clock %d", key, m.GetTimestampMs(), clk.Now().UnixMilli())
				}
			}
		}
		return got
	}
	const web = ",container=c,namespace=shop,pod=web"
	first := scrape()
	clk.Step(10 * time.Second)
	second := scrape()
	want := map[string]float64{
		"container_cpu_usage_seconds_total" + web:  counterStart + 2, // 200m (the limit) for 10 s
		"container_memory_working_set_bytes" + web: 10 * 1024 * 1024,
		"container_start_time_seconds" + web:       float64(t0.Unix()),
		"node_cpu_usage_seconds_total":             counterStart + 2,
		"node_memory_working_set_bytes":            10 * 1024 * 1024,
		"scrape_error":                             0,
	}
	if diff := cmp.Diff(want, second, cmp.Comparer(func(a, b float64) bool { d := a - b; return d < 1e-6 && d > -1e-6 })); diff != "" {
		t.Errorf("second scrape (-want +got):\n%s\nfirst: %v", diff, first)
	}

	failing = true
	if got := scrape(); got["scrape_error"] != 1 {
		t.Errorf("scrape_error %v with the metrics API failing, want 1", got["scrape_error"])
	}

	for _, tc := range []struct {
		name, user, path string
		code             int
		body             string
	}{
		{"another user", "someone", "/metrics/resource/annex-beta", http.StatusForbidden, "subresource=metrics"},
		{"no node in the path", metricsUser, "/metrics/resource", http.StatusNotFound, virtualnode.AnnotationResourceMetricsPath},
		{"unreachable provider", metricsUser, "/metrics/resource/annex-down", http.StatusBadGateway, "cannot be reached"},
		{"not a virtual node", metricsUser, "/metrics/resource/worker-0", http.StatusNotFound, "not an Annex virtual node"},
		{"no such node", metricsUser, "/metrics/resource/nope", http.StatusNotFound, "not found"},
	} {
		code, body := get(t, h, tc.user, tc.path)
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %q, want %d with %q", tc.name, code, body, tc.code, tc.body)
		}
	}
}
