package shadowendpointslice_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/shadowendpointslice"
	"github.com/annexhq/annex/internal/identity"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// TestHostileEndpointsIntegration runs the controller against a real
// provider API server: a tenant's ShadowEndpointSlice that points at the
// provider's nodes and pods, another tenant's pod and the metadata service
// yields an EndpointSlice the API server accepts with only the tenant's own
// address, a status that counts the rest and a Warning Event; without a
// network link nothing is published.
func TestHostileEndpointsIntegration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const (
		remoteNS = "web-alpha"
		podCIDR  = "10.1.0.0/16"
	)
	cluster := clustertest.Start(ctx, t, localcluster.Options{Name: "beta", PodCIDR: podCIDR})
	scheme := clustertest.Scheme(t)
	c, cfg := clustertest.Client(t, cluster, scheme)
	clustertest.InstallCRDs(ctx, t, c)

	// The tenant alpha's remote namespace, the provider's own namespace and
	// its network links: alpha (pod CIDR 10.2.0.0/16, external CIDR
	// 10.3.0.0/16) and another tenant, delta.
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: remoteNS, Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "own"}},
		{ObjectMeta: metav1.ObjectMeta{Name: corev1alpha1.AgentNamespace}},
	} {
		clustertest.Must(t, c.Create(ctx, ns))
	}
	links := map[string]*networkingv1alpha1.NetworkConfiguration{}
	for id, remote := range map[string]networkingv1alpha1.ClusterCIDRs{
		"alpha": {PodCIDR: "10.2.0.0/16", ExternalCIDR: "10.3.0.0/16"},
		"delta": {PodCIDR: "10.5.0.0/16", ExternalCIDR: "10.6.0.0/16"},
	} {
		nc := &networkingv1alpha1.NetworkConfiguration{
			ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: id},
			Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: id, Remote: remote,
				Local: networkingv1alpha1.ClusterCIDRs{PodCIDR: podCIDR, ExternalCIDR: "10.71.0.0/16"}},
		}
		clustertest.Must(t, c.Create(ctx, nc))
		nc.Status.RemappedRemote = &networkingv1alpha1.RemappedCIDRs{}
		clustertest.Must(t, c.Status().Update(ctx, nc))
		links[id] = nc
	}
	// A node whose address lies inside alpha's pod CIDR, next to the kwok one.
	extra := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "extra"}}
	clustertest.Must(t, c.Create(ctx, extra))
	// A merge patch, not an update: the node controllers write the new
	// node too, and an update would conflict with them.
	orig := extra.DeepCopy()
	extra.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.2.200.1"}}
	clustertest.Must(t, c.Status().Patch(ctx, extra, client.MergeFrom(orig)))
	kwokNode := &corev1.Node{}
	clustertest.Must(t, c.Get(ctx, client.ObjectKey{Name: cluster.NodeNames()[0]}, kwokNode))
	nodeIP := ""
	for _, a := range kwokNode.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	if nodeIP == "" {
		t.Fatalf("node %s has no InternalIP: %+v", kwokNode.Name, kwokNode.Status.Addresses)
	}
	// One of the provider's own pods.
	clustertest.Eventually(t, 30*time.Second, "ServiceAccount own/default", func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: "own", Name: "default"}, &corev1.ServiceAccount{})
	})
	own := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "own", Name: "db"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}
	clustertest.Must(t, c.Create(ctx, own))
	clustertest.Eventually(t, 60*time.Second, "an IP for the provider's pod", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(own), own); err != nil {
			return err
		}
		if own.Status.PodIP == "" {
			return errors.New("none yet")
		}
		return nil
	})
	if !netip.MustParsePrefix(podCIDR).Contains(netip.MustParseAddr(own.Status.PodIP)) {
		t.Fatalf("the provider's pod got %s, outside %s", own.Status.PodIP, podCIDR)
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	clustertest.Must(t, err)
	r := shadowendpointslice.New(mgr.GetClient(), mgr.GetEventRecorder("annex-shadowendpointslice"), shadowendpointslice.Options{
		LocalCIDRs: shadowendpointslice.IdentityRanges(identity.Identity{PodCIDR: podCIDR, ServiceCIDR: cluster.ServiceCIDR(), ExternalCIDR: "10.71.0.0/16"}),
	})
	clustertest.Must(t, r.SetupWithManager(mgr))
	mgrCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(mgrCtx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { stop(); <-done })

	// The attack, with one legit consumer pod.
	const legit = "10.2.0.1"
	hostile := []string{nodeIP, "10.2.200.1", own.Status.PodIP, "10.5.0.4", "169.254.169.254"}
	ses := &offloadingv1alpha1.ShadowEndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: "web-abcde"},
		Spec: offloadingv1alpha1.ShadowEndpointSliceSpec{Template: offloadingv1alpha1.EndpointSliceTemplate{
			Labels:      map[string]string{discoveryv1.LabelServiceName: "web"},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
		}},
	}
	for _, a := range append(slices.Clone(hostile), legit) {
		ses.Spec.Template.Endpoints = append(ses.Spec.Template.Endpoints,
			discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	clustertest.Must(t, c.Create(ctx, ses))

	clustertest.Eventually(t, 60*time.Second, "an EndpointSlice with only the legit address", func() error {
		got := &discoveryv1.EndpointSlice{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(ses), got); err != nil {
			return err
		}
		var addrs []string
		for _, ep := range got.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
		if !slices.Equal(addrs, []string{legit}) {
			return fmt.Errorf("addresses %v", addrs)
		}
		return nil
	})
	clustertest.Eventually(t, 30*time.Second, "the status counts the refused endpoints", func() error {
		clustertest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(ses), ses))
		cond := meta.FindStatusCondition(ses.Status.Conditions, offloadingv1alpha1.ConditionAddressesAllowed)
		if int(ses.Status.RefusedEndpoints) != len(hostile) || cond == nil ||
			cond.Status != metav1.ConditionFalse || cond.Reason != offloadingv1alpha1.ReasonOutsideConsumerRanges {
			return fmt.Errorf("refusedEndpoints %d, condition %+v", ses.Status.RefusedEndpoints, cond)
		}
		for _, a := range hostile {
			if !strings.Contains(cond.Message, fmt.Sprintf("%q", a)) {
				return fmt.Errorf("message %q does not name %s", cond.Message, a)
			}
		}
		return nil
	})
	t.Logf("refused: %s", meta.FindStatusCondition(ses.Status.Conditions, offloadingv1alpha1.ConditionAddressesAllowed).Message)
	clustertest.Eventually(t, 30*time.Second, "a Warning Event on the ShadowEndpointSlice", func() error {
		return findEvent(ctx, c, remoteNS, ses.Name, shadowendpointslice.ReasonAddressesRefused)
	})

	// The link with alpha goes: nothing of alpha's is published any more.
	clustertest.Must(t, c.Delete(ctx, links["alpha"]))
	clustertest.Eventually(t, 30*time.Second, "the EndpointSlice deleted without a network link", func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(ses), &discoveryv1.EndpointSlice{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			err = errors.New("still there")
		}
		return err
	})
	clustertest.Eventually(t, 30*time.Second, "Ready=False NoNetworkLink", func() error {
		clustertest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(ses), ses))
		if cond := meta.FindStatusCondition(ses.Status.Conditions, offloadingv1alpha1.ConditionReady); cond == nil ||
			cond.Reason != offloadingv1alpha1.ReasonNoNetworkLink {
			return fmt.Errorf("condition Ready %+v", cond)
		}
		return findEvent(ctx, c, remoteNS, ses.Name, offloadingv1alpha1.ReasonNoNetworkLink)
	})
}

func findEvent(ctx context.Context, c client.Client, ns, name, reason string) error {
	list := &eventsv1.EventList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason && e.Type == corev1.EventTypeWarning {
			return nil
		}
	}
	return fmt.Errorf("no %s Event among %d", reason, len(list.Items))
}
