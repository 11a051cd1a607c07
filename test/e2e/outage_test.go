package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/localcluster"
)

// outageBound is how long after a provider's API server dies (or hangs)
// its offloaded pods may stay Ready on the consumer and their endpoints
// ready: the consumer's failure detection must beat it.
const outageBound = 20 * time.Second

// checkOutage kills beta's API server while Deployment app (want replicas)
// runs in ns spread over beta and gamma, and checks what happens during the
// outage and after: a pod deleted locally is deleted on beta afterwards
// (no orphan), its replacement lands on gamma, a label change reaches beta
// afterwards, a consumer agent restarted during the outage keeps everything
// NotReady, and after recovery a pod whose ShadowPod was deleted on beta is
// gone locally while the others are Ready again.
func checkOutage(t *testing.T, ns, app string, want int, beta *localcluster.Cluster, alpha *testAgent, ca, cb client.Client) {
	ctx := context.Background()
	remoteNS := ns + "-alpha"
	onBeta := podsOn(ctx, t, ca, ns, "annex-beta")
	if len(onBeta) < 3 {
		t.Fatalf("%d pods on beta, need 3", len(onBeta))
	}
	deleted, touched, goneRemotely := onBeta[0], onBeta[1], onBeta[2]

	if err := beta.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = beta.ResumeAPIServer(context.Background()) })
	allNotReady := func() error {
		if err := nodeReady(ctx, ca, "annex-beta"); err == nil {
			return errors.New("node annex-beta is Ready")
		}
		for _, p := range podsOn(ctx, t, ca, ns, "annex-beta") {
			if p.DeletionTimestamp != nil {
				continue
			}
			if podReady(&p) || p.Labels[corev1alpha1.LabelRemoteUnavailable] != "true" {
				return fmt.Errorf("pod %s: ready %v, label %q", p.Name, podReady(&p), p.Labels[corev1alpha1.LabelRemoteUnavailable])
			}
		}
		return nil
	}
	eventually(t, outageBound, "beta's pods NotReady", allNotReady)
	t.Run("Events and metrics say what happened", func(t *testing.T) {
		eventually(t, 10*time.Second, "ProviderUnreachable Events on the Node and a pod", func() error {
			for _, obj := range []string{"annex-beta", onBeta[0].Name} {
				evs := &eventsv1.EventList{}
				if err := ca.List(ctx, evs); err != nil {
					return err
				}
				found := false
				for _, e := range evs.Items {
					found = found || (e.Regarding.Name == obj && e.Reason == "ProviderUnreachable")
				}
				if !found {
					return fmt.Errorf("no ProviderUnreachable Event about %s", obj)
				}
			}
			return nil
		})
		m := metricsOf(t, alpha)
		for _, want := range []string{`annex_peer_reachable{peer="beta"} 0`, `annex_peer_reachable{peer="gamma"} 1`, `annex_offloaded_pod_notready_seconds_count{provider="beta"}`} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})

	// During the outage: a deletion and a label change, neither of which
	// can reach beta now.
	if err := ca.Delete(ctx, &deleted); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(touched.DeepCopy())
	touched.Labels["touched"] = "yes"
	if err := ca.Patch(ctx, &touched, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the replacement Ready on gamma", func() error {
		return podsReady(ctx, ca, ns, "app="+app, want-len(onBeta)+1, func(p *corev1.Pod) error {
			if p.Spec.NodeName == "annex-beta" {
				return errSkip
			}
			return nil
		})
	})

	t.Run("a consumer agent restarted during the outage keeps the state", func(t *testing.T) {
		alpha.kill(t)
		alpha.start(t)
		// The dead agent's leader lease lapses within 35 s; the new one then
		// starts its virtual nodes. Nothing may turn Ready meanwhile.
		deadline := time.Now().Add(25 * time.Second)
		for time.Now().Before(deadline) {
			if err := allNotReady(); err != nil {
				t.Fatalf("after the agent restart: %v", err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})

	if err := beta.ResumeAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	// Right away, possibly before alpha has seen beta back: beta's
	// ShadowPod of goneRemotely is deleted there.
	sp := &offloadingv1alpha1.ShadowPod{}
	sp.Namespace, sp.Name = remoteNS, goneRemotely.Name
	if err := cb.Delete(ctx, sp); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Alpha reflects beta's truth: the pod whose ShadowPod went away on
	// beta is gone, the pods beta still runs are Ready and unlabelled.
	eventually(t, 30*time.Second, "alpha reflects beta's truth again", func() error {
		p := &corev1.Pod{}
		if err := ca.Get(ctx, client.ObjectKeyFromObject(&goneRemotely), p); err == nil && p.UID == goneRemotely.UID {
			return fmt.Errorf("pod %s deleted on beta is still here", goneRemotely.Name)
		}
		for _, p := range podsOn(ctx, t, ca, ns, "annex-beta") {
			if p.DeletionTimestamp != nil || p.Status.StartTime == nil {
				continue // deleted, or new since the outage
			}
			if !podReady(&p) || p.Labels[corev1alpha1.LabelRemoteUnavailable] != "" {
				return fmt.Errorf("pod %s: ready %v, label %q", p.Name, podReady(&p), p.Labels[corev1alpha1.LabelRemoteUnavailable])
			}
		}
		return nil
	})
	t.Logf("alpha reflects beta's truth %s after beta's API server came back", time.Since(start).Round(100*time.Millisecond))
	eventually(t, 60*time.Second, "alpha and beta converged", func() error {
		// The pod deleted locally has no ShadowPod left on beta.
		if err := cb.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: deleted.Name}, &offloadingv1alpha1.ShadowPod{}); err == nil {
			return fmt.Errorf("pod %s deleted during the outage still has a ShadowPod on beta", deleted.Name)
		}
		// The label change reached beta.
		got := &offloadingv1alpha1.ShadowPod{}
		if err := cb.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: touched.Name}, got); err != nil {
			return err
		}
		if got.Spec.PodLabels["touched"] != "yes" {
			return fmt.Errorf("ShadowPod %s labels %v", touched.Name, got.Spec.PodLabels)
		}
		// Every replica Ready (new ones included), none labelled unavailable.
		return podsReady(ctx, ca, ns, "app="+app, want, func(p *corev1.Pod) error {
			if v, ok := p.Labels[corev1alpha1.LabelRemoteUnavailable]; ok {
				return fmt.Errorf("pod %s still labelled %s=%s", p.Name, corev1alpha1.LabelRemoteUnavailable, v)
			}
			return nil
		})
	})
	t.Logf("alpha and beta converged %s after beta's API server came back (new pods need beta's agent)", time.Since(start).Round(100*time.Millisecond))
	eventually(t, 30*time.Second, fmt.Sprintf("%d ready endpoints", want), func() error {
		n, err := readyEndpoints(ctx, ca, ns, app)
		if err == nil && n != want {
			err = fmt.Errorf("%d ready endpoints", n)
		}
		return err
	})
}

// metricsOf returns the agent's Prometheus metrics.
func metricsOf(t *testing.T, a *testAgent) string {
	t.Helper()
	resp, err := http.Get("http://" + a.agent.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// errSkip, returned by a podsReady check, leaves the pod out of the count.
var errSkip = errors.New("skip")

// podsOn lists the pods of ns bound to node.
func podsOn(ctx context.Context, t *testing.T, c client.Client, ns, node string) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ns), client.MatchingFields{"spec.nodeName": node}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}
