package netview

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
)

// TestCheckPeering: a link made for a peering, or one that does not say
// what it is for, is programmed only while this cluster peers with its
// remote cluster; only the former is removed without it; a link for direct
// connections needs no peering.
func TestCheckPeering(t *testing.T) {
	link := func(purpose string) *networkingv1alpha1.NetworkConfiguration {
		nc := &networkingv1alpha1.NetworkConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "alpha"},
			Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: "alpha"}}
		if purpose != "" {
			nc.Labels = map[string]string{networkingv1alpha1.LabelLinkPurpose: purpose}
		}
		return nc
	}
	type result struct {
		Purpose  string
		Refused  bool
		Reason   string // the PeeringError's Purpose, when refused
		Orphaned bool
	}
	for _, tc := range []struct {
		name   string
		nc     *networkingv1alpha1.NetworkConfiguration
		peered bool
		want   result
	}{
		{"a peering's link while it peers", link(networkingv1alpha1.LinkPurposePeering), true,
			result{Purpose: networkingv1alpha1.LinkPurposePeering}},
		{"a peering's link after the peering went: refused and removed", link(networkingv1alpha1.LinkPurposePeering), false,
			result{Purpose: networkingv1alpha1.LinkPurposePeering, Refused: true, Reason: networkingv1alpha1.LinkPurposePeering, Orphaned: true}},
		{"a direct connection needs no peering", link(networkingv1alpha1.LinkPurposeDirect), false,
			result{Purpose: networkingv1alpha1.LinkPurposeDirect}},
		{"a direct connection between clusters that peer", link(networkingv1alpha1.LinkPurposeDirect), true,
			result{Purpose: networkingv1alpha1.LinkPurposeDirect}},
		{"an old link of a peering", link(""), true, result{}},
		{"an old link without a peering: refused, kept", link(""), false, result{Refused: true}},
		{"a purpose nobody wrote counts as none", link("everything"), false, result{Refused: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := result{Purpose: LinkPurpose(tc.nc), Orphaned: Orphaned(tc.nc, tc.peered)}
			if err := CheckPeering(tc.nc, tc.peered); err != nil {
				var pe *PeeringError
				if !errors.As(err, &pe) {
					t.Fatalf("CheckPeering: %T %v, want a *PeeringError", err, err)
				}
				got.Refused, got.Reason = true, pe.Purpose
				if pe.Peer != "alpha" {
					t.Errorf("PeeringError.Peer = %q, want alpha", pe.Peer)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
