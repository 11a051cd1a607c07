package netview

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/network"
)

func TestNodeAddresses(t *testing.T) {
	node := func(name string, labels map[string]string, addrs ...string) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		for _, a := range addrs {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
		}
		return n
	}
	got := NodeAddresses([]corev1.Node{
		node("n1", nil, "192.168.77.1", "n1.example"), // a host name is no address
		node("n2", map[string]string{"type": "kwok"}, "127.0.0.1", "fd00::2"),
		node(corev1alpha1.VirtualNodeName("gamma"), map[string]string{corev1alpha1.LabelRemoteClusterID: "gamma"}, "10.200.0.4"),
	})
	want := []network.NodeAddress{{Node: "n1", Addr: netip.MustParseAddr("192.168.77.1")},
		{Node: "n2", Addr: netip.MustParseAddr("127.0.0.1")}, {Node: "n2", Addr: netip.MustParseAddr("fd00::2")}}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
		t.Errorf("NodeAddresses (-want +got):\n%s", diff)
	}
}

func TestCheckLink(t *testing.T) {
	local := network.LocalRanges{ServiceCIDR: netip.MustParsePrefix("10.96.0.0/16"),
		Nodes: []network.NodeAddress{{Node: "n1", Addr: netip.MustParseAddr("100.64.0.9")}},
		Own:   []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16"), netip.MustParsePrefix("10.70.0.0/16")}}
	nc := func(pod, ext string, remapped *networkingv1alpha1.RemappedCIDRs) *networkingv1alpha1.NetworkConfiguration {
		return &networkingv1alpha1.NetworkConfiguration{Spec: networkingv1alpha1.NetworkConfigurationSpec{
			Remote: networkingv1alpha1.ClusterCIDRs{PodCIDR: pod, ExternalCIDR: ext}},
			Status: networkingv1alpha1.NetworkConfigurationStatus{RemappedRemote: remapped}}
	}
	// agreed is nc with the agreement annotation.
	agreed := func(annotation string, n *networkingv1alpha1.NetworkConfiguration) *networkingv1alpha1.NetworkConfiguration {
		n.Annotations = map[string]string{AnnotationAgreedRemoteCIDRs: annotation}
		return n
	}
	asIs := &networkingv1alpha1.RemappedCIDRs{}
	for _, tc := range []struct {
		name string
		nc   *networkingv1alpha1.NetworkConfiguration
		want string
	}{
		{"private, used as they are", nc("10.201.0.0/16", "10.71.0.0/16", nil), ""},
		{"remapped clear of the nodes", nc("10.200.0.0/16", "10.72.0.0/16", &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.65.0.0/16"}), ""},
		{"public external CIDR", nc("10.201.0.0/16", "203.0.113.0/24", nil),
			"annex-network-private-range: spec.remote.externalCIDR 203.0.113.0/24 is not inside a private range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fd00::/8)"},
		{"remapped onto a node", nc("10.200.0.0/16", "10.72.0.0/16", &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.64.0.0/16"}),
			"annex-network-node-address: status.remappedRemote.podCIDR 100.64.0.0/16 holds the address 100.64.0.9 of this cluster's node n1"},
		{"not canonical", nc("10.201.0.1/16", "10.71.0.0/16", nil), "spec.remote.podCIDR: CIDR 10.201.0.1/16 has host bits set (did you mean 10.201.0.0/16?)"},
		{"as agreed", agreed(`{"podCIDR":"10.201.0.0/16","externalCIDR":"10.71.0.0/16"}`, nc("10.201.0.0/16", "10.71.0.0/16", asIs)), ""},
		{"pod CIDR changed after the agreement", agreed(`{"podCIDR":"10.201.0.0/16","externalCIDR":"10.71.0.0/16"}`, nc("10.0.0.0/9", "10.71.0.0/16", asIs)),
			"annex-network-agreed-range: spec.remote.podCIDR 10.0.0.0/9 is not the 10.201.0.0/16 agreed when the link was made (run `annexctl network disconnect` and connect again to agree on new ranges)"},
		{"external CIDR changed after the agreement", agreed(`{"podCIDR":"10.201.0.0/16","externalCIDR":"10.71.0.0/16"}`, nc("10.201.0.0/16", "10.75.0.0/16", asIs)),
			"annex-network-agreed-range: spec.remote.externalCIDR 10.75.0.0/16 is not the 10.71.0.0/16 agreed when the link was made (run `annexctl network disconnect` and connect again to agree on new ranges)"},
		{"an agreement that does not parse", agreed(`{"podCIDR":`, nc("10.201.0.0/16", "10.71.0.0/16", asIs)),
			"annex-network-agreed-range: metadata.annotations annotation annex.dev/agreed-remote-cidrs \"{\\\"podCIDR\\\":\" is not the JSON of the agreed CIDRs"},
		{"used as it is over this cluster's pod CIDR", nc("10.192.0.0/11", "10.71.0.0/16", asIs),
			"annex-network-own-range: spec.remote.podCIDR 10.192.0.0/11 overlaps this cluster's own range 10.200.0.0/16 (it would route it into the peer)"},
		{"used as it is over this cluster's external CIDR", nc("10.201.0.0/16", "10.70.0.0/24", asIs),
			"annex-network-own-range: spec.remote.externalCIDR 10.70.0.0/24 overlaps this cluster's own range 10.70.0.0/16 (it would route it into the peer)"},
		{"overlapping but remapped away", nc("10.200.0.0/16", "10.72.0.0/16", &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.65.0.0/16"}), ""},
		{"remapped onto this cluster's external CIDR", nc("10.200.0.0/16", "10.72.0.0/16", &networkingv1alpha1.RemappedCIDRs{PodCIDR: "10.70.0.0/16"}),
			"annex-network-own-range: status.remappedRemote.podCIDR 10.70.0.0/16 overlaps this cluster's own range 10.70.0.0/16 (it would route it into the peer)"},
		{"overlapping, not decided yet: nothing routed", nc("10.200.0.0/16", "10.72.0.0/16", nil), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if err := CheckLink(tc.nc, local); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("CheckLink = %q, want %q", got, tc.want)
			}
		})
	}
}
