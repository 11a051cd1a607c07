package network

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/identity"
)

func TestTunnels(t *testing.T) {
	withTunnel := func(peer string, port int32) networkingv1alpha1.NetworkConfiguration {
		return networkingv1alpha1.NetworkConfiguration{Spec: networkingv1alpha1.NetworkConfigurationSpec{
			RemoteClusterID: peer, Tunnel: &networkingv1alpha1.TunnelSpec{ListenPort: port}}}
	}
	alpha := Side{Identity: identity.Identity{ClusterID: "alpha"}, Configs: []networkingv1alpha1.NetworkConfiguration{
		withTunnel("beta", 51820), withTunnel("delta", 51822)}}
	gamma := Side{Identity: identity.Identity{ClusterID: "gamma"}}
	ga := &Gateway{PublicKey: "A", Address: netip.MustParseAddr("192.168.77.1")}
	gg := &Gateway{PublicKey: "G", Address: netip.MustParseAddr("192.168.77.3")}

	ta, tg, line := tunnels(alpha, gamma, ga, gg)
	if diff := cmp.Diff(&networkingv1alpha1.TunnelSpec{ListenPort: 51821, RemotePublicKey: "G", RemoteEndpoint: "192.168.77.3:51820"}, ta); diff != "" {
		t.Errorf("alpha's tunnel (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&networkingv1alpha1.TunnelSpec{ListenPort: 51820, RemotePublicKey: "A", RemoteEndpoint: "192.168.77.1:51821"}, tg); diff != "" {
		t.Errorf("gamma's tunnel (-want +got):\n%s", diff)
	}
	if want := "tunnel between alpha's gateway at 192.168.77.1:51821 and gamma's at 192.168.77.3:51820"; line != want {
		t.Errorf("line %q, want %q", line, want)
	}

	// The port already recorded is kept.
	alpha.Configs = append(alpha.Configs, withTunnel("gamma", 51830))
	if ta, _, _ := tunnels(alpha, gamma, ga, gg); ta.ListenPort != 51830 {
		t.Errorf("recorded port not kept: %d", ta.ListenPort)
	}
	// Either side without a gateway: no tunnel on both.
	if ta, tg, line := tunnels(alpha, gamma, ga, nil); ta != nil || tg != nil || line != "no tunnel: gamma runs no gateway (agent flag --gateway-config)" {
		t.Errorf("gamma without gateway: %v %v %q", ta, tg, line)
	}
}
