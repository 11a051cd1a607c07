package fabricagent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/fabric"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func gatewayPod(name, node, hostIP string, created time.Time, mutate func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec:       corev1.PodSpec{NodeName: node, HostNetwork: true},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, HostIP: hostIP, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "agent", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: GatewayContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		}},
	}
	if mutate != nil {
		mutate(&p)
	}
	return p
}

func TestFindGateway(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t0} }
	noGateway := func(p *corev1.Pod) { p.Status.ContainerStatuses = p.Status.ContainerStatuses[:1] }
	gatewayWaiting := func(p *corev1.Pod) {
		p.Status.ContainerStatuses[1].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}
	}
	pending := func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }
	podNetwork := func(p *corev1.Pod) { p.Spec.HostNetwork = false }
	tests := []struct {
		name   string
		pods   []corev1.Pod
		want   Gateway
		wantOK bool
	}{
		{name: "none"},
		{name: "one", pods: []corev1.Pod{gatewayPod("a", "n0", "172.31.1.2", t0, nil)},
			want: Gateway{Node: "n0", Address: netip.MustParseAddr("172.31.1.2")}, wantOK: true},
		{name: "the newest of two (a move)", pods: []corev1.Pod{
			gatewayPod("a", "n0", "172.31.1.2", t0, nil), gatewayPod("b", "n1", "172.31.1.3", t0.Add(time.Minute), nil)},
			want: Gateway{Node: "n1", Address: netip.MustParseAddr("172.31.1.3")}, wantOK: true},
		{name: "a pod being deleted is not the gateway", pods: []corev1.Pod{gatewayPod("a", "n0", "172.31.1.2", t0, deleting)}},
		{name: "a pod without the gateway container", pods: []corev1.Pod{gatewayPod("a", "n0", "172.31.1.2", t0, noGateway)}},
		{name: "the gateway container not running", pods: []corev1.Pod{gatewayPod("a", "n0", "172.31.1.2", t0, gatewayWaiting)}},
		{name: "a pending pod", pods: []corev1.Pod{gatewayPod("a", "n0", "172.31.1.2", t0, pending)}},
		{name: "not on the host network", pods: []corev1.Pod{gatewayPod("a", "n0", "172.31.1.2", t0, podNetwork)}},
		{name: "no host IP", pods: []corev1.Pod{gatewayPod("a", "n0", "", t0, nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := FindGateway(tt.pods)
			if ok != tt.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("gateway (-want +got):\n%s", diff)
			}
		})
	}
}

func link(peer, pod, ext string, remapped *networkingv1alpha1.RemappedCIDRs, conds ...metav1.Condition) networkingv1alpha1.NetworkConfiguration {
	nc := networkingv1alpha1.NetworkConfiguration{}
	nc.Name = peer
	nc.Spec.RemoteClusterID = peer
	nc.Spec.Remote.PodCIDR, nc.Spec.Remote.ExternalCIDR = pod, ext
	nc.Spec.Tunnel = &networkingv1alpha1.TunnelSpec{}
	nc.Status.RemappedRemote, nc.Status.RemappedLocal = remapped, &networkingv1alpha1.RemappedCIDRs{}
	nc.Status.Conditions = append([]metav1.Condition{{Type: networkingv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Connected"}}, conds...)
	return nc
}

func TestDestinations(t *testing.T) {
	local := Local{PodCIDR: pfx("10.200.0.0/16"), ServiceCIDR: pfx("10.96.0.0/16"), ExternalCIDR: pfx("10.70.0.0/16")}
	notReady := link("delta", "10.204.0.0/16", "10.74.0.0/16", &networkingv1alpha1.RemappedCIDRs{})
	notReady.Status.Conditions[0].Status = metav1.ConditionFalse
	noTunnel := link("eps", "10.205.0.0/16", "10.75.0.0/16", &networkingv1alpha1.RemappedCIDRs{})
	noTunnel.Spec.Tunnel = nil
	tests := []struct {
		name        string
		ncs         []networkingv1alpha1.NetworkConfiguration
		want        []netip.Prefix
		wantSkipped []string
	}{
		{name: "no links"},
		{name: "beta as it is, gamma remapped, plus the external CIDR", ncs: []networkingv1alpha1.NetworkConfiguration{
			link("beta", "10.201.0.0/16", "10.71.0.0/16", &networkingv1alpha1.RemappedCIDRs{}),
			link("gamma", "10.200.0.0/16", "10.72.0.0/16", &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.64.0.0/16"}),
		}, want: []netip.Prefix{pfx("10.70.0.0/16"), pfx("10.71.0.0/16"), pfx("10.72.0.0/16"), pfx("10.201.0.0/16"), pfx("100.64.0.0/16")}},
		{name: "links the gateway does not program are left out, silently", ncs: []networkingv1alpha1.NetworkConfiguration{notReady, noTunnel}},
		{name: "a link the agent refused", ncs: []networkingv1alpha1.NetworkConfiguration{
			link("evil", "10.210.0.0/16", "10.80.0.0/16", &networkingv1alpha1.RemappedCIDRs{},
				metav1.Condition{Type: networkingv1alpha1.ConditionTunnelConnected, Status: metav1.ConditionFalse, Reason: networkingv1alpha1.ReasonCIDRRefused}),
		}, wantSkipped: []string{"evil: CIDRRefused"}},
		{name: "a link whose peering is gone", ncs: []networkingv1alpha1.NetworkConfiguration{
			link("alpha", "10.210.0.0/16", "10.80.0.0/16", &networkingv1alpha1.RemappedCIDRs{},
				metav1.Condition{Type: networkingv1alpha1.ConditionTunnelConnected, Status: metav1.ConditionFalse, Reason: networkingv1alpha1.ReasonNoPeering}),
		}, wantSkipped: []string{"alpha: NoPeering"}},
		{name: "a public claim is refused here too, before the agent says so", ncs: []networkingv1alpha1.NetworkConfiguration{
			link("evil", "8.8.0.0/16", "10.80.0.0/16", &networkingv1alpha1.RemappedCIDRs{}),
			link("beta", "10.201.0.0/16", "", &networkingv1alpha1.RemappedCIDRs{}),
		}, want: []netip.Prefix{pfx("10.70.0.0/16"), pfx("10.201.0.0/16")},
			wantSkipped: []string{"evil: annex-network-private-range: spec.remote.podCIDR 8.8.0.0/16 is not inside a private range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fd00::/8)"}},
		{name: "an unremapped overlap with the own pod CIDR is never routed", ncs: []networkingv1alpha1.NetworkConfiguration{
			link("gamma", "10.200.0.0/16", "10.72.0.0/16", &networkingv1alpha1.RemappedCIDRs{}),
		}, wantSkipped: []string{"gamma: 10.200.0.0/16 overlaps this cluster's own ranges"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, skipped := Destinations(local, tt.ncs)
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("destinations (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantSkipped, skipped); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	local := Local{PodCIDR: pfx("10.200.0.0/16"), ExternalCIDR: pfx("10.70.0.0/16")}
	dst := []netip.Prefix{pfx("10.70.0.0/16"), pfx("10.201.0.0/16")}
	gw := Gateway{Node: "n0", Address: netip.MustParseAddr("172.31.1.2")}
	tests := []struct {
		name       string
		self       string
		hasGateway bool
		dst        []netip.Prefix
		wantPlan   fabric.Plan
		wantReason string
	}{
		{name: "no links: nothing", self: "n1", hasGateway: true, wantReason: networkingv1alpha1.ReasonNoLinks},
		{name: "another node: routes to the gateway", self: "n1", hasGateway: true, dst: dst,
			wantPlan:   fabric.Plan{Gateway: gw.Address, Destinations: dst, Sources: []netip.Prefix{local.PodCIDR}},
			wantReason: networkingv1alpha1.ReasonRoutesProgrammed},
		{name: "the gateway node: left to the gateway", self: "n0", hasGateway: true, dst: dst, wantReason: networkingv1alpha1.ReasonGatewayNode},
		{name: "no gateway: unreachable", self: "n0", dst: dst,
			wantPlan:   fabric.Plan{Destinations: dst, Sources: []netip.Prefix{local.PodCIDR}},
			wantReason: networkingv1alpha1.ReasonNoGateway},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := gw
			if !tt.hasGateway {
				g = Gateway{}
			}
			d := Decide(tt.self, local, g, tt.hasGateway, tt.dst, nil)
			if diff := cmp.Diff(tt.wantPlan, d.Plan, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
				cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			if d.Reason != tt.wantReason {
				t.Errorf("reason = %s, want %s (%s)", d.Reason, tt.wantReason, d.Message)
			}
		})
	}
}
