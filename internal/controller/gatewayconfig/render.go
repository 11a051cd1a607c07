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
	"github.com/annexhq/annex/internal/network"
)

// Local is what Render needs to know about this cluster.
type Local struct {
	PodCIDR      netip.Prefix
	ExternalCIDR netip.Prefix // invalid when the cluster has none: no transit
	PrivateKey   gateway.Key
}

// Render computes the gateway's configuration (docs/network.md, "What a
// gateway must do"): one link per Ready NetworkConfiguration with a tunnel,
// and on each link the transit addresses of this cluster's pods running on
// that peer (pods on the peer's virtual node; virtualNodes maps node name to
// cluster ID); peers may open connections to this cluster's pod CIDR only.
// Links and transit addresses are sorted, so the same input always renders
// the same file. A NetworkConfiguration that cannot be
// rendered is left out and reported in skipped (by name) with the reason.
func Render(local Local, ncs []networkingv1alpha1.NetworkConfiguration, pods []corev1.Pod, virtualNodes map[string]string) (cfg gateway.Config, skipped map[string]string) {
	skipped = map[string]string{}
	transit := transitByPeer(pods, virtualNodes)
	for i := range ncs {
		nc := &ncs[i]
		if !nc.DeletionTimestamp.IsZero() {
			continue
		}
		l, err := renderLink(local, nc, transit[nc.Spec.RemoteClusterID])
		if err != nil {
			skipped[nc.Name] = err.Error()
			continue
		}
		if l != nil {
			cfg.Links = append(cfg.Links, *l)
		}
	}
	slices.SortFunc(cfg.Links, func(a, b gateway.Link) int { return strings.Compare(a.Peer, b.Peer) })
	if local.PodCIDR.IsValid() {
		// Peers open connections to this cluster's pods, nothing else.
		cfg.Accept = []netip.Prefix{local.PodCIDR}
	}
	if cfg.Links == nil {
		cfg.Links = []gateway.Link{}
	}
	return cfg, skipped
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
