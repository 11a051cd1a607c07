package network

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/identity"
	"github.com/annexhq/annex/internal/netview"
	annexnet "github.com/annexhq/annex/internal/network"
)

func id(name, pod, ext string) identity.Identity {
	return identity.Identity{ClusterID: name, PodCIDR: pod, ServiceCIDR: "10.96.0.0/16", ExternalCIDR: ext}
}

// The sandbox: alpha's and gamma's pod CIDRs overlap.
var (
	alpha = id("alpha", "10.200.0.0/16", "10.70.0.0/16")
	beta  = id("beta", "10.201.0.0/16", "10.71.0.0/16")
	gamma = id("gamma", "10.200.0.0/16", "10.72.0.0/16")
	delta = id("delta", "10.200.0.0/16", "10.73.0.0/16")
)

// cfg is a NetworkConfiguration for peer with its decision recorded;
// remapped is "podRemap,extRemap" (either may be empty).
func cfg(peer identity.Identity, remapped string) networkingv1alpha1.NetworkConfiguration {
	pod, ext, _ := strings.Cut(remapped, ",")
	nc := networkingv1alpha1.NetworkConfiguration{}
	nc.Name, nc.Namespace = peer.ClusterID, "annex-system"
	nc.Spec.RemoteClusterID = peer.ClusterID
	nc.Spec.Remote = networkingv1alpha1.ClusterCIDRs{PodCIDR: peer.PodCIDR, ExternalCIDR: peer.ExternalCIDR}
	nc.Status.RemappedRemote = &networkingv1alpha1.RemappedCIDRs{PodCIDR: pod, ExternalCIDR: ext}
	return nc
}

// agreedCfg is nc with the agreement on peer's identity's CIDRs recorded.
func agreedCfg(nc networkingv1alpha1.NetworkConfiguration, peer identity.Identity) networkingv1alpha1.NetworkConfiguration {
	nc.Annotations = map[string]string{netview.AnnotationAgreedRemoteCIDRs: netview.AgreedAnnotation(
		networkingv1alpha1.ClusterCIDRs{PodCIDR: peer.PodCIDR, ExternalCIDR: peer.ExternalCIDR})}
	return nc
}

// undecided is a NetworkConfiguration for peer whose status is not written yet.
func undecided(peer identity.Identity) networkingv1alpha1.NetworkConfiguration {
	nc := cfg(peer, "")
	nc.Status.RemappedRemote = nil
	return nc
}

func sideOf(self identity.Identity, cfgs ...networkingv1alpha1.NetworkConfiguration) Side {
	return Side{Identity: self, Configs: cfgs}
}

func lines(p Plan) []string { return append(p.A.Lines(), p.B.Lines()...) }

func TestDecide(t *testing.T) {
	tests := []struct {
		name    string
		a, b    Side
		pool    string
		want    []string
		wantErr string
	}{
		{
			name: "sandbox alpha-beta: nothing overlaps",
			a:    sideOf(alpha), b: sideOf(beta),
			want: []string{
				"alpha uses beta's pod CIDR 10.201.0.0/16 as it is",
				"alpha uses beta's external CIDR 10.71.0.0/16 as it is",
				"beta uses alpha's pod CIDR 10.200.0.0/16 as it is",
				"beta uses alpha's external CIDR 10.70.0.0/16 as it is",
			},
		},
		{
			name: "sandbox alpha-gamma: the pod CIDRs overlap, each side remaps the other's",
			a:    sideOf(alpha, cfg(beta, "")), b: sideOf(gamma),
			want: []string{
				"alpha maps gamma's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps alpha's pod CIDR 10.200.0.0/16)",
				"alpha uses gamma's external CIDR 10.72.0.0/16 as it is",
				"gamma maps alpha's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps gamma's pod CIDR 10.200.0.0/16)",
				"gamma uses alpha's external CIDR 10.70.0.0/16 as it is",
			},
		},
		{
			name: "sandbox beta-gamma: beta already uses 10.200.0.0/16 for alpha",
			a:    sideOf(beta, cfg(alpha, "")), b: sideOf(gamma, cfg(alpha, "100.64.0.0/16,")),
			want: []string{
				"beta maps gamma's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps alpha's pod CIDR 10.200.0.0/16)",
				"beta uses gamma's external CIDR 10.72.0.0/16 as it is",
				"gamma uses beta's pod CIDR 10.201.0.0/16 as it is",
				"gamma uses beta's external CIDR 10.71.0.0/16 as it is",
			},
		},
		{
			name: "a second overlapping peer skips the block the first one got",
			a:    sideOf(alpha, cfg(beta, ""), cfg(gamma, "100.64.0.0/16,")), b: sideOf(delta),
			want: []string{
				"alpha maps delta's pod CIDR 10.200.0.0/16 to 100.65.0.0/16 (it overlaps alpha's pod CIDR 10.200.0.0/16)",
				"alpha uses delta's external CIDR 10.73.0.0/16 as it is",
				"delta maps alpha's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps delta's pod CIDR 10.200.0.0/16)",
				"delta uses alpha's external CIDR 10.70.0.0/16 as it is",
			},
		},
		{
			name: "an undecided peer counts with its original CIDRs",
			a:    sideOf(beta, undecided(alpha)), b: sideOf(gamma),
			want: []string{
				"beta maps gamma's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps alpha's pod CIDR 10.200.0.0/16)",
				"beta uses gamma's external CIDR 10.72.0.0/16 as it is",
				"gamma uses beta's pod CIDR 10.201.0.0/16 as it is",
				"gamma uses beta's external CIDR 10.71.0.0/16 as it is",
			},
		},
		{
			name: "a peer's remapping is in use too",
			a:    sideOf(id("x", "10.1.0.0/16", "10.2.0.0/16"), cfg(id("p", "10.9.0.0/16", "10.8.0.0/16"), "100.64.0.0/16,")),
			b:    sideOf(id("y", "100.64.0.0/16", "10.3.0.0/16")),
			want: []string{
				"x maps y's pod CIDR 100.64.0.0/16 to 100.65.0.0/16 (it overlaps p's pod CIDR as x maps it (100.64.0.0/16))",
				"x uses y's external CIDR 10.3.0.0/16 as it is",
				"y uses x's pod CIDR 10.1.0.0/16 as it is",
				"y uses x's external CIDR 10.2.0.0/16 as it is",
			},
		},
		{
			name: "both CIDRs overlap, crosswise, and the peer's external CIDR lies in the pool",
			a:    sideOf(id("x", "10.1.0.0/16", "10.2.0.0/16")),
			b:    sideOf(id("y", "10.2.0.0/16", "10.1.0.0/16")),
			want: []string{
				"x maps y's pod CIDR 10.2.0.0/16 to 100.64.0.0/16 (it overlaps x's external CIDR 10.2.0.0/16)",
				"x maps y's external CIDR 10.1.0.0/16 to 100.65.0.0/16 (it overlaps x's pod CIDR 10.1.0.0/16)",
				"y maps x's pod CIDR 10.1.0.0/16 to 100.64.0.0/16 (it overlaps y's external CIDR 10.1.0.0/16)",
				"y maps x's external CIDR 10.2.0.0/16 to 100.65.0.0/16 (it overlaps y's pod CIDR 10.2.0.0/16)",
			},
		},
		{
			name: "a remapped pod CIDR avoids the peer's external CIDR used as it is",
			a:    sideOf(id("x", "10.1.0.0/16", "10.2.0.0/16")),
			b:    sideOf(id("y", "10.1.0.0/16", "100.64.0.0/16")),
			want: []string{
				"x maps y's pod CIDR 10.1.0.0/16 to 100.65.0.0/16 (it overlaps x's pod CIDR 10.1.0.0/16)",
				"x uses y's external CIDR 100.64.0.0/16 as it is",
				"y maps x's pod CIDR 10.1.0.0/16 to 100.65.0.0/16 (it overlaps y's pod CIDR 10.1.0.0/16)",
				"y uses x's external CIDR 10.2.0.0/16 as it is",
			},
		},
		{
			name: "the remapping has the remote's size",
			a:    sideOf(alpha), b: sideOf(id("wide", "10.192.0.0/12", "10.70.0.0/24")),
			want: []string{
				"alpha maps wide's pod CIDR 10.192.0.0/12 to 100.64.0.0/12 (it overlaps alpha's pod CIDR 10.200.0.0/16)",
				"alpha maps wide's external CIDR 10.70.0.0/24 to 100.80.0.0/24 (it overlaps alpha's external CIDR 10.70.0.0/16)",
				"wide maps alpha's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps wide's pod CIDR 10.192.0.0/12)",
				"wide maps alpha's external CIDR 10.70.0.0/16 to 100.65.0.0/16 (it overlaps wide's external CIDR 10.70.0.0/24)",
			},
		},
		{
			name: "a peer's CIDR over the service CIDR is refused, not remapped",
			a:    sideOf(alpha), b: sideOf(id("svc", "10.201.0.0/16", "10.96.0.0/20")),
			wantErr: "alpha refuses the link: annex-network-service-cidr: svc's external CIDR 10.96.0.0/20 overlaps this cluster's service CIDR 10.96.0.0/16 " +
				"(as svc's identity ConfigMap annex-system/annex-cluster-identity publishes it)",
		},
		{
			name: "a peer's public pod CIDR is refused",
			a:    sideOf(id("pub", "8.8.0.0/16", "10.71.0.0/16")), b: sideOf(alpha),
			wantErr: "alpha refuses the link: annex-network-private-range: pub's pod CIDR 8.8.0.0/16 is not inside a private range",
		},
		{
			name:    "a peer's CIDR holding a node's address is refused",
			a:       Side{Identity: alpha, Nodes: []annexnet.NodeAddress{{Node: "n1", Addr: netip.MustParseAddr("192.168.77.1")}}},
			b:       sideOf(id("onnodes", "192.168.77.0/24", "10.71.0.0/16")),
			wantErr: "alpha refuses the link: annex-network-node-address: onnodes's pod CIDR 192.168.77.0/24 holds the address 192.168.77.1 of this cluster's node n1",
		},
		{
			name: "shared address space and 172.16/12 are private; a remapping avoids the nodes",
			a:    Side{Identity: alpha, Nodes: []annexnet.NodeAddress{{Node: "n1", Addr: netip.MustParseAddr("100.64.0.5")}}},
			b:    sideOf(id("cgnat", "10.200.0.0/16", "172.20.0.0/16")),
			want: []string{
				"alpha maps cgnat's pod CIDR 10.200.0.0/16 to 100.65.0.0/16 (it overlaps alpha's pod CIDR 10.200.0.0/16)",
				"alpha uses cgnat's external CIDR 172.20.0.0/16 as it is",
				"cgnat maps alpha's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps cgnat's pod CIDR 10.200.0.0/16)",
				"cgnat uses alpha's external CIDR 10.70.0.0/16 as it is",
			},
		},
		{
			name: "a recorded remapping is kept even when a smaller one is free",
			a:    sideOf(alpha, cfg(gamma, "100.70.0.0/16,")), b: sideOf(gamma, cfg(alpha, "100.64.0.0/16,")),
			want: []string{
				"alpha maps gamma's pod CIDR 10.200.0.0/16 to 100.70.0.0/16 (unchanged)",
				"alpha uses gamma's external CIDR 10.72.0.0/16 as it is (unchanged)",
				"gamma maps alpha's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (unchanged)",
				"gamma uses alpha's external CIDR 10.70.0.0/16 as it is (unchanged)",
			},
		},
		{
			name: "a recorded remapping is kept when the overlap went away",
			a:    sideOf(id("alpha", "10.210.0.0/16", "10.70.0.0/16"), cfg(gamma, "100.64.0.0/16,")), b: sideOf(gamma),
			want: []string{
				"alpha maps gamma's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (unchanged)",
				"alpha uses gamma's external CIDR 10.72.0.0/16 as it is (unchanged)",
				"gamma uses alpha's pod CIDR 10.210.0.0/16 as it is",
				"gamma uses alpha's external CIDR 10.70.0.0/16 as it is",
			},
		},
		{
			name: "a peer whose CIDR changed since a link recorded before agreements is refused",
			a:    sideOf(alpha, cfg(gamma, "100.64.0.0/16,")), b: sideOf(id("gamma", "10.210.0.0/16", "10.72.0.0/16")),
			wantErr: "alpha refuses the link: annex-network-agreed-range: gamma's pod CIDR 10.210.0.0/16 is not the 10.200.0.0/16 agreed when the link was made " +
				"(run `annexctl network disconnect` and connect again to agree on new ranges) (as gamma's identity ConfigMap annex-system/annex-cluster-identity publishes it; " +
				"alpha's NetworkConfiguration annex-system/gamma recorded the agreement)",
		},
		{
			name:    "a peer widening its pod CIDR over the consumer's after the agreement is refused",
			a:       sideOf(alpha, agreedCfg(cfg(beta, ""), beta)),
			b:       sideOf(id("beta", "10.192.0.0/11", "10.71.0.0/16")),
			wantErr: "alpha refuses the link: annex-network-agreed-range: beta's pod CIDR 10.192.0.0/11 is not the 10.201.0.0/16 agreed",
		},
		{
			name: "the agreement, not spec.remote, is what counts",
			a: sideOf(alpha, func() networkingv1alpha1.NetworkConfiguration {
				nc := agreedCfg(cfg(beta, ""), beta)
				nc.Spec.Remote.ExternalCIDR = "10.99.0.0/16" // written by something else
				return nc
			}()),
			b:       sideOf(id("beta", "10.201.0.0/16", "10.99.0.0/16")),
			wantErr: "alpha refuses the link: annex-network-agreed-range: beta's external CIDR 10.99.0.0/16 is not the 10.71.0.0/16 agreed",
		},
		{
			name: "as agreed: unchanged",
			a:    sideOf(alpha, agreedCfg(cfg(beta, ""), beta)), b: sideOf(beta),
			want: []string{
				"alpha uses beta's pod CIDR 10.201.0.0/16 as it is (unchanged)",
				"alpha uses beta's external CIDR 10.71.0.0/16 as it is (unchanged)",
				"beta uses alpha's pod CIDR 10.200.0.0/16 as it is",
				"beta uses alpha's external CIDR 10.70.0.0/16 as it is",
			},
		},
		{
			name: "an agreement that does not parse is refused",
			a: sideOf(alpha, func() networkingv1alpha1.NetworkConfiguration {
				nc := cfg(beta, "")
				nc.Annotations = map[string]string{netview.AnnotationAgreedRemoteCIDRs: "10.201.0.0/16"}
				return nc
			}()),
			b:       sideOf(beta),
			wantErr: "alpha refuses the link: NetworkConfiguration annex-system/beta: annotation annex.dev/agreed-remote-cidrs \"10.201.0.0/16\" is not the JSON of the agreed CIDRs",
		},
		{
			name: "a recorded remapping that now collides with another peer is replaced",
			a:    sideOf(alpha, cfg(gamma, "100.64.0.0/16,"), cfg(delta, "100.64.0.0/16,")), b: sideOf(gamma),
			want: []string{
				"alpha maps gamma's pod CIDR 10.200.0.0/16 to 100.65.0.0/16 (it overlaps alpha's pod CIDR 10.200.0.0/16)",
				"alpha uses gamma's external CIDR 10.72.0.0/16 as it is (unchanged)",
				"gamma maps alpha's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps gamma's pod CIDR 10.200.0.0/16)",
				"gamma uses alpha's external CIDR 10.70.0.0/16 as it is",
			},
		},
		{
			name: "a recorded 'as is' that now overlaps is remapped",
			a:    sideOf(alpha, cfg(gamma, "")), b: sideOf(gamma),
			want: []string{
				"alpha maps gamma's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps alpha's pod CIDR 10.200.0.0/16)",
				"alpha uses gamma's external CIDR 10.72.0.0/16 as it is (unchanged)",
				"gamma maps alpha's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps gamma's pod CIDR 10.200.0.0/16)",
				"gamma uses alpha's external CIDR 10.70.0.0/16 as it is",
			},
		},
		{
			name: "a recorded remapping of the wrong size is replaced",
			a:    sideOf(alpha, cfg(gamma, "100.64.0.0/24,")), b: sideOf(gamma),
			want: []string{
				"alpha maps gamma's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps alpha's pod CIDR 10.200.0.0/16)",
				"alpha uses gamma's external CIDR 10.72.0.0/16 as it is (unchanged)",
				"gamma maps alpha's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps gamma's pod CIDR 10.200.0.0/16)",
				"gamma uses alpha's external CIDR 10.70.0.0/16 as it is",
			},
		},
		{
			name: "another object about the same peer does not count as in use",
			a: sideOf(alpha, func() networkingv1alpha1.NetworkConfiguration {
				nc := cfg(gamma, "100.64.0.0/16,")
				nc.Name = "old-name"
				return nc
			}()),
			b: sideOf(gamma),
			want: []string{
				"alpha maps gamma's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps alpha's pod CIDR 10.200.0.0/16)",
				"alpha uses gamma's external CIDR 10.72.0.0/16 as it is",
				"gamma maps alpha's pod CIDR 10.200.0.0/16 to 100.64.0.0/16 (it overlaps gamma's pod CIDR 10.200.0.0/16)",
				"gamma uses alpha's external CIDR 10.70.0.0/16 as it is",
			},
		},
		{
			name: "IPv6",
			a:    sideOf(identity.Identity{ClusterID: "x", PodCIDR: "fd00:1::/64", ServiceCIDR: "fd00:96::/108", ExternalCIDR: "fd00:70::/64"}),
			b:    sideOf(identity.Identity{ClusterID: "y", PodCIDR: "fd00:1::/64", ExternalCIDR: "fd00:71::/64"}),
			pool: "fd64::/48",
			want: []string{
				"x maps y's pod CIDR fd00:1::/64 to fd64::/64 (it overlaps x's pod CIDR fd00:1::/64)",
				"x uses y's external CIDR fd00:71::/64 as it is",
				"y maps x's pod CIDR fd00:1::/64 to fd64::/64 (it overlaps y's pod CIDR fd00:1::/64)",
				"y uses x's external CIDR fd00:70::/64 as it is",
			},
		},
		{
			name: "pool exhausted",
			a:    sideOf(alpha, cfg(gamma, "100.64.0.0/16,")), b: sideOf(delta), pool: "100.64.0.0/16",
			wantErr: "alpha cannot map delta's pod CIDR 10.200.0.0/16, which overlaps alpha's pod CIDR 10.200.0.0/16: no free CIDR left in the pool: every /16 of 100.64.0.0/16 overlaps a CIDR in use (choose a larger pool with --remap-pool)",
		},
		{
			name: "remote CIDR larger than the pool",
			a:    sideOf(identity.Identity{ClusterID: "nosvc", PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.70.0.0/16"}), b: sideOf(id("huge", "10.0.0.0/8", "172.16.0.0/16")),
			wantErr: "a /8 does not fit in pool 100.64.0.0/10",
		},
		{
			name: "identity without an external CIDR",
			a:    sideOf(alpha), b: sideOf(id("y", "10.1.0.0/16", "")),
			wantErr: "cluster y: its identity has no external CIDR",
		},
		{
			name: "identity with a malformed pod CIDR",
			a:    sideOf(id("x", "10.1.2.0/16", "10.2.0.0/16")), b: sideOf(beta),
			wantErr: "cluster x: pod CIDR in its identity: CIDR 10.1.2.0/16 has host bits set",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.pool == "" {
				tt.pool = annexnet.DefaultPool
			}
			pool := netip.MustParsePrefix(tt.pool)
			plan, err := Decide(tt.a, tt.b, pool)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decide() error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, lines(plan)); diff != "" {
				t.Fatalf("Decide() (-want +got):\n%s", diff)
			}

			// Rerun with the objects the first run wrote: nothing changes.
			onA, onB := plan.A.Object(plan.B), plan.B.Object(plan.A)
			again, err := Decide(replace(tt.a, *onA), replace(tt.b, *onB), pool)
			if err != nil {
				t.Fatalf("rerun: %v", err)
			}
			for _, c := range []Choice{again.A.Pod, again.A.External, again.B.Pod, again.B.External} {
				if !c.Kept {
					t.Errorf("rerun changed a decision: %v", lines(again))
				}
			}
			if diff := cmp.Diff([]networkingv1alpha1.RemappedCIDRs{plan.A.Remapped(), plan.B.Remapped()}, []networkingv1alpha1.RemappedCIDRs{again.A.Remapped(), again.B.Remapped()}); diff != "" {
				t.Errorf("rerun remappings (-first +rerun):\n%s", diff)
			}
		})
	}
}

// replace puts nc into s in place of any object of the same name.
func replace(s Side, nc networkingv1alpha1.NetworkConfiguration) Side {
	out := s
	out.Configs = nil
	for _, c := range s.Configs {
		if c.Name != nc.Name {
			out.Configs = append(out.Configs, c)
		}
	}
	out.Configs = append(out.Configs, nc)
	return out
}

func TestObject(t *testing.T) {
	plan, err := Decide(sideOf(alpha, cfg(beta, "")), sideOf(gamma), netip.MustParsePrefix(annexnet.DefaultPool))
	if err != nil {
		t.Fatal(err)
	}
	got := plan.A.Object(plan.B)
	want := &networkingv1alpha1.NetworkConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.annex.dev/v1alpha1", Kind: "NetworkConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: "gamma", Namespace: "annex-system", Labels: map[string]string{
			"annex.dev/remote-cluster-id": "gamma", "annex.dev/managed-by": "annex"},
			Annotations: map[string]string{"annex.dev/agreed-remote-cidrs": `{"podCIDR":"10.200.0.0/16","externalCIDR":"10.72.0.0/16"}`}},
		Spec: networkingv1alpha1.NetworkConfigurationSpec{
			RemoteClusterID: "gamma",
			Local:           networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.70.0.0/16"},
			Remote:          networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.72.0.0/16"},
		},
		Status: networkingv1alpha1.NetworkConfigurationStatus{
			RemappedRemote: &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.64.0.0/16"},
			RemappedLocal:  &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.64.0.0/16"},
		},
	}
	conds := got.Status.Conditions
	got.Status.Conditions = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Object() (-want +got):\n%s", diff)
	}
	for typ, reason := range map[string]string{
		networkingv1alpha1.ConditionRemapped: networkingv1alpha1.ReasonCIDRRemapped,
		networkingv1alpha1.ConditionReady:    networkingv1alpha1.ReasonConnected,
	} {
		c := meta.FindStatusCondition(conds, typ)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
			t.Errorf("condition %s = %+v, want True/%s", typ, c, reason)
		}
	}
	if c := meta.FindStatusCondition(conds, networkingv1alpha1.ConditionRemapped); c != nil && c.Message != "pod CIDR 10.200.0.0/16 → 100.64.0.0/16, external CIDR 10.72.0.0/16 as it is" {
		t.Errorf("Remapped message = %q", c.Message)
	}
	// No remap at all: empty (not nil) remappings, reason NoOverlap.
	plain, _ := Decide(sideOf(alpha), sideOf(beta), netip.MustParsePrefix(annexnet.DefaultPool))
	nc := plain.A.Object(plain.B)
	if nc.Status.RemappedRemote == nil || *nc.Status.RemappedRemote != (networkingv1alpha1.RemappedCIDRs{}) || nc.Status.RemappedLocal == nil {
		t.Errorf("remappings without overlap = %+v / %+v, want empty and set", nc.Status.RemappedRemote, nc.Status.RemappedLocal)
	}
	if c := meta.FindStatusCondition(nc.Status.Conditions, networkingv1alpha1.ConditionRemapped); c == nil || c.Reason != networkingv1alpha1.ReasonNoOverlap {
		t.Errorf("Remapped without overlap = %+v", c)
	}
}

func TestOptionsValidate(t *testing.T) {
	for pool, wantErr := range map[string]string{
		"":              "",
		"100.64.0.0/10": "",
		"fd64::/48":     "",
		"100.64.0.1/10": "--remap-pool: CIDR 100.64.0.1/10 has host bits set",
		"nope":          "--remap-pool: \"nope\" is not a CIDR",
	} {
		err := Options{Pool: pool}.Validate()
		if wantErr == "" && err != nil || wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("Validate(pool %q) = %v, want %q", pool, err, wantErr)
		}
	}
}
