package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/cli/sandbox"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/ociimage"
	"github.com/annexhq/annex/internal/sandboxnet"
)

// TestRealNodeSandbox drives `annexctl sandbox up --real-nodes --nodes 2`:
// three clusters with two real nodes each, Annex installed from its image
// (agent and gateway in a pod on node 0, the fabric on every node), peered
// through the addresses the sandbox gives. A real container on alpha's
// other node reaches real containers on beta's other node (by pod IP and by
// a Service's ClusterIP, through kube-proxy, the fabric and the gateways)
// and on gamma's (by pod IP, remapped: gamma's pod CIDR overlaps alpha's),
// each seeing the caller's own pod address; the fabric confines each node
// to its own FabricNode, survives a SIGKILL, and follows the gateway when
// it moves to the other node; after unpeer and uninstall every node's
// routes, rules and nftables ruleset are as before Annex; `sandbox down`
// leaves no process or network namespace behind.
func TestRealNodeSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: real nodes need root (namespaces, mounts, cgroups, veth devices)")
	}
	if err := localcluster.CheckRealNodes(localcluster.DefaultBinDir()); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if sandboxnet.NetnsExists(sandboxnet.UnderlayNetns()) {
		t.Fatalf("network namespace %s exists: a sandbox with --network or --real-nodes is up on this machine; take it down (annexctl sandbox down) before the e2e tests", sandboxnet.UnderlayNetns())
	}
	ctx := context.Background()
	images := buildImages(t)
	dir := filepath.Join(env.dir, "real-sandbox")
	flags := []string{"--dir", dir}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("the nodes' rulesets are compared with nft (make node-deps installs it): %v", err)
	}
	t.Cleanup(func() {
		if out, err := annexctl(t, append([]string{"sandbox", "down"}, flags...)...); err != nil {
			t.Errorf("sandbox down: %v\n%s", err, out)
		}
		if left := processesUnder(dir); len(left) > 0 {
			t.Errorf("processes left after sandbox down: %v", left)
		}
		if sandboxnet.NetnsExists(sandboxnet.UnderlayNetns()) {
			t.Errorf("network namespace %s left after sandbox down", sandboxnet.UnderlayNetns())
		}
	})
	start := time.Now()
	if out, err := annexctl(t, append([]string{"sandbox", "up", "--real-nodes", "--nodes", "2", "--images", images}, flags...)...); err != nil {
		t.Fatalf("sandbox up --real-nodes --nodes 2: %v\n%s", err, out)
	}
	t.Logf("sandbox up --real-nodes took %s", time.Since(start).Round(100*time.Millisecond))
	if out, err := annexctl(t, append([]string{"sandbox", "up"}, flags...)...); err == nil || !strings.Contains(out, "--real-nodes") {
		t.Errorf("sandbox up without --real-nodes on a real-node sandbox: %v\n%s", err, out)
	}

	out, err := annexctl(t, append([]string{"sandbox", "status", "-o", "json"}, flags...)...)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var st struct{ Clusters []sandbox.ClusterStatus }
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	servers := map[string]string{}
	for _, c := range st.Clusters {
		if !c.Healthy() || !strings.HasPrefix(c.PeerServer, "https://172.31.") {
			t.Errorf("%s: healthy %v, peer server %q: %+v", c.Name, c.Healthy(), c.PeerServer, c)
		}
		servers[c.Name] = c.PeerServer
	}
	if len(servers) != 3 {
		t.Fatalf("status shows %d clusters, want 3", len(servers))
	}

	clusters := map[string]*localcluster.Cluster{}
	clients := map[string]client.Client{}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		c, err := localcluster.Load(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		clusters[name], clients[name] = c, crClient(t, c)
		// Installed as users install it: the agent's pod, from the image,
		// with the gateway beside it, on the real node.
		pods := &corev1.PodList{}
		if err := clients[name].List(ctx, pods, client.InNamespace(corev1alpha1.AgentNamespace), client.MatchingLabels{"app.kubernetes.io/name": "annex-agent"}); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != c.RealNodeNames()[0] || len(pods.Items[0].Spec.Containers) != 2 ||
			pods.Items[0].Spec.Containers[0].Image != ociimage.AgentRef() || !pods.Items[0].Spec.HostNetwork {
			t.Fatalf("%s: agent pods %s, want one on %s with the agent and gateway containers of %s on the host network", name, describePods(pods.Items), c.RealNodeNames()[0], ociimage.AgentRef())
		}
	}
	alpha := clusters["alpha"]
	for _, p := range []string{"beta", "gamma"} {
		if out, err := annexctl(t, "peer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", clusters[p].KubeconfigPath(),
			"--remote-server", servers[p], "--cpu", "2", "--memory", "4Gi", "--pods", "20"); err != nil {
			t.Fatalf("peer with %s: %v\n%s", p, err, out)
		}
	}
	ca := clients["alpha"]
	// The fabric: every node but the gateway's routes the peers' ranges
	// (in its cluster's view) to the gateway node.
	fabricProgrammed(ctx, t, alpha, ca, "alpha-node-0", "10.201.0.0/16", "10.71.0.0/16", "100.64.0.0/16", "10.72.0.0/16", "10.70.0.0/16")
	fabricProgrammed(ctx, t, clusters["beta"], clients["beta"], "beta-node-0", "10.200.0.0/16", "10.70.0.0/16")
	fabricProgrammed(ctx, t, clusters["gamma"], clients["gamma"], "gamma-node-0", "100.64.0.0/16", "10.70.0.0/16")
	// The providers' pods go to their other node, away from the gateway.
	for _, p := range []string{"beta", "gamma"} {
		if out, stderr, err := kubectl(clusters[p].KubeconfigPath(), "cordon", p+"-node-0"); err != nil {
			t.Fatalf("cordon %s-node-0: %v\n%s%s", p, err, out, stderr)
		}
	}
	const ns = "across"
	if err := ca.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if out, err := annexctl(t, "offload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath(), "--pod-strategy", "Remote"); err != nil {
		t.Fatalf("offload: %v\n%s", err, out)
	}
	echo := ociimage.EchoRef()
	onProvider := func(name, provider string) *appsv1.Deployment {
		d := echoDeployment(name, echo)
		d.Namespace = ns
		d.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "annex-" + provider}
		return d
	}
	clientOn := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			Containers:                    []corev1.Container{echoContainer(echo, "/echo-server", "serve")},
		}}
	}
	client0 := clientOn("client", "alpha-node-1") // not the gateway's node
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(echoPort)}}}}
	for _, o := range []client.Object{onProvider("web", "beta"), onProvider("far", "gamma"), svc, client0} {
		if err := ca.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	podIP := map[string]string{}
	for app, provider := range map[string]string{"web": "beta", "far": "gamma"} {
		eventually(t, 90*time.Second, "pod of "+app+" Ready on annex-"+provider, func() error {
			return podsReady(ctx, ca, ns, "app="+app, 1, func(p *corev1.Pod) error {
				podIP[provider] = p.Status.PodIP
				return nil
			})
		})
	}
	clientIP := map[string]string{}
	clientReady := func(name, node string) {
		t.Helper()
		eventually(t, 60*time.Second, name+" Ready on "+node, func() error {
			p := &corev1.Pod{}
			if err := ca.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, p); err != nil {
				return err
			}
			if p.Spec.NodeName != node || p.Status.PodIP == "" || !podReady(p) {
				return fmt.Errorf("pod %s on %q, IP %q, phase %s", p.Name, p.Spec.NodeName, p.Status.PodIP, p.Status.Phase)
			}
			clientIP[name] = p.Status.PodIP
			return nil
		})
	}
	clientReady("client", "alpha-node-1")
	clusterIP := func() string {
		s := &corev1.Service{}
		if err := ca.Get(ctx, client.ObjectKeyFromObject(svc), s); err != nil {
			t.Fatal(err)
		}
		return s.Spec.ClusterIP
	}()

	// get asks a client's container to GET url and checks which node
	// answered and that it saw the caller as remote (its own pod address,
	// in the answering cluster's view: no node masqueraded it).
	get := func(from, what, url, wantNode, remote string) time.Duration {
		t.Helper()
		var body string
		start := time.Now()
		eventually(t, 30*time.Second, what, func() error {
			out, stderr, err := kubectl(alpha.KubeconfigPath(), "exec", from, "--", "/echo-server", "get", url)
			body = out
			if err != nil {
				return fmt.Errorf("%v: %s", err, stderr)
			}
			if !strings.Contains(out, `"node":"`+wantNode+`"`) {
				return fmt.Errorf("answer %q is not from %s", out, wantNode)
			}
			if !strings.Contains(out, `"remote":"`+remote+`:`) {
				return fmt.Errorf("answer %q: the caller is not seen as %s", out, remote)
			}
			return nil
		})
		t.Logf("%s: %s", what, strings.TrimSpace(body))
		return time.Since(start)
	}
	// gamma sees alpha's pod CIDR 10.200.0.0/16 as 100.64.0.0/16.
	inGamma := func(ip string) string { return "100.64." + strings.SplitN(ip, ".", 3)[2] }
	checkPaths := func(from string) {
		t.Helper()
		get(from, from+" to beta's pod by its IP", "http://"+podIP["beta"]+":8080/", "beta-node-1", clientIP[from])
		get(from, from+" to gamma's pod by its remapped IP", "http://"+podIP["gamma"]+":8080/", "gamma-node-1", inGamma(clientIP[from]))
		for i := range 3 {
			get(from, fmt.Sprintf("%s to Service web's ClusterIP %s (%d)", from, clusterIP, i+1), "http://"+clusterIP+"/", "beta-node-1", clientIP[from])
		}
	}
	checkPaths("client")

	out, err = annexctl(t, "status", "--kubeconfig", alpha.KubeconfigPath())
	if err != nil || !strings.Contains(out, "Fabric: 2 of 2 nodes programmed, gateway on alpha-node-0") {
		t.Errorf("annexctl status on alpha: %v\n%s", err, out)
	}
	checkFabricNodeConfined(ctx, t, alpha, ca, "alpha-node-1", "alpha-node-0")
	checkFabricRestart(ctx, t, alpha, ca, "alpha-node-1", "alpha-node-0")
	checkPaths("client")

	// The gateway moves to node 1 (install again with another
	// --gateway-node): every node follows, and new connections work.
	moved := time.Now()
	spec := sandbox.Clusters[0]
	if out, err := annexctl(t, "install", "--kubeconfig", alpha.KubeconfigPath(), "--cluster-id", "alpha",
		"--pod-cidr", spec.PodCIDR, "--service-cidr", spec.ServiceCIDR, "--external-cidr", spec.ExternalCIDR,
		"--image", ociimage.AgentRef(), "--image-pull-policy", string(corev1.PullNever),
		"--gateway-endpoint", sandboxnet.NodeUnderlayAddr(0, 1).String(), "--gateway-node", "alpha-node-1"); err != nil {
		t.Fatalf("install with the gateway on alpha-node-1: %v\n%s", err, out)
	}
	fabricProgrammed(ctx, t, alpha, ca, "alpha-node-1", "10.201.0.0/16", "100.64.0.0/16")
	if err := ca.Create(ctx, clientOn("client2", "alpha-node-0")); err != nil {
		t.Fatal(err)
	}
	clientReady("client2", "alpha-node-0")
	took := get("client2", "client2 on alpha-node-0 (no longer the gateway's) to beta's pod", "http://"+podIP["beta"]+":8080/", "beta-node-1", clientIP["client2"])
	t.Logf("gateway moved to alpha-node-1: the first new connection from the old gateway node answered %s after the install began (its last try took %s)", time.Since(moved).Round(100*time.Millisecond), took.Round(100*time.Millisecond))
	checkPaths("client2")
	checkPaths("client")

	// Every cluster runs metrics-server: `kubectl top` shows its agent's
	// pod, real containers on its real node.
	for _, name := range []string{"alpha", "beta", "gamma"} {
		var top string
		eventually(t, 60*time.Second, "kubectl top pod of "+name+"'s agent", func() error {
			out, stderr, err := kubectl(clusters[name].KubeconfigPath(), "top", "pod", "--namespace", corev1alpha1.AgentNamespace, "--containers")
			top = out
			if err != nil {
				return fmt.Errorf("%v: %s", err, stderr)
			}
			if !strings.Contains(out, "annex-agent") {
				return fmt.Errorf("no agent pod in %q", out)
			}
			return nil
		})
		t.Logf("%s: kubectl top pod -n %s --containers:\n%s", name, corev1alpha1.AgentNamespace, top)
	}

	t.Run("kubectl top and a HorizontalPodAutoscaler see offloaded pods", func(t *testing.T) {
		hot := onProvider("hot", "beta")
		hot.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("300m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		}
		if err := ca.Create(ctx, hot); err != nil {
			t.Fatal(err)
		}
		var pod string
		eventually(t, 90*time.Second, "hot's pod Ready on annex-beta", func() error {
			return podsReady(ctx, ca, ns, "app=hot", 1, func(p *corev1.Pod) error {
				pod = p.Name
				return nil
			})
		})
		ready := time.Now()
		eventually(t, 150*time.Second, "kubectl top pod shows the offloaded pod", func() error {
			out, stderr, err := kubectl(alpha.KubeconfigPath(), "top", "pod", "-n", ns, "-l", "app=hot", "--no-headers")
			if err != nil || !strings.Contains(out, pod) {
				return fmt.Errorf("%v: %s%s", err, out, stderr)
			}
			return nil
		})
		t.Logf("kubectl top pod shows %s %s after it was Ready", pod, time.Since(ready).Round(time.Second))

		hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hot"}, Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "hot"},
			MinReplicas:    ptr.To(int32(1)), MaxReplicas: 3,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To(int32(50))}}}},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleUp:   &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(int32(0))},
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(int32(0))},
			},
		}}
		if err := ca.Create(ctx, hpa); err != nil {
			t.Fatal(err)
		}
		// Load: the offloaded container burns CPU (up to its 300m limit,
		// 6 times its request) through kubectl exec on alpha, 20 s at a
		// time until the HPA scaled up (the load then ends within 20 s).
		burnCtx, stopBurn := context.WithTimeout(ctx, 4*time.Minute)
		defer stopBurn()
		var scaled atomic.Bool
		burned := make(chan error, 1)
		burnStart := time.Now()
		go func() {
			for !scaled.Load() {
				cmd := exec.CommandContext(burnCtx, filepath.Join(localcluster.DefaultBinDir(), "kubectl"), "--kubeconfig", alpha.KubeconfigPath(),
					"exec", "-n", ns, pod, "--", "/echo-server", "burn", "20s")
				if out, err := cmd.CombinedOutput(); err != nil {
					burned <- fmt.Errorf("%w: %s", err, out)
					return
				}
			}
			burned <- nil
		}()
		eventually(t, 180*time.Second, "the HPA scales hot up, the new replicas Ready on annex-beta", func() error {
			if err := ca.Get(ctx, client.ObjectKeyFromObject(hpa), hpa); err != nil {
				return err
			}
			if hpa.Status.DesiredReplicas < 2 {
				return fmt.Errorf("HPA wants %d replicas (current CPU %v)", hpa.Status.DesiredReplicas, describeHPAMetrics(hpa))
			}
			return podsReady(ctx, ca, ns, "app=hot", int(hpa.Status.DesiredReplicas), func(p *corev1.Pod) error {
				if p.Spec.NodeName != "annex-beta" {
					return fmt.Errorf("pod %s on %s", p.Name, p.Spec.NodeName)
				}
				return nil
			})
		})
		t.Logf("the HPA scaled hot up to %d replicas %s after the load started", hpa.Status.DesiredReplicas, time.Since(burnStart).Round(time.Second))
		scaled.Store(true)
		select {
		case err := <-burned:
			if err != nil {
				t.Fatalf("burn: %v", err)
			}
		case <-burnCtx.Done():
			t.Fatal("burn did not end")
		}
		loadEnd := time.Now()
		eventually(t, 180*time.Second, "the HPA scales hot back down to 1 replica", func() error {
			if err := ca.Get(ctx, client.ObjectKeyFromObject(hpa), hpa); err != nil {
				return err
			}
			if hpa.Status.DesiredReplicas != 1 {
				return fmt.Errorf("HPA wants %d replicas (current CPU %v)", hpa.Status.DesiredReplicas, describeHPAMetrics(hpa))
			}
			return nil
		})
		t.Logf("the HPA scaled hot back to 1 replica %s after the load ended", time.Since(loadEnd).Round(time.Second))
	})

	// Unpeer and uninstall: every real node as before Annex, rule by rule.
	for _, p := range []string{"beta", "gamma"} {
		if out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", clusters[p].KubeconfigPath()); err != nil {
			t.Fatalf("unpeer %s: %v\n%s", p, err, out)
		}
	}
	if out, err := annexctl(t, "uninstall", "--kubeconfig", alpha.KubeconfigPath()); err == nil || !strings.Contains(out, "annexctl unoffload namespace "+ns) {
		t.Errorf("uninstall with an offloaded namespace: %v, want a refusal naming it\n%s", err, out)
	}
	if out, err := annexctl(t, "unoffload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath()); err != nil {
		t.Fatalf("unoffload: %v\n%s", err, out)
	}
	// The test's own objects go too: kube-proxy's rules for their Services
	// were not there before either.
	for _, o := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "client"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "client2"}}} {
		if err := ca.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Minute, "alpha's "+o.GetName()+" gone", func() error {
			if err := ca.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
			return nil
		})
	}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		if out, err := annexctl(t, "uninstall", "--kubeconfig", clusters[name].KubeconfigPath()); err != nil {
			t.Fatalf("uninstall %s: %v\n%s", name, err, out)
		}
	}
	// The providers' remote namespaces go with their pods' grace periods
	// (real containers stop in their own time): the nodes' rules for their
	// Services go with them.
	for _, name := range []string{"beta", "gamma"} {
		c := crClient(t, clusters[name])
		eventually(t, 3*time.Minute, name+"'s remote namespaces gone", func() error {
			list := &corev1.NamespaceList{}
			if err := c.List(ctx, list, client.MatchingLabels{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}); err != nil {
				return err
			}
			var left []string
			for _, ns := range list.Items {
				left = append(left, fmt.Sprintf("%s (%s: %v)", ns.Name, ns.Status.Phase, ns.Status.Conditions))
			}
			if len(left) > 0 {
				return fmt.Errorf("still there: %s", strings.Join(left, "; "))
			}
			return nil
		})
	}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		checkNodesAsBefore(ctx, t, clusters[name])
	}
}

// describeHPAMetrics is the current value of each metric of hpa.
func describeHPAMetrics(hpa *autoscalingv2.HorizontalPodAutoscaler) string {
	var out []string
	for _, m := range hpa.Status.CurrentMetrics {
		if m.Resource != nil && m.Resource.Current.AverageUtilization != nil {
			out = append(out, fmt.Sprintf("%s %d%%", m.Resource.Name, *m.Resource.Current.AverageUtilization))
		}
	}
	for _, c := range hpa.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			out = append(out, fmt.Sprintf("%s=%s: %s", c.Type, c.Status, c.Message))
		}
	}
	return "[" + strings.Join(out, "; ") + "]"
}

// buildImages writes the pause, echo and agent images into the e2e
// directory (unchanged ones are kept) and returns that directory.
func buildImages(t *testing.T) string {
	t.Helper()
	// From a cold build cache the agent's image compiles it and every
	// dependency again (static, CGO_ENABLED=0): over 4 minutes on 2 busy
	// CPUs, once; later builds take seconds.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	dir := filepath.Join(env.dir, "images")
	for name, build := range map[string]func(context.Context, string) (ociimage.Image, error){
		"pause.tar": ociimage.Pause, "echo.tar": ociimage.Echo, "annex-agent.tar": ociimage.Agent,
	} {
		if _, err := build(ctx, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func describePods(pods []corev1.Pod) string {
	var out []string
	for _, p := range pods {
		var images []string
		for _, c := range p.Spec.Containers {
			images = append(images, c.Name+"="+c.Image)
		}
		out = append(out, fmt.Sprintf("%s on %q (hostNetwork %v, %s)", p.Name, p.Spec.NodeName, p.Spec.HostNetwork, strings.Join(images, ",")))
	}
	return "[" + strings.Join(out, "; ") + "]"
}
