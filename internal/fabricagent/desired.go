package fabricagent

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/fabric"
	"github.com/annexhq/annex/internal/netview"
	"github.com/annexhq/annex/internal/network"
)

// GatewayContainer is the name of annex-gateway's container in the agent's
// pod: the node of the pod that runs it is the gateway node.
const GatewayContainer = "gateway"

// Gateway is where the cluster's gateway runs.
type Gateway struct {
	Node    string
	Address netip.Addr
}

// FindGateway picks, among the agent's pods, the one whose gateway
// container runs: the newest such pod that is not being deleted and has a
// host IP. ok is false when none does (the gateway is moving or down).
func FindGateway(pods []corev1.Pod) (gw Gateway, ok bool) {
	var newest *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" || !p.Spec.HostNetwork {
			continue
		}
		if _, err := netip.ParseAddr(p.Status.HostIP); err != nil {
			continue
		}
		running := false
		for _, cs := range p.Status.ContainerStatuses {
			running = running || (cs.Name == GatewayContainer && cs.State.Running != nil)
		}
		if !running {
			continue
		}
		if newest == nil || newest.CreationTimestamp.Before(&p.CreationTimestamp) {
			newest = p
		}
	}
	if newest == nil {
		return Gateway{}, false
	}
	addr, _ := netip.ParseAddr(newest.Status.HostIP)
	return Gateway{Node: newest.Spec.NodeName, Address: addr.Unmap()}, true
}

// Local is this cluster's own ranges (its identity ConfigMap).
type Local struct {
	PodCIDR, ServiceCIDR, ExternalCIDR netip.Prefix
}

// Destinations are the ranges this cluster's gateway routes into its
// links, in this cluster's view: for every NetworkConfiguration the
// gateway programs (Ready, with a tunnel, its CIDR claims accepted, its
// peering, if it was made for one, still there), the
// peer's pod and external CIDRs as mapped here. skipped says, per link
// left out for a reason an operator should see, why.
func Destinations(local Local, ncs []networkingv1alpha1.NetworkConfiguration) (dst []netip.Prefix, skipped []string) {
	for i := range ncs {
		nc := &ncs[i]
		if nc.Spec.Tunnel == nil || !meta.IsStatusConditionTrue(nc.Status.Conditions, networkingv1alpha1.ConditionReady) {
			continue
		}
		if c := meta.FindStatusCondition(nc.Status.Conditions, networkingv1alpha1.ConditionTunnelConnected); c != nil &&
			(c.Reason == networkingv1alpha1.ReasonCIDRRefused || c.Reason == networkingv1alpha1.ReasonInvalidLink || c.Reason == networkingv1alpha1.ReasonNoPeering) {
			skipped = append(skipped, fmt.Sprintf("%s: %s", nc.Spec.RemoteClusterID, c.Reason))
			continue
		}
		if err := netview.CheckLink(nc, network.LocalRanges{ServiceCIDR: local.ServiceCIDR}); err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", nc.Spec.RemoteClusterID, err))
			continue
		}
		var remapped networkingv1alpha1.RemappedCIDRs
		if nc.Status.RemappedRemote != nil {
			remapped = *nc.Status.RemappedRemote
		}
		var views []netip.Prefix
		var bad error
		for _, c := range []struct{ original, remapped string }{
			{nc.Spec.Remote.PodCIDR, remapped.PodCIDR},
			{nc.Spec.Remote.ExternalCIDR, remapped.ExternalCIDR},
		} {
			if c.original == "" {
				continue
			}
			m, err := network.ParseMapping(c.original, c.remapped)
			if err != nil {
				bad = err
				break
			}
			v := m.View()
			if overlapsLocal(v, local) {
				bad = fmt.Errorf("%s overlaps this cluster's own ranges", v)
				break
			}
			views = append(views, v)
		}
		if bad != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", nc.Spec.RemoteClusterID, bad))
			continue
		}
		dst = append(dst, views...)
	}
	if len(dst) > 0 && local.ExternalCIDR.IsValid() {
		// Transit addresses and the gateway's own address there.
		dst = append(dst, local.ExternalCIDR)
	}
	slices.SortFunc(dst, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(dst), skipped
}

func overlapsLocal(p netip.Prefix, local Local) bool {
	for _, l := range []netip.Prefix{local.PodCIDR, local.ServiceCIDR} {
		if l.IsValid() && l.Overlaps(p) {
			return true
		}
	}
	return false
}

// Decision is what one node needs and how to report it.
type Decision struct {
	Plan fabric.Plan
	// Reason and Message of the Programmed condition when the plan is
	// applied without error; Programmed is True unless Reason is
	// ReasonNoGateway.
	Reason, Message string
}

// Decide is the plan of node self: nothing on the gateway node (its
// gateway programs it) or without links; routes to the gateway node for
// every destination otherwise, or unreachable routes while no gateway
// runs.
func Decide(self string, local Local, gw Gateway, hasGateway bool, dst []netip.Prefix, skipped []string) Decision {
	note := ""
	if len(skipped) > 0 {
		note = "; links left out: " + strings.Join(skipped, "; ")
	}
	switch {
	case len(dst) == 0:
		return Decision{Reason: networkingv1alpha1.ReasonNoLinks, Message: "no network link to program" + note}
	case !hasGateway:
		return Decision{
			Plan:   fabric.Plan{Destinations: dst, Sources: sources(local)},
			Reason: networkingv1alpha1.ReasonNoGateway,
			Message: fmt.Sprintf("no gateway runs (no Running annex-agent pod with container %q): %d peer ranges are unreachable from this node%s",
				GatewayContainer, len(dst), note),
		}
	case gw.Node == self:
		return Decision{Reason: networkingv1alpha1.ReasonGatewayNode,
			Message: fmt.Sprintf("this node runs the gateway (%s), which routes the %d peer ranges%s", gw.Address, len(dst), note)}
	}
	return Decision{
		Plan:    fabric.Plan{Gateway: gw.Address, Destinations: dst, Sources: sources(local)},
		Reason:  networkingv1alpha1.ReasonRoutesProgrammed,
		Message: fmt.Sprintf("%d peer ranges routed to the gateway node %s (%s)%s", len(dst), gw.Node, gw.Address, note),
	}
}

func sources(local Local) []netip.Prefix {
	if !local.PodCIDR.IsValid() {
		return nil
	}
	return []netip.Prefix{local.PodCIDR}
}
