// Package netview answers, from the agent's cache, how addresses look on the
// other side of this cluster's network links. It is where the mappings that
// NetworkConfigurations record (docs/network.md) meet the objects that carry
// addresses:
//
//   - PodIP translates the IP of a pod running on a provider into this
//     cluster's view of that provider's pod network (the IP the consumer's
//     pod shows), and refuses an IP outside that network;
//   - Translate expresses an endpoint of a consumer EndpointSlice so that a
//     provider P can route to it: consumer-local pods through P's mapping of
//     the consumer's pod CIDR, pods on P itself dropped, pods on another
//     provider Q through their transit address (annotation
//     annex.dev/transit-address, see internal/controller/transit) expressed
//     through P's mapping of the consumer's external CIDR;
//   - DirectConnection describes such an endpoint for direct connections
//     (internal/directconn): Q, its transit address, and the pod's address
//     in Q's own network.
//
// A provider without a NetworkConfiguration (peered with --no-network) gets
// addresses unchanged, as before the network model existed. A provider whose
// NetworkConfiguration does not yet know how it maps this cluster
// (status.remappedLocal unset) gets no endpoint that would need that mapping
// until it does: a wrong address is worse than a late one.
//
// NodeAddresses and CheckLink serve the refusal of a peer's CIDR claims
// that are not private ranges, cover this cluster's Services or nodes
// (network.CheckPeerCIDR), differ from the ones agreed when the link was
// made (AnnotationAgreedRemoteCIDRs) or would route this cluster's own pod
// or external CIDR into the peer (network.CheckOwn), for the agent's
// gateway configuration, its pod IPs and `annexctl network connect` alike.
//
// View reads only the cache (NetworkConfigurations, ForeignClusters and
// Pods), never the API server.
package netview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/controller/reflection"
	"github.com/annexhq/annex/internal/directconn"
	"github.com/annexhq/annex/internal/network"
)

// View translates addresses across this cluster's network links.
type View struct {
	reader      client.Reader
	localRanges []netip.Prefix
}

// New returns a View reading from reader (the manager's cache).
func New(reader client.Reader) *View {
	return &View{reader: reader}
}

// link returns this cluster's NetworkConfiguration with clusterID, or nil.
func (v *View) link(ctx context.Context, clusterID string) (*networkingv1alpha1.NetworkConfiguration, error) {
	list := &networkingv1alpha1.NetworkConfigurationList{}
	if err := v.reader.List(ctx, list, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].Spec.RemoteClusterID == clusterID && list.Items[i].DeletionTimestamp.IsZero() {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// PodIP translates ip, a pod IP provider reports in its own network, into
// this cluster's view, or says why it must not be published (it implements
// podreflector.PodIPTranslator):
//
//   - with a network link whose CIDR claims pass CheckLink (private
//     ranges, as agreed when the link was made, routed clear of this
//     cluster's own ranges), ip must be in the provider's pod CIDR
//     (spec.remote.podCIDR) and is translated into this cluster's view of it
//     (status.remappedRemote.podCIDR when remapped): an address a pod of the
//     provider cannot have is refused. Until the link says how it maps the
//     provider's pod CIDR (status.remappedRemote unset) no address is
//     published: a late address is better than a wrong one (the virtual
//     node writes the pods' status again when the NetworkConfiguration
//     changes);
//   - without one (peered with --no-network) the provider declared no pod
//     CIDR and ip is published as it is, unless it lies in one of this
//     cluster's own ranges (SetLocalRanges: its pod, service and external
//     CIDRs), where it would name a local pod or Service.
func (v *View) PodIP(provider, ip string) (string, error) {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return "", errors.New("is not an IP address")
	}
	nc, err := v.link(context.Background(), provider)
	if err != nil {
		return "", fmt.Errorf("cannot be checked: reading the network link with %s: %w", provider, err)
	}
	if nc == nil {
		for _, p := range v.localRanges {
			if p.Contains(addr) {
				return "", fmt.Errorf("is in this cluster's own range %s and there is no network link with %s", p, provider)
			}
		}
		return addr.String(), nil
	}
	if nc.Status.RemappedRemote == nil {
		return "", fmt.Errorf("cannot be checked yet: the network link with %s does not say how this cluster sees its pod CIDR %s", provider, nc.Spec.Remote.PodCIDR)
	}
	if err := CheckLink(nc, network.LocalRanges{Own: v.localRanges}); err != nil {
		return "", fmt.Errorf("comes through the network link with %s, whose CIDR claims this cluster refuses: %w", provider, err)
	}
	m, err := network.ParseMapping(nc.Spec.Remote.PodCIDR, nc.Status.RemappedRemote.PodCIDR)
	if err != nil {
		return "", fmt.Errorf("cannot be checked: the network link with %s: %w", provider, err)
	}
	if !m.Original.Contains(addr) {
		if m.IsRemapped() {
			return "", fmt.Errorf("is outside the pod CIDR %s of %s (seen here as %s)", m.Original, provider, m.Remapped)
		}
		return "", fmt.Errorf("is outside the pod CIDR %s of %s", m.Original, provider)
	}
	out, err := m.ToLocal(addr)
	if err != nil {
		return "", fmt.Errorf("cannot be translated into the view of %s's pod CIDR %s: %w", provider, m.View(), err)
	}
	return out.String(), nil
}

// SetLocalRanges sets this cluster's own address ranges (pod, service and
// external CIDRs, from its identity): PodIP refuses them for a provider
// without a network link. Call it before the View is used.
func (v *View) SetLocalRanges(ranges ...netip.Prefix) {
	v.localRanges = nil
	for _, p := range ranges {
		if p.IsValid() {
			v.localRanges = append(v.localRanges, p.Masked())
		}
	}
}

// VirtualNodes maps the name of each provider's virtual node to the
// provider's cluster ID, from the ForeignClusters reader holds.
func VirtualNodes(ctx context.Context, reader client.Reader) (map[string]string, error) {
	list := &corev1alpha1.ForeignClusterList{}
	if err := reader.List(ctx, list); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(list.Items))
	for _, fc := range list.Items {
		if fc.Spec.ClusterID != "" {
			out[corev1alpha1.VirtualNodeName(fc.Spec.ClusterID)] = fc.Spec.ClusterID
		}
	}
	return out, nil
}

// Translate implements reflection.EndpointTranslator.
func (v *View) Translate(ctx context.Context, provider string, ep discoveryv1.Endpoint, origin reflection.EndpointOrigin) (discoveryv1.Endpoint, bool) {
	if origin.Node != "" && origin.Node == corev1alpha1.VirtualNodeName(provider) {
		return ep, false // the provider has this pod itself
	}
	nc, err := v.link(ctx, provider)
	if err != nil {
		return ep, false
	}
	if nc == nil {
		return ep, true // no network link: addresses as they are
	}
	if nc.Status.RemappedLocal == nil {
		return ep, false // the provider has not said how it sees us yet
	}
	nodes, err := VirtualNodes(ctx, v.reader)
	if err != nil {
		return ep, false
	}
	if _, onProvider := nodes[origin.Node]; onProvider {
		return v.transit(ctx, nc, ep, origin)
	}
	// A consumer-local pod: its pod-CIDR addresses in the provider's view.
	m, err := network.ParseMapping(nc.Spec.Local.PodCIDR, nc.Status.RemappedLocal.PodCIDR)
	if err != nil {
		return ep, false
	}
	addrs := make([]string, 0, len(ep.Addresses))
	for _, a := range ep.Addresses {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return ep, false
		}
		if m.Original.Contains(addr) {
			if addr, err = m.ToLocal(addr); err != nil {
				return ep, false
			}
		}
		addrs = append(addrs, addr.String())
	}
	ep.Addresses = addrs
	return ep, true
}

// DirectConnection implements reflection.DirectConnector: for an endpoint
// whose pod runs on another provider Q (so out carries its transit
// address), the entry that lets provider reach the pod directly: Q, out's
// address, and the pod's address in Q's own network (this cluster's view
// translated back through its link with Q; unchanged without a link).
func (v *View) DirectConnection(ctx context.Context, provider string, in discoveryv1.Endpoint, origin reflection.EndpointOrigin, out discoveryv1.Endpoint) (directconn.Entry, bool) {
	nodes, err := VirtualNodes(ctx, v.reader)
	if err != nil {
		return directconn.Entry{}, false
	}
	q, onProvider := nodes[origin.Node]
	if !onProvider || q == provider || len(in.Addresses) == 0 || len(out.Addresses) == 0 {
		return directconn.Entry{}, false
	}
	addr, err := netip.ParseAddr(in.Addresses[0])
	if err != nil {
		return directconn.Entry{}, false
	}
	nc, err := v.link(ctx, q)
	if err != nil {
		return directconn.Entry{}, false
	}
	if nc != nil && nc.Status.RemappedRemote != nil {
		m, err := network.ParseMapping(nc.Spec.Remote.PodCIDR, nc.Status.RemappedRemote.PodCIDR)
		if err != nil || !m.View().Contains(addr) {
			return directconn.Entry{}, false
		}
		if addr, err = m.ToRemote(addr); err != nil {
			return directconn.Entry{}, false
		}
	}
	return directconn.Entry{ClusterID: q, Address: out.Addresses[0], PodAddress: addr.String()}, true
}

// transit expresses an endpoint whose pod runs on another provider by the
// pod's transit address, in the provider's view of this cluster's external
// CIDR. Without a transit address (not allocated yet) the endpoint is left
// out; the annotation's arrival triggers the reflection again.
func (v *View) transit(ctx context.Context, nc *networkingv1alpha1.NetworkConfiguration, ep discoveryv1.Endpoint, origin reflection.EndpointOrigin) (discoveryv1.Endpoint, bool) {
	if origin.Pod == nil {
		return ep, false
	}
	pod := &corev1.Pod{}
	if err := v.reader.Get(ctx, *origin.Pod, pod); err != nil {
		return ep, false
	}
	addr, err := netip.ParseAddr(pod.Annotations[corev1alpha1.AnnotationTransitAddress])
	if err != nil || len(ep.Addresses) == 0 {
		return ep, false
	}
	if orig, err := netip.ParseAddr(ep.Addresses[0]); err != nil || orig.Is4() != addr.Is4() {
		return ep, false // an IPv6 slice cannot carry an IPv4 transit address
	}
	m, err := network.ParseMapping(nc.Spec.Local.ExternalCIDR, nc.Status.RemappedLocal.ExternalCIDR)
	if err != nil || !m.Original.Contains(addr) {
		return ep, false
	}
	if addr, err = m.ToLocal(addr); err != nil {
		return ep, false
	}
	ep.Addresses = []string{addr.String()}
	return ep, true
}

// NodeAddresses lists the addresses (all types that parse as IPs) of
// nodes, leaving out Annex's virtual nodes: their address is the agent's
// (--virtual-node-ip) and they stand for another cluster. Peers' CIDRs
// must hold none of them (network.CheckView).
func NodeAddresses(nodes []corev1.Node) []network.NodeAddress {
	var out []network.NodeAddress
	for i := range nodes {
		n := &nodes[i]
		if n.Labels[corev1alpha1.LabelRemoteClusterID] != "" && strings.HasPrefix(n.Name, corev1alpha1.VirtualNodeNamePrefix) {
			continue
		}
		for _, a := range n.Status.Addresses {
			if addr, err := netip.ParseAddr(a.Address); err == nil {
				out = append(out, network.NodeAddress{Node: n.Name, Addr: addr.Unmap()})
			}
		}
	}
	return out
}

// AnnotationAgreedRemoteCIDRs, on a NetworkConfiguration, records the
// peer's CIDRs agreed when the link was made: `annexctl network connect`
// writes it (JSON of networkingv1alpha1.ClusterCIDRs) when it first
// records the link, from the peer's identity at that time, and keeps it
// while the link exists. It is the peering's word on what the peer's ranges
// are: a later claim (spec.remote) that differs is refused
// (network.RuleAgreedRange) by connect and by the agent alike. Deleting the
// link (`annexctl network disconnect`) forgets it; the next connect agrees
// anew.
const AnnotationAgreedRemoteCIDRs = "annex.dev/agreed-remote-cidrs"

// AgreedAnnotation is the AnnotationAgreedRemoteCIDRs value for cidrs.
func AgreedAnnotation(cidrs networkingv1alpha1.ClusterCIDRs) string {
	data, _ := json.Marshal(cidrs)
	return string(data)
}

// AgreedRemote returns the peer's CIDRs agreed for nc; ok is false when nc
// records no agreement (a link made before agreements were recorded). An
// annotation that does not parse is an error.
func AgreedRemote(nc *networkingv1alpha1.NetworkConfiguration) (cidrs networkingv1alpha1.ClusterCIDRs, ok bool, err error) {
	v, ok := nc.Annotations[AnnotationAgreedRemoteCIDRs]
	if !ok {
		return cidrs, false, nil
	}
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cidrs); err != nil || dec.More() {
		return cidrs, true, fmt.Errorf("annotation %s %q is not the JSON of the agreed CIDRs", AnnotationAgreedRemoteCIDRs, v)
	}
	return cidrs, true, nil
}

// CheckLink applies the rules of network.CheckPeerCIDR to the CIDRs a
// peer claims in nc (spec.remote), and those of network.CheckView and
// network.CheckOwn to the ranges this cluster routes into the peer (each
// CIDR as status.remappedRemote says this cluster sees it). Claims must also
// be those agreed when the link was made (network.CheckAgreed, annotation
// AnnotationAgreedRemoteCIDRs; a link without it is not checked by that
// rule). An error (a *network.ClaimError, or a parse error) means the link
// must not be programmed.
func CheckLink(nc *networkingv1alpha1.NetworkConfiguration, local network.LocalRanges) error {
	agreed, hasAgreement, err := AgreedRemote(nc)
	if err != nil {
		return &network.ClaimError{Rule: network.RuleAgreedRange, Field: "metadata.annotations", What: err.Error()}
	}
	var remapped networkingv1alpha1.RemappedCIDRs
	if nc.Status.RemappedRemote != nil {
		remapped = *nc.Status.RemappedRemote
	}
	for _, f := range []struct{ field, cidr, agreed, remappedField, remapped string }{
		{"spec.remote.podCIDR", nc.Spec.Remote.PodCIDR, agreed.PodCIDR, "status.remappedRemote.podCIDR", remapped.PodCIDR},
		{"spec.remote.externalCIDR", nc.Spec.Remote.ExternalCIDR, agreed.ExternalCIDR, "status.remappedRemote.externalCIDR", remapped.ExternalCIDR},
	} {
		if f.cidr == "" {
			if hasAgreement && f.agreed != "" {
				return &network.ClaimError{Rule: network.RuleAgreedRange, Field: f.field,
					What: "is empty, not the " + f.agreed + " agreed when the link was made"}
			}
			continue
		}
		p, err := network.ParseCIDR(f.cidr)
		if err != nil {
			return fmt.Errorf("%s: %w", f.field, err)
		}
		if hasAgreement {
			a, err := netip.ParsePrefix(f.agreed)
			if err != nil {
				return &network.ClaimError{Rule: network.RuleAgreedRange, Field: f.field, CIDR: p,
					What: fmt.Sprintf("has no agreed CIDR to compare with (annotation %s says %q)", AnnotationAgreedRemoteCIDRs, f.agreed)}
			}
			if err := network.CheckAgreed(f.field, p, a); err != nil {
				return err
			}
		}
		if err := network.CheckPeerCIDR(f.field, p, local); err != nil {
			return err
		}
		if nc.Status.RemappedRemote == nil {
			continue // not decided yet: nothing is routed
		}
		field, view := f.field, p
		if f.remapped != "" {
			if view, err = network.ParseCIDR(f.remapped); err != nil {
				return fmt.Errorf("%s: %w", f.remappedField, err)
			}
			field = f.remappedField
			if err := network.CheckView(field, view, local); err != nil {
				return err
			}
		}
		if err := network.CheckOwn(field, view, local); err != nil {
			return err
		}
	}
	return nil
}
