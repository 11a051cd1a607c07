package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestMetricsServerOptions: metrics-server needs a real node to run in.
func TestMetricsServerOptions(t *testing.T) {
	_, err := Options{Name: "a", Dir: t.TempDir(), MetricsServer: true}.withDefaults()
	if err == nil || !strings.Contains(err.Error(), "MetricsServer needs RealNodes") {
		t.Errorf("withDefaults() with MetricsServer and no real node: error %v, want one saying it needs RealNodes", err)
	}
	if err := CheckMetricsServer(t.TempDir()); err == nil || !strings.Contains(err.Error(), "metrics-server") || !strings.Contains(err.Error(), "make tools") {
		t.Errorf("CheckMetricsServer(empty dir) = %v, want an error naming metrics-server and `make tools`", err)
	}
}

// TestMetricsServerArgs: metrics-server serves on node 0's address, verifies
// kubelets with the cluster CA (never --kubelet-insecure-tls), calls them by
// InternalIP at the port in their status, and skips kwok's nodes.
func TestMetricsServerArgs(t *testing.T) {
	st := state{Name: "m", PodCIDR: DefaultPodCIDR, RealNodes: 1, NodeNetworkCIDR: "172.31.9.0/24", MetricsServer: true}
	nodes, err := st.realNodes()
	if err != nil {
		t.Fatal(err)
	}
	l := layout{dir: "/d"}
	args := metricsServerArgs(l, nodes[0])
	for _, want := range []string{
		"--bind-address=172.31.9.2",
		fmt.Sprintf("--secure-port=%d", metricsServerPort),
		"--kubelet-certificate-authority=/d/pki/ca.crt",
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-use-node-status-port",
		"--node-selector=type!=kwok",
		"--metric-resolution=10s",
		"--kubeconfig=/d/kubeconfigs/metrics-server.kubeconfig",
		"--authentication-kubeconfig=/d/kubeconfigs/metrics-server.kubeconfig",
		"--authorization-kubeconfig=/d/kubeconfigs/metrics-server.kubeconfig",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("metrics-server args lack %s: %v", want, args)
		}
	}
	for _, a := range args {
		if strings.Contains(a, "insecure") {
			t.Errorf("metrics-server args have %s", a)
		}
	}
	certs := metricsServerCerts(nodes[0])
	serving := certs[metricsServerServingCertName]
	if !slices.Contains(serving.dnsNames, "metrics-server.kube-system.svc") || len(serving.ips) != 1 || serving.ips[0].String() != "172.31.9.2" {
		t.Errorf("serving certificate for %v %v, want metrics-server.kube-system.svc (the aggregator's name for it) and the node's address", serving.dnsNames, serving.ips)
	}
	ep := metricsServerEndpoints(nodes[0])
	if ep.Endpoints[0].Addresses[0] != "172.31.9.2" || *ep.Ports[0].Port != metricsServerPort || *ep.Ports[0].Name != metricsServerServiceObject().Spec.Ports[0].Name {
		t.Errorf("EndpointSlice %+v does not point the Service's port at the node's metrics-server", ep)
	}
}

// TestMetricsServer starts a cluster with a real node and metrics-server,
// runs a real container and waits for its PodMetrics (and the node's
// NodeMetrics) through the API server's aggregator, and for `kubectl top
// pod` to show it; Stop leaves nothing behind.
func TestMetricsServer(t *testing.T) {
	requireRealNodes(t)
	if err := CheckMetricsServer(DefaultBinDir()); err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pause, echo := testImages(ctx, t)
	dir := t.TempDir()
	before := hostSnapshot(t, dir)
	begin := time.Now()
	c, err := Start(ctx, Options{
		Name: "ms", Dir: dir, RealNodes: 1, MetricsServer: true,
		Images: []string{pause.Path, echo.Path}, PauseImage: pause.Ref,
		Progress: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster with a real node and metrics-server in %s", time.Since(begin).Round(10*time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop(context.Background())
		}
	})
	node := c.RealNodes()[0]
	msName := NodeComponent(MetricsServer, node.Name)
	if !slices.ContainsFunc(c.Status(), func(s ComponentStatus) bool { return s.Name == msName && s.State == Running }) {
		t.Fatalf("no running %s in %+v", msName, c.Status())
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)

	t0 := time.Now()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, echoPod("echo", echo.Ref, node.Name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, 60*time.Second, func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "echo", metav1.GetOptions{})
		return err == nil && podReady(p), err
	}); err != nil {
		t.Fatalf("pod echo not Ready within 60 s: %v", err)
	}
	t.Logf("pod echo Ready in %s", time.Since(t0).Round(10*time.Millisecond))

	// PodMetrics: metrics-server scrapes every MetricResolution; a pod
	// shows once two scrapes saw its container (CPU is a rate).
	bound := 6*MetricResolution + 10*time.Second
	var podMetrics struct {
		Containers []struct {
			Name  string            `json:"name"`
			Usage map[string]string `json:"usage"`
		} `json:"containers"`
	}
	var last string
	if err := poll(ctx, bound, func() (bool, error) {
		body, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/echo").DoRaw(ctx)
		if err != nil {
			last = fmt.Sprintf("%v: %s", err, body)
			return false, nil
		}
		last = string(body)
		return json.Unmarshal(body, &podMetrics) == nil && len(podMetrics.Containers) == 1, nil
	}); err != nil {
		t.Fatalf("no PodMetrics of default/echo within %s: %v; last answer: %s\nmetrics-server's log (%s):\n%s",
			bound, err, last, c.LogPath(msName), logTail(c.LogPath(msName), 30))
	}
	t.Logf("PodMetrics of echo %s after it was created: %s", time.Since(t0).Round(10*time.Millisecond), last)
	got := podMetrics.Containers[0]
	if got.Name != "echo" {
		t.Errorf("PodMetrics container %q, want echo", got.Name)
	}
	if mem, err := resource.ParseQuantity(got.Usage["memory"]); err != nil || mem.Sign() <= 0 {
		t.Errorf("PodMetrics memory usage %q, want a positive quantity (%v)", got.Usage["memory"], err)
	}
	if _, err := resource.ParseQuantity(got.Usage["cpu"]); err != nil {
		t.Errorf("PodMetrics cpu usage %q: %v", got.Usage["cpu"], err)
	}
	if body, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/nodes/" + node.Name).DoRaw(ctx); err != nil || !strings.Contains(string(body), `"memory"`) {
		t.Errorf("NodeMetrics of %s: %v %s", node.Name, err, body)
	}
	// Kubelets verified with the cluster CA, every right granted: no
	// certificate or authorization error in metrics-server's log.
	if data, err := os.ReadFile(c.LogPath(msName)); err != nil {
		t.Error(err)
	} else {
		for _, line := range strings.Split(string(data), "\n") {
			if l := strings.ToLower(line); strings.Contains(l, "x509") || strings.Contains(l, "forbidden") || strings.Contains(l, "unauthorized") {
				t.Errorf("metrics-server logged: %s", line)
			}
		}
	}
	// What a user runs.
	top := exec.CommandContext(ctx, filepath.Join(DefaultBinDir(), "kubectl"), "--kubeconfig="+c.KubeconfigPath(), "top", "pod", "echo", "--namespace=default")
	if out, err := top.CombinedOutput(); err != nil || !strings.Contains(string(out), "echo") || !strings.Contains(string(out), "Mi") {
		t.Errorf("kubectl top pod echo: %v\n%s", err, out)
	} else {
		t.Logf("kubectl top pod echo:\n%s", out)
	}

	stopped = true
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(before, hostSnapshot(t, dir)); len(left) > 0 {
		t.Errorf("left behind after Stop:\n%s", strings.Join(left, "\n"))
	}
	t.Logf("test took %s", time.Since(begin).Round(10*time.Millisecond))
}
