package remotenamespace

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// TestIntegration runs the controller against a real API server and
// controller manager: Pod Security labels that the API server enforces
// (a hostNetwork pod created by an administrator is refused), quotas that the
// quota controller counts and the API server enforces, a LimitRange that
// gives requests to a container without any, each kept as desired, and the
// rules on names and on the number of namespaces.
func TestIntegration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lc := clustertest.Start(ctx, t, localcluster.Options{Name: "rns"})
	logf.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(0))))
	s := clustertest.Scheme(t)
	c, cfg := clustertest.Client(t, lc, s)
	clustertest.InstallCRDs(ctx, t, c)

	for _, ns := range []*corev1.Namespace{tenant("alpha"), tenantOf("x-alpha")} {
		clustertest.Must(t, c.Create(ctx, ns))
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  cache.Options{ByObject: CacheByObject()},
	})
	clustertest.Must(t, err)
	opts := Options{
		Reader:                 mgr.GetAPIReader(),
		MaxNamespacesPerTenant: 2,
		PodCIDR:                netip.MustParsePrefix("10.200.0.0/16"),
		LimitRequeue:           time.Second,
		ObjectQuota:            corev1.ResourceList{ResourceShadowPods: resource.MustParse("1")},
		TenantObjectQuota:      corev1.ResourceList{ResourceRemoteNamespaces: resource.MustParse("4")},
	}
	clustertest.Must(t, New(mgr.GetClient(), mgr.GetEventRecorder("annex-remotenamespace"), opts).SetupWithManager(mgr))
	mgrCtx, stopMgr := context.WithCancel(ctx)
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		stopMgr()
		if err := <-mgrDone; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	request := func(source, remote string) {
		t.Helper()
		// Until the quota controller has counted the tenant namespace's
		// quota (created with the first request), the API server refuses.
		clustertest.Eventually(t, 30*time.Second, "RemoteNamespace "+source+" created", func() error {
			err := c.Create(ctx, replica(source, remote, func(rn *offloadingv1alpha1.RemoteNamespace) { rn.Generation = 0 }))
			if err != nil && strings.Contains(err.Error(), "status unknown for quota") {
				return err
			}
			clustertest.Must(t, err)
			return nil
		})
	}
	phase := func(name string, want offloadingv1alpha1.RemoteNamespacePhase, msg string) {
		t.Helper()
		clustertest.Eventually(t, time.Minute, "RemoteNamespace "+name+" "+string(want), func() error {
			rn := &offloadingv1alpha1.RemoteNamespace{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: name}, rn); err != nil {
				return err
			}
			if rn.Status.Phase != want || !strings.Contains(rn.Status.Message, msg) {
				return fmt.Errorf("phase %q, message %q", rn.Status.Phase, rn.Status.Message)
			}
			return nil
		})
	}

	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		quotas := &corev1.ResourceQuotaList{}
		if err := c.List(context.Background(), quotas); err == nil {
			for _, q := range quotas.Items {
				t.Logf("ResourceQuota %s/%s: spec %v status %+v", q.Namespace, q.Name, q.Spec.Hard, q.Status)
			}
		}
	})
	request("web", "web-alpha")
	phase("web", offloadingv1alpha1.RemoteNamespaceReady, "")
	start := time.Now()

	t.Run("Pod Security labels corrected", func(t *testing.T) {
		ns := &corev1.Namespace{}
		clustertest.Must(t, c.Get(ctx, client.ObjectKey{Name: "web-alpha"}, ns))
		if !hasLabels(ns.Labels, oursPSA) {
			t.Fatalf("labels %v, want %v", ns.Labels, oursPSA)
		}
		orig := ns.DeepCopy()
		ns.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
		delete(ns.Labels, "pod-security.kubernetes.io/audit")
		clustertest.Must(t, c.Patch(ctx, ns, client.MergeFrom(orig)))
		clustertest.Eventually(t, 30*time.Second, "labels corrected", func() error {
			if err := c.Get(ctx, client.ObjectKey{Name: "web-alpha"}, ns); err != nil {
				return err
			}
			if !hasLabels(ns.Labels, oursPSA) {
				return fmt.Errorf("labels %v", ns.Labels)
			}
			return nil
		})
	})

	t.Run("a NetworkPolicy the API server accepts", func(t *testing.T) {
		np := &networkingv1.NetworkPolicy{}
		clustertest.Eventually(t, 30*time.Second, "NetworkPolicy "+NetworkPolicyName, func() error {
			return c.Get(ctx, client.ObjectKey{Namespace: "web-alpha", Name: NetworkPolicyName}, np)
		})
		if n := len(np.Spec.Egress); n != 3 || len(np.Spec.Ingress) != 2 {
			t.Errorf("NetworkPolicy has %d ingress and %d egress rules, want 2 and 3: %+v", len(np.Spec.Ingress), n, np.Spec)
		}
	})

	t.Run("baseline-violating pod refused by the API server", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web-alpha", Name: "host"}, Spec: corev1.PodSpec{
			HostNetwork: true, Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}
		err := c.Create(ctx, pod)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "baseline:latest"`) || !strings.Contains(err.Error(), "hostNetwork") {
			t.Fatalf("hostNetwork pod: err = %v, want Forbidden by PodSecurity baseline", err)
		}
		t.Logf("refused: %v", err)
	})

	t.Run("a container without requests gets the default requests", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web-alpha", Name: "plain"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "nginx"}},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			}}}
		clustertest.Must(t, c.Create(ctx, pod))
		want := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
		if got := pod.Spec.Containers[0].Resources; !apiequality.Semantic.DeepEqual(got.Requests, want) || got.Limits != nil {
			t.Errorf("resources %v, want requests %v and no limits", got, want)
		}
	})

	t.Run("object counts enforced", func(t *testing.T) {
		sp := func(name string) *offloadingv1alpha1.ShadowPod {
			return &offloadingv1alpha1.ShadowPod{ObjectMeta: metav1.ObjectMeta{Namespace: "web-alpha", Name: name},
				Spec: offloadingv1alpha1.ShadowPodSpec{Pod: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}}
		}
		clustertest.Must(t, c.Create(ctx, sp("one")))
		// The quota's usage may lag behind the first creation: a second one
		// is refused once it is counted.
		clustertest.Eventually(t, 30*time.Second, "second ShadowPod refused", func() error {
			err := c.Create(ctx, sp("two"))
			if err == nil {
				_ = c.Delete(ctx, sp("two"))
				return errors.New("created")
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: annex-tenant-quota") {
				return err
			}
			return nil
		})
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "web-alpha", Name: "np"}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}}
		if err := c.Create(ctx, svc); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "services.nodeports") {
			t.Errorf("NodePort Service: err = %v, want Forbidden by the quota on services.nodeports", err)
		}
	})

	t.Run("quota and LimitRange kept as desired", func(t *testing.T) {
		wantHard := wantQuota("web-alpha", opts).Spec.Hard
		quotaIsDesired := func() error {
			q := &corev1.ResourceQuota{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "web-alpha", Name: QuotaName}, q); err != nil {
				return err
			}
			if !apiequality.Semantic.DeepEqual(q.Spec.Hard, wantHard) || !hasLabels(q.Labels, oursLabels) {
				return fmt.Errorf("quota %v, labels %v", q.Spec.Hard, q.Labels)
			}
			return nil
		}
		limitRangeIsDesired := func() error {
			lr := &corev1.LimitRange{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "web-alpha", Name: LimitRangeName}, lr); err != nil {
				return err
			}
			if !apiequality.Semantic.DeepEqual(lr.Spec, wantLimitRange("web-alpha", DefaultRequests()).Spec) {
				return fmt.Errorf("LimitRange %+v", lr.Spec)
			}
			return nil
		}
		clustertest.Must(t, quotaIsDesired())
		clustertest.Must(t, limitRangeIsDesired())

		clustertest.Must(t, c.Delete(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "web-alpha", Name: QuotaName}}))
		clustertest.Must(t, c.Delete(ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Namespace: "web-alpha", Name: LimitRangeName}}))
		clustertest.Eventually(t, 30*time.Second, "quota recreated", quotaIsDesired)
		clustertest.Eventually(t, 30*time.Second, "LimitRange recreated", limitRangeIsDesired)

		// Raised, and its labels taken away (the controller's cache no
		// longer holds it). The quota controller may be writing the
		// recreated quota's status meanwhile: retry on conflict.
		clustertest.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			q := &corev1.ResourceQuota{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "web-alpha", Name: QuotaName}, q); err != nil {
				return err
			}
			q.Spec.Hard[corev1.ResourcePods] = resource.MustParse("1000000")
			q.Labels = nil
			return c.Update(ctx, q)
		}))
		clustertest.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			lr := &corev1.LimitRange{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "web-alpha", Name: LimitRangeName}, lr); err != nil {
				return err
			}
			lr.Spec.Limits[0].DefaultRequest = nil
			return c.Update(ctx, lr)
		}))
		clustertest.Eventually(t, 30*time.Second, "quota corrected", quotaIsDesired)
		clustertest.Eventually(t, 30*time.Second, "LimitRange corrected", limitRangeIsDesired)
	})

	t.Run("EnforceSameName refused without --allow-same-name-namespaces", func(t *testing.T) {
		request("same", "same")
		phase("same", offloadingv1alpha1.RemoteNamespaceFailed, "(EnforceSameName) is not allowed on this provider (it was not started with --allow-same-name-namespaces)")
		if err := c.Get(ctx, client.ObjectKey{Name: "same"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace same: err = %v, want NotFound", err)
		}
	})

	t.Run("bound of remote namespaces per consumer", func(t *testing.T) {
		request("shop", "shop-alpha")
		phase("shop", offloadingv1alpha1.RemoteNamespaceReady, "")
		request("more", "more-alpha")
		msg := "namespace more-alpha is not created: consumer alpha already has 2 remote namespaces on this provider, the most it may have (--max-remote-namespaces-per-tenant=2)"
		phase("more", offloadingv1alpha1.RemoteNamespaceFailed, msg)
		clustertest.Eventually(t, 30*time.Second, "Warning Event", func() error {
			list := &eventsv1.EventList{}
			if err := c.List(ctx, list, client.InNamespace(tenantNS)); err != nil {
				return err
			}
			for _, e := range list.Items {
				if e.Regarding.Name == "more" && e.Type == corev1.EventTypeWarning && e.Reason == offloadingv1alpha1.ReasonQuotaExceeded && e.Note == msg {
					return nil
				}
			}
			return fmt.Errorf("none among %d Events", len(list.Items))
		})

		// The tenant namespace's quota: RemoteNamespaces up to twice the
		// bound (4), whatever the earlier subtests left there.
		var err error
		for i := 0; i < 5 && err == nil; i++ {
			err = c.Create(ctx, replica(fmt.Sprintf("extra%d", i), fmt.Sprintf("extra%d-alpha", i)))
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: annex-tenant-quota") || !strings.Contains(err.Error(), string(ResourceRemoteNamespaces)) {
			t.Errorf("RemoteNamespace over the tenant quota: err = %v, want Forbidden by the tenant namespace's quota", err)
		}
		list := &offloadingv1alpha1.RemoteNamespaceList{}
		clustertest.Must(t, c.List(ctx, list, client.InNamespace(tenantNS)))
		if len(list.Items) > 4 {
			t.Errorf("%d RemoteNamespaces in %s, the quota allows 4", len(list.Items), tenantNS)
		}
		for i := 0; i < 5; i++ {
			_ = c.Delete(ctx, &offloadingv1alpha1.RemoteNamespace{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: fmt.Sprintf("extra%d", i)}})
		}

		// Room made: the refused request is answered.
		clustertest.Must(t, c.Delete(ctx, &offloadingv1alpha1.RemoteNamespace{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "shop"}}))
		phase("more", offloadingv1alpha1.RemoteNamespaceReady, "")
	})
	t.Logf("timing: checks done %s after the first namespace was Ready", time.Since(start).Round(time.Millisecond))
}
