package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// TestHelmInstalledProvider: a cluster installed with the Helm chart (as an
// operator would, with helm itself) is a provider like one installed by
// annexctl: alpha peers with it and its offloaded pods run there; helm
// uninstall then removes what the chart installed.
func TestHelmInstalledProvider(t *testing.T) {
	ctx := context.Background()
	const (
		name        = "delta"
		podCIDR     = "10.202.0.0/16"
		serviceCIDR = "10.96.0.0/16"
		extCIDR     = "10.74.0.0/16"
	)
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	delta, err := localcluster.Start(startCtx, localcluster.Options{Name: name, Dir: filepath.Join(env.dir, name),
		PodCIDR: podCIDR, ServiceCIDR: serviceCIDR, Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = delta.Stop(context.Background()) })

	helm := func(args ...string) string {
		t.Helper()
		out, err := clustertest.RunHelm(ctx, t, delta.KubeconfigPath(), args...)
		t.Logf("helm %s\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Fatalf("helm %s: %v", args[0], err)
		}
		return out
	}
	// The agent runs as a local process here (no real node runs its
	// image), so the chart installs everything but its Deployment.
	helm("install", "annex", filepath.Join("..", "..", "charts", "annex"), "--namespace", "default", "--wait",
		"--set", "clusterID="+name, "--set", "podCIDR="+podCIDR, "--set", "serviceCIDR="+serviceCIDR,
		"--set", "externalCIDR="+extCIDR, "--set", "agent.enabled=false")
	deltaAgent := &testAgent{cluster: delta}
	deltaAgent.start(t)

	alpha := env.clusters[0]
	installAndRunAgent(t, alpha, "alpha")
	peer(t, alpha, delta)
	unpeered := false
	t.Cleanup(func() {
		if !unpeered {
			_, _ = annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", delta.KubeconfigPath())
		}
		_ = deltaAgent.agent.Stop()
	})
	ca, cd := crClient(t, alpha), crClient(t, delta)
	eventually(t, 30*time.Second, "virtual node annex-delta Ready", func() error { return nodeReady(ctx, ca, "annex-delta") })

	if err := ca.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "charted"}}); err != nil {
		t.Fatal(err)
	}
	if out, err := annexctl(t, "offload", "namespace", "charted", "--kubeconfig", alpha.KubeconfigPath(), "--pod-strategy", "Remote"); err != nil {
		t.Fatalf("offload: %v\n%s", err, out)
	}
	if err := ca.Create(ctx, deployment("charted", "web", 3)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "3 pods Ready on annex-delta", func() error {
		return podsReady(ctx, ca, "charted", "app=web", 3, func(p *corev1.Pod) error {
			if p.Spec.NodeName != "annex-delta" {
				return fmt.Errorf("pod %s on %q", p.Name, p.Spec.NodeName)
			}
			return nil
		})
	})
	// They run on delta, in the remote namespace the chart-installed
	// agent made, with delta's pod IPs.
	pods := &corev1.PodList{}
	if err := cd.List(ctx, pods, client.InNamespace("charted-alpha")); err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range pods.Items {
		if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil && p.Status.Phase == corev1.PodRunning &&
			netip.MustParsePrefix(podCIDR).Contains(ip) {
			running++
		}
	}
	if running != 3 {
		t.Fatalf("%d pods Running with a pod IP of delta in charted-alpha, want 3: %+v", running, pods.Items)
	}

	if out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", delta.KubeconfigPath()); err != nil {
		t.Fatalf("unpeer: %v\n%s", err, out)
	}
	unpeered = true
	_ = deltaAgent.agent.Stop()
	helm("uninstall", "annex", "--namespace", "default", "--wait")
	eventually(t, 60*time.Second, "namespace "+corev1alpha1.AgentNamespace+" gone after helm uninstall", func() error {
		err := cd.Get(ctx, client.ObjectKey{Name: corev1alpha1.AgentNamespace}, &corev1.Namespace{})
		if err == nil {
			return fmt.Errorf("namespace %s still there", corev1alpha1.AgentNamespace)
		}
		return client.IgnoreNotFound(err)
	})
}
