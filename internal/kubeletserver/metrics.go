package kubeletserver

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/virtualnode"
)

// metricsPrefix is the kubelet's resource metrics path; the endpoint
// serves node N's at metricsPrefix + "/" + N (virtualnode.ResourceMetricsPath).
const metricsPrefix = "/metrics/resource"

// listPodMetrics lists the PodMetrics of namespace on the provider that
// cfg reaches.
type listPodMetrics func(ctx context.Context, cfg *rest.Config, namespace string) ([]metricsv1beta1.PodMetrics, error)

func listFromProvider(ctx context.Context, cfg *rest.Config, namespace string) ([]metricsv1beta1.PodMetrics, error) {
	cs, err := metricsclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	l, err := cs.MetricsV1beta1().PodMetricses(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// metricsNode returns the node a resource metrics path is about, and
// whether the path is one.
func metricsNode(path string) (string, bool) {
	if path != metricsPrefix && !strings.HasPrefix(path, metricsPrefix+"/") {
		return "", false
	}
	return strings.TrimPrefix(strings.TrimPrefix(path, metricsPrefix), "/"), true
}

// serveMetrics answers GET /metrics/resource/<node> for a caller allowed
// to get nodes/metrics of that node, as a kubelet's /metrics/resource
// does, for the Running pods of virtual node <node>.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, user string, node string) {
	if node == "" || strings.Contains(node, "/") {
		http.Error(w, "this endpoint serves the virtual nodes of an Annex agent: the resource metrics of node N are at "+
			virtualnode.ResourceMetricsPath("N")+" (each virtual Node names its own in annotation "+virtualnode.AnnotationResourceMetricsPath+")", http.StatusNotFound)
		return
	}
	body, err := s.resourceMetrics(r.Context(), node)
	if err != nil {
		code, msg := statusOf(err)
		s.log.V(1).Info("Resource metrics not served", "user", user, "node", node, "status", code, "reason", msg)
		http.Error(w, msg, code)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(body) //nolint:gosec // G705: a text/plain exposition of names the local API server validated, not HTML
}

// sample is one container's usage as the provider reports it, bounded.
type sample struct {
	namespace, pod, container string
	key                       counterKey
	cpu                       float64 // cores
	memory                    float64 // bytes
	at                        time.Time
}

// resourceMetrics renders the resource metrics of virtual node node's
// Running pods from the provider's PodMetrics of their remote namespaces.
func (s *Server) resourceMetrics(ctx context.Context, nodeName string) ([]byte, error) {
	node := &corev1.Node{}
	if err := s.local.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, notFound("node %s not found", nodeName)
		}
		return nil, fmt.Errorf("read node %s: %w", nodeName, err)
	}
	providerID := node.Labels[corev1alpha1.LabelRemoteClusterID]
	if node.Labels[virtualnode.LabelNodeType] != virtualnode.NodeTypeVirtual || providerID == "" {
		return nil, notFound("node %s is not an Annex virtual node: this endpoint serves only virtual nodes", nodeName)
	}
	cfg, err := s.remotes.RESTConfig(providerID)
	if err != nil {
		return nil, &resolveError{code: http.StatusBadGateway,
			msg: fmt.Sprintf("the pods of node %s run on provider %s, which cannot be reached now: %v", nodeName, providerID, err)}
	}
	pods := &corev1.PodList{}
	if err := s.local.List(ctx, pods, client.MatchingFields{"spec.nodeName": nodeName}); err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", nodeName, err)
	}
	byNamespace := map[string][]*corev1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == nodeName && p.DeletionTimestamp.IsZero() {
			byNamespace[p.Namespace] = append(byNamespace[p.Namespace], p)
		}
	}
	var samples []sample
	scrapeError := false
	for ns, local := range byNamespace {
		remoteNS, err := s.readyRemoteNamespace(ctx, ns, providerID)
		if err != nil || remoteNS == "" {
			continue // not running there (yet): nothing to report
		}
		callCtx, cancel := context.WithTimeout(ctx, s.connectTimeout)
		items, err := s.listPodMetrics(callCtx, cfg, remoteNS)
		cancel()
		if err != nil {
			scrapeError = true
			s.log.V(1).Info("Provider's pod metrics not listed", "provider", providerID, "remoteNamespace", remoteNS, "error", err.Error())
			continue
		}
		samples = append(samples, boundSamples(nodeName, node.Status.Capacity, local, items)...)
	}
	return s.render(nodeName, samples, scrapeError), nil
}

// boundSamples maps the provider's PodMetrics onto the local pods: only
// pods of this node, by name and only for containers of their spec; usage
// never below 0 nor above the container's limit (the node's capacity when
// it has none), so that a provider cannot make an autoscaler scale out by
// claiming more than a container may use.
func boundSamples(nodeName string, capacity corev1.ResourceList, local []*corev1.Pod, items []metricsv1beta1.PodMetrics) []sample {
	byName := map[string]*metricsv1beta1.PodMetrics{}
	for i := range items {
		byName[items[i].Name] = &items[i]
	}
	var out []sample
	for _, p := range local {
		pm, ok := byName[p.Name]
		if !ok {
			continue
		}
		reported := map[string]corev1.ResourceList{}
		for _, c := range pm.Containers {
			reported[c.Name] = c.Usage
		}
		for _, c := range p.Spec.Containers {
			usage, ok := reported[c.Name]
			if !ok {
				continue
			}
			out = append(out, sample{
				namespace: p.Namespace, pod: p.Name, container: c.Name,
				key:    counterKey{Node: nodeName, Namespace: p.Namespace, Pod: p.Name, UID: p.UID, Container: c.Name},
				cpu:    bounded(usage, c.Resources.Limits, capacity, corev1.ResourceCPU),
				memory: bounded(usage, c.Resources.Limits, capacity, corev1.ResourceMemory),
				at:     pm.Timestamp.Time,
			})
		}
	}
	return out
}

// bounded is usage's name clamped to [0, the limit] (the capacity when no
// limit is set; no bound above when neither is).
func bounded(usage, limits, capacity corev1.ResourceList, name corev1.ResourceName) float64 {
	q, ok := usage[name]
	if !ok {
		return 0
	}
	v := q.AsApproximateFloat64()
	if math.IsNaN(v) || v < 0 {
		return 0
	}
	upper := math.Inf(1)
	if l, ok := limits[name]; ok {
		upper = l.AsApproximateFloat64()
	} else if c, ok := capacity[name]; ok {
		upper = c.AsApproximateFloat64()
	}
	return math.Min(v, upper)
}

// render writes the samples as a kubelet's /metrics/resource: cumulative
// CPU counters integrated on the agent's clock, working sets, start
// times, the node's sums, and scrape_error.
func (s *Server) render(nodeName string, samples []sample, scrapeError bool) []byte {
	now := s.clock.Now()
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	sort.Slice(samples, func(i, j int) bool {
		a, b := samples[i], samples[j]
		return a.namespace+"/"+a.pod+"/"+a.container < b.namespace+"/"+b.pod+"/"+b.container
	})
	keep := map[counterKey]bool{}
	var cpu, mem, start bytes.Buffer
	var nodeRate, nodeMem float64
	var newest time.Time
	for _, smp := range samples {
		keep[smp.key] = true
		total, started := s.counters.advance(smp.key, now, smp.cpu, smp.at)
		labels := fmt.Sprintf(`{container=%s,namespace=%s,pod=%s}`, quote(smp.container), quote(smp.namespace), quote(smp.pod))
		fmt.Fprintf(&cpu, "container_cpu_usage_seconds_total%s %s %s\n", labels, num(total), ts)
		fmt.Fprintf(&mem, "container_memory_working_set_bytes%s %s %s\n", labels, num(math.Max(smp.memory, 1)), ts)
		fmt.Fprintf(&start, "container_start_time_seconds%s %s %s\n", labels, num(float64(started.UnixNano())/1e9), ts)
		nodeRate += smp.cpu
		nodeMem += smp.memory
		if smp.at.After(newest) {
			newest = smp.at
		}
	}
	nodeKey := counterKey{Node: nodeName}
	keep[nodeKey] = true
	nodeTotal, _ := s.counters.advance(nodeKey, now, nodeRate, newest)
	s.counters.prune(nodeName, keep)

	var b bytes.Buffer
	b.WriteString("# HELP container_cpu_usage_seconds_total Cumulative CPU time of the container in core-seconds (the provider's rate, integrated by the Annex agent)\n# TYPE container_cpu_usage_seconds_total counter\n")
	b.Write(cpu.Bytes())
	b.WriteString("# HELP container_memory_working_set_bytes Current working set of the container in bytes, as the provider reports it\n# TYPE container_memory_working_set_bytes gauge\n")
	b.Write(mem.Bytes())
	b.WriteString("# HELP container_start_time_seconds Start time of the container's CPU counter in seconds since the Unix epoch\n# TYPE container_start_time_seconds gauge\n")
	b.Write(start.Bytes())
	fmt.Fprintf(&b, "# HELP node_cpu_usage_seconds_total Cumulative CPU time of the node's offloaded pods in core-seconds\n# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total %s %s\n", num(nodeTotal), ts)
	fmt.Fprintf(&b, "# HELP node_memory_working_set_bytes Working set of the node's offloaded pods in bytes\n# TYPE node_memory_working_set_bytes gauge\nnode_memory_working_set_bytes %s %s\n", num(math.Max(nodeMem, 1)), ts)
	scrapeErr := 0
	if scrapeError {
		scrapeErr = 1
	}
	fmt.Fprintf(&b, "# HELP scrape_error 1 if the provider's metrics of some namespaces could not be read, 0 otherwise\n# TYPE scrape_error gauge\nscrape_error %d\n", scrapeErr)
	return b.Bytes()
}

// quote is a Prometheus text-format label value.
func quote(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v) + `"`
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// readyRemoteNamespace is namespace's Ready remote namespace on provider,
// "" when it has none.
func (s *Server) readyRemoteNamespace(ctx context.Context, namespace, provider string) (string, error) {
	nso := &offloadingv1alpha1.NamespaceOffloading{}
	err := s.local.Get(ctx, client.ObjectKey{Namespace: namespace, Name: offloadingv1alpha1.NamespaceOffloadingName}, nso)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("read NamespaceOffloading %s/%s: %w", namespace, offloadingv1alpha1.NamespaceOffloadingName, err)
	}
	for _, e := range nso.Status.RemoteNamespaces {
		if e.ClusterID == provider && e.Phase == offloadingv1alpha1.RemoteNamespaceReady {
			return e.RemoteNamespace, nil
		}
	}
	return "", nil
}
