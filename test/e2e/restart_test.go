package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// checkRestarts SIGKILLs the consumer's agent in the middle of a burst of n
// pods in ns and starts it again: every pod must end up offloaded exactly
// once. Then it SIGKILLs beta's agent: beta's pods keep running and the
// restarted agent adopts them (same pods, same UIDs).
func checkRestarts(t *testing.T, ns string, n int, alpha, betaAgent *testAgent, ca, cb, cg client.Client) {
	ctx := context.Background()
	remoteNS := ns + "-alpha"
	dep := deployment(ns, "burst", int32(n)) //nolint:gosec // G115: n is a small pod count
	if err := ca.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ca.Delete(ctx, dep)
		eventually(t, 60*time.Second, "no burst pods left on the providers", func() error { return remotePods(ctx, "burst", 0, cb, cg) })
	})
	eventually(t, 60*time.Second, "the burst under way", func() error {
		got := shadowPodsOf(ctx, t, "burst", remoteNS, cb, cg)
		if len(got) < 5 {
			return fmt.Errorf("%d ShadowPods so far", len(got))
		}
		return nil
	})
	t.Logf("killing alpha's agent with %d of %d ShadowPods created", len(shadowPodsOf(ctx, t, "burst", remoteNS, cb, cg)), n)
	alpha.kill(t)
	alpha.start(t)
	eventually(t, 120*time.Second, fmt.Sprintf("%d burst pods Ready", n), func() error {
		return podsReady(ctx, ca, ns, "app=burst", n, func(*corev1.Pod) error { return nil })
	})
	t.Run("every pod offloaded exactly once", func(t *testing.T) {
		local := &corev1.PodList{}
		if err := ca.List(ctx, local, client.InNamespace(ns), client.MatchingLabels{"app": "burst"}); err != nil {
			t.Fatal(err)
		}
		shadows := shadowPodsOf(ctx, t, "burst", remoteNS, cb, cg)
		if len(shadows) != n {
			t.Errorf("%d ShadowPods on the providers, want %d", len(shadows), n)
		}
		for _, p := range local.Items {
			if _, ok := shadows[p.Name]; !ok {
				t.Errorf("pod %s has no ShadowPod", p.Name)
			}
		}
		if err := remotePods(ctx, "burst", n, cb, cg); err != nil {
			t.Error(err)
		}
	})

	t.Run("a killed provider agent re-adopts its running pods", func(t *testing.T) {
		before := podUIDs(ctx, t, cb, remoteNS, "burst")
		if len(before) == 0 {
			t.Fatal("no burst pods on beta")
		}
		betaAgent.kill(t)
		// Without its agent beta's pods keep running.
		time.Sleep(2 * time.Second)
		if after := podUIDs(ctx, t, cb, remoteNS, "burst"); len(after) != len(before) {
			t.Fatalf("beta runs %d pods without its agent, had %d", len(after), len(before))
		}
		betaAgent.start(t)
		// The restarted agent (a new identity: it waits out the old Lease)
		// takes its ShadowPods over without replacing a single pod.
		eventually(t, 60*time.Second, "beta's ShadowPods controlling their running pods again", func() error {
			sps := &offloadingv1alpha1.ShadowPodList{}
			if err := cb.List(ctx, sps, client.InNamespace(remoteNS)); err != nil {
				return err
			}
			for _, sp := range sps.Items {
				if sp.Spec.PodLabels["app"] != "burst" {
					continue
				}
				pod := &corev1.Pod{}
				if err := cb.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: sp.Name}, pod); err != nil {
					return fmt.Errorf("ShadowPod %s: %w", sp.Name, err)
				}
				if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != sp.UID || pod.Status.Phase != corev1.PodRunning {
					return fmt.Errorf("ShadowPod %s: its pod %s, controller %v", sp.Name, pod.Status.Phase, ref)
				}
			}
			return nil
		})
		// Let the new agent reconcile everything at least once.
		time.Sleep(3 * time.Second)
		after := podUIDs(ctx, t, cb, remoteNS, "burst")
		for name, uid := range before {
			if after[name] != uid {
				t.Errorf("pod %s was replaced (UID %s, now %q)", name, uid, after[name])
			}
		}
		if err := podsReady(ctx, ca, ns, "app=burst", n, func(*corev1.Pod) error { return nil }); err != nil {
			t.Error(err)
		}
	})
}

// shadowPodsOf returns the ShadowPods of app in remoteNS on the providers,
// by name; a name on two providers is an error.
func shadowPodsOf(ctx context.Context, t *testing.T, app, remoteNS string, providers ...client.Client) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, c := range providers {
		list := &offloadingv1alpha1.ShadowPodList{}
		if err := c.List(ctx, list, client.InNamespace(remoteNS)); err != nil {
			t.Fatal(err)
		}
		for _, sp := range list.Items {
			if sp.Spec.PodLabels["app"] != app {
				continue
			}
			if out[sp.Name] {
				t.Errorf("ShadowPod %s exists twice", sp.Name)
			}
			out[sp.Name] = true
		}
	}
	return out
}

// podUIDs maps the names of app's pods in ns to their UIDs.
func podUIDs(ctx context.Context, t *testing.T, c client.Client, ns, app string) map[string]types.UID {
	t.Helper()
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out[p.Name] = p.UID
		}
	}
	return out
}
