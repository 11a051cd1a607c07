package resourceslice

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func node(t *testing.T, name, allocatable string, ready bool, mutate ...func(*corev1.Node)) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{
			Allocatable: rl(t, allocatable),
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}},
		},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func tenantNamespace(name, consumer string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if consumer != "" {
		ns.Labels = map[string]string{corev1alpha1.LabelRemoteClusterID: consumer}
	}
	return ns
}

func newSlice(t *testing.T, ns, name, consumer, provider, res string) *corev1alpha1.ResourceSlice {
	return &corev1alpha1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1},
		Spec:       corev1alpha1.ResourceSliceSpec{ConsumerClusterID: consumer, ProviderClusterID: provider, Resources: rl(t, res)},
	}
}

func answer(t *testing.T, phase corev1alpha1.ResourceSlicePhase, granted, reason, msg string, gen int64) corev1alpha1.ResourceSliceStatus {
	status := metav1.ConditionFalse
	if phase == corev1alpha1.ResourceSliceAccepted {
		status = metav1.ConditionTrue
	}
	var res corev1.ResourceList
	if granted != "" {
		res = rl(t, granted)
	}
	cond := func(typ string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now), Reason: reason, Message: msg}
	}
	return corev1alpha1.ResourceSliceStatus{
		Phase:      phase,
		Resources:  res,
		Conditions: []metav1.Condition{cond(corev1alpha1.ConditionAccepted), cond(corev1alpha1.ConditionReady)},
	}
}

// accepted is a slice of consumer to beta, accepted with granted.
func accepted(t *testing.T, ns, name, consumer, granted string) *corev1alpha1.ResourceSlice {
	o := newSlice(t, ns, name, consumer, "beta", granted)
	o.Status = answer(t, corev1alpha1.ResourceSliceAccepted, granted, corev1alpha1.ReasonResourcesGranted, "granted "+granted, 1)
	return o
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, corev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestReconcile(t *testing.T) {
	s := testScheme(t)
	// Capacity: cpu 16, memory 64Gi, pods 220 from the two Ready real nodes.
	nodes := []client.Object{
		node(t, "n1", "cpu=8,memory=32Gi,pods=110", true),
		node(t, "n2", "cpu=8,memory=32Gi,pods=110", true),
		node(t, "down", "cpu=64,memory=256Gi,pods=110", false),
		node(t, "cordoned", "cpu=64,memory=256Gi,pods=110", true, func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		node(t, "virtual", "cpu=64,memory=256Gi,pods=110", true, func(n *corev1.Node) { n.Labels = map[string]string{LabelNodeType: NodeTypeVirtual} }),
		node(t, "annex-gamma", "cpu=64,memory=256Gi,pods=110", true, func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: corev1alpha1.TaintKeyVirtualNode, Effect: corev1.TaintEffectNoSchedule}}
		}),
	}
	const ns = "annex-tenant-alpha"

	tests := []struct {
		name       string
		objs       []client.Object
		limit      string
		slice      *corev1alpha1.ResourceSlice
		want       corev1alpha1.ResourceSliceStatus
		wantEvents []string
	}{
		{
			name:       "accepted",
			objs:       []client.Object{tenantNamespace(ns, "alpha")},
			limit:      "cpu=16,memory=64Gi",
			slice:      newSlice(t, ns, "alpha", "alpha", "beta", "cpu=4,memory=8Gi"),
			want:       answer(t, corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi", corev1alpha1.ReasonResourcesGranted, "granted cpu=4,memory=8Gi", 1),
			wantEvents: []string{"Normal ResourcesGranted granted cpu=4,memory=8Gi"},
		},
		{
			name:  "denied by the per-consumer limit",
			objs:  []client.Object{tenantNamespace(ns, "alpha")},
			limit: "cpu=2",
			slice: newSlice(t, ns, "alpha", "alpha", "beta", "cpu=4"),
			want: answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonPolicyDenied,
				"requested cpu 4 exceeds this provider's per-consumer limit 2", 1),
			wantEvents: []string{"Warning PolicyDenied requested cpu 4 exceeds this provider's per-consumer limit 2"},
		},
		{
			name:  "denied: only Ready, schedulable, real nodes count",
			objs:  []client.Object{tenantNamespace(ns, "alpha")},
			slice: newSlice(t, ns, "alpha", "alpha", "beta", "cpu=17"),
			want: answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonInsufficientResources,
				"requested cpu 17 exceeds this provider's allocatable capacity 16", 1),
			wantEvents: []string{"Warning InsufficientResources requested cpu 17 exceeds this provider's allocatable capacity 16"},
		},
		{
			name:  "denied: other accepted slices of the consumer count against the limit",
			limit: "cpu=6",
			objs: []client.Object{tenantNamespace(ns, "alpha"), func() client.Object {
				o := newSlice(t, ns, "first", "alpha", "beta", "cpu=4")
				o.Status = answer(t, corev1alpha1.ResourceSliceAccepted, "cpu=4", corev1alpha1.ReasonResourcesGranted, "granted cpu=4", 1)
				return o
			}()},
			slice: newSlice(t, ns, "alpha", "alpha", "beta", "cpu=4"),
			want: answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonPolicyDenied,
				"requested cpu 4 plus 4 already granted to consumer alpha exceeds this provider's per-consumer limit 6", 1),
			wantEvents: []string{"Warning PolicyDenied requested cpu 4 plus 4 already granted to consumer alpha exceeds this provider's per-consumer limit 6"},
		},
		{
			name: "denied: other accepted slices of the consumer count against the capacity",
			objs: []client.Object{tenantNamespace(ns, "alpha"), accepted(t, ns, "first", "alpha", "cpu=12"),
				newSlice(t, ns, "pending", "alpha", "beta", "cpu=12"), // not answered: takes nothing
				func() client.Object {
					o := newSlice(t, ns, "refused", "alpha", "beta", "cpu=12")
					o.Status = answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonInsufficientResources, "no", 1)
					return o
				}(),
			},
			slice: newSlice(t, ns, "alpha", "alpha", "beta", "cpu=8"),
			want: answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonInsufficientResources,
				"requested cpu 8 plus 12 already granted to consumer alpha exceeds this provider's allocatable capacity 16", 1),
			wantEvents: []string{"Warning InsufficientResources requested cpu 8 plus 12 already granted to consumer alpha exceeds this provider's allocatable capacity 16"},
		},
		{
			name: "other consumers' grants and those of other providers do not count",
			objs: []client.Object{tenantNamespace(ns, "alpha"), tenantNamespace("annex-tenant-gamma", "gamma"),
				accepted(t, "annex-tenant-gamma", "peering", "gamma", "cpu=12"),
				func() client.Object {
					o := accepted(t, ns, "elsewhere", "alpha", "cpu=12")
					o.Spec.ProviderClusterID = "delta"
					return o
				}(),
			},
			slice:      newSlice(t, ns, "alpha", "alpha", "beta", "cpu=8"),
			want:       answer(t, corev1alpha1.ResourceSliceAccepted, "cpu=8", corev1alpha1.ReasonResourcesGranted, "granted cpu=8", 1),
			wantEvents: []string{"Normal ResourcesGranted granted cpu=8"},
		},
		{
			name:  "denied: consumer speaking for another",
			objs:  []client.Object{tenantNamespace(ns, "alpha")},
			slice: newSlice(t, ns, "alpha", "gamma", "beta", "cpu=1"),
			want: answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonPolicyDenied,
				`spec.consumerClusterID is "gamma" but namespace annex-tenant-alpha belongs to consumer "alpha": a consumer may not ask for resources on behalf of another`, 1),
			wantEvents: []string{`Warning PolicyDenied spec.consumerClusterID is "gamma" but namespace annex-tenant-alpha belongs to consumer "alpha": a consumer may not ask for resources on behalf of another`},
		},
		{
			name: "spec change is re-evaluated",
			objs: []client.Object{tenantNamespace(ns, "alpha")},
			slice: func() *corev1alpha1.ResourceSlice {
				o := newSlice(t, ns, "alpha", "alpha", "beta", "cpu=32")
				o.Generation = 2
				o.Status = answer(t, corev1alpha1.ResourceSliceAccepted, "cpu=4", corev1alpha1.ReasonResourcesGranted, "granted cpu=4", 1)
				return o
			}(),
			want: answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonInsufficientResources,
				"requested cpu 32 exceeds this provider's allocatable capacity 16", 2),
			wantEvents: []string{"Warning InsufficientResources requested cpu 32 exceeds this provider's allocatable capacity 16"},
		},
		{
			name:  "a request to another provider is left alone",
			objs:  []client.Object{tenantNamespace("annex-tenant-gamma", "gamma")},
			slice: newSlice(t, "annex-tenant-gamma", "gamma", "beta", "gamma", "cpu=1"),
			want:  corev1alpha1.ResourceSliceStatus{},
		},
		{
			name:  "a slice outside tenant namespaces is left alone",
			objs:  []client.Object{tenantNamespace("default", "alpha")},
			slice: newSlice(t, "default", "alpha", "alpha", "beta", "cpu=1"),
			want:  corev1alpha1.ResourceSliceStatus{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			objs := append(append(append([]client.Object{}, nodes...), tc.objs...), tc.slice)
			c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&corev1alpha1.ResourceSlice{}).
				WithIndex(&corev1alpha1.ResourceSlice{}, IndexPhase, PhaseIndexer("beta")).WithObjects(objs...).Build()
			rec := events.NewFakeRecorder(10)
			r := New(c, rec, "beta", Options{MaxPerConsumer: rl(t, tc.limit), Clock: clocktesting.NewFakePassiveClock(now)})
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tc.slice)}

			// Twice: the second pass must change nothing and record no Event.
			for range 2 {
				res, err := r.Reconcile(ctx, req)
				if err != nil {
					t.Fatalf("Reconcile() error = %v", err)
				}
				if !res.IsZero() {
					t.Errorf("Reconcile() = %+v, want no requeue", res)
				}
			}
			got := &corev1alpha1.ResourceSlice{}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Status, cmpOpts...); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			close(rec.Events)
			var gotEvents []string
			for e := range rec.Events {
				gotEvents = append(gotEvents, e)
			}
			if diff := cmp.Diff(tc.wantEvents, gotEvents); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// Two slices sent together that fit the capacity each, but not together:
// the second is denied although the cache does not show the first's
// acceptance yet.
func TestSlicesDecidedTogether(t *testing.T) {
	ctx := context.Background()
	const ns = "annex-tenant-alpha"
	s := testScheme(t)
	objs := func() []client.Object {
		return []client.Object{
			node(t, "n1", "cpu=16,memory=64Gi,pods=110", true), tenantNamespace(ns, "alpha"),
			newSlice(t, ns, "one", "alpha", "beta", "cpu=10"), newSlice(t, ns, "two", "alpha", "beta", "cpu=10"),
		}
	}
	build := func(funcs interceptor.Funcs) client.WithWatch {
		return fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&corev1alpha1.ResourceSlice{}).
			WithIndex(&corev1alpha1.ResourceSlice{}, IndexPhase, PhaseIndexer("beta")).WithObjects(objs()...).
			WithInterceptorFuncs(funcs).Build()
	}
	// server is the API server; cache, what the controller reads, sees
	// status writes only once synced.
	server := build(interceptor.Funcs{})
	var synced bool
	cache := build(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		if synced {
			if err := c.SubResource(sub).Patch(ctx, obj.DeepCopyObject().(client.Object), patch, opts...); err != nil {
				return err
			}
		}
		return server.SubResource(sub).Patch(ctx, obj, patch, opts...)
	}})
	r := New(cache, events.NewFakeRecorder(10), "beta", Options{Clock: clocktesting.NewFakePassiveClock(now)})
	decide := func(name string) {
		t.Helper()
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}); err != nil {
			t.Fatalf("Reconcile(%s) error = %v", name, err)
		}
	}
	status := func(name string) corev1alpha1.ResourceSliceStatus {
		t.Helper()
		rs := &corev1alpha1.ResourceSlice{}
		if err := server.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, rs); err != nil {
			t.Fatal(err)
		}
		return rs.Status
	}
	decide("one")
	decide("two")
	if diff := cmp.Diff(answer(t, corev1alpha1.ResourceSliceAccepted, "cpu=10", corev1alpha1.ReasonResourcesGranted, "granted cpu=10", 1), status("one"), cmpOpts...); diff != "" {
		t.Errorf("one (-want +got):\n%s", diff)
	}
	deniedTwo := answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonInsufficientResources,
		"requested cpu 10 plus 10 already granted to consumer alpha exceeds this provider's allocatable capacity 16", 1)
	if diff := cmp.Diff(deniedTwo, status("two"), cmpOpts...); diff != "" {
		t.Errorf("two (-want +got):\n%s", diff)
	}

	// "one" asks for more: denied. Until the cache shows that, its grant
	// still counts (never less than the cache shows).
	if err := cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: "one"}, &corev1alpha1.ResourceSlice{}); err != nil {
		t.Fatal(err)
	}
	synced = true
	for _, name := range []string{"one", "two"} {
		rs := &corev1alpha1.ResourceSlice{}
		if err := server.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, rs); err != nil {
			t.Fatal(err)
		}
		cached := &corev1alpha1.ResourceSlice{}
		if err := cache.Get(ctx, client.ObjectKeyFromObject(rs), cached); err != nil {
			t.Fatal(err)
		}
		orig := cached.DeepCopy()
		cached.Status = rs.Status
		if err := cache.Status().Patch(ctx, cached, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	synced = false
	got, err := r.grantedToConsumer(ctx, newSlice(t, ns, "three", "alpha", "beta", "cpu=1"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rl(t, "cpu=10"), got, cmpOpts...); diff != "" {
		t.Errorf("granted to alpha (-want +got):\n%s", diff)
	}
	if len(r.decided) != 0 {
		t.Errorf("answers the cache shows are still remembered: %v", r.decided)
	}
	one := &corev1alpha1.ResourceSlice{}
	if err := server.Get(ctx, types.NamespacedName{Namespace: ns, Name: "one"}, one); err != nil {
		t.Fatal(err)
	}
	one.Spec.Resources = rl(t, "cpu=20")
	one.Generation = 2
	if err := server.Update(ctx, one); err != nil {
		t.Fatal(err)
	}
	cachedOne := &corev1alpha1.ResourceSlice{}
	if err := cache.Get(ctx, client.ObjectKeyFromObject(one), cachedOne); err != nil {
		t.Fatal(err)
	}
	cachedOne.Spec.Resources = rl(t, "cpu=20")
	cachedOne.Generation = 2
	if err := cache.Update(ctx, cachedOne); err != nil {
		t.Fatal(err)
	}
	decide("one")
	if got := status("one").Phase; got != corev1alpha1.ResourceSliceDenied {
		t.Fatalf("one after asking for cpu=20: %s, want Denied", got)
	}
	got, err = r.grantedToConsumer(ctx, newSlice(t, ns, "three", "alpha", "beta", "cpu=1"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rl(t, "cpu=10"), got, cmpOpts...); diff != "" {
		t.Errorf("granted to alpha while the cache still shows one accepted (-want +got):\n%s", diff)
	}
}

// Denied slices are found through the index.
func TestDeniedSlices(t *testing.T) {
	ctx := context.Background()
	denied := func(ns, name, provider string) *corev1alpha1.ResourceSlice {
		o := newSlice(t, ns, name, "alpha", provider, "cpu=1")
		o.Status.Phase = corev1alpha1.ResourceSliceDenied
		return o
	}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithIndex(&corev1alpha1.ResourceSlice{}, IndexPhase, PhaseIndexer("beta")).
		WithObjects(denied("annex-tenant-alpha", "a", "beta"), denied("annex-tenant-gamma", "g", "beta"),
			denied("annex-tenant-alpha", "other-provider", "delta"), denied("default", "not-a-tenant", "beta"),
			accepted(t, "annex-tenant-alpha", "ok", "alpha", "cpu=1"), newSlice(t, "annex-tenant-alpha", "new", "alpha", "beta", "cpu=1")).
		Build()
	r := New(c, events.NewFakeRecorder(1), "beta", Options{})
	keys := func(reqs []reconcile.Request) []string {
		var out []string
		for _, req := range reqs {
			out = append(out, req.String())
		}
		slices.Sort(out)
		return out
	}
	if diff := cmp.Diff([]string{"annex-tenant-alpha/a", "annex-tenant-gamma/g"}, keys(r.deniedSlices(ctx))); diff != "" {
		t.Errorf("deniedSlices() (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"annex-tenant-alpha/a"}, keys(r.deniedSlices(ctx, client.InNamespace("annex-tenant-alpha")))); diff != "" {
		t.Errorf("deniedSlices(annex-tenant-alpha) (-want +got):\n%s", diff)
	}
}

func TestRoomFreed(t *testing.T) {
	acc := accepted(t, "annex-tenant-alpha", "a", "alpha", "cpu=4")
	with := func(mutate func(*corev1alpha1.ResourceSlice)) *corev1alpha1.ResourceSlice {
		o := acc.DeepCopy()
		mutate(o)
		return o
	}
	den := with(func(o *corev1alpha1.ResourceSlice) {
		o.Status.Phase = corev1alpha1.ResourceSliceDenied
		o.Status.Resources = nil
	})
	tests := []struct {
		name string
		e    func(predicate.Predicate) bool
		want bool
	}{
		{"an accepted slice deleted", func(p predicate.Predicate) bool { return p.Delete(event.DeleteEvent{Object: acc}) }, true},
		{"a denied slice deleted", func(p predicate.Predicate) bool { return p.Delete(event.DeleteEvent{Object: den}) }, false},
		{"a slice created", func(p predicate.Predicate) bool { return p.Create(event.CreateEvent{Object: acc}) }, false},
		{"accepted, then denied", func(p predicate.Predicate) bool { return p.Update(event.UpdateEvent{ObjectOld: acc, ObjectNew: den}) }, true},
		{"accepted, then granted less", func(p predicate.Predicate) bool {
			return p.Update(event.UpdateEvent{ObjectOld: acc, ObjectNew: with(func(o *corev1alpha1.ResourceSlice) { o.Status.Resources = rl(t, "cpu=2") })})
		}, true},
		{"an accepted slice being deleted", func(p predicate.Predicate) bool {
			return p.Update(event.UpdateEvent{ObjectOld: acc, ObjectNew: with(func(o *corev1alpha1.ResourceSlice) { o.DeletionTimestamp = &metav1.Time{Time: now} })})
		}, true},
		{"denied, then accepted", func(p predicate.Predicate) bool { return p.Update(event.UpdateEvent{ObjectOld: den, ObjectNew: acc}) }, false},
		{"accepted, unchanged", func(p predicate.Predicate) bool {
			return p.Update(event.UpdateEvent{ObjectOld: acc, ObjectNew: with(func(o *corev1alpha1.ResourceSlice) { o.Labels = map[string]string{"x": "y"} })})
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.e(roomFreed()); got != tc.want {
				t.Errorf("roomFreed() = %v, want %v", got, tc.want)
			}
		})
	}
}
