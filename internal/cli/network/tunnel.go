package network

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/gateway"
)

// Gateway is what a cluster's agent publishes about its gateway.
type Gateway struct {
	PublicKey string
	Address   netip.Addr
}

// readGateway reads the gateway a cluster's agent publishes (ConfigMap
// annex-system/annex-gateway); nil when the cluster runs none.
func readGateway(ctx context.Context, c *cli.Cluster, id string) (*Gateway, error) {
	cm := &corev1.ConfigMap{}
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: networkingv1alpha1.GatewayConfigMapName}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: read the gateway ConfigMap: %w", id, c.Unreachable(err))
	}
	var k gateway.Key
	pub := cm.Data[networkingv1alpha1.GatewayPublicKey]
	if err := k.UnmarshalText([]byte(pub)); err != nil {
		return nil, fmt.Errorf("%s: ConfigMap %s/%s, key %s: %w", id, cm.Namespace, cm.Name, networkingv1alpha1.GatewayPublicKey, err)
	}
	addr, err := netip.ParseAddr(cm.Data[networkingv1alpha1.GatewayAddress])
	if err != nil || !addr.Is4() {
		return nil, fmt.Errorf("%s: ConfigMap %s/%s, key %s: %q is not an IPv4 address", id, cm.Namespace, cm.Name, networkingv1alpha1.GatewayAddress, cm.Data[networkingv1alpha1.GatewayAddress])
	}
	return &Gateway{PublicKey: pub, Address: addr}, nil
}

// tunnelPort is the UDP port of self's gateway for the link with peer: the
// one already recorded, or the lowest port from DefaultTunnelPort up that
// none of self's other links uses.
func tunnelPort(self Side, peer string) int32 {
	used := map[int32]bool{}
	for _, nc := range self.Configs {
		if nc.Spec.Tunnel == nil {
			continue
		}
		if nc.Spec.RemoteClusterID == peer {
			return nc.Spec.Tunnel.ListenPort
		}
		used[nc.Spec.Tunnel.ListenPort] = true
	}
	p := int32(networkingv1alpha1.DefaultTunnelPort)
	for used[p] {
		p++
	}
	return p
}

// tunnels returns the spec.tunnel of each side (nil for both when either
// runs no gateway) and a line that says so.
func tunnels(sa, sb Side, ga, gb *Gateway) (ta, tb *networkingv1alpha1.TunnelSpec, line string) {
	a, b := sa.Identity.ClusterID, sb.Identity.ClusterID
	switch {
	case ga == nil && gb == nil:
		return nil, nil, fmt.Sprintf("no tunnel: neither %s nor %s runs a gateway (agent flag --gateway-config)", a, b)
	case ga == nil:
		return nil, nil, fmt.Sprintf("no tunnel: %s runs no gateway (agent flag --gateway-config)", a)
	case gb == nil:
		return nil, nil, fmt.Sprintf("no tunnel: %s runs no gateway (agent flag --gateway-config)", b)
	}
	pa, pb := tunnelPort(sa, b), tunnelPort(sb, a)
	ta = &networkingv1alpha1.TunnelSpec{ListenPort: pa, RemotePublicKey: gb.PublicKey,
		RemoteEndpoint: netip.AddrPortFrom(gb.Address, uint16(pb)).String()} //nolint:gosec // G115: listenPort is validated to 1..65535
	tb = &networkingv1alpha1.TunnelSpec{ListenPort: pb, RemotePublicKey: ga.PublicKey,
		RemoteEndpoint: netip.AddrPortFrom(ga.Address, uint16(pa)).String()} //nolint:gosec // G115: listenPort is validated to 1..65535
	return ta, tb, fmt.Sprintf("tunnel between %s's gateway at %s and %s's at %s", a, tb.RemoteEndpoint, b, ta.RemoteEndpoint)
}
