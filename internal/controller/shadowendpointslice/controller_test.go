package shadowendpointslice

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/fairqueue"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const ns = "web-alpha"

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, offloadingv1alpha1.AddToScheme, networkingv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func namespace(name, consumer string) *corev1.Namespace {
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if consumer != "" {
		n.Labels = map[string]string{corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}
	}
	return n
}

func endpoint(addr string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
}

func shadow(mutate ...func(*offloadingv1alpha1.ShadowEndpointSlice)) *offloadingv1alpha1.ShadowEndpointSlice {
	s := &offloadingv1alpha1.ShadowEndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-abcde", UID: "ses-uid", Generation: 2},
		Spec: offloadingv1alpha1.ShadowEndpointSliceSpec{Template: offloadingv1alpha1.EndpointSliceTemplate{
			Labels:      map[string]string{discoveryv1.LabelServiceName: "web"},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{endpoint("10.2.0.1"), endpoint("10.1.0.7"), endpoint("10.3.0.1")},
			Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
		}},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

// realSlice is the EndpointSlice the controller keeps for shadow().
func realSlice(mutate ...func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: "web-abcde",
			Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ManagedBy},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: offloadingv1alpha1.GroupVersion.String(), Kind: "ShadowEndpointSlice", Name: "web-abcde", UID: "ses-uid",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{endpoint("10.2.0.1"), endpoint("10.3.0.1")},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](80)}},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

// localPod is a pod of this cluster with IP 10.1.0.7.
func localPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.7", PodIPs: []corev1.PodIP{{IP: "10.1.0.7"}}},
	}
}

func ready(status metav1.ConditionStatus, reason, msg string) offloadingv1alpha1.ShadowEndpointSliceStatus {
	return offloadingv1alpha1.ShadowEndpointSliceStatus{Conditions: []metav1.Condition{condition(offloadingv1alpha1.ConditionReady, status, reason, msg)}}
}

func condition(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{
		Type: typ, Status: status, ObservedGeneration: 2,
		LastTransitionTime: metav1.NewTime(now), Reason: reason, Message: msg,
	}
}

// withAddresses adds the AddressesAllowed condition and refusedEndpoints to st.
func withAddresses(st offloadingv1alpha1.ShadowEndpointSliceStatus, refused int32, reason, msg string) offloadingv1alpha1.ShadowEndpointSliceStatus {
	status := metav1.ConditionFalse
	if reason == offloadingv1alpha1.ReasonInConsumerRanges {
		status = metav1.ConditionTrue
	}
	st.Conditions = append(st.Conditions, condition(offloadingv1alpha1.ConditionAddressesAllowed, status, reason, msg))
	st.RefusedEndpoints = refused
	return st
}

// link is this provider's NetworkConfiguration with cluster id: this
// provider's pod CIDR is 10.1.0.0/16, its external CIDR 10.71.0.0/16.
func link(id, podCIDR, extCIDR string, remapped *networkingv1alpha1.RemappedCIDRs) *networkingv1alpha1.NetworkConfiguration {
	return &networkingv1alpha1.NetworkConfiguration{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: id},
		Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: id,
			Local:  networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.1.0.0/16", ExternalCIDR: "10.71.0.0/16"},
			Remote: networkingv1alpha1.ClusterCIDRs{PodCIDR: podCIDR, ExternalCIDR: extCIDR}},
		Status: networkingv1alpha1.NetworkConfigurationStatus{RemappedRemote: remapped},
	}
}

// alphaLink: the consumer's pod CIDR 10.2.0.0/16 and external CIDR
// 10.3.0.0/16, used as they are.
func alphaLink() *networkingv1alpha1.NetworkConfiguration {
	return link("alpha", "10.2.0.0/16", "10.3.0.0/16", &networkingv1alpha1.RemappedCIDRs{})
}

// node is a node of this provider with InternalIP ip.
func node(name, ip string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}}}
}

const alphaRanges = "pod CIDR 10.2.0.0/16, external CIDR 10.3.0.0/16 in this cluster's view"

func TestReconcile(t *testing.T) {
	s := testScheme(t)
	base := []client.Object{namespace(ns, "alpha"), localPod(), alphaLink(), node("node-1", "192.168.1.10")}
	allowed := func(st offloadingv1alpha1.ShadowEndpointSliceStatus) offloadingv1alpha1.ShadowEndpointSliceStatus {
		return withAddresses(st, 0, offloadingv1alpha1.ReasonInConsumerRanges, "every address is consumer alpha's ("+alphaRanges+")")
	}
	upToDate := allowed(ready(metav1.ConditionTrue, offloadingv1alpha1.ReasonReconciled,
		"EndpointSlice is up to date: 2 endpoints, 1 dropped (pods of this cluster), 0 refused (addresses not the consumer's)"))
	const noService = "spec.template.labels must carry kubernetes.io/service-name: the EndpointSlice must belong to a Service"
	const notOurs = "EndpointSlice web-abcde already exists on this provider and does not belong to this ShadowEndpointSlice"
	const noLink = "no network link with consumer alpha (no NetworkConfiguration for it in this cluster): no endpoint is published"
	const linkUndecided = "the network link with consumer alpha does not say yet how this cluster maps its CIDRs (NetworkConfiguration alpha has no status.remappedRemote): no endpoint is published"
	// The attack: the provider's node IP and one of its pods (another
	// namespace), another tenant's pod, the metadata service, loopback, a
	// public address and an FQDN-looking junk address, next to one legit
	// consumer pod and one legit transit address.
	hostile := shadow(func(s *offloadingv1alpha1.ShadowEndpointSlice) {
		s.Spec.Template.Endpoints = []discoveryv1.Endpoint{
			endpoint("192.168.1.10"), endpoint("10.1.0.8"), endpoint("10.5.0.4"), endpoint("169.254.169.254"),
			endpoint("10.2.0.1"), endpoint("127.0.0.1"), endpoint("8.8.8.8"), endpoint("10.3.0.9"),
		}
	})
	const hostileMsg = "6 endpoints dropped: their addresses are not consumer alpha's (" + alphaRanges + "): " +
		`"192.168.1.10" (in an address of node node-1); "10.1.0.8" (in the pod CIDR of this cluster); ` +
		`"10.5.0.4" (in the pod CIDR of cluster delta); "169.254.169.254" (in link-local 169.254.0.0/16 (cloud metadata services)); ` +
		`"127.0.0.1" (in loopback); and 1 more`
	// Another tenant, delta, linked with this provider too.
	deltaLink := link("delta", "10.5.0.0/16", "10.6.0.0/16", &networkingv1alpha1.RemappedCIDRs{})

	tests := []struct {
		name        string
		objs        []client.Object
		ses         *offloadingv1alpha1.ShadowEndpointSlice
		want        offloadingv1alpha1.ShadowEndpointSliceStatus
		wantSlice   *discoveryv1.EndpointSlice // nil: there must be none
		wantEvents  []string
		wantRequeue bool
	}{
		{
			name:      "created, without the endpoints of this cluster's pods",
			objs:      base,
			ses:       shadow(),
			want:      upToDate,
			wantSlice: realSlice(),
		},
		{
			name: "outdated slice updated",
			objs: append([]client.Object{realSlice(func(s *discoveryv1.EndpointSlice) {
				s.Labels["stale"] = "true"
				s.Endpoints = []discoveryv1.Endpoint{endpoint("10.9.9.9")}
			})}, base...),
			ses:       shadow(),
			want:      upToDate,
			wantSlice: realSlice(),
		},
		{
			name:      "up to date: nothing written",
			objs:      append([]client.Object{realSlice()}, base...),
			ses:       shadow(func(s *offloadingv1alpha1.ShadowEndpointSlice) { s.Status = upToDate }),
			want:      upToDate,
			wantSlice: realSlice(),
		},
		{
			name: "address type changed: the slice is replaced",
			objs: append([]client.Object{realSlice(func(s *discoveryv1.EndpointSlice) {
				s.AddressType = discoveryv1.AddressTypeIPv6
			})}, base...),
			ses:         shadow(),
			wantRequeue: true,
		},
		{
			name: "refused: no service name; the previous slice is deleted",
			objs: append([]client.Object{realSlice()}, base...),
			ses: shadow(func(s *offloadingv1alpha1.ShadowEndpointSlice) {
				s.Spec.Template.Labels = map[string]string{"app": "web"}
			}),
			want:       ready(metav1.ConditionFalse, offloadingv1alpha1.ReasonForbidden, noService),
			wantEvents: []string{"Warning Forbidden " + noService},
		},
		{
			name: "refused: a slice of that name that is not ours",
			objs: append([]client.Object{realSlice(func(s *discoveryv1.EndpointSlice) {
				s.OwnerReferences = nil
				s.Labels = map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}
			})}, base...),
			ses:  shadow(),
			want: allowed(ready(metav1.ConditionFalse, offloadingv1alpha1.ReasonCreationFailed, notOurs)),
			wantSlice: realSlice(func(s *discoveryv1.EndpointSlice) {
				s.OwnerReferences = nil
				s.Labels = map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}
			}),
			wantEvents: []string{"Warning CreationFailed " + notOurs},
		},
		{
			name: "the slice of a previous ShadowEndpointSlice is waited for",
			objs: append([]client.Object{realSlice(func(s *discoveryv1.EndpointSlice) {
				s.OwnerReferences[0].UID = types.UID("previous")
			})}, base...),
			ses: shadow(),
			wantSlice: realSlice(func(s *discoveryv1.EndpointSlice) {
				s.OwnerReferences[0].UID = types.UID("previous")
			}),
			wantRequeue: true,
		},
		{
			name: "hostile addresses refused: only the consumer's are published",
			objs: append([]client.Object{deltaLink}, base...),
			ses:  hostile,
			want: withAddresses(ready(metav1.ConditionTrue, offloadingv1alpha1.ReasonReconciled,
				"EndpointSlice is up to date: 2 endpoints, 0 dropped (pods of this cluster), 6 refused (addresses not the consumer's)"),
				6, offloadingv1alpha1.ReasonOutsideConsumerRanges, hostileMsg),
			wantSlice: realSlice(func(s *discoveryv1.EndpointSlice) {
				s.Endpoints = []discoveryv1.Endpoint{endpoint("10.2.0.1"), endpoint("10.3.0.9")}
			}),
			wantEvents: []string{"Warning AddressesRefused " + hostileMsg},
		},
		{
			name: "no network link with the consumer: nothing published, the previous slice is deleted",
			objs: []client.Object{namespace(ns, "alpha"), localPod(), realSlice()},
			ses:  shadow(),
			want: withAddresses(ready(metav1.ConditionFalse, offloadingv1alpha1.ReasonNoNetworkLink, noLink),
				3, offloadingv1alpha1.ReasonNoNetworkLink, noLink),
			wantEvents: []string{"Warning NoNetworkLink " + noLink},
		},
		{
			name: "a link whose mapping is not decided: nothing published",
			objs: []client.Object{namespace(ns, "alpha"), localPod(), link("alpha", "10.2.0.0/16", "10.3.0.0/16", nil)},
			ses:  shadow(),
			want: withAddresses(ready(metav1.ConditionFalse, offloadingv1alpha1.ReasonNoNetworkLink, linkUndecided),
				3, offloadingv1alpha1.ReasonNoNetworkLink, linkUndecided),
			wantEvents: []string{"Warning NoNetworkLink " + linkUndecided},
		},
		{
			name: "remapped consumer CIDRs: addresses in the mapped ranges only",
			objs: []client.Object{namespace(ns, "alpha"), link("alpha", "10.2.0.0/16", "10.3.0.0/16",
				&networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.64.0.0/16", ExternalCIDR: "100.65.0.0/16"})},
			ses: shadow(func(s *offloadingv1alpha1.ShadowEndpointSlice) {
				s.Spec.Template.Endpoints = []discoveryv1.Endpoint{endpoint("100.64.0.1"), endpoint("10.2.0.1"), endpoint("100.65.0.1")}
			}),
			want: withAddresses(ready(metav1.ConditionTrue, offloadingv1alpha1.ReasonReconciled,
				"EndpointSlice is up to date: 2 endpoints, 0 dropped (pods of this cluster), 1 refused (addresses not the consumer's)"),
				1, offloadingv1alpha1.ReasonOutsideConsumerRanges,
				"1 endpoints dropped: their addresses are not consumer alpha's (pod CIDR 100.64.0.0/16, external CIDR 100.65.0.0/16 in this cluster's view): "+
					`"10.2.0.1" (outside the consumer's ranges)`),
			wantSlice: realSlice(func(s *discoveryv1.EndpointSlice) {
				s.Endpoints = []discoveryv1.Endpoint{endpoint("100.64.0.1"), endpoint("100.65.0.1")}
			}),
			wantEvents: []string{"Warning AddressesRefused 1 endpoints dropped: their addresses are not consumer alpha's " +
				`(pod CIDR 100.64.0.0/16, external CIDR 100.65.0.0/16 in this cluster's view): "10.2.0.1" (outside the consumer's ranges)`},
		},
		{
			name: "a namespace not managed for a consumer is ignored",
			objs: []client.Object{namespace(ns, "")},
			ses:  shadow(),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := fake.NewClientBuilder().WithScheme(s).
				WithStatusSubresource(&offloadingv1alpha1.ShadowEndpointSlice{}).
				WithObjects(append(append([]client.Object{}, tc.objs...), tc.ses)...).Build()
			rec := events.NewFakeRecorder(10)
			r := New(c, rec, Options{Clock: clocktesting.NewFakePassiveClock(now)})
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tc.ses)}

			res, err := r.Reconcile(ctx, req)
			if err != nil {
				t.Fatalf("Reconcile() error = %v", err)
			}
			if got := res.RequeueAfter > 0; got != tc.wantRequeue {
				t.Errorf("Reconcile() = %+v, want requeue %v", res, tc.wantRequeue)
			}
			if !tc.wantRequeue {
				// A second pass must change nothing and record no Event.
				if res, err := r.Reconcile(ctx, req); err != nil || !res.IsZero() {
					t.Errorf("second Reconcile() = %+v, %v; want nothing to do", res, err)
				}
			}

			got := &offloadingv1alpha1.ShadowEndpointSlice{}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Status); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			slice := &discoveryv1.EndpointSlice{}
			if err := c.Get(ctx, req.NamespacedName, slice); err != nil {
				if !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
				slice = nil
			}
			if diff := cmp.Diff(tc.wantSlice, slice, cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion"),
				cmpopts.IgnoreTypes(metav1.TypeMeta{})); diff != "" {
				t.Errorf("EndpointSlice (-want +got):\n%s", diff)
			}
			close(rec.Events)
			var gotEvents []string
			for e := range rec.Events {
				gotEvents = append(gotEvents, e)
			}
			if diff := cmp.Diff(tc.wantEvents, gotEvents); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAddressTypeChangeCompletes follows a replaced slice to its new version.
func TestAddressTypeChangeCompletes(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithStatusSubresource(&offloadingv1alpha1.ShadowEndpointSlice{}).
		WithObjects(namespace(ns, "alpha"), alphaLink(), realSlice(func(s *discoveryv1.EndpointSlice) { s.AddressType = discoveryv1.AddressTypeIPv6 }), shadow(func(s *offloadingv1alpha1.ShadowEndpointSlice) {
			s.Spec.Template.Endpoints = []discoveryv1.Endpoint{endpoint("10.2.0.1"), endpoint("10.2.0.7"), endpoint("10.3.0.1")}
		})).Build()
	r := New(c, events.NewFakeRecorder(10), Options{Clock: clocktesting.NewFakePassiveClock(now)})
	req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "web-abcde"}}
	for range 2 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	got := &discoveryv1.EndpointSlice{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	// No local pod here: every endpoint is kept.
	want := realSlice(func(s *discoveryv1.EndpointSlice) {
		s.Endpoints = []discoveryv1.Endpoint{endpoint("10.2.0.1"), endpoint("10.2.0.7"), endpoint("10.3.0.1")}
	})
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion"), cmpopts.IgnoreTypes(metav1.TypeMeta{})); diff != "" {
		t.Errorf("EndpointSlice (-want +got):\n%s", diff)
	}
}

func TestDirectConnections(t *testing.T) {
	s := testScheme(t)
	// Beta's link with gamma: gamma's pod CIDR 10.200.0.0/16 is 100.64.0.0/16 here.
	gamma := link("gamma", "10.200.0.0/16", "10.72.0.0/16", &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.64.0.0/16"})
	// A node of this provider whose address lies in gamma's mapped pod CIDR.
	n := node("node-1", "100.64.3.8")
	data := `[{"clusterID":"gamma","address":"10.3.0.1","podAddress":"10.200.3.7"},` +
		`{"clusterID":"gamma","address":"10.3.0.2","podAddress":"1.2.3.4"},` +
		`{"clusterID":"gamma","address":"10.3.0.3","podAddress":"10.200.3.8"},` +
		`{"clusterID":"delta","address":"10.2.0.1","podAddress":"10.9.0.1"},` +
		`{"clusterID":"gamma","address":"10.1.0.7","podAddress":"10.200.3.9"}]`
	const refusedEntries = "Warning DirectConnectionsRefused direct-connections data not used for some endpoints, which keep their transit address: " +
		`"10.1.0.7" (cluster "gamma", pod address "10.200.3.9"): not an address of this slice; ` +
		`"10.2.0.1" (cluster "delta", pod address "10.9.0.1"): no network link with that cluster; ` +
		`"10.3.0.2" (cluster "gamma", pod address "1.2.3.4"): pod address outside the cluster's pod CIDR 10.200.0.0/16; ` +
		`"10.3.0.3" (cluster "gamma", pod address "10.200.3.8"): the pod address is 100.64.3.8 here, in an address of node node-1`
	const refusedAddress = "Warning AddressesRefused 1 endpoints dropped: their addresses are not consumer alpha's (" + alphaRanges + "): " +
		`"10.1.0.7" (in the pod CIDR of this cluster)`
	tests := []struct {
		name       string
		data       string
		deny       bool
		want       []string
		wantEvents []string
	}{
		{"valid entry used, bad ones refused", data, false, []string{"10.2.0.1", "100.64.3.7", "10.3.0.2", "10.3.0.3"},
			[]string{refusedEntries, refusedAddress}},
		{"denied by flag", data, true, []string{"10.2.0.1", "10.3.0.1", "10.3.0.2", "10.3.0.3"}, []string{refusedAddress}},
		{"malformed", `[{"clusterID":`, false, []string{"10.2.0.1", "10.3.0.1", "10.3.0.2", "10.3.0.3"},
			[]string{"Warning DirectConnectionsRefused direct-connections data not used for some endpoints, which keep their transit address: " +
				"malformed direct-connections data: unexpected EOF", refusedAddress}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ses := shadow(func(s *offloadingv1alpha1.ShadowEndpointSlice) {
				s.Annotations = map[string]string{corev1alpha1.AnnotationDirectConnectionsData: tc.data}
				s.Spec.Template.Endpoints = []discoveryv1.Endpoint{endpoint("10.2.0.1"), endpoint("10.3.0.1"), endpoint("10.1.0.7"),
					endpoint("10.3.0.2"), endpoint("10.3.0.3")}
			})
			c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(ses).
				WithObjects(namespace(ns, "alpha"), ses, alphaLink(), gamma, n).Build()
			rec := events.NewFakeRecorder(10)
			r := New(c, rec, Options{Clock: clocktesting.NewFakePassiveClock(now), DenyDirectConnections: tc.deny})
			for range 2 { // the second pass reports nothing new
				if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ses)}); err != nil {
					t.Fatal(err)
				}
			}
			got := &discoveryv1.EndpointSlice{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(ses), got); err != nil {
				t.Fatal(err)
			}
			var addrs []string
			for _, ep := range got.Endpoints {
				addrs = append(addrs, ep.Addresses...)
			}
			if diff := cmp.Diff(tc.want, addrs); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
			if _, copied := got.Annotations[corev1alpha1.AnnotationDirectConnectionsData]; copied {
				t.Error("the annotation was copied to the EndpointSlice")
			}
			close(rec.Events)
			var gotEvents []string
			for e := range rec.Events {
				gotEvents = append(gotEvents, e)
			}
			if diff := cmp.Diff(tc.wantEvents, gotEvents); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEndpointSliceWritesBoundedPerConsumer: a consumer changing its
// ShadowEndpointSlice faster than --tenant-sync-rate has its EndpointSlice
// written at that rate, with the endpoints it has when its turn comes.
func TestEndpointSliceWritesBoundedPerConsumer(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithStatusSubresource(&offloadingv1alpha1.ShadowEndpointSlice{}).
		WithObjects(namespace(ns, "alpha"), localPod(), alphaLink(), shadow()).Build()
	clk := clocktesting.NewFakePassiveClock(now)
	r := New(c, events.NewFakeRecorder(100), Options{Clock: clk,
		Sync: fairqueue.NewLimiter(fairqueue.LimiterOptions{Rate: 1, Burst: 1}, clk)})
	req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "web-abcde"}}

	type result struct {
		RequeueAfter time.Duration
		Endpoints    []string // of the EndpointSlice afterwards
	}
	steps := []struct {
		advance  time.Duration
		endpoint string // the ShadowEndpointSlice's second endpoint is changed to it first ("": unchanged)
	}{
		{0, ""},                              // created with the token
		{0, "10.2.0.2"},                      // its next turn is in 1 s
		{400 * time.Millisecond, "10.2.0.3"}, // still not
		{600 * time.Millisecond, ""},         // its turn: the latest endpoints
		{0, ""},                              // up to date: nothing to wait for
	}
	want := []result{
		{0, []string{"10.2.0.1", "10.3.0.1"}},
		{time.Second, []string{"10.2.0.1", "10.3.0.1"}},
		{600 * time.Millisecond, []string{"10.2.0.1", "10.3.0.1"}},
		{0, []string{"10.2.0.1", "10.2.0.3"}},
		{0, []string{"10.2.0.1", "10.2.0.3"}},
	}
	var got []result
	for _, st := range steps {
		clk.SetTime(clk.Now().Add(st.advance))
		if st.endpoint != "" {
			ses := &offloadingv1alpha1.ShadowEndpointSlice{}
			if err := c.Get(ctx, req.NamespacedName, ses); err != nil {
				t.Fatal(err)
			}
			ses.Spec.Template.Endpoints = []discoveryv1.Endpoint{endpoint("10.2.0.1"), endpoint(st.endpoint)}
			if err := c.Update(ctx, ses); err != nil {
				t.Fatal(err)
			}
		}
		res, err := r.Reconcile(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		slice := &discoveryv1.EndpointSlice{}
		if err := c.Get(ctx, req.NamespacedName, slice); err != nil {
			t.Fatal(err)
		}
		var addrs []string
		for _, ep := range slice.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
		got = append(got, result{res.RequeueAfter, addrs})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
}
