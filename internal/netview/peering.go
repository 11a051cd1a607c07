package netview

import (
	"fmt"

	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
)

// LinkPurpose is what nc was made for: networkingv1alpha1.LinkPurposePeering,
// networkingv1alpha1.LinkPurposeDirect, or "" when its label
// (networkingv1alpha1.LabelLinkPurpose) is missing or says anything else (a
// link made before the label existed).
func LinkPurpose(nc *networkingv1alpha1.NetworkConfiguration) string {
	switch p := nc.Labels[networkingv1alpha1.LabelLinkPurpose]; p {
	case networkingv1alpha1.LinkPurposePeering, networkingv1alpha1.LinkPurposeDirect:
		return p
	}
	return ""
}

// PeeringError says why a link is not programmed: this cluster no longer
// peers with the link's remote cluster, and the link is not one for direct
// connections.
type PeeringError struct {
	// Peer is the link's remote cluster.
	Peer string
	// Purpose is LinkPurpose of the link: LinkPurposePeering (its peering
	// is gone: the link goes too) or "" (unknown: kept, not programmed).
	Purpose string
}

func (e *PeeringError) Error() string {
	if e.Purpose == networkingv1alpha1.LinkPurposePeering {
		return fmt.Sprintf("the link was made for the peering with %s, and this cluster has no ForeignCluster for %s any more: the agent removes the link", e.Peer, e.Peer)
	}
	return fmt.Sprintf("this cluster has no ForeignCluster for %s and the link does not say what it is for (label %s, added by `annexctl network connect` since links record it): "+
		"it may be what an unpeering left, so it is not programmed. A direct connection between providers: run `annexctl network connect` again to record it; otherwise `annexctl network disconnect`",
		e.Peer, networkingv1alpha1.LabelLinkPurpose)
}

// CheckPeering returns a *PeeringError when nc must not be programmed for
// want of a peering: peered says whether this cluster has a ForeignCluster
// for nc's remote cluster (one not being deleted). A link made for a
// peering needs that ForeignCluster; a link for direct connections does
// not; a link that does not say what it is for needs it too, since it may
// be the remains of a peering, and without one it would give its peer the
// access of a direct connection (every tenant's pods, see
// gatewayconfig.PeerAccessTenant).
func CheckPeering(nc *networkingv1alpha1.NetworkConfiguration, peered bool) error {
	purpose := LinkPurpose(nc)
	if peered || purpose == networkingv1alpha1.LinkPurposeDirect {
		return nil
	}
	return &PeeringError{Peer: nc.Spec.RemoteClusterID, Purpose: purpose}
}

// Orphaned reports whether nc was made for a peering that is gone (peered
// as for CheckPeering): such a link is deleted by the agent.
func Orphaned(nc *networkingv1alpha1.NetworkConfiguration, peered bool) bool {
	return !peered && LinkPurpose(nc) == networkingv1alpha1.LinkPurposePeering
}
