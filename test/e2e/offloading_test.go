package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/localcluster"
)

// TestOffloading: alpha offloads a namespace to beta and gamma; the real
// kube-scheduler places a Deployment's pods on the virtual nodes, they run on
// the providers, and Services, EndpointSlices and ConfigMaps follow them.
func TestOffloading(t *testing.T) {
	alpha, beta, gamma := env.clusters[0], env.clusters[1], env.clusters[2]
	ctx := context.Background()
	alphaAgent := installAndRunAgent(t, alpha, "alpha")
	betaAgent := installAndRunAgent(t, beta, "beta")
	installAndRunAgent(t, gamma, "gamma")
	for _, p := range []*localcluster.Cluster{beta, gamma} {
		peer(t, alpha, p)
		t.Cleanup(func() {
			if out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", p.KubeconfigPath()); err != nil {
				t.Errorf("unpeer %s: %v\n%s", p.Name(), err, out)
			}
		})
	}
	ca, cb, cg := crClient(t, alpha), crClient(t, beta), crClient(t, gamma)
	for _, node := range []string{"annex-beta", "annex-gamma"} {
		eventually(t, 30*time.Second, "virtual node "+node+" Ready", func() error { return nodeReady(ctx, ca, node) })
	}

	mkns := func(c client.Client, name string) {
		t.Helper()
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	mkns(ca, "shop")
	mkns(ca, "local-only")
	if out, err := annexctl(t, "offload", "namespace", "shop", "--kubeconfig", alpha.KubeconfigPath(), "--pod-strategy", "Remote"); err != nil {
		t.Fatalf("offload: %v\n%s", err, out)
	}
	nso := &offloadingv1alpha1.NamespaceOffloading{}
	if err := ca.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "offloading"}, nso); err != nil {
		t.Fatal(err)
	}
	if len(nso.Status.RemoteNamespaces) != 2 {
		t.Fatalf("remote namespaces: %+v", nso.Status.RemoteNamespaces)
	}
	for _, c := range []client.Client{cb, cg} {
		if err := c.Get(ctx, client.ObjectKey{Name: "shop-alpha"}, &corev1.Namespace{}); err != nil {
			t.Fatalf("remote namespace missing: %v", err)
		}
	}

	// Objects the pods need, and a Service over them.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "settings"}, Data: map[string]string{"color": "blue"}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080)}}}}
	dep := deployment("shop", "web", 20)
	for _, o := range []client.Object{cm, svc, dep} {
		if err := ca.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("pods scheduled on virtual nodes and Ready with IPs", func(t *testing.T) {
		eventually(t, 120*time.Second, "20 pods Running and Ready on virtual nodes", func() error {
			return podsReady(ctx, ca, "shop", "app=web", 20, func(p *corev1.Pod) error {
				if !strings.HasPrefix(p.Spec.NodeName, "annex-") {
					return fmt.Errorf("pod %s on %q, not a virtual node", p.Name, p.Spec.NodeName)
				}
				return nil
			})
		})
		perNode := map[string]int{}
		pods := &corev1.PodList{}
		_ = ca.List(ctx, pods, client.InNamespace("shop"))
		for _, p := range pods.Items {
			perNode[p.Spec.NodeName]++
		}
		t.Logf("pods per virtual node: %v", perNode)
	})
	t.Run("Service has ready endpoints", func(t *testing.T) {
		eventually(t, 30*time.Second, "20 ready endpoints", func() error {
			n, err := readyEndpoints(ctx, ca, "shop", "web")
			if err == nil && n != 20 {
				err = fmt.Errorf("%d ready endpoints", n)
			}
			return err
		})
	})
	t.Run("providers run the pods and see the Service", func(t *testing.T) {
		for name, c := range map[string]client.Client{"beta": cb, "gamma": cg} {
			eventually(t, 30*time.Second, name+" has the ConfigMap and the Service", func() error {
				if err := c.Get(ctx, client.ObjectKey{Namespace: "shop-alpha", Name: "settings"}, &corev1.ConfigMap{}); err != nil {
					return err
				}
				return c.Get(ctx, client.ObjectKey{Namespace: "shop-alpha", Name: "web"}, &corev1.Service{})
			})
			shadows := &offloadingv1alpha1.ShadowPodList{}
			if err := c.List(ctx, shadows, client.InNamespace("shop-alpha")); err != nil {
				t.Fatal(err)
			}
			pods := &corev1.PodList{}
			if err := c.List(ctx, pods, client.InNamespace("shop-alpha")); err != nil {
				t.Fatal(err)
			}
			if len(shadows.Items) != len(pods.Items) || len(pods.Items) == 0 {
				t.Errorf("%s: %d ShadowPods, %d pods", name, len(shadows.Items), len(pods.Items))
			}
		}
		// Beta's EndpointSlice for the Service holds gamma's pods (beta has its own).
		eventually(t, 30*time.Second, "beta's EndpointSlices for web", func() error {
			slices := &discoveryv1.EndpointSliceList{}
			if err := cb.List(ctx, slices, client.InNamespace("shop-alpha"), client.MatchingLabels{"kubernetes.io/service-name": "web"}); err != nil {
				return err
			}
			n := 0
			for _, s := range slices.Items {
				n += len(s.Endpoints)
			}
			if n == 0 {
				return errors.New("no endpoints")
			}
			return nil
		})
	})
	t.Run("network: addresses across overlapping clusters", func(t *testing.T) {
		checkNetwork(t, "shop", alphaAgent, ca, cb, cg)
	})
	t.Run("failed provider: its endpoints stop being ready, the others stay", func(t *testing.T) {
		for _, f := range []struct {
			name string
			do   func() error
		}{{"killed", beta.KillAPIServer}, {"paused", beta.PauseAPIServer}} {
			onBeta := countPodsOn(ctx, t, ca, "shop", "annex-beta")
			start := time.Now()
			if err := f.do(); err != nil {
				t.Fatal(err)
			}
			eventually(t, outageBound, f.name+" beta: only gamma's endpoints ready", func() error {
				n, err := readyEndpoints(ctx, ca, "shop", "web")
				if err == nil && n != 20-onBeta {
					err = fmt.Errorf("%d ready endpoints, want %d", n, 20-onBeta)
				}
				return err
			})
			t.Logf("%s beta: its %d endpoints not ready after %s", f.name, onBeta, time.Since(start).Round(100*time.Millisecond))
			pods := &corev1.PodList{}
			_ = ca.List(ctx, pods, client.InNamespace("shop"), client.MatchingFields{"spec.nodeName": "annex-beta"})
			for _, p := range pods.Items {
				if p.Labels["annex.dev/remote-unavailable"] != "true" || podReady(&p) {
					t.Errorf("pod %s on beta: label %q, ready %v", p.Name, p.Labels["annex.dev/remote-unavailable"], podReady(&p))
				}
			}
			start = time.Now()
			if err := beta.ResumeAPIServer(ctx); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, "all 20 endpoints ready again", func() error {
				n, err := readyEndpoints(ctx, ca, "shop", "web")
				if err == nil && n != 20 {
					err = fmt.Errorf("%d ready endpoints", n)
				}
				return err
			})
			t.Logf("%s beta resumed: all endpoints ready after %s", f.name, time.Since(start).Round(100*time.Millisecond))
		}
	})
	t.Run("provider outage: deletions, updates, agent restart, recovery", func(t *testing.T) {
		checkOutage(t, "shop", "web", 20, beta, alphaAgent, ca, cb)
	})
	t.Run("ConfigMap update reaches the providers", func(t *testing.T) {
		cm.Data["color"] = "green"
		if err := ca.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "green on beta", func() error {
			got := &corev1.ConfigMap{}
			if err := cb.Get(ctx, client.ObjectKey{Namespace: "shop-alpha", Name: "settings"}, got); err != nil {
				return err
			}
			if got.Data["color"] != "green" {
				return fmt.Errorf("color %q", got.Data["color"])
			}
			return nil
		})
	})
	t.Run("a pod waits for the ConfigMaps it mounts to reach the provider", func(t *testing.T) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "needs-cm"}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"annex.dev/remote-cluster-id": "gamma"},
			Containers:   []corev1.Container{{Name: "c", Image: "x", VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}}},
			Volumes: []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "late"}}}}}}}
		if err := ca.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ca.Delete(ctx, p) })
		eventually(t, 30*time.Second, "pod waiting for ConfigMap late", func() error {
			if err := ca.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			for _, c := range p.Status.Conditions {
				if c.Reason == "WaitingForDependencies" && strings.Contains(c.Message, "ConfigMap late") {
					return nil
				}
			}
			return fmt.Errorf("conditions %+v", p.Status.Conditions)
		})
		if err := cg.Get(ctx, client.ObjectKey{Namespace: "shop-alpha", Name: "needs-cm"}, &offloadingv1alpha1.ShadowPod{}); err == nil {
			t.Fatal("offloaded before its ConfigMap reached gamma")
		}
		late := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "late"}, Data: map[string]string{"k": "v"}}
		if err := ca.Create(ctx, late); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ca.Delete(ctx, late) })
		eventually(t, 30*time.Second, "pod Running on gamma", func() error {
			if err := ca.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("phase %s", p.Status.Phase)
			}
			return cg.Get(ctx, client.ObjectKey{Namespace: "shop-alpha", Name: "late"}, &corev1.ConfigMap{})
		})
	})
	t.Run("privileged pod refused with a visible reason", func(t *testing.T) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "root"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "x", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}}
		if err := ca.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "privileged pod Failed with a reason", func() error {
			if err := ca.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodFailed || p.Status.Reason == "" || !strings.Contains(p.Status.Message, "rivileged") {
				return fmt.Errorf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
			return nil
		})
		t.Logf("refused: %s: %s", p.Status.Reason, p.Status.Message)
	})
	t.Run("the provider's refusal shows as an Event on the local pod", func(t *testing.T) {
		// A hostPath volume: the remote namespace's Pod Security level
		// (baseline) forbids it, the provider's agent refuses the ShadowPod
		// and records a Warning Event on it.
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "hostpath"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "x"}},
			Volumes:    []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}}}
		if err := ca.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		var got corev1.Event
		eventually(t, 60*time.Second, "an Event from the provider on the refused pod", func() error {
			if err := ca.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			provider := strings.TrimPrefix(p.Spec.NodeName, "annex-")
			if provider == p.Spec.NodeName || provider == "" {
				return fmt.Errorf("pod on node %q", p.Spec.NodeName)
			}
			events := &corev1.EventList{}
			if err := ca.List(ctx, events, client.InNamespace("shop")); err != nil {
				return err
			}
			for _, ev := range events.Items {
				if ev.InvolvedObject.Name == p.Name && ev.InvolvedObject.UID == p.UID && ev.Type == corev1.EventTypeWarning &&
					ev.Source.Component == "annex-"+provider && strings.HasPrefix(ev.Message, provider+": ") {
					got = ev
					return nil
				}
			}
			return fmt.Errorf("no Event from %s among %d", provider, len(events.Items))
		})
		t.Logf("reflected: %s %s: %s", got.Type, got.Reason, got.Message)
		if got.Reason != offloadingv1alpha1.ReasonForbidden {
			t.Errorf("reason %q, want the refusal's Forbidden", got.Reason)
		}
	})
	t.Run("a pod over the consumer's grant is refused by the provider with a visible reason and Event", func(t *testing.T) {
		// Bound to annex-beta directly, past the consumer's scheduler (which
		// keeps pods within the virtual node's capacity): beta's agent counts
		// the consumer's pods against its accepted ResourceSlice (8 CPUs).
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "greedy"}, Spec: corev1.PodSpec{
			NodeName: "annex-beta",
			Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100")}}}}}}
		if err := ca.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "the pod Failed with reason QuotaExceeded and beta's Event", func() error {
			if err := ca.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodFailed || p.Status.Reason != offloadingv1alpha1.ReasonQuotaExceeded {
				return fmt.Errorf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
			events := &corev1.EventList{}
			if err := ca.List(ctx, events, client.InNamespace("shop")); err != nil {
				return err
			}
			for _, ev := range events.Items {
				if ev.InvolvedObject.UID == p.UID && ev.Reason == offloadingv1alpha1.ReasonQuotaExceeded && ev.Source.Component == "annex-beta" {
					return nil
				}
			}
			return fmt.Errorf("no QuotaExceeded Event from beta among %d", len(events.Items))
		})
		t.Logf("refused: %s: %s", p.Status.Reason, p.Status.Message)
		if err := ca.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a pod the provider cannot schedule says so, and runs once it can", func(t *testing.T) {
		// Every node of beta tainted: beta's scheduler cannot place the pod.
		nodes := &corev1.NodeList{}
		if err := cb.List(ctx, nodes); err != nil {
			t.Fatal(err)
		}
		full := corev1.Taint{Key: "e2e.annex.dev/full", Effect: corev1.TaintEffectNoSchedule}
		setTaint := func(on bool) {
			t.Helper()
			for _, n := range nodes.Items {
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					node := &corev1.Node{}
					if err := cb.Get(ctx, client.ObjectKeyFromObject(&n), node); err != nil {
						return err
					}
					node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(x corev1.Taint) bool { return x.Key == full.Key })
					if on {
						node.Spec.Taints = append(node.Spec.Taints, full)
					}
					return cb.Update(ctx, node)
				})
				if err != nil {
					t.Fatalf("taint %s: %v", n.Name, err)
				}
			}
		}
		setTaint(true)
		t.Cleanup(func() { setTaint(false) })
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "unschedulable"}, Spec: corev1.PodSpec{
			NodeName:   "annex-beta",
			Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		if err := ca.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "the local pod says the provider cannot schedule it", func() error {
			if err := ca.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodPending || p.Status.Reason != offloadingv1alpha1.ReasonProviderUnschedulable || !strings.Contains(p.Status.Message, "untolerated taint") {
				return fmt.Errorf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
			return nil
		})
		t.Logf("status: %s: %s", p.Status.Reason, p.Status.Message)
		eventually(t, 60*time.Second, "beta's FailedScheduling Event on the local pod", func() error {
			events := &corev1.EventList{}
			if err := ca.List(ctx, events, client.InNamespace("shop")); err != nil {
				return err
			}
			for _, ev := range events.Items {
				if ev.InvolvedObject.UID == p.UID && ev.Reason == "FailedScheduling" && ev.Source.Component == "annex-beta" {
					return nil
				}
			}
			return fmt.Errorf("none among %d Events", len(events.Items))
		})
		setTaint(false)
		eventually(t, 60*time.Second, "the pod Running and Ready once beta has room", func() error {
			if err := ca.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			if !podReady(p) || p.Status.Reason != "" {
				return fmt.Errorf("phase %s ready %v reason %q", p.Status.Phase, podReady(p), p.Status.Reason)
			}
			return nil
		})
		if err := ca.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("pods of other namespaces never land on virtual nodes", func(t *testing.T) {
		d := deployment("local-only", "app", 6)
		if err := ca.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "6 local pods Running", func() error {
			return podsReady(ctx, ca, "local-only", "app=app", 6, func(p *corev1.Pod) error {
				if strings.HasPrefix(p.Spec.NodeName, "annex-") {
					return fmt.Errorf("pod %s landed on virtual node %s", p.Name, p.Spec.NodeName)
				}
				return nil
			})
		})
	})
	t.Run("scale down and delete clean up remotely", func(t *testing.T) {
		if err := ca.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			t.Fatal(err)
		}
		dep.Spec.Replicas = ptr.To(int32(4))
		if err := ca.Update(ctx, dep); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "4 remote pods", func() error { return remotePods(ctx, "web", 4, cb, cg) })
		if err := ca.Delete(ctx, dep); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "no remote pods", func() error { return remotePods(ctx, "web", 0, cb, cg) })
	})
	t.Run("restart safety", func(t *testing.T) {
		checkRestarts(t, "shop", 50, alphaAgent, betaAgent, ca, cb, cg)
	})
	if out, err := annexctl(t, "unoffload", "namespace", "shop", "--kubeconfig", alpha.KubeconfigPath()); err != nil {
		t.Fatalf("unoffload: %v\n%s", err, out)
	}
	for name, c := range map[string]client.Client{"beta": cb, "gamma": cg} {
		eventually(t, 60*time.Second, name+"'s remote namespace gone", func() error {
			if err := c.Get(ctx, client.ObjectKey{Name: "shop-alpha"}, &corev1.Namespace{}); err == nil {
				return errors.New("still there")
			}
			return nil
		})
	}
}

func deployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx",
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}}},
			},
		},
	}
}

func nodeReady(ctx context.Context, c client.Client, name string) error {
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("node %s not Ready: %+v", name, n.Status.Conditions)
}

// podsReady checks that exactly want pods match selector, all Running and
// Ready with an IP, and each passes check (a check returning errSkip leaves
// the pod out).
func podsReady(ctx context.Context, c client.Client, ns, selector string, want int, check func(*corev1.Pod) error) error {
	pods := &corev1.PodList{}
	sel, _ := metav1.ParseToLabelSelector(selector)
	ls, _ := metav1.LabelSelectorAsSelector(sel)
	if err := c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: ls}); err != nil {
		return err
	}
	n := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		if err := check(p); errors.Is(err, errSkip) {
			continue
		} else if err != nil {
			return err
		}
		n++
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || !podReady(p) {
			return fmt.Errorf("pod %s: phase %s, IP %q, ready %v", p.Name, p.Status.Phase, p.Status.PodIP, podReady(p))
		}
	}
	if n != want {
		return fmt.Errorf("%d pods, want %d", n, want)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readyEndpoints(ctx context.Context, c client.Client, ns, svc string) (int, error) {
	slices := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, slices, client.InNamespace(ns), client.MatchingLabels{"kubernetes.io/service-name": svc}); err != nil {
		return 0, err
	}
	n := 0
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				n++
			}
		}
	}
	return n, nil
}

// remotePods checks that the providers together run want pods of app.
func remotePods(ctx context.Context, app string, want int, providers ...client.Client) error {
	n := 0
	for _, c := range providers {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace("shop-alpha"), client.MatchingLabels{"app": app}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				n++
			}
		}
	}
	if n != want {
		return fmt.Errorf("%d remote pods, want %d", n, want)
	}
	return nil
}

func countPodsOn(ctx context.Context, t *testing.T, c client.Client, ns, node string) int {
	t.Helper()
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ns), client.MatchingFields{"spec.nodeName": node}); err != nil {
		t.Fatal(err)
	}
	return len(pods.Items)
}
