package tenantquota

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/textlogger"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/replicator"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// TestIntegration divides budgets against a real API server, whose quota
// admission and quota controller enforce and count the shares. Consumer
// alpha has three remote namespaces and a budget of 12 ConfigMaps (each
// namespace also holds kube-root-ca.crt, which counts): writing into one
// namespace alone reaches the whole budget and no more, so does writing
// into all three at once, deleting frees the budget for another namespace,
// and consumer beta's namespace has a budget of its own. alpha's budget of
// ShadowPods follows its grant: twice its granted pods plus ShadowPodsSlack.
func TestIntegration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Annex's CRDs before the quota controller starts: it counts
	// ShadowPods from the start.
	lc := clustertest.Start(ctx, t, localcluster.Options{Name: "tenantquota", BeforeControllers: clustertest.ApplyCRDs})
	logf.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(0))))
	s := clustertest.Scheme(t)
	c, cfg := clustertest.Client(t, lc, s)
	const budget = 12
	spaces := map[string]string{"a-alpha": "alpha", "b-alpha": "alpha", "c-alpha": "alpha", "a-beta": "beta"}
	for name, consumer := range spaces {
		clustertest.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: managedLabels(consumer)}}))
	}
	// The tenant namespace is not a remote namespace: it gets no share.
	clustertest.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: corev1alpha1.TenantNamespacePrefix + "alpha", Labels: managedLabels("alpha")}}))
	clustertest.InstallCRDs(ctx, t, c)

	mgr := clustertest.NewManager(t, cfg, s)
	// A grant of 2 pods to alpha: 24 ShadowPods.
	tenantNS := corev1alpha1.TenantNamespacePrefix + "alpha"
	rs := &corev1alpha1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "peering",
		Annotations: map[string]string{replicator.AnnotationOriginNamespace: "annex-peer-p"}},
		Spec: corev1alpha1.ResourceSliceSpec{ConsumerClusterID: "alpha", ProviderClusterID: "p", Resources: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}}}
	clustertest.Must(t, c.Create(ctx, rs))
	rs.Status = corev1alpha1.ResourceSliceStatus{Phase: corev1alpha1.ResourceSliceAccepted, Resources: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}}
	clustertest.Must(t, c.Status().Update(ctx, rs))
	const shadowPods = 2*2 + ShadowPodsSlack

	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: Options{
		Budget:                  corev1.ResourceList{corev1.ResourceConfigMaps: *resource.NewQuantity(budget, resource.DecimalSI)},
		ShadowPodsPerGrantedPod: 2,
	}}
	clustertest.Must(t, r.SetupWithManager(mgr))
	clustertest.RunManager(ctx, t, mgr)

	for name := range spaces {
		clustertest.Eventually(t, 30*time.Second, "the share of "+name+" counted", func() error {
			q := &corev1.ResourceQuota{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: name, Name: ShareQuotaName}, q); err != nil {
				return err
			}
			if !Counted(q) {
				return fmt.Errorf("not counted: %+v", q.Status)
			}
			return nil
		})
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.TenantNamespacePrefix + "alpha", Name: ShareQuotaName}, &corev1.ResourceQuota{}); !apierrors.IsNotFound(err) {
		t.Errorf("share in the tenant namespace: %v, want none", err)
	}

	n := 0
	// fill creates ConfigMaps in namespaces, in turn, until none has been
	// admitted for 5 s, and returns how many were; a refusal must be the
	// share's.
	fill := func(namespaces ...string) int {
		t.Helper()
		made, last := 0, time.Now()
		for time.Since(last) < 5*time.Second {
			for _, ns := range namespaces {
				n++
				err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", n)}})
				switch {
				case err == nil:
					made, last = made+1, time.Now()
				case apierrors.IsForbidden(err) && strings.Contains(err.Error(), ShareQuotaName):
				default:
					t.Fatalf("create a ConfigMap in %s: %v", ns, err)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		return made
	}
	stored := func(namespaces ...string) int {
		t.Helper()
		total := 0
		for _, ns := range namespaces {
			list := &corev1.ConfigMapList{}
			clustertest.Must(t, c.List(ctx, list, client.InNamespace(ns)))
			total += len(list.Items)
		}
		return total
	}
	alpha := []string{"a-alpha", "b-alpha", "c-alpha"}
	clustertest.Eventually(t, 30*time.Second, "kube-root-ca.crt in every namespace", func() error {
		if got := stored(alpha...); got != len(alpha) {
			return fmt.Errorf("%d ConfigMaps", got)
		}
		return nil
	})

	made := fill("a-alpha")
	if got := stored(alpha...); got != budget {
		t.Fatalf("writing into a-alpha alone: %d admitted, alpha stores %d ConfigMaps, want its budget %d", made, got, budget)
	}
	t.Logf("writing into a-alpha alone: %d admitted, the budget reached", made)

	if made := fill("a-beta"); made != budget-1 {
		t.Errorf("beta: %d admitted, want %d (its own budget, less its kube-root-ca.crt)", made, budget-1)
	}

	// Deleting frees the budget for another namespace.
	list := &corev1.ConfigMapList{}
	clustertest.Must(t, c.List(ctx, list, client.InNamespace("a-alpha")))
	freed := 0
	for _, cm := range list.Items {
		if cm.Name != "kube-root-ca.crt" && freed < 6 {
			clustertest.Must(t, c.Delete(ctx, &cm))
			freed++
		}
	}
	made = fill(alpha...)
	if got := stored(alpha...); got != budget || made != freed {
		t.Errorf("after deleting %d in a-alpha, writing into all three: %d admitted, alpha stores %d, want %d", freed, made, got, budget)
	}

	// ShadowPods: the grant's budget, in all three namespaces together.
	sp := 0
	for i := 0; ; i++ {
		err := c.Create(ctx, &offloadingv1alpha1.ShadowPod{ObjectMeta: metav1.ObjectMeta{Namespace: alpha[i%len(alpha)], Name: fmt.Sprintf("sp-%d", i)},
			Spec: offloadingv1alpha1.ShadowPodSpec{Pod: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}})
		if err == nil {
			sp++
			continue
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), ShareQuotaName) {
			t.Fatalf("ShadowPod %d: %v", i, err)
		}
		if i > 3*shadowPods {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if sp != shadowPods {
		t.Errorf("%d ShadowPods admitted, want twice the granted pods plus %d: %d", sp, ShadowPodsSlack, shadowPods)
	}
}

// TestIntegrationKindsCountedLate: Annex's CRDs appear after the quota
// controller started (a Helm install on a running cluster), so a share
// naming ShadowPods, written before the controller discovered them, is
// counted in part. It is written again until counted, and ShadowPods can
// then be created.
func TestIntegrationKindsCountedLate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lc := clustertest.Start(ctx, t, localcluster.Options{Name: "tenantquota-late"})
	logf.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(0))))
	s := clustertest.Scheme(t)
	c, cfg := clustertest.Client(t, lc, s)
	clustertest.InstallCRDs(ctx, t, c)
	clustertest.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a-alpha", Labels: managedLabels("alpha")}}))
	mgr := clustertest.NewManager(t, cfg, s)
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Options: Options{Budget: corev1.ResourceList{ResourceShadowPods: resource.MustParse("5")}}}
	clustertest.Must(t, r.SetupWithManager(mgr))
	clustertest.RunManager(ctx, t, mgr)
	start := time.Now()
	clustertest.Eventually(t, 2*time.Minute, "the share of a-alpha counted", func() error {
		q := &corev1.ResourceQuota{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "a-alpha", Name: ShareQuotaName}, q); err != nil {
			return err
		}
		if !Counted(q) {
			return fmt.Errorf("not counted: %+v", q.Status)
		}
		return nil
	})
	t.Logf("counted %s after the CRDs were installed", time.Since(start).Round(100*time.Millisecond))
	clustertest.Must(t, c.Create(ctx, &offloadingv1alpha1.ShadowPod{ObjectMeta: metav1.ObjectMeta{Namespace: "a-alpha", Name: "sp"},
		Spec: offloadingv1alpha1.ShadowPodSpec{Pod: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}))
}
