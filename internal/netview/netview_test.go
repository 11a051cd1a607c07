package netview

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/agent"
	"github.com/annexhq/annex/internal/controller/reflection"
	"github.com/annexhq/annex/internal/directconn"
)

// The sandbox topology seen from alpha (pod 10.200/16, external 10.70/16):
// gamma has the same pod CIDR, so alpha maps gamma's pods to 100.64/16 and
// gamma maps alpha's to 100.65/16; beta (10.201/16) needs no remapping.
func world(t *testing.T, extra ...client.Object) *View {
	t.Helper()
	scheme, err := agent.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	local := networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.70.0.0/16"}
	objs := []client.Object{
		fc("beta"), fc("gamma"),
		&networkingv1alpha1.NetworkConfiguration{
			ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: "gamma"},
			Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: "gamma", Local: local,
				Remote: networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.72.0.0/16"}},
			Status: networkingv1alpha1.NetworkConfigurationStatus{
				RemappedRemote: &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.64.0.0/16"},
				RemappedLocal:  &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.65.0.0/16", ExternalCIDR: "100.66.0.0/16"},
			},
		},
		&networkingv1alpha1.NetworkConfiguration{
			ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: "beta"},
			Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: "beta", Local: local,
				Remote: networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.201.0.0/16", ExternalCIDR: "10.71.0.0/16"}},
			Status: networkingv1alpha1.NetworkConfigurationStatus{
				RemappedRemote: &networkingv1alpha1.RemappedCIDRs{}, RemappedLocal: &networkingv1alpha1.RemappedCIDRs{}},
		},
		pod("on-beta", "10.70.0.7"), pod("on-gamma", "10.70.0.9"), pod("no-transit", ""),
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(objs, extra...)...).Build()
	return New(c)
}

func fc(id string) *corev1alpha1.ForeignCluster {
	return &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: id}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: id}}
}

func pod(name, transit string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
	if transit != "" {
		p.Annotations = map[string]string{corev1alpha1.AnnotationTransitAddress: transit}
	}
	return p
}

func TestPodIP(t *testing.T) {
	pending := &networkingv1alpha1.NetworkConfiguration{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: "epsilon"},
		Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: "epsilon",
			Local:  networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.70.0.0/16"},
			Remote: networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.202.0.0/16", ExternalCIDR: "10.72.0.0/16"}},
	}
	// Links whose claims are refused (CheckLink): no pod IP comes through them.
	changed := &networkingv1alpha1.NetworkConfiguration{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: "zeta",
			Annotations: map[string]string{AnnotationAgreedRemoteCIDRs: `{"podCIDR":"10.203.0.0/16","externalCIDR":"10.73.0.0/16"}`}},
		Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: "zeta",
			Local:  networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.70.0.0/16"},
			Remote: networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.204.0.0/16", ExternalCIDR: "10.73.0.0/16"}},
		Status: networkingv1alpha1.NetworkConfigurationStatus{RemappedRemote: &networkingv1alpha1.RemappedCIDRs{}},
	}
	covering := &networkingv1alpha1.NetworkConfiguration{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: "eta"},
		Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: "eta",
			Local:  networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.70.0.0/16"},
			Remote: networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.192.0.0/11", ExternalCIDR: "10.74.0.0/16"}},
		Status: networkingv1alpha1.NetworkConfigurationStatus{RemappedRemote: &networkingv1alpha1.RemappedCIDRs{}},
	}
	v := world(t, pending, changed, covering)
	v.SetLocalRanges(netip.MustParsePrefix("10.200.0.0/16"), netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("10.70.0.0/16"))
	tests := []struct {
		name, provider, ip string
		want               string // "" when refused
		wantErr            string
	}{
		{"remapped", "gamma", "10.200.3.4", "100.64.3.4", ""},
		{"outside the remapped pod CIDR", "gamma", "192.168.0.1", "", "is outside the pod CIDR 10.200.0.0/16 of gamma (seen here as 100.64.0.0/16)"},
		{"already in this cluster's view: not the provider's own", "gamma", "100.64.3.4", "", "is outside the pod CIDR 10.200.0.0/16 of gamma"},
		{"not remapped", "beta", "10.201.3.4", "10.201.3.4", ""},
		{"outside the pod CIDR", "beta", "10.200.3.4", "", "is outside the pod CIDR 10.201.0.0/16 of beta"},
		{"the link does not say how it maps yet", "epsilon", "10.202.0.1", "", "cannot be checked yet: the network link with epsilon does not say how this cluster sees its pod CIDR 10.202.0.0/16"},
		{"no link", "delta", "10.210.3.4", "10.210.3.4", ""},
		{"no link, in the local pod CIDR", "delta", "10.200.3.4", "", "is in this cluster's own range 10.200.0.0/16 and there is no network link with delta"},
		{"no link, in the local service CIDR", "delta", "10.96.0.1", "", "is in this cluster's own range 10.96.0.0/12"},
		{"not an IP", "gamma", "not-an-ip", "", "is not an IP address"},
		{"a link whose claim changed after it was agreed", "zeta", "10.204.0.1", "",
			"comes through the network link with zeta, whose CIDR claims this cluster refuses: annex-network-agreed-range: spec.remote.podCIDR 10.204.0.0/16 is not the 10.203.0.0/16 agreed"},
		{"a link routing this cluster's own pod CIDR into the provider", "eta", "10.201.0.1", "",
			"comes through the network link with eta, whose CIDR claims this cluster refuses: annex-network-own-range: spec.remote.podCIDR 10.192.0.0/11 overlaps this cluster's own range 10.200.0.0/16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v.PodIP(tc.provider, tc.ip)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tc.want || !strings.HasPrefix(gotErr, tc.wantErr) || (tc.wantErr == "") != (err == nil) {
				t.Errorf("PodIP(%s, %s) = %q, %q; want %q, %q", tc.provider, tc.ip, got, gotErr, tc.want, tc.wantErr)
			}
		})
	}
}

func TestTranslate(t *testing.T) {
	v := world(t)
	ep := func(addr string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	}
	ref := func(name string) *types.NamespacedName { return &types.NamespacedName{Namespace: "shop", Name: name} }
	tests := []struct {
		name     string
		provider string
		ep       discoveryv1.Endpoint
		origin   reflection.EndpointOrigin
		want     *discoveryv1.Endpoint // nil: left out
	}{
		{"local pod, provider remaps alpha", "gamma", ep("10.200.1.2"), reflection.EndpointOrigin{Node: "kwok-0", Pod: ref("web")}, ptr.To(ep("100.65.1.2"))},
		{"local pod, no remap", "beta", ep("10.200.1.2"), reflection.EndpointOrigin{Node: "kwok-0"}, ptr.To(ep("10.200.1.2"))},
		{"local host-network pod", "gamma", ep("127.0.0.1"), reflection.EndpointOrigin{Node: "kwok-0"}, ptr.To(ep("127.0.0.1"))},
		{"pod on the provider itself", "gamma", ep("100.64.0.5"), reflection.EndpointOrigin{Node: "annex-gamma", Pod: ref("on-gamma")}, nil},
		{"pod on another provider: transit, remapped", "gamma", ep("10.201.0.5"), reflection.EndpointOrigin{Node: "annex-beta", Pod: ref("on-beta")}, ptr.To(ep("100.66.0.7"))},
		{"pod on another provider: transit", "beta", ep("100.64.0.5"), reflection.EndpointOrigin{Node: "annex-gamma", Pod: ref("on-gamma")}, ptr.To(ep("10.70.0.9"))},
		{"transit not assigned yet", "beta", ep("100.64.0.6"), reflection.EndpointOrigin{Node: "annex-gamma", Pod: ref("no-transit")}, nil},
		{"transit pod unknown", "beta", ep("100.64.0.6"), reflection.EndpointOrigin{Node: "annex-gamma", Pod: ref("gone")}, nil},
		{"transit without a pod reference", "beta", ep("100.64.0.6"), reflection.EndpointOrigin{Node: "annex-gamma"}, nil},
		{"IPv6 slice cannot carry an IPv4 transit", "beta", ep("fd00::1"), reflection.EndpointOrigin{Node: "annex-gamma", Pod: ref("on-gamma")}, nil},
		{"no link: unchanged", "delta", ep("10.200.1.2"), reflection.EndpointOrigin{Node: "annex-gamma"}, ptr.To(ep("10.200.1.2"))},
		{"no link, pod on that provider", "delta", ep("10.200.1.2"), reflection.EndpointOrigin{Node: "annex-delta"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, keep := v.Translate(context.Background(), tc.provider, tc.ep, tc.origin)
			if tc.want == nil {
				if keep {
					t.Errorf("kept %v, want it left out", got.Addresses)
				}
				return
			}
			if !keep {
				t.Fatal("left out, want it kept")
			}
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("endpoint (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTranslateLinkNotReady(t *testing.T) {
	pending := &networkingv1alpha1.NetworkConfiguration{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: "delta"},
		Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: "delta",
			Local:  networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.70.0.0/16"},
			Remote: networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.203.0.0/16", ExternalCIDR: "10.73.0.0/16"}},
	}
	v := world(t, pending)
	ep := discoveryv1.Endpoint{Addresses: []string{"10.200.1.2"}}
	if _, keep := v.Translate(context.Background(), "delta", ep, reflection.EndpointOrigin{Node: "kwok-0"}); keep {
		t.Error("endpoint sent before delta said how it maps alpha")
	}
}

func TestDirectConnection(t *testing.T) {
	v := world(t)
	ep := func(addr string) discoveryv1.Endpoint { return discoveryv1.Endpoint{Addresses: []string{addr}} }
	ref := &types.NamespacedName{Namespace: "shop", Name: "on-gamma"}
	tests := []struct {
		name     string
		provider string
		in, out  string
		node     string
		want     *directconn.Entry
	}{
		// alpha sees gamma's pods in 100.64/16; gamma's own view is 10.200/16.
		{"pod on gamma, sent to beta", "beta", "100.64.3.7", "10.70.0.9", "annex-gamma", &directconn.Entry{ClusterID: "gamma", Address: "10.70.0.9", PodAddress: "10.200.3.7"}},
		{"pod on beta (not remapped), sent to gamma", "gamma", "10.201.0.5", "100.66.0.7", "annex-beta", &directconn.Entry{ClusterID: "beta", Address: "100.66.0.7", PodAddress: "10.201.0.5"}},
		{"pod on the provider itself", "gamma", "100.64.3.7", "100.64.3.7", "annex-gamma", nil},
		{"consumer-local pod", "beta", "10.200.1.2", "10.200.1.2", "kwok-0", nil},
		{"address outside alpha's view of gamma", "beta", "10.201.3.7", "10.70.0.9", "annex-gamma", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := v.DirectConnection(context.Background(), tc.provider, ep(tc.in), reflection.EndpointOrigin{Node: tc.node, Pod: ref}, ep(tc.out))
			if tc.want == nil {
				if ok {
					t.Errorf("got %+v, want none", got)
				}
				return
			}
			if diff := cmp.Diff(*tc.want, got); !ok || diff != "" {
				t.Errorf("ok=%v, entry (-want +got):\n%s", ok, diff)
			}
		})
	}
}
