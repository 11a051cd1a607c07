package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/localcluster"
)

// TestForcedUnpeer: with pods offloaded to beta and gamma, beta's API server
// dies for good; `unpeer beta` refuses without --force and changes nothing;
// with --force it leaves nothing of the peering on alpha within seconds, the
// Deployment's pods come back on gamma, and gamma is untouched. When beta
// comes back it finds its consumer gone and removes the tenant by itself after
// the grace period; then alpha and beta can peer again.
func TestForcedUnpeer(t *testing.T) {
	alpha, beta, gamma := env.clusters[0], env.clusters[1], env.clusters[2]
	fast := []string{"--consumer-heartbeat-interval=2s", "--tenant-grace-period=20s"}
	installAndRunAgent(t, alpha, "alpha", fast...)
	installAndRunAgent(t, beta, "beta", fast...)
	installAndRunAgent(t, gamma, "gamma", fast...)
	t.Run("dead provider", func(t *testing.T) { forcedUnpeer(t, "dead", beta.KillAPIServer) })
	t.Run("hung provider", func(t *testing.T) { forcedUnpeer(t, "hung", beta.PauseAPIServer) })
	t.Run("reachable provider: --force is a graceful unpeer", func(t *testing.T) { forceReachable(t) })
}

// forceReachable unpeers alpha from a healthy gamma with --force: the
// graceful path runs, so gamma is cleaned up at once, not after the grace
// period.
func forceReachable(t *testing.T) {
	alpha, gamma := env.clusters[0], env.clusters[2]
	ctx := context.Background()
	ns := "burst-reachable"
	peer(t, alpha, gamma)
	ca, cg := crClient(t, alpha), crClient(t, gamma)
	t.Cleanup(func() {
		_, _ = annexctl(t, "unoffload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath())
		_ = ca.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	if err := ca.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if out, err := annexctl(t, "offload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath(), "--pod-strategy", "Remote"); err != nil {
		t.Fatalf("offload: %v\n%s", err, out)
	}
	if err := ca.Create(ctx, deployment(ns, "work", 4)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "4 pods Ready on gamma", func() error {
		return podsReady(ctx, ca, ns, "app=work", 4, func(*corev1.Pod) error { return nil })
	})
	start := time.Now()
	out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "gamma", "--force")
	if err != nil {
		t.Fatalf("unpeer --force: %v\n%s", err, out)
	}
	t.Logf("unpeer --force with a reachable provider took %s", time.Since(start).Round(100*time.Millisecond))
	if !strings.Contains(out, "answers: removing the peering through it") || strings.Contains(out, "forcing") {
		t.Errorf("want the graceful path:\n%s", out)
	}
	if left := leftovers(ctx, t, ca, "gamma"); len(left) > 0 {
		t.Errorf("left on alpha: %s", strings.Join(left, ", "))
	}
	// Well within the 20 s grace period: gamma cleans up because alpha told it.
	eventually(t, 15*time.Second, "gamma without alpha's tenant and remote namespace", func() error {
		for _, name := range []string{"annex-tenant-alpha", ns + "-alpha"} {
			if err := cg.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{}); err == nil {
				return fmt.Errorf("namespace %s still there", name)
			}
		}
		return nil
	})
}

// forcedUnpeer runs the scenario with beta failed by fault.
func forcedUnpeer(t *testing.T, name string, fault func() error) {
	alpha, beta, gamma := env.clusters[0], env.clusters[1], env.clusters[2]
	ctx := context.Background()
	ns := "burst-" + name
	peer(t, alpha, beta)
	peer(t, alpha, gamma)
	t.Cleanup(func() {
		_ = beta.ResumeAPIServer(context.Background())
		_, _ = annexctl(t, "unoffload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath())
		for _, p := range []*localcluster.Cluster{beta, gamma} {
			if out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", p.KubeconfigPath()); err != nil {
				t.Errorf("clean-up unpeer %s: %v\n%s", p.Name(), err, out)
			}
		}
	})
	ca, cb, cg := crClient(t, alpha), crClient(t, beta), crClient(t, gamma)
	if err := ca.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if out, err := annexctl(t, "offload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath(), "--pod-strategy", "Remote"); err != nil {
		t.Fatalf("offload: %v\n%s", err, out)
	}
	if err := ca.Create(ctx, deployment(ns, "work", 10)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 120*time.Second, "10 pods Ready on both virtual nodes", func() error {
		seen := map[string]bool{}
		err := podsReady(ctx, ca, ns, "app=work", 10, func(p *corev1.Pod) error { seen[p.Spec.NodeName] = true; return nil })
		if err == nil && (!seen["annex-beta"] || !seen["annex-gamma"]) {
			err = fmt.Errorf("pods only on %v", seen)
		}
		return err
	})

	if err := fault(); err != nil {
		t.Fatal(err)
	}
	t.Run("without --force: clear error, nothing changed", func(t *testing.T) {
		out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "beta", "--graceful-timeout", "3s")
		if err == nil || !strings.Contains(out, "--force") || !strings.Contains(out, "nothing was changed") {
			t.Fatalf("want a refusal that suggests --force, got %v:\n%s", err, out)
		}
		fc := &corev1alpha1.ForeignCluster{}
		if err := ca.Get(ctx, client.ObjectKey{Name: "beta"}, fc); err != nil || fc.Spec.Unreachable {
			t.Errorf("ForeignCluster beta changed: %v, unreachable=%v", err, fc.Spec.Unreachable)
		}
		if err := ca.Get(ctx, client.ObjectKey{Namespace: "annex-peer-beta", Name: "beta"}, &corev1alpha1.VirtualNode{}); err != nil {
			t.Errorf("VirtualNode beta gone: %v", err)
		}
	})
	t.Run("with --force: nothing of beta left on alpha", func(t *testing.T) {
		start := time.Now()
		out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "beta", "--force", "--graceful-timeout", "3s", "--timeout", "60s")
		if err != nil {
			t.Fatalf("forced unpeer: %v\n%s", err, out)
		}
		t.Logf("forced unpeer with a %s provider took %s", name, time.Since(start).Round(100*time.Millisecond))
		if !strings.Contains(out, "Not cleaned here") {
			t.Errorf("unpeer does not say what it could not clean on the provider:\n%s", out)
		}
		if left := leftovers(ctx, t, ca, "beta"); len(left) > 0 {
			t.Errorf("left on alpha: %s", strings.Join(left, ", "))
		}
	})
	t.Run("pods come back on gamma, gamma untouched", func(t *testing.T) {
		eventually(t, 120*time.Second, "10 pods Ready on gamma", func() error {
			return podsReady(ctx, ca, ns, "app=work", 10, func(p *corev1.Pod) error {
				if p.Spec.NodeName != "annex-gamma" {
					return fmt.Errorf("pod %s on %q", p.Name, p.Spec.NodeName)
				}
				return nil
			})
		})
		fc := &corev1alpha1.ForeignCluster{}
		if err := ca.Get(ctx, client.ObjectKey{Name: "gamma"}, fc); err != nil || fc.Spec.Unreachable {
			t.Errorf("gamma's ForeignCluster: %v unreachable=%v", err, fc.Spec.Unreachable)
		}
		if err := remotePodsIn(ctx, cg, ns+"-alpha", 10); err != nil {
			t.Error(err)
		}
	})
	t.Run("beta comes back and removes the tenant after the grace period", func(t *testing.T) {
		if err := beta.ResumeAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		// The grace period (20 s) counts from when beta's API server
		// answers its agent again, then the namespaces' deletion.
		eventually(t, 150*time.Second, "beta without alpha's tenant", func() error {
			for _, name := range []string{"annex-tenant-alpha", ns + "-alpha"} {
				n := &corev1.Namespace{}
				if err := cb.Get(ctx, client.ObjectKey{Name: name}, n); err == nil {
					return fmt.Errorf("namespace %s still there (%s)", name, n.Status.Phase)
				}
			}
			if err := cb.Get(ctx, client.ObjectKey{Name: "alpha"}, &corev1alpha1.ForeignCluster{}); err == nil {
				return errors.New("ForeignCluster alpha still on beta")
			}
			links := &networkingv1alpha1.NetworkConfigurationList{}
			if err := cb.List(ctx, links, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
				return err
			}
			for _, nc := range links.Items {
				if nc.Spec.RemoteClusterID == "alpha" {
					return errors.New("NetworkConfiguration with alpha still on beta")
				}
			}
			return nil
		})
		if err := ca.Get(ctx, client.ObjectKey{Namespace: "annex-peer-beta", Name: "beta"}, &corev1alpha1.VirtualNode{}); err == nil {
			t.Error("a VirtualNode for beta came back on alpha")
		}
	})
	t.Run("peer again", func(t *testing.T) {
		peer(t, alpha, beta)
		eventually(t, 30*time.Second, "virtual node annex-beta Ready", func() error { return nodeReady(ctx, ca, "annex-beta") })
	})
}

// leftovers lists what of the peering with provider id remains on alpha.
func leftovers(ctx context.Context, t *testing.T, ca client.Client, id string) []string {
	t.Helper()
	var left []string
	check := func(what string, obj client.Object, key client.ObjectKey) {
		if err := ca.Get(ctx, key, obj); err == nil {
			left = append(left, fmt.Sprintf("%s (finalizers %v)", what, obj.GetFinalizers()))
		}
	}
	peerNS, node := "annex-peer-"+id, "annex-"+id
	check("Node "+node, &corev1.Node{}, client.ObjectKey{Name: node})
	check("VirtualNode", &corev1alpha1.VirtualNode{}, client.ObjectKey{Namespace: peerNS, Name: id})
	check("ResourceSlice", &corev1alpha1.ResourceSlice{}, client.ObjectKey{Namespace: peerNS, Name: "peering"})
	check("namespace "+peerNS, &corev1.Namespace{}, client.ObjectKey{Name: peerNS})
	check("ForeignCluster "+id, &corev1alpha1.ForeignCluster{}, client.ObjectKey{Name: id})
	links := &networkingv1alpha1.NetworkConfigurationList{}
	_ = ca.List(ctx, links, client.InNamespace(corev1alpha1.AgentNamespace))
	for _, nc := range links.Items {
		if nc.Spec.RemoteClusterID == id {
			left = append(left, "NetworkConfiguration "+nc.Name)
		}
	}
	pods := &corev1.PodList{}
	_ = ca.List(ctx, pods, client.MatchingFields{"spec.nodeName": node})
	for _, p := range pods.Items {
		left = append(left, "pod "+p.Namespace+"/"+p.Name+" on "+node)
	}
	return left
}

func remotePodsIn(ctx context.Context, c client.Client, ns string, want int) error {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return err
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	if n != want {
		return fmt.Errorf("%d running pods in %s, want %d", n, ns, want)
	}
	return nil
}

// TestUnpeerTeardownOrder: when a peering ends, access goes first. beta, a
// provider of alpha, also hosts another tenant's pod, and beta's agent
// renders its gateway's file, whose accept list on the link with alpha
// must never hold that pod (the access of a link for direct connections).
// An unpeering stopped right after beta's ForeignCluster went leaves beta's
// gateway closed to alpha, and beta's agent removes the link by itself; a
// hostile alpha that releases its heartbeat with the tenant's credential
// alone makes beta remove the link before the tenant and its
// ForeignCluster; a plain unpeer removes the link before anything else.
func TestUnpeerTeardownOrder(t *testing.T) {
	alpha, beta := env.clusters[0], env.clusters[1]
	ctx := context.Background()
	fast := []string{"--consumer-heartbeat-interval=2s", "--tenant-grace-period=20s"}
	alphaAgent := installAndRunAgent(t, alpha, "alpha", fast...)
	betaAgent := installAndRunAgent(t, beta, "beta", fast...)
	ca, cb := crClient(t, alpha), crClient(t, beta)
	_, other := providerBystanders(t, beta, cb)
	forbidden := []string{other.Status.PodIP}
	unpeer := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := annexctl(t, append([]string{"unpeer", "--kubeconfig", alpha.KubeconfigPath()}, args...)...)
		if err != nil {
			t.Fatalf("unpeer %v: %v\n%s", args, err, out)
		}
		if left := leftovers(ctx, t, ca, "beta"); len(left) > 0 {
			t.Errorf("left on alpha: %s", strings.Join(left, ", "))
		}
		return out
	}

	t.Run("unpeer stopped after the provider's ForeignCluster went", func(t *testing.T) {
		peer(t, alpha, beta)
		start := time.Now()
		if err := linkWithoutPeeringClosed(ctx, t, betaAgent, cb, "alpha", forbidden); err != nil {
			t.Error(err)
		}
		t.Logf("closed and removed in %s", time.Since(start).Round(100*time.Millisecond))
		unpeer(t, "--remote-kubeconfig", beta.KubeconfigPath())
	})
	t.Run("a hostile consumer says goodbye without unpeering", func(t *testing.T) {
		peer(t, alpha, beta)
		tenant := tenantClient(t, ca, "beta")
		alphaAgent.kill(t) // it would renew the heartbeat; a hostile consumer runs none
		err := goodbyeTakesTheLinkFirst(ctx, t, betaAgent, tenant, cb, "alpha", forbidden)
		alphaAgent.start(t)
		if err != nil {
			t.Error(err)
		}
		unpeer(t, "beta", "--force", "--graceful-timeout", "3s", "--timeout", "60s")
	})
	t.Run("unpeer removes the link first", func(t *testing.T) {
		peer(t, alpha, beta)
		out := unpeer(t, "--remote-kubeconfig", beta.KubeconfigPath())
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "• deleted ") {
				if !strings.Contains(line, "NetworkConfiguration") {
					t.Errorf("first deletion %q, want the network link:\n%s", line, out)
				}
				break
			}
		}
	})
}
