package tenantgc

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
)

func testScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = corev1alpha1.AddToScheme(s)
	_ = networkingv1alpha1.AddToScheme(s)
	return s
}

func TestReconcile(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	grace := 15 * time.Minute
	s := testScheme()
	managed := func(name string, extra map[string]string) *corev1.Namespace {
		l := map[string]string{corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}
		for k, v := range extra {
			l[k] = v
		}
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}}
	}
	tenant := managed("annex-tenant-alpha", map[string]string{corev1alpha1.LabelTenant: "true"})
	// What this cluster keeps for alpha when it consumes alpha too.
	peerNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "annex-peer-alpha", Labels: map[string]string{
		corev1alpha1.LabelPeer: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}}}
	remoteNS := managed("shop-alpha", nil)
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop-delta", Labels: map[string]string{corev1alpha1.LabelRemoteClusterID: "delta", corev1alpha1.LabelManagedBy: "annex"}}}
	lease := func(ago time.Duration) *coordinationv1.Lease {
		rt := metav1.NewMicroTime(now.Add(-ago))
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tenant.Name, Name: corev1alpha1.HeartbeatLeaseName, CreationTimestamp: tenant.CreationTimestamp},
			Spec: coordinationv1.LeaseSpec{RenewTime: &rt}}
	}
	// staleLease is the heartbeat of an earlier tenant namespace of the same
	// name (a cache that has not seen its deletion yet).
	staleLease := func(ago time.Duration) *coordinationv1.Lease {
		l := lease(ago)
		l.CreationTimestamp = metav1.NewTime(now.Add(-2 * time.Hour))
		return l
	}
	fc := func(role corev1alpha1.PeeringRole) *corev1alpha1.ForeignCluster {
		return &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "alpha"}, Status: corev1alpha1.ForeignClusterStatus{Role: role}}
	}
	for _, tc := range []struct {
		name        string
		objs        []client.Object
		wantNS      []string
		wantFC      bool                     // and the NetworkConfiguration with alpha
		wantRole    corev1alpha1.PeeringRole // of the ForeignCluster kept, when set
		wantRequeue time.Duration
		// tenantAge is how long ago the tenant namespace was made; default 1h.
		tenantAge time.Duration
	}{
		{name: "heartbeat fresh", objs: []client.Object{lease(time.Minute), fc(corev1alpha1.RoleConsumer)},
			wantNS: []string{"annex-tenant-alpha", "shop-alpha", "shop-delta"}, wantFC: true, wantRequeue: grace - time.Minute + time.Second},
		{name: "heartbeat lapsed", objs: []client.Object{lease(grace + time.Minute), fc(corev1alpha1.RoleConsumer)},
			wantNS: []string{"shop-delta"}},
		{name: "never renewed, tenant older than grace", objs: []client.Object{fc(corev1alpha1.RoleConsumer)},
			wantNS: []string{"shop-delta"}},
		{name: "peered again: a lapsed Lease older than the new tenant namespace is not its heartbeat",
			objs: []client.Object{staleLease(grace + time.Minute), fc(corev1alpha1.RoleConsumer)}, tenantAge: time.Minute,
			wantNS: []string{"annex-tenant-alpha", "shop-alpha", "shop-delta"}, wantFC: true, wantRequeue: grace - time.Minute + time.Second},
		{name: "peered again and silent past the grace period", objs: []client.Object{staleLease(time.Minute), fc(corev1alpha1.RoleConsumer)},
			wantNS: []string{"shop-delta"}},
		{name: "released by a graceful unpeer: a young tenant goes at once",
			objs: []client.Object{func() client.Object {
				l := lease(0)
				l.CreationTimestamp = metav1.NewTime(now.Add(-time.Minute))
				l.Spec.RenewTime = &metav1.MicroTime{Time: time.Unix(corev1alpha1.HeartbeatReleasedUnix, 0)}
				return l
			}(), fc(corev1alpha1.RoleConsumer)}, tenantAge: time.Minute,
			wantNS: []string{"shop-delta"}},
		{name: "we consume them: not a tenant", objs: []client.Object{fc(corev1alpha1.RoleProvider)},
			wantNS: []string{"annex-tenant-alpha", "shop-alpha", "shop-delta"}, wantFC: true},
		{name: "both ways: the tenant goes, our peer namespace, the ForeignCluster (now Provider) and the link stay",
			objs:   []client.Object{lease(grace + time.Minute), fc(corev1alpha1.RoleBoth), peerNS.DeepCopy()},
			wantNS: []string{"annex-peer-alpha", "shop-delta"}, wantFC: true, wantRole: corev1alpha1.RoleProvider},
	} {
		t.Run(tc.name, func(t *testing.T) {
			link := func(peer string) *networkingv1alpha1.NetworkConfiguration {
				return &networkingv1alpha1.NetworkConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: peer},
					Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: peer}}
			}
			tn := tenant.DeepCopy()
			if tc.tenantAge != 0 {
				tn.CreationTimestamp = metav1.NewTime(now.Add(-tc.tenantAge))
			}
			c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&corev1alpha1.ForeignCluster{}).WithObjects(append(tc.objs, tn, remoteNS.DeepCopy(), other.DeepCopy(), link("alpha"), link("delta"))...).Build()
			r := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakePassiveClock(now), GracePeriod: grace}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: tenant.Name}})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			nss := &corev1.NamespaceList{}
			_ = c.List(context.Background(), nss)
			var got []string
			for _, n := range nss.Items {
				got = append(got, n.Name)
			}
			sort.Strings(got)
			if diff := cmp.Diff(tc.wantNS, got); diff != "" {
				t.Errorf("namespaces (-want +got):\n%s", diff)
			}
			kept := &corev1alpha1.ForeignCluster{}
			err = c.Get(context.Background(), client.ObjectKey{Name: "alpha"}, kept)
			if (err == nil) != tc.wantFC {
				t.Errorf("ForeignCluster exists = %v, want %v", err == nil, tc.wantFC)
			}
			if tc.wantRole != "" && kept.Status.Role != tc.wantRole {
				t.Errorf("ForeignCluster role = %q, want %q", kept.Status.Role, tc.wantRole)
			}
			err = c.Get(context.Background(), client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: "alpha"}, &networkingv1alpha1.NetworkConfiguration{})
			if (err == nil) != tc.wantFC {
				t.Errorf("NetworkConfiguration with alpha exists = %v, want %v", err == nil, tc.wantFC)
			}
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: "delta"}, &networkingv1alpha1.NetworkConfiguration{}); err != nil {
				t.Errorf("another consumer's link was removed: %v", err)
			}
		})
	}
}

// tenantObjects is a consumer "alpha" with a tenant namespace made at
// created and a heartbeat Lease renewed at renewed.
func tenantObjects(uid types.UID, created, renewed time.Time) []client.Object {
	rt := metav1.NewMicroTime(renewed)
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "annex-tenant-alpha", UID: uid, CreationTimestamp: metav1.NewTime(created), Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelTenant: "true"}}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "annex-tenant-alpha", Name: corev1alpha1.HeartbeatLeaseName, CreationTimestamp: metav1.NewTime(created)},
			Spec: coordinationv1.LeaseSpec{RenewTime: &rt}},
		&corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "alpha"}, Status: corev1alpha1.ForeignClusterStatus{Role: corev1alpha1.RoleConsumer}},
	}
}

// TestReconcileConfirmsWithTheAPIServer: a cache that says a consumer is
// silent is not enough; the API server, which may already know a new
// peering's namespace or Lease, decides.
func TestReconcileConfirmsWithTheAPIServer(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	grace := 10 * time.Second
	for _, tc := range []struct {
		name        string
		cached      []client.Object
		live        []client.Object
		wantRemoved bool
	}{
		{name: "the API server knows a fresh Lease",
			cached: tenantObjects("old", now.Add(-time.Hour), now.Add(-time.Minute)),
			live:   tenantObjects("old", now.Add(-time.Hour), now.Add(-time.Second))},
		{name: "the tenant namespace was made again (a new peering)",
			cached: tenantObjects("old", now.Add(-time.Hour), now.Add(-time.Minute)),
			live:   tenantObjects("new", now.Add(-2*time.Second), now.Add(-2*time.Second))},
		{name: "the API server agrees: removed",
			cached:      tenantObjects("old", now.Add(-time.Hour), now.Add(-time.Minute)),
			live:        tenantObjects("old", now.Add(-time.Hour), now.Add(-time.Minute)),
			wantRemoved: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cached := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(tc.cached...).Build()
			live := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(tc.live...).Build()
			// Deletes go to the API server; the cache only serves reads.
			r := &Reconciler{Client: deletesTo{Client: cached, to: live}, APIReader: live, Recorder: events.NewFakeRecorder(10),
				Clock: clocktesting.NewFakePassiveClock(now), GracePeriod: grace}
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "annex-tenant-alpha"}}); err != nil {
				t.Fatal(err)
			}
			err := live.Get(context.Background(), client.ObjectKey{Name: "annex-tenant-alpha"}, &corev1.Namespace{})
			if removed := apierrors.IsNotFound(err); removed != tc.wantRemoved {
				t.Errorf("tenant namespace removed = %v, want %v (err %v)", removed, tc.wantRemoved, err)
			}
		})
	}
}

// deletesTo sends the deletes of a cached client to another client.
type deletesTo struct {
	client.Client
	to client.Client
}

func (d deletesTo) Delete(ctx context.Context, o client.Object, opts ...client.DeleteOption) error {
	return d.to.Delete(ctx, o, opts...)
}

// TestReconcileCountsOnlyWhileTheAPIServerAnswers: no consumer can renew its
// Lease while the API server is down, so silence counts again from the
// agent's start and from the end of every outage.
func TestReconcileCountsOnlyWhileTheAPIServerAnswers(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	grace := 15 * time.Minute
	clk := clocktesting.NewFakeClock(now)
	down := true
	c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(tenantObjects("u", now.Add(-time.Hour), now.Add(-time.Hour))...).Build()
	live := interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if down {
				return apierrors.NewServiceUnavailable("down")
			}
			return c.Get(ctx, key, o, opts...)
		},
	})
	r := &Reconciler{Client: c, APIReader: live, Recorder: events.NewFakeRecorder(10), Clock: clk, GracePeriod: grace}
	req := ctrl.Request{NamespacedName: client.ObjectKey{Name: "annex-tenant-alpha"}}
	exists := func() bool {
		return c.Get(context.Background(), req.NamespacedName, &corev1.Namespace{}) == nil
	}

	// The API server was down for an hour: the read fails, nothing goes.
	if _, err := r.Reconcile(context.Background(), req); err == nil {
		t.Fatal("Reconcile succeeded while the API server is down")
	}
	if !exists() {
		t.Fatal("tenant removed while the API server does not answer")
	}
	// It answers again: the consumer gets a full grace period from now.
	down = false
	res, err := r.Reconcile(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !exists() {
		t.Fatal("tenant removed right after the API server answered again")
	}
	if want := grace + time.Second; res.RequeueAfter != want {
		t.Errorf("requeue after %s, want %s", res.RequeueAfter, want)
	}
	// Still silent a grace period later: now it goes.
	clk.Step(grace + time.Second)
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Error("tenant kept after a full grace period of silence with the API server answering")
	}
}

// TestRemoveStoppedAtEveryStep stops the removal of a silent tenant after
// each of its writes in turn (an agent killed there) and restarts it: no
// stop leaves the network link without the ForeignCluster it was made for,
// or the ForeignCluster gone before the tenant's credentials (its
// namespace), and the restarted agent finishes the removal, also when it
// finds the tenant namespace already being deleted.
func TestRemoveStoppedAtEveryStep(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	grace := 15 * time.Minute
	ctx := context.Background()
	hold := []string{"example.com/hold"} // namespaces stay, terminating, as the namespace controller empties them
	objects := func() []client.Object {
		objs := tenantObjects("u", now.Add(-time.Hour), now.Add(-time.Hour))
		objs[0].SetFinalizers(hold)
		return append(objs,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop-alpha", Finalizers: hold, Labels: map[string]string{
				corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}}},
			&networkingv1alpha1.NetworkConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: "alpha"},
				Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: "alpha"}})
	}
	exists := func(c client.Client, o client.Object) bool {
		err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	fc := &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}}
	nc := &networkingv1alpha1.NetworkConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: "alpha"}}
	tenantNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "annex-tenant-alpha"}}
	req := ctrl.Request{NamespacedName: client.ObjectKey{Name: "annex-tenant-alpha"}}
	for budget := 0; ; budget++ {
		var writes []string
		killed := false
		c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(objects()...).WithStatusSubresource(&corev1alpha1.ForeignCluster{}).Build()
		stopping := interceptor.NewClient(c, interceptor.Funcs{
			Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
				if len(writes) >= budget {
					killed = true
					return errors.New("killed")
				}
				writes = append(writes, fmt.Sprintf("%T %s", o, o.GetName()))
				return c.Delete(ctx, o, opts...)
			},
		})
		r := &Reconciler{Client: stopping, APIReader: c, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakePassiveClock(now), GracePeriod: grace}
		_, _ = r.Reconcile(ctx, req)
		if exists(c, nc) && !exists(c, fc) {
			t.Fatalf("stopped after %v: the link is left without its ForeignCluster", writes)
		}
		if !exists(c, fc) && exists(c, tenantNS) && tenantNS.DeletionTimestamp.IsZero() {
			t.Fatalf("stopped after %v: the ForeignCluster went before the tenant's namespace", writes)
		}
		if !killed {
			if len(writes) == 0 || writes[0] != "*v1alpha1.NetworkConfiguration alpha" {
				t.Errorf("writes %v, want the network link first", writes)
			}
			break
		}
		// The agent restarts: it finishes what was left.
		restarted := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakePassiveClock(now.Add(grace + time.Minute)), GracePeriod: grace}
		for range 2 { // the first may only start the removal; the namespace's next event finishes it
			if _, err := restarted.Reconcile(ctx, req); err != nil {
				t.Fatalf("stopped after %v, restarted: %v", writes, err)
			}
		}
		if exists(c, nc) || exists(c, fc) {
			t.Errorf("stopped after %v, restarted: link left %v, ForeignCluster left %v", writes, exists(c, nc), exists(c, fc))
		}
		if exists(c, tenantNS) && tenantNS.DeletionTimestamp.IsZero() {
			t.Errorf("stopped after %v, restarted: the tenant namespace is not being deleted", writes)
		}
	}
}

// TestFinish: a tenant namespace being deleted takes the tenant's link and
// ForeignCluster with it (a two-way peering keeps both, with role
// Provider), but only when the API server agrees that it is that
// namespace which is going.
func TestFinish(t *testing.T) {
	ctx := context.Background()
	now := metav1.NewTime(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	tenant := func(uid types.UID, terminating bool) *corev1.Namespace {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "annex-tenant-alpha", UID: uid, Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelTenant: "true"}}}
		if terminating {
			ns.DeletionTimestamp, ns.Finalizers = &now, []string{"example.com/hold"}
		}
		return ns
	}
	fc := func(role corev1alpha1.PeeringRole) *corev1alpha1.ForeignCluster {
		return &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "alpha"},
			Status: corev1alpha1.ForeignClusterStatus{Role: role, TenantNamespace: "annex-tenant-alpha"}}
	}
	nc := func() *networkingv1alpha1.NetworkConfiguration {
		return &networkingv1alpha1.NetworkConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: "alpha"},
			Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: "alpha"}}
	}
	for _, tc := range []struct {
		name     string
		cached   *corev1.Namespace
		live     *corev1.Namespace // nil: gone
		role     corev1alpha1.PeeringRole
		wantLink bool
		wantRole corev1alpha1.PeeringRole // "": the ForeignCluster is gone
	}{
		{name: "being deleted: link and ForeignCluster go", cached: tenant("u", true), live: tenant("u", true), role: corev1alpha1.RoleConsumer},
		{name: "both ways: the link stays, the ForeignCluster as Provider", cached: tenant("u", true), live: tenant("u", true),
			role: corev1alpha1.RoleBoth, wantLink: true, wantRole: corev1alpha1.RoleProvider},
		{name: "the cache shows the old namespace going, the API server a new peering's", cached: tenant("old", true), live: tenant("new", false),
			role: corev1alpha1.RoleConsumer, wantLink: true, wantRole: corev1alpha1.RoleConsumer},
		{name: "gone already: nothing is decided on the cache's word", cached: tenant("u", true),
			role: corev1alpha1.RoleConsumer, wantLink: true, wantRole: corev1alpha1.RoleConsumer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			liveObjs := []client.Object{fc(tc.role), nc()}
			if tc.live != nil {
				liveObjs = append(liveObjs, tc.live)
			}
			live := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(liveObjs...).WithStatusSubresource(&corev1alpha1.ForeignCluster{}).Build()
			cached := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(tc.cached, fc(tc.role), nc()).Build()
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{Client: writesTo{Client: cached, to: live}, APIReader: live, Recorder: rec,
				Clock: clocktesting.NewFakePassiveClock(now.Time), GracePeriod: time.Minute}
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "annex-tenant-alpha"}}); err != nil {
				t.Fatal(err)
			}
			err := live.Get(ctx, client.ObjectKeyFromObject(nc()), nc())
			if (err == nil) != tc.wantLink {
				t.Errorf("link exists = %v, want %v", err == nil, tc.wantLink)
			}
			got := fc("")
			if err := live.Get(ctx, client.ObjectKey{Name: "alpha"}, got); err != nil {
				got.Status.Role = ""
			}
			if got.Status.Role != tc.wantRole {
				t.Errorf("ForeignCluster role %q, want %q (\"\": gone)", got.Status.Role, tc.wantRole)
			}
		})
	}
}

// writesTo sends the deletes and status patches of a cached client to
// another client.
type writesTo struct {
	client.Client
	to client.Client
}

func (w writesTo) Delete(ctx context.Context, o client.Object, opts ...client.DeleteOption) error {
	return w.to.Delete(ctx, o, opts...)
}

func (w writesTo) Status() client.SubResourceWriter { return w.to.Status() }
