package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/cli/sandbox"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/ociimage"
)

// The provider with a real node: a cluster of this test's own (the
// package's beta runs kwok), named apart from it so that nothing of one
// can be taken for the other's.
const (
	realProvider     = "rbeta"
	realProviderNode = "annex-" + realProvider // its virtual node on alpha
	realPodCIDR      = "10.203.0.0/16"
	realServiceCIDR  = "10.96.0.0/16"
	realExternalCIDR = "10.73.0.0/16"
	realNS           = "onreal"
	realRemoteNS     = realNS + "-alpha"
	echoPort         = 8080
)

// TestRealNodes: alpha (kwok) offloads a namespace to a provider whose only
// node is a real one (kubelet, containerd, runc): offloaded pods run real
// containers; kubectl logs, exec and port-forward on alpha reach them; a
// Job completes and is not run again after the provider's API server
// restarts; a crashing container's restarts and exit code show on alpha; a
// readiness probe flipped from inside the container takes the pod and its
// endpoint out and back; the provider's NetworkPolicy enforcer keeps the
// tenant's pods apart from the provider's and another tenant's
// (tenantNetworkConfined); and the provider's API server dying takes alpha's
// pods and endpoints out within the bound of the kwok outage test.
func TestRealNodes(t *testing.T) {
	binDir := localcluster.DefaultBinDir()
	if os.Geteuid() != 0 {
		t.Skip("skipping: real nodes need root (namespaces, mounts, cgroups, veth devices)")
	}
	if err := localcluster.CheckRealNodes(binDir); err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx := context.Background()
	alpha := env.clusters[0]
	beta, echo := startRealProvider(t)

	installAndRunAgent(t, alpha, "alpha")
	installFromImage(t, beta, realProvider, realExternalCIDR)
	if out, err := annexctl(t, "peer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", beta.KubeconfigPath(),
		"--cpu", "2", "--memory", "4Gi", "--pods", "20"); err != nil {
		t.Fatalf("peer: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", beta.KubeconfigPath()); err != nil {
			t.Errorf("unpeer: %v\n%s", err, out)
		}
	})
	ca, cb := crClient(t, alpha), crClient(t, beta)
	eventually(t, 30*time.Second, "virtual node "+realProviderNode+" Ready", func() error { return nodeReady(ctx, ca, realProviderNode) })
	if err := ca.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: realNS}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := annexctl(t, "unoffload", "namespace", realNS, "--kubeconfig", alpha.KubeconfigPath()); err != nil {
			t.Errorf("unoffload: %v\n%s", err, out)
		}
		_ = ca.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: realNS}})
	})
	if out, err := annexctl(t, "offload", "namespace", realNS, "--kubeconfig", alpha.KubeconfigPath(), "--pod-strategy", "Remote"); err != nil {
		t.Fatalf("offload: %v\n%s", err, out)
	}

	web := echoDeployment("web", echo)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: realNS, Name: "web"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(echoPort)}}}}
	for _, o := range []client.Object{svc, web} {
		if err := ca.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	var webPod string // its name, the same on alpha and beta

	t.Run("offloaded pods run real containers", func(t *testing.T) {
		eventually(t, 90*time.Second, "pod of web Ready on "+realProviderNode, func() error {
			return podsReady(ctx, ca, realNS, "app=web", 1, func(p *corev1.Pod) error {
				if p.Spec.NodeName != realProviderNode {
					return fmt.Errorf("pod %s on %q", p.Name, p.Spec.NodeName)
				}
				webPod = p.Name
				return nil
			})
		})
		node := &corev1.Node{}
		if err := cb.Get(ctx, client.ObjectKey{Name: beta.RealNodeNames()[0]}, node); err != nil {
			t.Fatal(err)
		}
		if node.Labels[localcluster.NodeTypeLabel] != localcluster.NodeTypeReal {
			t.Fatalf("beta's node %s is labelled %s=%q, not a real node", node.Name, localcluster.NodeTypeLabel, node.Labels[localcluster.NodeTypeLabel])
		}
		nodeCIDR := netip.MustParsePrefix(node.Spec.PodCIDR)
		remote := &corev1.Pod{}
		if err := cb.Get(ctx, client.ObjectKey{Namespace: realRemoteNS, Name: webPod}, remote); err != nil {
			t.Fatal(err)
		}
		ip, err := netip.ParseAddr(remote.Status.PodIP)
		if remote.Spec.NodeName != node.Name || remote.Status.Phase != corev1.PodRunning || err != nil || !nodeCIDR.Contains(ip) {
			t.Fatalf("beta's pod %s: node %q, phase %s, IP %q; want Running on %s with an IP of %s", webPod, remote.Spec.NodeName, remote.Status.Phase, remote.Status.PodIP, node.Name, nodeCIDR)
		}
		if len(remote.Status.ContainerStatuses) != 1 || !strings.HasPrefix(remote.Status.ContainerStatuses[0].ContainerID, "containerd://") {
			t.Errorf("beta's pod %s: container statuses %+v, want one run by containerd", webPod, remote.Status.ContainerStatuses)
		}
		local := &corev1.Pod{}
		if err := ca.Get(ctx, client.ObjectKey{Namespace: realNS, Name: webPod}, local); err != nil {
			t.Fatal(err)
		}
		t.Logf("pod %s: on beta %s IP %s (node pod CIDR %s); on alpha IP %s", webPod, remote.Spec.NodeName, remote.Status.PodIP, nodeCIDR, local.Status.PodIP)
	})
	if webPod == "" {
		t.Fatal("no pod of web to go on with")
	}

	t.Run("kubectl logs (--limit-bytes, --all-containers, --since), exec, attach and port-forward on alpha reach the container", func(t *testing.T) {
		kc := alpha.KubeconfigPath()
		var logs string
		eventually(t, 30*time.Second, "kubectl logs shows the server's start", func() error {
			out, stderr, err := kubectl(kc, "-n", realNS, "logs", webPod)
			logs = out
			if err != nil {
				return fmt.Errorf("%v: %s", err, stderr)
			}
			if !strings.Contains(out, "msg=listening") || !strings.Contains(out, `Node:`+beta.RealNodeNames()[0]) {
				return fmt.Errorf("logs %q", out)
			}
			return nil
		})
		t.Logf("kubectl logs: %s", strings.TrimSpace(logs))
		out, stderr, err := kubectl(kc, "-n", realNS, "exec", webPod, "--", "/echo-server", "say", "hi", "from", "the", "real", "node")
		if err != nil || out != "hi from the real node\n" {
			t.Errorf("kubectl exec say: %q %q %v", out, stderr, err)
		}
		out, stderr, err = kubectl(kc, "-n", realNS, "logs", "--limit-bytes", "20", "--all-containers", webPod)
		if err != nil || len(out) != 20 || !strings.HasPrefix(logs, out) {
			t.Errorf("kubectl logs --limit-bytes 20 --all-containers: %q %q %v; want the log's first 20 bytes", out, stderr, err)
		}
		if out, stderr, err := kubectl(kc, "-n", realNS, "logs", "--since", "1h", webPod); err != nil || !strings.Contains(out, "msg=listening") {
			t.Errorf("kubectl logs --since 1h: %q %q %v", out, stderr, err)
		}
		// attach: the container's output as it is written (the readiness
		// probe's requests, every second).
		if line, err := kubectlAttachLine(kc, realNS, webPod, "msg=request"); err != nil {
			t.Errorf("kubectl attach: %v", err)
		} else {
			t.Logf("kubectl attach: %s", line)
		}
		body, err := kubectlPortForwardGet(t, kc, realNS, webPod, echoPort)
		if err != nil {
			t.Fatalf("kubectl port-forward: %v", err)
		}
		for _, want := range []string{`"pod":"` + webPod + `"`, `"namespace":"` + realRemoteNS + `"`, `"node":"` + beta.RealNodeNames()[0] + `"`} {
			if !strings.Contains(body, want) {
				t.Errorf("GET through the forwarded port: %q lacks %s", body, want)
			}
		}
	})

	t.Run("a hostile tenant's packets", func(t *testing.T) {
		t.Logf("%d network attempts", tenantNetworkConfined(t, beta, cb, echo, realRemoteNS, webPod))
	})

	t.Run("a Job completes and is not run again after the provider's API server restarts", func(t *testing.T) {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: realNS, Name: "once"},
			Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To(int32(0)),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "once"}},
					Spec: corev1.PodSpec{
						RestartPolicy: corev1.RestartPolicyNever,
						Containers:    []corev1.Container{echoContainer(echo, "/echo-server", "say", "job done")},
					},
				},
			},
		}
		if err := ca.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		completed := func() error {
			j := &batchv1.Job{}
			if err := ca.Get(ctx, client.ObjectKeyFromObject(job), j); err != nil {
				return err
			}
			complete := false
			for _, c := range j.Status.Conditions {
				complete = complete || (c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue)
			}
			if !complete || j.Status.Succeeded != 1 || j.Status.Failed != 0 {
				return fmt.Errorf("Job: complete %v, succeeded %d, failed %d, conditions %+v", complete, j.Status.Succeeded, j.Status.Failed, j.Status.Conditions)
			}
			return nil
		}
		onePod := func() error {
			for name, c := range map[string]struct {
				cl client.Client
				ns string
			}{"alpha": {ca, realNS}, "beta": {cb, realRemoteNS}} {
				pods := &corev1.PodList{}
				if err := c.cl.List(ctx, pods, client.InNamespace(c.ns), client.MatchingLabels{"app": "once"}); err != nil {
					return err
				}
				if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodSucceeded {
					var phases []string
					for _, p := range pods.Items {
						phases = append(phases, p.Name+" "+string(p.Status.Phase))
					}
					return fmt.Errorf("%s has %d pods of the Job (%v), want 1 Succeeded", name, len(pods.Items), phases)
				}
			}
			return nil
		}
		eventually(t, 90*time.Second, "Job once Complete", completed)
		if err := onePod(); err != nil {
			t.Fatal(err)
		}
		pods := &corev1.PodList{}
		if err := cb.List(ctx, pods, client.InNamespace(realRemoteNS), client.MatchingLabels{"app": "once"}); err != nil {
			t.Fatal(err)
		}
		if cs := pods.Items[0].Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 0 ||
			!strings.HasPrefix(cs[0].ContainerID, "containerd://") {
			t.Errorf("beta's Job pod: container statuses %+v, want one terminated with 0 by containerd", cs)
		}

		if err := beta.KillAPIServer(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = beta.ResumeAPIServer(context.Background()) })
		eventually(t, outageBound, realProviderNode+" NotReady", func() error {
			if nodeReady(ctx, ca, realProviderNode) == nil {
				return errors.New("still Ready")
			}
			return nil
		})
		if err := beta.ResumeAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, realProviderNode+" Ready again", func() error { return nodeReady(ctx, ca, realProviderNode) })
		// Long enough for alpha and beta to resync: nothing reruns it.
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
			if err := completed(); err != nil {
				t.Fatalf("after the restart: %v", err)
			}
			if err := onePod(); err != nil {
				t.Fatalf("after the restart: %v", err)
			}
		}
	})

	t.Run("a crashing container's restarts, exit code and previous log show on alpha", func(t *testing.T) {
		// Connection refused: `get` exits 1.
		crash := echoDeployment("crash", echo)
		c := &crash.Spec.Template.Spec.Containers[0]
		c.Command = []string{"/echo-server", "get", "-timeout", "1s", "http://127.0.0.1:1/"}
		c.ReadinessProbe = nil
		if err := ca.Create(ctx, crash); err != nil {
			t.Fatal(err)
		}
		var got corev1.ContainerStatus
		var crashPod string
		eventually(t, 90*time.Second, "crash's container restarted after exiting 1", func() error {
			var err error
			if crashPod, got, err = onlyContainer(ctx, ca, "crash"); err != nil {
				return err
			}
			if got.RestartCount < 1 || got.LastTerminationState.Terminated == nil || got.LastTerminationState.Terminated.ExitCode != 1 {
				return fmt.Errorf("container status %+v", got)
			}
			return nil
		})
		t.Logf("on alpha: restartCount %d, last terminated with %d (%s)", got.RestartCount, got.LastTerminationState.Terminated.ExitCode, got.LastTerminationState.Terminated.Reason)
		out, stderr, err := kubectl(alpha.KubeconfigPath(), "-n", realNS, "logs", "--previous", crashPod)
		if err != nil || !strings.Contains(out, "echo-server get:") || !strings.Contains(out, "connection refused") {
			t.Errorf("kubectl logs --previous of %s: %q %q %v; want the exited container's error", crashPod, out, stderr, err)
		}
		if err := ca.Delete(ctx, crash); err != nil {
			t.Error(err)
		}
	})

	t.Run("a container that cannot start says why on alpha", func(t *testing.T) {
		missing := echoDeployment("noimage", "annex.dev/missing:v0")
		missing.Spec.Template.Spec.Containers[0].ReadinessProbe = nil
		if err := ca.Create(ctx, missing); err != nil {
			t.Fatal(err)
		}
		var got corev1.ContainerStatus
		eventually(t, 60*time.Second, "noimage's container waiting with the kubelet's reason", func() error {
			var err error
			if _, got, err = onlyContainer(ctx, ca, "noimage"); err != nil {
				return err
			}
			if w := got.State.Waiting; w == nil || w.Reason != "ErrImageNeverPull" || !strings.Contains(w.Message, "annex.dev/missing:v0") {
				return fmt.Errorf("container status %+v", got)
			}
			return nil
		})
		t.Logf("on alpha: waiting %s: %s", got.State.Waiting.Reason, got.State.Waiting.Message)
		if err := ca.Delete(ctx, missing); err != nil {
			t.Error(err)
		}
	})

	t.Run("a readiness probe failing in the container takes the pod and its endpoint out", func(t *testing.T) {
		kc := alpha.KubeconfigPath()
		flip := func(state string) {
			t.Helper()
			url := fmt.Sprintf("http://127.0.0.1:%d/ready?state=%s", echoPort, state)
			if out, stderr, err := kubectl(kc, "-n", realNS, "exec", webPod, "--", "/echo-server", "get", url); err != nil || !strings.Contains(out, "state "+state) {
				t.Fatalf("kubectl exec get %s: %q %q %v", url, out, stderr, err)
			}
		}
		endpoint := func(ready bool) func() error {
			return func() error {
				p := &corev1.Pod{}
				if err := ca.Get(ctx, client.ObjectKey{Namespace: realNS, Name: webPod}, p); err != nil {
					return err
				}
				if podReady(p) != ready {
					return fmt.Errorf("pod %s ready %v", webPod, podReady(p))
				}
				eps, err := endpointsOf(ctx, ca, realNS, "web")
				if err != nil {
					return err
				}
				if len(eps) != 1 || eps[0].TargetRef == nil || eps[0].TargetRef.Name != webPod || eps[0].Conditions.Ready == nil || *eps[0].Conditions.Ready != ready {
					return fmt.Errorf("endpoints of web %s, want only %s with ready=%v", describeEndpoints(eps), webPod, ready)
				}
				return nil
			}
		}
		eventually(t, 10*time.Second, "web's endpoint ready", endpoint(true))
		flip("fail")
		eventually(t, 30*time.Second, "pod not Ready, endpoint ready=false", endpoint(false))
		flip("ok")
		eventually(t, 30*time.Second, "pod Ready, endpoint ready=true", endpoint(true))
	})

	t.Run("the provider's API server dies: alpha's pods go NotReady, endpoints withdrawn", func(t *testing.T) {
		eventually(t, 30*time.Second, "web Ready before the outage", func() error {
			n, err := readyEndpoints(ctx, ca, realNS, "web")
			if err == nil && n != 1 {
				err = fmt.Errorf("%d ready endpoints", n)
			}
			return err
		})
		start := time.Now()
		if err := beta.KillAPIServer(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = beta.ResumeAPIServer(context.Background()) })
		eventually(t, outageBound, "web's pod NotReady and its endpoint withdrawn", func() error {
			p := &corev1.Pod{}
			if err := ca.Get(ctx, client.ObjectKey{Namespace: realNS, Name: webPod}, p); err != nil {
				return err
			}
			if podReady(p) || p.Labels[corev1alpha1.LabelRemoteUnavailable] != "true" {
				return fmt.Errorf("pod %s: ready %v, label %q", webPod, podReady(p), p.Labels[corev1alpha1.LabelRemoteUnavailable])
			}
			n, err := readyEndpoints(ctx, ca, realNS, "web")
			if err == nil && n != 0 {
				err = fmt.Errorf("%d ready endpoints", n)
			}
			return err
		})
		t.Logf("pod NotReady and endpoint withdrawn %s after the kill", time.Since(start).Round(100*time.Millisecond))
		if err := beta.ResumeAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		// Back for the clean-up (unoffload, unpeer), and because it must.
		eventually(t, 60*time.Second, "web Ready again", func() error {
			n, err := readyEndpoints(ctx, ca, realNS, "web")
			if err == nil && n != 1 {
				err = fmt.Errorf("%d ready endpoints", n)
			}
			return err
		})
	})

}

// startRealProvider builds the pause and echo images and starts the
// provider cluster with one real node and no kwok node; Stop at cleanup.
func startRealProvider(t *testing.T) (*localcluster.Cluster, string) {
	t.Helper()
	built := time.Now()
	imgDir := buildImages(t)
	t.Logf("images built in %s", time.Since(built).Round(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := localcluster.Start(ctx, localcluster.Options{
		Name: realProvider, Dir: filepath.Join(env.dir, realProvider),
		PodCIDR: realPodCIDR, ServiceCIDR: realServiceCIDR,
		RealNodes: 1, Images: []string{filepath.Join(imgDir, "pause.tar"), filepath.Join(imgDir, "echo.tar"), filepath.Join(imgDir, "annex-agent.tar")},
		PauseImage:        ociimage.PauseRef(),
		NetworkPolicies:   true, // kube-router's firewall on the node, as a provider's CNI would
		Progress:          os.Stderr,
		BeforeControllers: sandbox.ApplyCRDs,
	})
	if err != nil {
		t.Fatalf("start %s: %v", realProvider, err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("stop %s: %v", realProvider, err)
		}
	})
	t.Logf("%s up with real node %v in %s", realProvider, c.RealNodeNames(), time.Since(start).Round(100*time.Millisecond))
	if kwok, real := c.NodeNames(), c.RealNodeNames(); len(kwok) != 0 || len(real) != 1 {
		t.Fatalf("%s has kwok nodes %v and real nodes %v, want only one real node", realProvider, kwok, real)
	}
	return c, ociimage.EchoRef()
}

// installFromImage installs Annex into c as users do on real clusters:
// `annexctl install --image` with the annex-agent image imported into its
// real node, so the agent runs as a Deployment there (with the in-cluster
// ServiceAccount, reaching its API server through the kubernetes Service),
// not as a local process. It waits for the agent's pod to be Ready.
func installFromImage(t *testing.T, c *localcluster.Cluster, clusterID, ext string) {
	t.Helper()
	if out, err := annexctl(t, "install", "--kubeconfig", c.KubeconfigPath(), "--cluster-id", clusterID,
		"--pod-cidr", c.PodCIDR(), "--service-cidr", c.ServiceCIDR(), "--external-cidr", ext,
		"--image", ociimage.AgentRef(), "--image-pull-policy", "Never"); err != nil {
		t.Fatalf("install %s: %v\n%s", clusterID, err, out)
	}
	cl := crClient(t, c)
	ctx := context.Background()
	eventually(t, 2*time.Minute, "the agent's pod Ready on "+clusterID+"'s real node", func() error {
		return podsReady(ctx, cl, corev1alpha1.AgentNamespace, "app.kubernetes.io/name=annex-agent", 1, func(p *corev1.Pod) error {
			if p.Spec.NodeName != c.RealNodeNames()[0] {
				return fmt.Errorf("agent pod %s on %q", p.Name, p.Spec.NodeName)
			}
			if img := p.Spec.Containers[0].Image; img != ociimage.AgentRef() {
				return fmt.Errorf("agent pod %s runs %s", p.Name, img)
			}
			return nil
		})
	})
	// The chart's memory limit (512Mi) reaches the agent through the
	// downward API, and the agent gives the Go runtime 90 % of it.
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(corev1alpha1.AgentNamespace), client.MatchingLabels{"app.kubernetes.io/name": "annex-agent"}); err != nil || len(pods.Items) != 1 {
		t.Fatalf("the agent's pod on %s: %d pods, %v", clusterID, len(pods.Items), err)
	}
	logs, err := clientset(t, c).CoreV1().Pods(corev1alpha1.AgentNamespace).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
	if want := fmt.Sprintf("limitBytes=%d", 512<<20*9/10); err != nil || !strings.Contains(string(logs), want) {
		t.Errorf("the agent's log on %s has no %q (%v):\n%.2000s", clusterID, want, err, logs)
	}
}

// echoContainer runs the echo image (imported into the real node, never
// pulled) with args, its identity from the downward API.
func echoContainer(image string, command ...string) corev1.Container {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return corev1.Container{
		Name: "echo", Image: image, ImagePullPolicy: corev1.PullNever, Command: command,
		Env:   []corev1.EnvVar{field("POD_NAME", "metadata.name"), field("POD_NAMESPACE", "metadata.namespace"), field("NODE_NAME", "spec.nodeName")},
		Ports: []corev1.ContainerPort{{ContainerPort: echoPort}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
	}
}

// echoDeployment is one replica of the echo server with a readiness probe
// on /readyz (every second, out at the first failure).
func echoDeployment(name, image string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	c := echoContainer(image)
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(echoPort)}},
		PeriodSeconds:    1,
		FailureThreshold: 1,
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: realNS, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(int64(1)), Containers: []corev1.Container{c}},
			},
		},
	}
}

// kubectl runs the kubectl of the Kubernetes binaries with kubeconfig.
func kubectl(kubeconfig string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(localcluster.DefaultBinDir(), "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// onlyContainer is the name and container status of the one pod of app in
// realNS on c, which must have one container status.
func onlyContainer(ctx context.Context, c client.Client, app string) (string, corev1.ContainerStatus, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(realNS), client.MatchingLabels{"app": app}); err != nil {
		return "", corev1.ContainerStatus{}, err
	}
	if len(pods.Items) != 1 || len(pods.Items[0].Status.ContainerStatuses) != 1 {
		return "", corev1.ContainerStatus{}, fmt.Errorf("%d pods of %s, want one with a container status", len(pods.Items), app)
	}
	return pods.Items[0].Name, pods.Items[0].Status.ContainerStatuses[0], nil
}

// kubectlAttachLine runs `kubectl attach` to the pod's container and
// returns the first line of its output that contains want, giving up after
// 20 s.
func kubectlAttachLine(kubeconfig, ns, pod, want string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(localcluster.DefaultBinDir(), "kubectl"), "--kubeconfig", kubeconfig, "-n", ns, "attach", pod)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if strings.Contains(sc.Text(), want) {
			return sc.Text(), nil
		}
	}
	return "", fmt.Errorf("no line with %q in its output (%v); stderr %q", want, ctx.Err(), errOut.String())
}

var forwardingFrom = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) ->`)

// kubectlPortForwardGet runs `kubectl port-forward` to the pod's port on a
// free local port, GETs / through it and stops kubectl.
func kubectlPortForwardGet(t *testing.T, kubeconfig, ns, pod string, port int) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(localcluster.DefaultBinDir(), "kubectl"), "--kubeconfig", kubeconfig,
		"-n", ns, "port-forward", "--address", "127.0.0.1", "pod/"+pod, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() {
		_ = cmd.Process.Kill() // the kubectl this function started
		_ = cmd.Wait()
	}()
	local := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwardingFrom.FindStringSubmatch(sc.Text()); m != nil {
				local <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var lport string
	select {
	case lport = <-local:
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("kubectl port-forward not forwarding within 30s: %s", stderr.String())
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Get("http://127.0.0.1:" + lport + "/")
	if err != nil {
		return "", fmt.Errorf("GET through port %s: %w (kubectl: %s)", lport, err, stderr.String())
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET through port %s: %s", lport, resp.Status)
	}
	return string(body), err
}

// endpointsOf lists the endpoints of svc's EndpointSlices.
func endpointsOf(ctx context.Context, c client.Client, ns, svc string) ([]discoveryv1.Endpoint, error) {
	slices := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc}); err != nil {
		return nil, err
	}
	var eps []discoveryv1.Endpoint
	for _, s := range slices.Items {
		eps = append(eps, s.Endpoints...)
	}
	return eps, nil
}

func describeEndpoints(eps []discoveryv1.Endpoint) string {
	var parts []string
	for _, e := range eps {
		name := "?"
		if e.TargetRef != nil {
			name = e.TargetRef.Name
		}
		parts = append(parts, fmt.Sprintf("%s %v ready=%v", name, e.Addresses, ptr.Deref(e.Conditions.Ready, false)))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
