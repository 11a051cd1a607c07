package gatewayconfig

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/netview"
	"github.com/annexhq/annex/internal/network"
)

// tpod is a pod in namespace ns on node with ip; transit is its transit
// address ("" for none).
func tpod(ns, name, node, ip, transit string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{PodIP: ip, Phase: corev1.PodRunning}}
	if transit != "" {
		p.Annotations = map[string]string{corev1alpha1.AnnotationTransitAddress: transit}
	}
	return p
}

// direct is nc recorded as a link for direct connections.
func direct(nc networkingv1alpha1.NetworkConfiguration) networkingv1alpha1.NetworkConfiguration {
	return purpose(nc, networkingv1alpha1.LinkPurposeDirect)
}

// purpose is nc recorded as made for p.
func purpose(nc networkingv1alpha1.NetworkConfiguration, p string) networkingv1alpha1.NetworkConfiguration {
	nc.Labels = map[string]string{networkingv1alpha1.LabelLinkPurpose: p}
	return nc
}

func finished(p corev1.Pod) corev1.Pod { p.Status.Phase = corev1.PodSucceeded; return p }

func terminating(p corev1.Pod) corev1.Pod {
	now := metav1.Now()
	p.DeletionTimestamp = &now
	return p
}

// TestRenderAccept checks what each peer may open connections to, with
// the sandbox's addresses: alpha consumes from beta and gamma (wire is
// offloaded to both), beta and gamma are linked for direct connections
// only.
func TestRenderAccept(t *testing.T) {
	p := netip.MustParsePrefix
	priv, _ := key(t)
	tunnel := func(port int32) *networkingv1alpha1.TunnelSpec {
		_, pub := key(t)
		return &networkingv1alpha1.TunnelSpec{ListenPort: port, RemotePublicKey: pub.String(), RemoteEndpoint: "192.168.77.9:51820"}
	}
	remap := &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.64.0.0/16"}
	gammaLocal := Local{PodCIDR: p("10.200.0.0/16"), ExternalCIDR: p("10.72.0.0/16"), PrivateKey: priv,
		Ranges: network.LocalRanges{ServiceCIDR: p("10.96.0.0/16")}}
	alphaLocal := Local{PodCIDR: p("10.200.0.0/16"), ExternalCIDR: p("10.70.0.0/16"), PrivateKey: priv,
		Ranges: network.LocalRanges{ServiceCIDR: p("10.96.0.0/16")}}

	// On gamma (a provider): alpha and zeta are tenants, beta is linked for
	// direct connections, omega is peered but its role is not known yet.
	onGamma := State{
		NetworkConfigurations: []networkingv1alpha1.NetworkConfiguration{
			link("alpha", "10.200.0.0/16", "10.70.0.0/16", remap, remap, tunnel(51820), true),
			direct(link("beta", "10.201.0.0/16", "10.71.0.0/16", nil, nil, tunnel(51821), true)),
			link("zeta", "10.202.0.0/16", "10.73.0.0/16", nil, nil, tunnel(51822), true),
			link("omega", "10.203.0.0/16", "10.74.0.0/16", nil, nil, tunnel(51823), true),
		},
		Roles:            map[string]corev1alpha1.PeeringRole{"alpha": corev1alpha1.RoleConsumer, "zeta": corev1alpha1.RoleConsumer, "omega": ""},
		RemoteNamespaces: map[string]string{"wire-alpha": "alpha", "other-zeta": "zeta", "empty-omega": "omega"},
		VirtualNodes:     map[string]string{},
		Pods: []corev1.Pod{
			tpod("wire-alpha", "g1", "n1", "10.200.3.4", ""),
			tpod("wire-alpha", "g2", "n2", "10.200.3.5", ""),
			terminating(tpod("wire-alpha", "g3", "n1", "10.200.3.6", "")), // still serving
			finished(tpod("wire-alpha", "done", "n1", "10.200.3.7", "")),
			tpod("wire-alpha", "hostnet", "n1", "192.168.77.3", ""), // a node's address: never
			tpod("wire-alpha", "pending", "", "", ""),
			tpod("other-zeta", "z", "n2", "10.200.5.1", ""),
			tpod("kube-system", "coredns", "n1", "10.200.0.10", ""),
			tpod("default", "own", "n2", "10.200.0.11", ""),
		},
	}
	// On alpha (the consumer): beta and gamma are its providers; wire is
	// offloaded to both, solo to gamma only.
	onAlpha := State{
		NetworkConfigurations: []networkingv1alpha1.NetworkConfiguration{
			link("beta", "10.201.0.0/16", "10.71.0.0/16", nil, nil, tunnel(51820), true),
			link("gamma", "10.200.0.0/16", "10.72.0.0/16", remap, remap, tunnel(51821), true),
		},
		Roles:        map[string]corev1alpha1.PeeringRole{"beta": corev1alpha1.RoleProvider, "gamma": corev1alpha1.RoleProvider},
		VirtualNodes: map[string]string{"annex-beta": "beta", "annex-gamma": "gamma"},
		Offloaded:    map[string][]string{"wire": {"beta", "gamma"}, "solo": {"gamma"}},
		Pods: []corev1.Pod{
			tpod("wire", "a", "n1", "10.200.1.5", ""),
			tpod("solo", "s", "n1", "10.200.1.7", ""),
			tpod("kube-system", "coredns", "n1", "10.200.0.10", ""),
			tpod("default", "own", "n2", "10.200.0.11", ""),
			tpod("wire", "g", "annex-gamma", "100.64.3.7", "10.70.0.1"),
			tpod("wire", "b", "annex-beta", "10.201.2.4", "10.70.0.2"),
			tpod("solo", "g2", "annex-gamma", "100.64.3.8", "10.70.0.3"),
			tpod("wire", "no-transit-yet", "annex-gamma", "100.64.3.9", ""),
		},
	}
	// alpha offloading to delta as well, and delta offloading to alpha.
	both := onAlpha
	both.NetworkConfigurations = append(append([]networkingv1alpha1.NetworkConfiguration{}, onAlpha.NetworkConfigurations...),
		link("delta", "10.204.0.0/16", "10.75.0.0/16", nil, nil, tunnel(51822), true))
	both.Roles = map[string]corev1alpha1.PeeringRole{"beta": corev1alpha1.RoleProvider, "gamma": corev1alpha1.RoleProvider, "delta": corev1alpha1.RoleBoth}
	both.Offloaded = map[string][]string{"wire": {"beta", "gamma", "delta"}}
	both.RemoteNamespaces = map[string]string{"app-delta": "delta"}
	both.Pods = append(append([]corev1.Pod{}, onAlpha.Pods...), tpod("app-delta", "d", "n1", "10.200.9.9", ""))

	tests := []struct {
		name   string
		local  Local
		state  State
		access PeerAccess
		want   map[string]string // peer: accept list
		own    string            // OwnPods; "" and no PodCIDR with PeerAccessAll
	}{
		{name: "provider: each tenant its own pods, a direct link every tenant's, never the provider's own",
			local: gammaLocal, state: onGamma, access: PeerAccessTenant,
			want: map[string]string{
				"alpha": "10.200.3.4/31 10.200.3.6/32",
				"zeta":  "10.200.5.1/32",
				"beta":  "10.200.3.4/31 10.200.3.6/32 10.200.5.1/32",
				"omega": "", // no pods, and no role: nothing more
			},
			own: "10.200.0.10/31"}, // coredns and own: not the tenants' pods
		{name: "consumer: a provider reaches the pods of what is offloaded to it, and their transit addresses",
			local: alphaLocal, state: onAlpha, access: PeerAccessTenant,
			want: map[string]string{
				"beta":  "10.70.0.1/32 10.200.1.5/32",               // a, and g (wire, on gamma) by transit
				"gamma": "10.70.0.2/32 10.200.1.5/32 10.200.1.7/32", // a, s, and b (wire, on beta) by transit
			},
			own: "10.200.0.10/31 10.200.1.5/32 10.200.1.7/32"}, // not the pods on virtual nodes
		{name: "two-way peering: the peer's tenant pods and what is offloaded to it",
			local: alphaLocal, state: both, access: PeerAccessTenant,
			want: map[string]string{
				"beta":  "10.70.0.1/32 10.200.1.5/32",
				"gamma": "10.70.0.2/32 10.200.1.5/32",
				"delta": "10.70.0.1/32 10.70.0.2/32 10.200.1.5/32 10.200.9.9/32", // its tenant pod d, and wire as beta and gamma see it
			},
			own: "10.200.0.10/31 10.200.1.5/32 10.200.1.7/32"}, // not delta's d
		{name: "all: every peer the whole pod CIDR and every transit address",
			local: alphaLocal, state: onAlpha, access: PeerAccessAll,
			want: map[string]string{
				"beta":  "10.70.0.1/32 10.70.0.2/31 10.200.0.0/16",
				"gamma": "10.70.0.1/32 10.70.0.2/31 10.200.0.0/16",
			}},
		{name: "all on a provider",
			local: gammaLocal, state: onGamma, access: PeerAccessAll,
			want: map[string]string{"alpha": "10.200.0.0/16", "beta": "10.200.0.0/16", "zeta": "10.200.0.0/16", "omega": "10.200.0.0/16"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, skipped := Render(tt.local, tt.state, tt.access)
			if len(skipped) > 0 {
				t.Fatalf("skipped: %v", skipped)
			}
			got := map[string]string{}
			for _, l := range cfg.Links {
				var s []string
				for _, a := range l.Accept {
					s = append(s, a.String())
				}
				got[l.Peer] = strings.Join(s, " ")
				if l.Accept == nil {
					t.Errorf("link %s: accept is null, want a list", l.Peer)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("accept by peer (-want +got):\n%s", diff)
			}
			var own []string
			for _, a := range cfg.OwnPods {
				own = append(own, a.String())
			}
			if got := strings.Join(own, " "); got != tt.own {
				t.Errorf("own pods %q, want %q", got, tt.own)
			}
			if bound := cfg.PodCIDR.IsValid(); bound != (tt.access != PeerAccessAll) {
				t.Errorf("podCIDR %v: sources bound = %v, want %v", cfg.PodCIDR, bound, tt.access != PeerAccessAll)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("rendered configuration is invalid: %v", err)
			}
		})
	}
}

// TestRenderWithoutPeering: on a provider, every state an unpeering can
// stop in (or a cache can see, the deletions of the ForeignCluster, the
// link and the namespaces arriving in any order) leaves the link with the
// tenant accepting at most the tenant's own pods, and a link whose peering
// is gone out of the file, in both access modes; a link for direct
// connections needs no peering.
func TestRenderWithoutPeering(t *testing.T) {
	p := netip.MustParsePrefix
	priv, _ := key(t)
	_, pub := key(t)
	tunnel := &networkingv1alpha1.TunnelSpec{ListenPort: 51820, RemotePublicKey: pub.String(), RemoteEndpoint: "192.168.77.1:51820"}
	gamma := Local{PodCIDR: p("10.200.0.0/16"), ExternalCIDR: p("10.72.0.0/16"), PrivateKey: priv,
		Ranges: network.LocalRanges{ServiceCIDR: p("10.96.0.0/16")}}
	alphaLink := link("alpha", "10.201.0.0/16", "10.70.0.0/16", nil, nil, tunnel, true)
	tenantPods := []corev1.Pod{tpod("wire-alpha", "a", "n1", "10.200.3.4", "")}
	others := []corev1.Pod{tpod("shop-zeta", "z", "n1", "10.200.5.1", ""), tpod("kube-system", "dns", "n1", "10.200.0.10", "")}
	const alphasOwn = "10.200.3.4/32"

	for _, access := range []PeerAccess{PeerAccessTenant, PeerAccessAll} {
		for _, linkPurpose := range []string{networkingv1alpha1.LinkPurposePeering, "", networkingv1alpha1.LinkPurposeDirect} {
			for _, role := range []corev1alpha1.PeeringRole{corev1alpha1.RoleConsumer, corev1alpha1.RoleBoth, "", "none"} {
				for _, remoteNS := range []bool{true, false} {
					name := fmt.Sprintf("%s/purpose %q/role %q/remote namespace %v", access, linkPurpose, role, remoteNS)
					t.Run(name, func(t *testing.T) {
						st := State{NetworkConfigurations: []networkingv1alpha1.NetworkConfiguration{alphaLink},
							Roles:            map[string]corev1alpha1.PeeringRole{"zeta": corev1alpha1.RoleConsumer},
							RemoteNamespaces: map[string]string{"shop-zeta": "zeta"}, VirtualNodes: map[string]string{},
							Pods: append([]corev1.Pod{}, others...)}
						if linkPurpose != "" {
							st.NetworkConfigurations[0] = purpose(alphaLink, linkPurpose)
						}
						peered := role != "none"
						if peered {
							st.Roles["alpha"] = role
						}
						if remoteNS {
							st.RemoteNamespaces["wire-alpha"] = "alpha"
							st.Pods = append(st.Pods, tenantPods...)
						}
						cfg, skipped := Render(gamma, st, access)
						var accept []string
						for _, l := range cfg.Links {
							for _, a := range l.Accept {
								accept = append(accept, a.String())
							}
						}
						programmed := len(cfg.Links) == 1
						switch {
						case !peered && linkPurpose != networkingv1alpha1.LinkPurposeDirect:
							var pe *netview.PeeringError
							if programmed || !errors.As(skipped["alpha"], &pe) {
								t.Fatalf("a link without its peering: links %v, skipped %v; want it left out for want of a peering", accept, skipped)
							}
						case !programmed:
							t.Fatalf("link left out: %v", skipped)
						case access == PeerAccessAll:
							if got := strings.Join(accept, " "); got != "10.200.0.0/16" {
								t.Errorf("accept %s, want the whole pod CIDR", got)
							}
						case !peered: // a direct connection: every tenant's pods, never the provider's own
							want := "10.200.5.1/32"
							if remoteNS {
								want = alphasOwn + " " + want
							}
							if got := strings.Join(accept, " "); got != want {
								t.Errorf("accept %s, want %s", got, want)
							}
						default: // a peering: at most the tenant's own pods
							for _, a := range accept {
								if a != alphasOwn {
									t.Errorf("accept holds %s, more than the tenant had (%s)", a, alphasOwn)
								}
							}
						}
					})
				}
			}
		}
	}
}
