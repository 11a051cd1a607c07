package remotenamespace

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

func TestOutside(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	block := func(cidr string, except ...string) []networkingv1.NetworkPolicyPeer {
		return []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}}
	}
	for _, tc := range []struct {
		name    string
		podCIDR string
		nodes   []netip.Addr
		want    []networkingv1.NetworkPolicyPeer
	}{{
		name: "ingress: only the pod CIDR is kept out", podCIDR: "10.200.0.0/16",
		want: block("0.0.0.0/0", "10.200.0.0/16"),
	}, {
		name: "egress: the pod CIDR, link-local and every node", podCIDR: "10.200.0.0/16",
		nodes: addrs("172.31.0.2", "172.31.0.3"),
		want:  block("0.0.0.0/0", "10.200.0.0/16", "169.254.0.0/16", "172.31.0.2/32", "172.31.0.3/32"),
	}, {
		name: "node addresses already kept out, or of the other family, add nothing", podCIDR: "10.200.1.0/24",
		nodes: addrs("10.200.1.7", "169.254.3.4", "fd00::1"),
		want:  block("0.0.0.0/0", "10.200.1.0/24", "169.254.0.0/16"),
	}, {
		name: "a pod CIDR written with host bits is masked", podCIDR: "10.200.1.5/24",
		want: block("0.0.0.0/0", "10.200.1.0/24"),
	}, {
		name: "IPv6", podCIDR: "fd10::/56", nodes: addrs("fd00::2", "172.31.0.2"),
		want: block("::/0", "fd10::/56", "fe80::/10", "fd00::2/128"),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, outside(netip.MustParsePrefix(tc.podCIDR), tc.nodes)); diff != "" {
				t.Errorf("outside() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDesiredNetworkPolicy pins the whole policy: every pod of the
// namespace, both directions, the tenant's namespaces by their labels.
func TestDesiredNetworkPolicy(t *testing.T) {
	tenant := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
		corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}}}}
	udp, tcp, dns := corev1.ProtocolUDP, corev1.ProtocolTCP, intstr.FromInt32(53)
	want := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "annex-tenant-isolation", Namespace: "web-alpha", Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{From: tenant},
				{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.200.0.0/16"}}}}},
			},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: tenant},
				{
					To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
					}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
				},
				{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0",
					Except: []string{"10.200.0.0/16", "169.254.0.0/16", "172.31.0.2/32"}}}}},
			},
		},
	}
	got := desiredNetworkPolicy("web-alpha", "alpha", netip.MustParsePrefix("10.200.0.0/16"), []netip.Addr{netip.MustParseAddr("172.31.0.2")})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("desiredNetworkPolicy() (-want +got):\n%s", diff)
	}
}
