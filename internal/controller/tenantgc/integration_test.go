package tenantgc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// TestIntegrationHeartbeatFromTheFuture runs tenantgc against a real API
// server, which stores whatever renewTime and leaseDurationSeconds the
// tenant writes: a heartbeat renewed a year ahead with a lease of ten years
// keeps the tenant only for the grace period after the agent saw it (a few
// seconds here), and the agent says why (Warning Event
// HeartbeatRenewTimeAhead about the Lease).
func TestIntegrationHeartbeatFromTheFuture(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lc := clustertest.Start(ctx, t, localcluster.Options{Name: "tenantgc"})
	logf.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(0))))
	s := clustertest.Scheme(t)
	c, cfg := clustertest.Client(t, lc, s)
	clustertest.InstallCRDs(ctx, t, c)

	const tenantNS = "annex-tenant-alpha"
	grace := 8 * time.Second
	clustertest.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS, Labels: map[string]string{
		corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelTenant: "true"}}}))
	clustertest.Must(t, c.Create(ctx, &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "alpha"}}))
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: corev1alpha1.AgentNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	link := &networkingv1alpha1.NetworkConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: "alpha"},
		Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: "alpha",
			Local:  networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.201.0.0/16", ExternalCIDR: "10.71.0.0/16"},
			Remote: networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.70.0.0/16"}}}
	clustertest.Must(t, c.Create(ctx, link))
	year := 365 * 24 * time.Hour
	future := metav1.NewMicroTime(time.Now().Add(year))
	clustertest.Must(t, c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: corev1alpha1.HeartbeatLeaseName,
		Annotations: map[string]string{"annex.dev/grace-period": "87600h"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else"), RenewTime: &future, AcquireTime: &future,
			LeaseDurationSeconds: ptr.To(int32(10 * 365 * 24 * 3600))}}))
	stored := &coordinationv1.Lease{}
	clustertest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: corev1alpha1.HeartbeatLeaseName}, stored))
	if !stored.Spec.RenewTime.After(time.Now().Add(year - time.Hour)) {
		t.Fatalf("the API server did not keep the renewTime a year ahead: %s", stored.Spec.RenewTime)
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	clustertest.Must(t, err)
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("annex-tenantgc"),
		Clock: clock.RealClock{}, GracePeriod: grace}
	clustertest.Must(t, r.SetupWithManager(mgr))
	mgrCtx, stopMgr := context.WithCancel(ctx)
	mgrDone := make(chan error, 1)
	started := time.Now()
	go func() { mgrDone <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		stopMgr()
		if err := <-mgrDone; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	clustertest.Eventually(t, 30*time.Second, "Warning Event HeartbeatRenewTimeAhead about the Lease", func() error {
		evs := &eventsv1.EventList{}
		if err := c.List(ctx, evs, client.InNamespace(tenantNS)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "HeartbeatRenewTimeAhead" && e.Type == corev1.EventTypeWarning && e.Regarding.Kind == "Lease" && strings.Contains(e.Note, "by its own clock") {
				return nil
			}
		}
		return fmt.Errorf("none among %d Events", len(evs.Items))
	})
	clustertest.Eventually(t, grace+30*time.Second, "tenant removed", func() error {
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: tenantNS}, ns); err != nil {
			return client.IgnoreNotFound(err)
		}
		if ns.DeletionTimestamp != nil {
			return nil
		}
		return errors.New("still there")
	})
	if took := time.Since(started); took < grace {
		t.Errorf("tenant removed %s after the agent started, before the grace period (%s)", took, grace)
	}
	// The ForeignCluster goes after the network link and the namespaces.
	clustertest.Eventually(t, 20*time.Second, "ForeignCluster alpha removed", func() error {
		fc := &corev1alpha1.ForeignCluster{}
		err := c.Get(ctx, client.ObjectKey{Name: "alpha"}, fc)
		switch {
		case err != nil:
			return client.IgnoreNotFound(err)
		case fc.DeletionTimestamp != nil:
			return nil
		}
		return errors.New("still there")
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(link), link); !apierrors.IsNotFound(err) {
		t.Errorf("the network link with alpha is left (%v)", err)
	}
}
