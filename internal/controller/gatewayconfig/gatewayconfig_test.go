package gatewayconfig

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/gateway"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, corev1alpha1.AddToScheme,
		networkingv1alpha1.AddToScheme, offloadingv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// provider is gamma as the provider of tenant alpha, with its gateway's
// file in a temporary directory. Its pods are *pods, not objects of the
// fake client (whose Create is too slow for thousands).
func provider(t *testing.T, pods *[]corev1.Pod, objs ...client.Object) (*Reconciler, client.Client, *clocktesting.FakeClock, *events.FakeRecorder) {
	t.Helper()
	_, alphaPub := key(t)
	nc := link("alpha", "10.200.0.0/16", "10.70.0.0/16", &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.64.0.0/16"}, &networkingv1alpha1.RemappedCIDRs{},
		&networkingv1alpha1.TunnelSpec{ListenPort: 51820, RemotePublicKey: alphaPub.String(), RemoteEndpoint: "192.168.77.1:51821"}, true)
	nc.Spec.Local = networkingv1alpha1.ClusterCIDRs{PodCIDR: "10.200.0.0/16", ExternalCIDR: "10.72.0.0/16"}
	base := []client.Object{&nc,
		&corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "alpha"},
			Status: corev1alpha1.ForeignClusterStatus{Role: corev1alpha1.RoleConsumer}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "wire-alpha", Labels: map[string]string{
			corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: "alpha"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "annex-tenant-alpha", Labels: map[string]string{
			corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelTenant: "true"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "192.168.77.3"}}}},
	}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(base, objs...)...).
		WithStatusSubresource(&networkingv1alpha1.NetworkConfiguration{}).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if pl, ok := list.(*corev1.PodList); ok && pods != nil {
				pl.Items = *pods
				return nil
			}
			return c.List(ctx, list, opts...)
		}}).Build()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	rec := events.NewFakeRecorder(20)
	dir := t.TempDir()
	r := New(c, c, rec, Options{ConfigPath: filepath.Join(dir, "config.json"), StatusPath: filepath.Join(dir, "status.json"), Address: "192.168.77.3"},
		Cluster{PodCIDR: netip.MustParsePrefix("10.200.0.0/16"), ServiceCIDR: netip.MustParsePrefix("10.96.0.0/16"),
			ExternalCIDR: netip.MustParsePrefix("10.72.0.0/16")}, clk)
	return r, c, clk, rec
}

func readConfig(t *testing.T, r *Reconciler) gateway.Config {
	t.Helper()
	data, err := os.ReadFile(r.opts.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := gateway.ParseConfig(data)
	if err != nil {
		t.Fatalf("the agent wrote a file the gateway refuses: %v", err)
	}
	return cfg
}

// TestReconcileCoalesces creates 5000 tenant pods within half a second,
// reconciling after each (as their events would): the file is written
// once at the start and once a second later with all of them.
func TestReconcileCoalesces(t *testing.T) {
	ctx := context.Background()
	// Pods of the provider's own and of the peering's tenant namespace are
	// never accepted.
	pods := []corev1.Pod{tpod("annex-tenant-alpha", "x", "n1", "10.200.99.1", ""), tpod("kube-system", "dns", "n1", "10.200.99.2", "")}
	r, _, clk, _ := provider(t, &pods)
	reconcileOnce := func() reconcile.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, theRequest)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := reconcileOnce(); res.RequeueAfter != 2*time.Second {
		t.Errorf("first reconcile: requeue after %s, want the status interval", res.RequeueAfter)
	}
	if got := readConfig(t, r).Links; len(got) != 1 || len(got[0].Accept) != 0 || got[0].Accept == nil {
		t.Fatalf("links before any pod: %+v, want alpha's with an empty accept list", got)
	}
	const n = 5000
	for i := range n {
		pods = append(pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "wire-alpha", Name: fmt.Sprintf("p%d", i)},
			Spec:   corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.200.%d.%d", 16+i/256, i%256)}})
		clk.Step(100 * time.Microsecond)
		if res := reconcileOnce(); res.RequeueAfter <= 0 || res.RequeueAfter > renderEvery {
			t.Fatalf("pod %d: requeue after %s, want within %s", i, res.RequeueAfter, renderEvery)
		}
	}
	if r.writes != 1 {
		t.Errorf("%d writes during the burst, want 1 (the first render)", r.writes)
	}
	clk.Step(renderEvery)
	reconcileOnce()
	if r.writes != 2 {
		t.Errorf("%d writes after the burst, want 2", r.writes)
	}
	// 5000 consecutive addresses from 10.200.16.0: 10.200.16.0/20 (4096)
	// and 904 more, 10.200.32.0/23 (512) + /24 + /25 + 8.
	want := []netip.Prefix{netip.MustParsePrefix("10.200.16.0/20"), netip.MustParsePrefix("10.200.32.0/23"),
		netip.MustParsePrefix("10.200.34.0/24"), netip.MustParsePrefix("10.200.35.0/25"), netip.MustParsePrefix("10.200.35.128/29")}
	if diff := cmp.Diff(want, readConfig(t, r).Links[0].Accept, cmp.Comparer(func(x, y netip.Prefix) bool { return x == y })); diff != "" {
		t.Errorf("alpha's accept list (-want +got):\n%s", diff)
	}
	// Nothing changed: a render writes nothing.
	clk.Step(renderEvery)
	reconcileOnce()
	if r.writes != 2 {
		t.Errorf("%d writes after a render without changes, want 2", r.writes)
	}
}

// TestReconcileRefusesClaims: a peer claiming a public range is left out
// of the file, with a condition and an Event naming the rule.
func TestReconcileRefusesClaims(t *testing.T) {
	ctx := context.Background()
	_, pub := key(t)
	bad := link("evil", "1.0.0.0/8", "10.71.0.0/16", nil, nil,
		&networkingv1alpha1.TunnelSpec{ListenPort: 51821, RemotePublicKey: pub.String(), RemoteEndpoint: "192.168.77.2:51821"}, true)
	onNodes := link("nodes", "192.168.77.0/24", "10.79.0.0/16", nil, nil,
		&networkingv1alpha1.TunnelSpec{ListenPort: 51822, RemotePublicKey: pub.String(), RemoteEndpoint: "192.168.77.4:51821"}, true)
	r, c, _, rec := provider(t, nil, &bad, &onNodes)
	if _, err := r.Reconcile(ctx, theRequest); err != nil {
		t.Fatal(err)
	}
	var peers []string
	for _, l := range readConfig(t, r).Links {
		peers = append(peers, l.Peer)
	}
	if diff := cmp.Diff([]string{"alpha"}, peers); diff != "" {
		t.Errorf("links in the file (-want +got):\n%s", diff)
	}
	for name, want := range map[string]string{
		"evil":  "not programmed: annex-network-private-range: spec.remote.podCIDR 1.0.0.0/8 is not inside a private range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fd00::/8)",
		"nodes": "not programmed: annex-network-node-address: spec.remote.podCIDR 192.168.77.0/24 holds the address 192.168.77.3 of this cluster's node n1",
	} {
		nc := &networkingv1alpha1.NetworkConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: name}, nc); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(nc.Status.Conditions, networkingv1alpha1.ConditionTunnelConnected)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != networkingv1alpha1.ReasonCIDRRefused || cond.Message != want {
			t.Errorf("%s: TunnelConnected %+v, want False/%s %q", name, cond, networkingv1alpha1.ReasonCIDRRefused, want)
		}
	}
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "Warning RemoteCIDRRefused annex-network-") || !strings.HasPrefix(got[1], "Warning RemoteCIDRRefused annex-network-") {
		t.Errorf("events %q, want one RemoteCIDRRefused Warning per refused link", got)
	}
	// The same refusal again: no new Event.
	r.clock.(*clocktesting.FakeClock).Step(renderEvery)
	if _, err := r.Reconcile(ctx, theRequest); err != nil {
		t.Fatal(err)
	}
	if len(rec.Events) != 0 {
		t.Errorf("the same refusal was reported again: %q", <-rec.Events)
	}
}

func TestPeerAccessFlag(t *testing.T) {
	for _, tc := range []struct {
		value, wantErr string
	}{{"tenant", ""}, {"all", ""}, {"everything", `must be "tenant" or "all"`}} {
		v := peerAccessValue(PeerAccessTenant)
		err := v.Set(tc.value)
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Set(%q) = %v, want %q", tc.value, err, tc.wantErr)
		}
	}
	if err := (Options{PeerAccess: "open"}).Validate(); err == nil {
		t.Error("Validate accepted --gateway-peer-access=open")
	}
}

// TestReconcileLeavesOutALinkWithoutPeering: once the tenant's
// ForeignCluster is gone (an unpeering stopped there, or its deletion
// reached the cache before the link's), the link made for that peering is
// out of the file at the next render, with a condition and an Event, while
// a link for direct connections stays.
func TestReconcileLeavesOutALinkWithoutPeering(t *testing.T) {
	ctx := context.Background()
	_, pub := key(t)
	beta := direct(link("beta", "10.201.0.0/16", "10.71.0.0/16", nil, nil,
		&networkingv1alpha1.TunnelSpec{ListenPort: 51821, RemotePublicKey: pub.String(), RemoteEndpoint: "192.168.77.2:51821"}, true))
	pods := []corev1.Pod{tpod("wire-alpha", "a", "n1", "10.200.3.4", ""), tpod("shop-zeta", "z", "n1", "10.200.5.1", "")}
	zeta := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop-zeta", Labels: map[string]string{
		corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: "zeta"}}}
	r, c, clk, rec := provider(t, &pods, &beta, zeta)
	alpha := &networkingv1alpha1.NetworkConfiguration{}
	alphaKey := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: "alpha"}
	if err := c.Get(ctx, alphaKey, alpha); err != nil {
		t.Fatal(err)
	}
	alpha.Labels = map[string]string{networkingv1alpha1.LabelLinkPurpose: networkingv1alpha1.LinkPurposePeering}
	if err := c.Update(ctx, alpha); err != nil {
		t.Fatal(err)
	}
	accepts := func() map[string]string {
		t.Helper()
		if _, err := r.Reconcile(ctx, theRequest); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, l := range readConfig(t, r).Links {
			var s []string
			for _, a := range l.Accept {
				s = append(s, a.String())
			}
			got[l.Peer] = strings.Join(s, " ")
		}
		return got
	}
	if diff := cmp.Diff(map[string]string{"alpha": "10.200.3.4/32", "beta": "10.200.3.4/32 10.200.5.1/32"}, accepts()); diff != "" {
		t.Errorf("while alpha peers (-want +got):\n%s", diff)
	}
	if err := c.Delete(ctx, &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}}); err != nil {
		t.Fatal(err)
	}
	clk.Step(renderEvery)
	if diff := cmp.Diff(map[string]string{"beta": "10.200.3.4/32 10.200.5.1/32"}, accepts()); diff != "" {
		t.Errorf("once alpha's ForeignCluster is gone (-want +got):\n%s", diff)
	}
	if err := c.Get(ctx, alphaKey, alpha); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(alpha.Status.Conditions, networkingv1alpha1.ConditionTunnelConnected)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != networkingv1alpha1.ReasonNoPeering ||
		!strings.Contains(cond.Message, "no ForeignCluster for alpha") {
		t.Errorf("TunnelConnected %+v, want False/%s naming the missing ForeignCluster", cond, networkingv1alpha1.ReasonNoPeering)
	}
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+EventLinkWithoutPeering+" ") {
		t.Errorf("events %q, want one %s Warning", got, EventLinkWithoutPeering)
	}
}
