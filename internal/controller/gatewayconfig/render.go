package gatewayconfig

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/gateway"
	"github.com/annexhq/annex/internal/netview"
	"github.com/annexhq/annex/internal/network"
)

// Local is what Render needs to know about this cluster.
type Local struct {
	PodCIDR      netip.Prefix
	ExternalCIDR netip.Prefix // invalid when the cluster has none: no transit
	PrivateKey   gateway.Key
	// Ranges are what the peers' CIDRs must keep clear of: this cluster's
	// service CIDR and its nodes' addresses.
	Ranges network.LocalRanges
}

// PeerAccess says what a peer may open connections to through the gateway
// (--gateway-peer-access).
type PeerAccess string

const (
	// PeerAccessTenant, the default: a peer reaches the pods of its own
	// remote namespaces here (it is this cluster's tenant); a provider of
	// this cluster also reaches the pods of this cluster's namespaces
	// offloaded to it and the transit addresses of their pods on other
	// providers; a peer with no peering at all (a link made for direct
	// connections between two providers) reaches the pods of every
	// tenant's remote namespaces, never this cluster's own pods.
	PeerAccessTenant PeerAccess = "tenant"
	// PeerAccessAll: every peer reaches this cluster's whole pod CIDR and
	// every transit address, as before per-peer access existed.
	PeerAccessAll PeerAccess = "all"
)

// State is what Render reads of the cluster, all from the agent's cache.
type State struct {
	NetworkConfigurations []networkingv1alpha1.NetworkConfiguration
	Pods                  []corev1.Pod
	// VirtualNodes maps a virtual node's name to its provider's cluster ID.
	VirtualNodes map[string]string
	// Roles maps a peer's cluster ID to its ForeignCluster's status.role;
	// a peer with no ForeignCluster (or one being deleted) is absent: this
	// cluster does not peer with it.
	Roles map[string]corev1alpha1.PeeringRole
	// RemoteNamespaces maps each remote namespace of this cluster (labelled
	// annex.dev/managed-by=annex and annex.dev/remote-cluster-id) to the
	// consumer it belongs to.
	RemoteNamespaces map[string]string
	// Offloaded maps each namespace of this cluster with a
	// NamespaceOffloading to the providers its status lists.
	Offloaded map[string][]string
}

// Render computes the gateway's configuration (docs/network.md, "What a
// gateway must do"): one link per Ready NetworkConfiguration with a tunnel
// whose CIDRs pass netview.CheckLink and whose peering, if it was made for
// one, still exists (netview.CheckPeering: a ForeignCluster for the peer,
// st.Roles); on each link the transit addresses of
// this cluster's pods running on that peer (pods on the peer's virtual
// node), and the destinations the peer may open connections to (accept,
// see PeerAccess; aggregated into the fewest prefixes); and, with
// PeerAccessTenant, this cluster's own pods, the only ones besides a link's
// accept list that may open connections into it (gateway.Config.OwnPods).
// Links, transit
// addresses and accept lists are sorted, so the same input always renders
// the same file. A NetworkConfiguration that cannot be rendered is left out
// and reported in skipped (by name): a *network.ClaimError when the rule of
// a CIDR claim refused it, a *netview.PeeringError when its peering is
// gone, another error otherwise.
func Render(local Local, st State, access PeerAccess) (cfg gateway.Config, skipped map[string]error) {
	skipped = map[string]error{}
	transit := transitByPeer(st.Pods, st.VirtualNodes)
	cfg.Links = []gateway.Link{}
	names := map[string]string{} // NetworkConfiguration by peer
	for i := range st.NetworkConfigurations {
		nc := &st.NetworkConfigurations[i]
		if !nc.DeletionTimestamp.IsZero() {
			continue
		}
		if err := netview.CheckLink(nc, local.Ranges); err != nil {
			skipped[nc.Name] = err
			continue
		}
		_, peered := st.Roles[nc.Spec.RemoteClusterID]
		if err := netview.CheckPeering(nc, peered); err != nil {
			skipped[nc.Name] = err
			continue
		}
		l, err := renderLink(local, nc, transit[nc.Spec.RemoteClusterID])
		if err != nil {
			skipped[nc.Name] = err
			continue
		}
		if l != nil {
			cfg.Links = append(cfg.Links, *l)
			names[l.Peer] = nc.Name
		}
	}
	slices.SortFunc(cfg.Links, func(a, b gateway.Link) int { return strings.Compare(a.Peer, b.Peer) })
	acc := newAccess(local, st, cfg.Links)
	links := cfg.Links[:0]
	for _, l := range cfg.Links {
		if access == PeerAccessAll {
			l.Accept = acc.all()
		} else {
			l.Accept = acc.forPeer(l.Peer)
		}
		if len(l.Accept) > gateway.MaxAccept {
			skipped[names[l.Peer]] = fmt.Errorf("the peer may reach %d separate ranges, more than a gateway takes (%d); run the agent with --gateway-peer-access=all", len(l.Accept), gateway.MaxAccept)
			continue
		}
		links = append(links, l)
	}
	cfg.Links = links
	// Sources bound (gateway.Config.OwnPods), unless every peer reaches
	// everything anyway, or the own pods are too scattered for a set (then
	// tenants' pods are bound only by the peers' accept lists).
	if own := gateway.Aggregate(acc.own); access != PeerAccessAll && len(own) <= gateway.MaxAccept {
		cfg.PodCIDR, cfg.OwnPods = local.PodCIDR, own
	}
	return cfg, skipped
}

// accessIndex holds, for computing accept lists, this cluster's addresses
// by what they belong to.
type accessIndex struct {
	podCIDR netip.Prefix
	roles   map[string]corev1alpha1.PeeringRole
	// tenantPods: pod addresses of each consumer's remote namespaces.
	tenantPods map[string][]netip.Prefix
	allTenants []netip.Prefix
	// offloaded: addresses of this cluster's own pods (not on virtual
	// nodes) in the namespaces offloaded to each provider, and the transit
	// addresses of the pods of those namespaces on other providers.
	offloaded map[string][]netip.Prefix
	transit   []netip.Prefix // every transit address a link leads to
	// own: addresses of this cluster's own pods (of no tenant, not on
	// virtual nodes).
	own []netip.Prefix
}

// podAddrs are the IPv4 addresses of p inside podCIDR (a host-network
// pod's node address is none of them), none for a pod that finished. A
// pod being deleted keeps its addresses until it is gone: its connections
// may still be served.
func podAddrs(p *corev1.Pod, podCIDR netip.Prefix) []netip.Prefix {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil
	}
	var out []netip.Prefix
	add := func(s string) {
		a, err := netip.ParseAddr(s)
		if err == nil && a.Is4() && podCIDR.Contains(a) {
			pfx := netip.PrefixFrom(a, 32)
			if !slices.Contains(out, pfx) {
				out = append(out, pfx)
			}
		}
	}
	add(p.Status.PodIP)
	for _, ip := range p.Status.PodIPs {
		add(ip.IP)
	}
	return out
}

func newAccess(local Local, st State, links []gateway.Link) *accessIndex {
	a := &accessIndex{podCIDR: local.PodCIDR, roles: st.Roles,
		tenantPods: map[string][]netip.Prefix{}, offloaded: map[string][]netip.Prefix{}}
	// Transit addresses the gateway leads somewhere, by the peer their pod
	// runs on.
	transitTo := map[netip.Addr]string{}
	for _, l := range links {
		for _, t := range l.Transit {
			transitTo[t.Address] = l.Peer
			a.transit = append(a.transit, netip.PrefixFrom(t.Address, 32))
		}
	}
	for i := range st.Pods {
		p := &st.Pods[i]
		if consumer, ok := st.RemoteNamespaces[p.Namespace]; ok {
			addrs := podAddrs(p, local.PodCIDR)
			a.tenantPods[consumer] = append(a.tenantPods[consumer], addrs...)
			a.allTenants = append(a.allTenants, addrs...)
			continue
		}
		on, remote := st.VirtualNodes[p.Spec.NodeName]
		if !remote {
			a.own = append(a.own, podAddrs(p, local.PodCIDR)...)
		}
		providers := st.Offloaded[p.Namespace]
		if len(providers) == 0 {
			continue
		}
		if remote {
			t, err := netip.ParseAddr(p.Annotations[corev1alpha1.AnnotationTransitAddress])
			if err != nil || transitTo[t] != on {
				continue // no transit address, or none the gateway leads to this pod
			}
			for _, prov := range providers {
				if prov != on { // a provider reaches its own pods itself
					a.offloaded[prov] = append(a.offloaded[prov], netip.PrefixFrom(t, 32))
				}
			}
			continue
		}
		addrs := podAddrs(p, local.PodCIDR)
		for _, prov := range providers {
			a.offloaded[prov] = append(a.offloaded[prov], addrs...)
		}
	}
	return a
}

// forPeer is what peer may open connections to (PeerAccessTenant).
func (a *accessIndex) forPeer(peer string) []netip.Prefix {
	out := slices.Clone(a.tenantPods[peer])
	switch role, peered := a.roles[peer]; {
	case !peered:
		out = append(out, a.allTenants...) // a link for direct connections
	case role == corev1alpha1.RoleProvider || role == corev1alpha1.RoleBoth:
		out = append(out, a.offloaded[peer]...)
	}
	return gateway.Aggregate(out)
}

// all is what every peer may open connections to (PeerAccessAll).
func (a *accessIndex) all() []netip.Prefix {
	return gateway.Aggregate(append([]netip.Prefix{a.podCIDR}, a.transit...))
}

// transitAddr is a pod's transit address and its IP in this cluster's view.
type transitAddr struct {
	address, podIP netip.Addr
}

func transitByPeer(pods []corev1.Pod, virtualNodes map[string]string) map[string][]transitAddr {
	out := map[string][]transitAddr{}
	for i := range pods {
		p := &pods[i]
		peer, ok := virtualNodes[p.Spec.NodeName]
		if !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || !p.DeletionTimestamp.IsZero() {
			continue
		}
		t, err1 := netip.ParseAddr(p.Annotations[corev1alpha1.AnnotationTransitAddress])
		ip, err2 := netip.ParseAddr(p.Status.PodIP)
		if err1 != nil || err2 != nil || !t.Is4() || !ip.Is4() {
			continue
		}
		out[peer] = append(out[peer], transitAddr{address: t, podIP: ip})
	}
	return out
}

// renderLink is the link of nc, nil when nc has no tunnel or is not Ready.
func renderLink(local Local, nc *networkingv1alpha1.NetworkConfiguration, transit []transitAddr) (*gateway.Link, error) {
	tun := nc.Spec.Tunnel
	if tun == nil || !meta.IsStatusConditionTrue(nc.Status.Conditions, networkingv1alpha1.ConditionReady) {
		return nil, nil
	}
	var remoteMap, localMap networkingv1alpha1.RemappedCIDRs
	if nc.Status.RemappedRemote != nil {
		remoteMap = *nc.Status.RemappedRemote
	}
	if nc.Status.RemappedLocal != nil {
		localMap = *nc.Status.RemappedLocal
	}
	podMap, err := network.ParseMapping(nc.Spec.Remote.PodCIDR, remoteMap.PodCIDR)
	if err != nil {
		return nil, fmt.Errorf("remote pod CIDR: %w", err)
	}
	extMap, err := network.ParseMapping(nc.Spec.Remote.ExternalCIDR, remoteMap.ExternalCIDR)
	if err != nil {
		return nil, fmt.Errorf("remote external CIDR: %w", err)
	}
	l := &gateway.Link{Peer: nc.Spec.RemoteClusterID, ListenPort: int(tun.ListenPort), PrivateKey: local.PrivateKey}
	if err := l.PeerPublicKey.UnmarshalText([]byte(tun.RemotePublicKey)); err != nil {
		return nil, fmt.Errorf("spec.tunnel.remotePublicKey: %w", err)
	}
	if l.PeerEndpoint, err = netip.ParseAddrPort(tun.RemoteEndpoint); err != nil {
		return nil, fmt.Errorf("spec.tunnel.remoteEndpoint: %w", err)
	}
	for _, m := range []network.Mapping{podMap, extMap} {
		l.Routes = append(l.Routes, m.View())
		l.AllowedSources = append(l.AllowedSources, m.Original)
		if m.IsRemapped() {
			l.DNAT = append(l.DNAT, gateway.Netmap{From: m.Remapped, To: m.Original})
			l.AllowedSources = append(l.AllowedSources, m.Remapped)
		}
	}
	// This cluster's own ranges, as the peer sees them.
	ownExt := local.ExternalCIDR
	for _, own := range []struct {
		cidr     netip.Prefix
		remapped string
	}{{local.PodCIDR, localMap.PodCIDR}, {ownExt, localMap.ExternalCIDR}} {
		if own.remapped == "" || !own.cidr.IsValid() {
			continue
		}
		to, err := network.ParseCIDR(own.remapped)
		if err != nil || to.Bits() != own.cidr.Bits() {
			return nil, fmt.Errorf("status.remappedLocal %s does not map %s", own.remapped, own.cidr)
		}
		l.SNAT = append(l.SNAT, gateway.Netmap{From: own.cidr, To: to})
	}
	if ownExt.IsValid() && len(transit) > 0 {
		gw := network.GatewayAddr(ownExt)
		if l.Masquerade, err = localInPeerView(gw, ownExt, localMap.ExternalCIDR); err != nil {
			return nil, err
		}
		for _, t := range transit {
			to, err := podMap.ToRemote(t.podIP)
			if err != nil {
				continue // not (yet) an address of the peer's pod CIDR
			}
			l.Transit = append(l.Transit, gateway.Transit{Address: t.address, To: to})
		}
		slices.SortFunc(l.Transit, func(a, b gateway.Transit) int { return a.Address.Compare(b.Address) })
	}
	return l, nil
}

// localInPeerView translates addr of this cluster's cidr into the peer's
// view (remapped: the peer's mapping of cidr, "" when used as it is).
func localInPeerView(addr netip.Addr, cidr netip.Prefix, remapped string) (netip.Addr, error) {
	if remapped == "" {
		return addr, nil
	}
	to, err := network.ParseCIDR(remapped)
	if err != nil {
		return netip.Addr{}, err
	}
	return network.Translate(addr, cidr, to)
}

// tunnelCondition is the TunnelConnected condition for a link, from the
// gateway's report: gatewayFresh says whether the status file is recent,
// st is the link's entry (nil when the gateway does not report it).
func tunnelCondition(hasTunnel, gatewayFresh bool, st *gateway.LinkStatus, now metav1.Time, handshakeMaxAge float64) metav1.Condition {
	c := metav1.Condition{Type: networkingv1alpha1.ConditionTunnelConnected, Status: metav1.ConditionFalse}
	switch {
	case !hasTunnel:
		c.Reason, c.Message = networkingv1alpha1.ReasonNoTunnel,
			"no spec.tunnel: run `annexctl network connect` once both clusters' agents run with a gateway"
	case !gatewayFresh:
		c.Reason, c.Message = networkingv1alpha1.ReasonGatewayDown, "this cluster's gateway has not reported recently"
	case st == nil:
		c.Reason, c.Message = networkingv1alpha1.ReasonTunnelDown, "the gateway has not set up this link (yet)"
	case st.LastHandshake.IsZero() || now.Sub(st.LastHandshake).Seconds() > handshakeMaxAge:
		c.Reason, c.Message = networkingv1alpha1.ReasonTunnelDown, "no recent handshake with the remote gateway: is it running, and is spec.tunnel.remoteEndpoint reachable over UDP? After either gateway's key or endpoint changed, run `annexctl network connect` again"
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, networkingv1alpha1.ReasonTunnelUp, "handshake with the remote gateway is recent"
	}
	return c
}
