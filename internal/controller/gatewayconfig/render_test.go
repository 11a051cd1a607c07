package gatewayconfig

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/gateway"
	"github.com/annexhq/annex/internal/netview"
	"github.com/annexhq/annex/internal/network"
)

func key(t *testing.T) (gateway.Key, gateway.Key) {
	t.Helper()
	priv, err := gateway.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := priv.Public()
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

// link is alpha's NetworkConfiguration for remote (the sandbox's CIDRs).
func link(remote, podCIDR, extCIDR string, remappedRemote, remappedLocal *networkingv1alpha1.RemappedCIDRs, tunnel *networkingv1alpha1.TunnelSpec, ready bool) networkingv1alpha1.NetworkConfiguration {
	nc := networkingv1alpha1.NetworkConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: remote, Namespace: corev1alpha1.AgentNamespace},
		Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: remote,
			Local:  networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.70.0.0/16"},
			Remote: networkingv1alpha1.ClusterCIDRs{PodCIDR: podCIDR, ExternalCIDR: extCIDR}, Tunnel: tunnel},
		Status: networkingv1alpha1.NetworkConfigurationStatus{RemappedRemote: remappedRemote, RemappedLocal: remappedLocal},
	}
	if ready {
		nc.Status.Conditions = []metav1.Condition{{Type: networkingv1alpha1.ConditionReady, Status: metav1.ConditionTrue}}
	}
	return nc
}

func pod(name, node, ip, transit string, phase corev1.PodPhase) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo",
		Annotations: map[string]string{corev1alpha1.AnnotationTransitAddress: transit}},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{PodIP: ip, Phase: phase}}
}

func TestRender(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	priv, _ := key(t)
	_, gammaPub := key(t)
	_, betaPub := key(t)
	local := Local{PodCIDR: p("10.200.0.0/16"), ExternalCIDR: p("10.70.0.0/16"), PrivateKey: priv,
		Ranges: network.LocalRanges{ServiceCIDR: p("10.96.0.0/16"), Nodes: []network.NodeAddress{{Node: "n1", Addr: a("192.168.77.1")}},
			Own: ownRanges(Cluster{PodCIDR: p("10.200.0.0/16"), ExternalCIDR: p("10.70.0.0/16")})}}
	gammaTunnel := &networkingv1alpha1.TunnelSpec{ListenPort: 51821, RemotePublicKey: gammaPub.String(), RemoteEndpoint: "192.168.77.3:51820"}
	betaTunnel := &networkingv1alpha1.TunnelSpec{ListenPort: 51820, RemotePublicKey: betaPub.String(), RemoteEndpoint: "192.168.77.2:51820"}
	remap := &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.64.0.0/16"}
	gamma := link("gamma", "10.200.0.0/16", "10.72.0.0/16", remap, remap, gammaTunnel, true)
	beta := link("beta", "10.201.0.0/16", "10.71.0.0/16", nil, nil, betaTunnel, true)
	nodes := map[string]string{"annex-gamma": "gamma", "annex-beta": "beta"}
	roles := map[string]corev1alpha1.PeeringRole{"gamma": corev1alpha1.RoleProvider, "beta": corev1alpha1.RoleProvider}

	wantGamma := gateway.Link{Peer: "gamma", ListenPort: 51821, PrivateKey: priv, PeerPublicKey: gammaPub,
		PeerEndpoint:   netip.MustParseAddrPort("192.168.77.3:51820"),
		Routes:         []netip.Prefix{p("100.64.0.0/16"), p("10.72.0.0/16")},
		DNAT:           []gateway.Netmap{{From: p("100.64.0.0/16"), To: p("10.200.0.0/16")}},
		SNAT:           []gateway.Netmap{{From: p("10.200.0.0/16"), To: p("100.64.0.0/16")}},
		AllowedSources: []netip.Prefix{p("10.200.0.0/16"), p("100.64.0.0/16"), p("10.72.0.0/16")},
		Accept:         []netip.Prefix{p("10.200.0.0/16")}, // --gateway-peer-access=all
	}
	wantBeta := gateway.Link{Peer: "beta", ListenPort: 51820, PrivateKey: priv, PeerPublicKey: betaPub,
		PeerEndpoint:   netip.MustParseAddrPort("192.168.77.2:51820"),
		Routes:         []netip.Prefix{p("10.201.0.0/16"), p("10.71.0.0/16")},
		AllowedSources: []netip.Prefix{p("10.201.0.0/16"), p("10.71.0.0/16")},
		Accept:         []netip.Prefix{p("10.200.0.0/16")},
	}
	withTransit := wantGamma
	withTransit.Masquerade = a("10.70.255.254")
	withTransit.Transit = []gateway.Transit{{Address: a("10.70.0.1"), To: a("10.200.0.11")}, {Address: a("10.70.0.3"), To: a("10.200.0.12")}}
	withTransit.Accept = []netip.Prefix{p("10.70.0.1/32"), p("10.70.0.3/32"), p("10.200.0.0/16")}
	public := link("beta", "8.8.0.0/16", "10.71.0.0/16", nil, nil, betaTunnel, true)
	overService := link("beta", "10.201.0.0/16", "10.96.0.0/12", nil, nil, betaTunnel, true)
	changedClaim := link("beta", "10.0.0.0/9", "10.71.0.0/16", &networkingv1alpha1.RemappedCIDRs{}, &networkingv1alpha1.RemappedCIDRs{}, betaTunnel, true)
	changedClaim.Annotations = map[string]string{netview.AnnotationAgreedRemoteCIDRs: netview.AgreedAnnotation(
		networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.201.0.0/16", ExternalCIDR: "10.71.0.0/16"})}
	overOwn := link("beta", "10.201.0.0/16", "10.70.0.0/20", &networkingv1alpha1.RemappedCIDRs{}, &networkingv1alpha1.RemappedCIDRs{}, betaTunnel, true)
	viewOnNodes := link("beta", "10.200.0.0/16", "10.71.0.0/16", &networkingv1alpha1.RemappedCIDRs{PodCIDR: "192.168.77.0/24"}, nil, betaTunnel, false)

	tests := []struct {
		name        string
		ncs         []networkingv1alpha1.NetworkConfiguration
		pods        []corev1.Pod
		want        []gateway.Link
		wantSkipped map[string]string
	}{
		{name: "nothing", want: []gateway.Link{}, wantSkipped: map[string]string{}},
		{name: "no tunnel, or not ready: no link",
			ncs: []networkingv1alpha1.NetworkConfiguration{
				link("gamma", "10.200.0.0/16", "10.72.0.0/16", remap, remap, nil, true),
				link("beta", "10.201.0.0/16", "10.71.0.0/16", nil, nil, betaTunnel, false)},
			want: []gateway.Link{}, wantSkipped: map[string]string{}},
		{name: "links sorted by peer, remapped and not",
			ncs:  []networkingv1alpha1.NetworkConfiguration{gamma, beta},
			want: []gateway.Link{wantBeta, wantGamma}, wantSkipped: map[string]string{}},
		{name: "transit addresses of pods on gamma, translated to gamma's view",
			ncs: []networkingv1alpha1.NetworkConfiguration{gamma},
			pods: []corev1.Pod{
				pod("b", "annex-gamma", "100.64.0.12", "10.70.0.3", corev1.PodRunning),
				pod("a", "annex-gamma", "100.64.0.11", "10.70.0.1", corev1.PodRunning),
				pod("done", "annex-gamma", "100.64.0.13", "10.70.0.4", corev1.PodSucceeded),
				pod("no-ip", "annex-gamma", "", "10.70.0.5", corev1.PodPending),
				pod("local", "node-1", "10.200.0.9", "10.70.0.6", corev1.PodRunning),
			},
			want: []gateway.Link{withTransit}, wantSkipped: map[string]string{}},
		{name: "a bad key is skipped with the reason",
			ncs: []networkingv1alpha1.NetworkConfiguration{link("gamma", "10.200.0.0/16", "10.72.0.0/16", remap, remap,
				&networkingv1alpha1.TunnelSpec{ListenPort: 51820, RemotePublicKey: "nope", RemoteEndpoint: "192.168.77.3:51820"}, true)},
			want:        []gateway.Link{},
			wantSkipped: map[string]string{"gamma": "spec.tunnel.remotePublicKey: a WireGuard key is 32 bytes in base64"}},
		{name: "a peer claiming a public range is refused, the other links stay",
			ncs:  []networkingv1alpha1.NetworkConfiguration{gamma, public},
			want: []gateway.Link{wantGamma},
			wantSkipped: map[string]string{"beta": "annex-network-private-range: spec.remote.podCIDR 8.8.0.0/16 is not inside a private range " +
				"(10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fd00::/8)"}},
		{name: "a peer's CIDR over this cluster's service CIDR is refused",
			ncs:  []networkingv1alpha1.NetworkConfiguration{overService},
			want: []gateway.Link{},
			wantSkipped: map[string]string{"beta": "annex-network-service-cidr: spec.remote.externalCIDR 10.96.0.0/12 overlaps " +
				"this cluster's service CIDR 10.96.0.0/16"}},
		{name: "a peer's claim that changed after the link was agreed is refused",
			ncs:  []networkingv1alpha1.NetworkConfiguration{gamma, changedClaim},
			want: []gateway.Link{wantGamma},
			wantSkipped: map[string]string{"beta": "annex-network-agreed-range: spec.remote.podCIDR 10.0.0.0/9 is not the 10.201.0.0/16 " +
				"agreed when the link was made (run `annexctl network disconnect` and connect again to agree on new ranges)"}},
		{name: "a peer's CIDR used as it is over this cluster's own external CIDR is refused",
			ncs:  []networkingv1alpha1.NetworkConfiguration{overOwn},
			want: []gateway.Link{},
			wantSkipped: map[string]string{"beta": "annex-network-own-range: spec.remote.externalCIDR 10.70.0.0/20 overlaps " +
				"this cluster's own range 10.70.0.0/16 (it would route it into the peer)"}},
		{name: "a remapping onto this cluster's nodes is refused, even before the link is ready",
			ncs:  []networkingv1alpha1.NetworkConfiguration{viewOnNodes},
			want: []gateway.Link{},
			wantSkipped: map[string]string{"beta": "annex-network-node-address: status.remappedRemote.podCIDR 192.168.77.0/24 holds " +
				"the address 192.168.77.1 of this cluster's node n1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, skippedErrs := Render(local, State{NetworkConfigurations: tt.ncs, Pods: tt.pods, VirtualNodes: nodes, Roles: roles}, PeerAccessAll)
			skipped := map[string]string{}
			for name, err := range skippedErrs {
				skipped[name] = err.Error()
			}
			if diff := cmp.Diff(tt.want, got.Links, cmp.Comparer(func(x, y netip.Prefix) bool { return x == y }),
				cmp.Comparer(func(x, y netip.Addr) bool { return x == y }), cmp.Comparer(func(x, y netip.AddrPort) bool { return x == y })); diff != "" {
				t.Errorf("links (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantSkipped, skipped); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("rendered configuration is invalid: %v", err)
			}
		})
	}
}

func TestTunnelCondition(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	recent := &gateway.LinkStatus{Peer: "gamma", LastHandshake: now.Add(-30 * time.Second)}
	old := &gateway.LinkStatus{Peer: "gamma", LastHandshake: now.Add(-5 * time.Minute)}
	tests := []struct {
		name       string
		hasTunnel  bool
		fresh      bool
		st         *gateway.LinkStatus
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{"no tunnel", false, true, recent, metav1.ConditionFalse, networkingv1alpha1.ReasonNoTunnel},
		{"gateway silent", true, false, recent, metav1.ConditionFalse, networkingv1alpha1.ReasonGatewayDown},
		{"link not reported", true, true, nil, metav1.ConditionFalse, networkingv1alpha1.ReasonTunnelDown},
		{"no handshake", true, true, &gateway.LinkStatus{Peer: "gamma"}, metav1.ConditionFalse, networkingv1alpha1.ReasonTunnelDown},
		{"old handshake", true, true, old, metav1.ConditionFalse, networkingv1alpha1.ReasonTunnelDown},
		{"recent handshake", true, true, recent, metav1.ConditionTrue, networkingv1alpha1.ReasonTunnelUp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tunnelCondition(tt.hasTunnel, tt.fresh, tt.st, now, handshakeMaxAge)
			if c.Status != tt.wantStatus || c.Reason != tt.wantReason {
				t.Errorf("got %s/%s, want %s/%s", c.Status, c.Reason, tt.wantStatus, tt.wantReason)
			}
		})
	}
}

func TestNeedsWrite(t *testing.T) {
	hs := metav1.NewTime(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	up := metav1.Condition{Type: networkingv1alpha1.ConditionTunnelConnected, Status: metav1.ConditionTrue,
		Reason: networkingv1alpha1.ReasonTunnelUp, Message: "handshake with the remote gateway is recent"}
	written := &networkingv1alpha1.NetworkConfiguration{Status: networkingv1alpha1.NetworkConfigurationStatus{
		Conditions: []metav1.Condition{up},
		Tunnel:     &networkingv1alpha1.TunnelStatus{LastHandshake: &hs, RxBytes: 100, TxBytes: 200}}}
	newer := metav1.NewTime(hs.Add(2 * time.Minute))
	down := up
	down.Status, down.Reason = metav1.ConditionFalse, networkingv1alpha1.ReasonGatewayDown
	tests := []struct {
		name        string
		cond        metav1.Condition
		tun         *networkingv1alpha1.TunnelStatus
		countersDue bool
		want        bool
	}{
		{"unchanged", up, &networkingv1alpha1.TunnelStatus{LastHandshake: &hs, RxBytes: 100, TxBytes: 200}, true, false},
		{"condition changed", down, written.Status.Tunnel, false, true},
		{"new handshake", up, &networkingv1alpha1.TunnelStatus{LastHandshake: &newer, RxBytes: 100, TxBytes: 200}, false, true},
		{"counters only, not due", up, &networkingv1alpha1.TunnelStatus{LastHandshake: &hs, RxBytes: 150, TxBytes: 250}, false, false},
		{"counters only, due", up, &networkingv1alpha1.TunnelStatus{LastHandshake: &hs, RxBytes: 150, TxBytes: 250}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := needsWrite(written, tt.cond, tt.tun, tt.countersDue); got != tt.want {
				t.Errorf("needsWrite = %v, want %v", got, tt.want)
			}
		})
	}
}
