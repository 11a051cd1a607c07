package shadowpod_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/replicator"
	"github.com/annexhq/annex/internal/controller/resourceslice"
	"github.com/annexhq/annex/internal/controller/shadowpod"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// TestQuotaIntegration runs the provider's resourceslice and shadowpod
// controllers against a real API server (its garbage collector and
// scheduler, kwok's node of 32 CPUs) and checks that a tenant's quota
// holds: two slices sent together cannot both take the capacity, a
// BestEffort pod runs with the default requests, an ungranted GPU is
// refused, and a pod orphaned by a ShadowPod deleted with
// propagationPolicy Orphan is deleted and counts until it is gone.
func TestQuotaIntegration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster := clustertest.Start(ctx, t, localcluster.Options{Name: "beta"})
	scheme := clustertest.Scheme(t)
	c, cfg := clustertest.Client(t, cluster, scheme)
	clustertest.InstallCRDs(ctx, t, c)

	const (
		consumer = "alpha"
		ns       = "web-alpha"
	)
	tenant := corev1alpha1.TenantNamespaceName(consumer)
	for _, name := range []string{tenant, ns} {
		clustertest.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex,
		}}}))
	}
	clustertest.Eventually(t, time.Minute, "ServiceAccount default in "+ns, func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
	})

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	clustertest.Must(t, err)
	opts := shadowpod.DefaultOptions()
	clustertest.Must(t, shadowpod.New(mgr.GetClient(), mgr.GetEventRecorder("annex-shadowpod"), opts).SetupWithManager(mgr))
	clustertest.Must(t, resourceslice.New(mgr.GetClient(), mgr.GetEventRecorder("annex-resourceslice"), "beta", resourceslice.Options{}).SetupWithManager(mgr))
	mgrDone := make(chan struct{})
	go func() {
		defer close(mgrDone)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	defer func() { cancel(); <-mgrDone }()

	// Two slices of 20 CPUs sent together: the capacity is 32.
	var wg sync.WaitGroup
	for _, name := range []string{"one", "two"} {
		wg.Go(func() {
			rs := &corev1alpha1.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: name,
					Annotations: map[string]string{replicator.AnnotationOriginNamespace: corev1alpha1.TenantNamespaceName("beta")}},
				Spec: corev1alpha1.ResourceSliceSpec{ConsumerClusterID: consumer, ProviderClusterID: "beta", Resources: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("20"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("10"),
				}},
			}
			if err := c.Create(ctx, rs); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	clustertest.Eventually(t, time.Minute, "one slice accepted, the other denied", func() error {
		phases := map[corev1alpha1.ResourceSlicePhase]int{}
		var denial string
		for _, name := range []string{"one", "two"} {
			rs := &corev1alpha1.ResourceSlice{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: tenant, Name: name}, rs); err != nil {
				return err
			}
			phases[rs.Status.Phase]++
			if rs.Status.Phase == corev1alpha1.ResourceSliceDenied {
				for _, cond := range rs.Status.Conditions {
					denial = cond.Message
				}
			}
		}
		if phases[corev1alpha1.ResourceSliceAccepted] != 1 || phases[corev1alpha1.ResourceSliceDenied] != 1 {
			return fmt.Errorf("phases %v", phases)
		}
		if want := "requested cpu 20 plus 20 already granted to consumer alpha exceeds this provider's allocatable capacity 32"; denial != want {
			return fmt.Errorf("denial %q, want %q", denial, want)
		}
		return nil
	})

	// A BestEffort pod runs with the default requests.
	createShadowPod(ctx, t, c, ns, "best", corev1.ResourceRequirements{})
	pod := waitPod(ctx, t, c, ns, "best")
	if got := pod.Spec.Containers[0].Resources.Requests; got.Cpu().String() != "100m" || got.Memory().String() != "128Mi" {
		t.Errorf("requests of the BestEffort pod = %v, want cpu=100m,memory=128Mi", got)
	}

	// A GPU no slice grants is refused, and nothing is made for it.
	createShadowPod(ctx, t, c, ns, "gpu", corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
		func(sp *offloadingv1alpha1.ShadowPod) { sp.Spec.Pod.ServiceAccountName = "gpu-runner" })
	waitRefused(ctx, t, c, ns, "gpu", "its containers request resources that no accepted ResourceSlice of consumer alpha grants and that this provider does not leave unmetered: nvidia.com/gpu 1 requested")
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gpu-runner"}, &corev1.ServiceAccount{}); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceAccount of the refused ShadowPod: err = %v, want NotFound", err)
	}

	// 19 CPUs: with best's 100m, 19.1 of the 20 granted.
	createShadowPod(ctx, t, c, ns, "big", cpu("19"))
	big := waitPod(ctx, t, c, ns, "big")
	// Held in Terminating once deleted, so that the test sees it counted.
	const hold = "test.annex.dev/hold"
	orig := big.DeepCopy()
	big.Finalizers = append(big.Finalizers, hold)
	clustertest.Must(t, c.Patch(ctx, big, client.MergeFrom(orig)))
	sp := &offloadingv1alpha1.ShadowPod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"}}
	clustertest.Must(t, c.Delete(ctx, sp, client.PropagationPolicy(metav1.DeletePropagationOrphan)))
	clustertest.Eventually(t, time.Minute, "the orphaned pod deleted by the controller", func() error {
		p := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(big), p); err != nil {
			return err
		}
		if len(p.OwnerReferences) > 0 || p.DeletionTimestamp.IsZero() {
			return fmt.Errorf("ownerReferences %v, deletionTimestamp %v", p.OwnerReferences, p.DeletionTimestamp)
		}
		events := &eventsv1.EventList{}
		if err := c.List(ctx, events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == shadowpod.ReasonOrphanDeleted && e.Regarding.Name == "big" && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return errors.New("no OrphanDeleted Event")
	})

	// It still runs (Terminating) and counts: a ShadowPod that needs its
	// room waits, one that could never fit is refused.
	createShadowPod(ctx, t, c, ns, "next", cpu("2"))
	createShadowPod(ctx, t, c, ns, "huge", cpu("21"))
	waitRefused(ctx, t, c, ns, "huge", "cpu 21 requested + ")
	time.Sleep(3 * time.Second)
	next := &offloadingv1alpha1.ShadowPod{}
	clustertest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "next"}, next))
	if next.Status.Phase == corev1.PodFailed {
		t.Errorf("next refused while the orphaned pod was only going away: %+v", next.Status)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "next"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod of next while the orphaned pod still runs: err = %v, want NotFound", err)
	}
	// Once it is gone, next runs.
	clustertest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(big), big))
	orig = big.DeepCopy()
	big.Finalizers = nil
	clustertest.Must(t, c.Patch(ctx, big, client.MergeFrom(orig)))
	waitPod(ctx, t, c, ns, "next")
}

func cpu(q string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}}
}

func createShadowPod(ctx context.Context, t *testing.T, c client.Client, ns, name string, res corev1.ResourceRequirements, mutate ...func(*offloadingv1alpha1.ShadowPod)) {
	t.Helper()
	sp := &offloadingv1alpha1.ShadowPod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: offloadingv1alpha1.ShadowPodSpec{Pod: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "app", Image: "nginx", Resources: res}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		}},
	}
	for _, m := range mutate {
		m(sp)
	}
	clustertest.Must(t, c.Create(ctx, sp))
}

func waitPod(ctx context.Context, t *testing.T, c client.Client, ns, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	clustertest.Eventually(t, time.Minute, "pod "+name, func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod)
	})
	return pod
}

func waitRefused(ctx context.Context, t *testing.T, c client.Client, ns, name, msg string) {
	t.Helper()
	clustertest.Eventually(t, time.Minute, "ShadowPod "+name+" refused", func() error {
		sp := &offloadingv1alpha1.ShadowPod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sp); err != nil {
			return err
		}
		if sp.Status.Phase != corev1.PodFailed || sp.Status.Reason != offloadingv1alpha1.ReasonQuotaExceeded || !strings.Contains(sp.Status.Message, msg) {
			return fmt.Errorf("status %+v, want Failed, QuotaExceeded, message with %q", sp.Status, msg)
		}
		return nil
	})
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod of refused ShadowPod %s: err = %v, want NotFound", name, err)
	}
}
