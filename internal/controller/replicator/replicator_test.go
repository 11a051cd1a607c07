package replicator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

const (
	local    = "alpha"
	peer     = "beta"
	localNS  = "annex-peer-beta"    // where the consumer keeps objects for beta
	remoteNS = "annex-tenant-alpha" // alpha's tenant namespace on beta
	sliceNm  = "alpha"
	pending  = 2 * time.Second
	resync   = 30 * time.Second
)

var gvk = corev1alpha1.GroupVersion.WithKind("ResourceSlice")

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := corev1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeRemotes is a Remotes stub: it hands out one client for peer, or err.
type fakeRemotes struct {
	client client.Client
	err    error
	calls  int
}

func (f *fakeRemotes) Client(id string) (client.Client, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	if id != peer {
		return nil, errors.New("unknown peer " + id)
	}
	return f.client, nil
}

func (f *fakeRemotes) Subscribe() <-chan event.TypedGenericEvent[*corev1alpha1.ForeignCluster] {
	return make(chan event.TypedGenericEvent[*corev1alpha1.ForeignCluster])
}

func q(s string) resource.Quantity { return resource.MustParse(s) }

func fc(unreachable bool) *corev1alpha1.ForeignCluster {
	return &corev1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: peer},
		Spec:       corev1alpha1.ForeignClusterSpec{ClusterID: peer, Unreachable: unreachable},
	}
}

func spec(cpu string) corev1alpha1.ResourceSliceSpec {
	return corev1alpha1.ResourceSliceSpec{
		ConsumerClusterID: local,
		ProviderClusterID: peer,
		Resources:         corev1.ResourceList{corev1.ResourceCPU: q(cpu)},
	}
}

func accepted(cpu string) corev1alpha1.ResourceSliceStatus {
	return corev1alpha1.ResourceSliceStatus{
		Phase:     corev1alpha1.ResourceSliceAccepted,
		Resources: corev1.ResourceList{corev1.ResourceCPU: q(cpu)},
		Conditions: []metav1.Condition{{
			Type: corev1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: corev1alpha1.ReasonResourcesGranted,
			LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		}},
	}
}

// localSlice is a local ResourceSlice to replicate to peer; tracked means the
// replicator already holds its finalizer.
func localSlice(cpu string, tracked bool, status corev1alpha1.ResourceSliceStatus) *corev1alpha1.ResourceSlice {
	rs := &corev1alpha1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: localNS, Name: sliceNm,
			Labels: map[string]string{corev1alpha1.LabelRemoteClusterID: peer, "team": "a"},
			Annotations: map[string]string{
				"note": "keep",
				"kubectl.kubernetes.io/last-applied-configuration": "{}",
			},
		},
		Spec:   spec(cpu),
		Status: status,
	}
	if tracked {
		rs.Finalizers = []string{Finalizer}
		rs.Annotations[AnnotationReplicatedTo] = peer
	}
	return rs
}

func remoteLabels() map[string]string {
	return map[string]string{
		corev1alpha1.LabelRemoteClusterID: local,
		corev1alpha1.LabelManagedBy:       corev1alpha1.ManagedByAnnex,
		"team":                            "a",
	}
}

func remoteAnnotations() map[string]string {
	return map[string]string{"note": "keep", AnnotationOriginNamespace: localNS}
}

// remoteSlice is the copy of localSlice on peer.
func remoteSlice(cpu string, status corev1alpha1.ResourceSliceStatus) *corev1alpha1.ResourceSlice {
	return &corev1alpha1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: remoteNS, Name: sliceNm,
			Labels: remoteLabels(), Annotations: remoteAnnotations(),
		},
		Spec:   spec(cpu),
		Status: status,
	}
}

// view is what the tests compare of a ResourceSlice.
type view struct {
	Namespace, Name string
	Labels          map[string]string
	Annotations     map[string]string
	Finalizers      []string
	Spec            corev1alpha1.ResourceSliceSpec
	Status          corev1alpha1.ResourceSliceStatus
}

func viewOf(rs *corev1alpha1.ResourceSlice) *view {
	if rs == nil {
		return nil
	}
	return &view{
		Namespace: rs.Namespace, Name: rs.Name,
		Labels: rs.Labels, Annotations: rs.Annotations, Finalizers: rs.Finalizers,
		Spec: rs.Spec, Status: rs.Status,
	}
}

func get(t *testing.T, c client.Client, ns string) *corev1alpha1.ResourceSlice {
	t.Helper()
	rs := &corev1alpha1.ResourceSlice{}
	err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: sliceNm}, rs)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s/%s: %v", ns, sliceNm, err)
	}
	return rs
}

var cmpOpts = []cmp.Option{cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })}

// writeCounter counts writes through an interceptor client.
type writeCounter struct{ n int }

func (w *writeCounter) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			w.n++
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			w.n++
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			w.n++
			return c.Patch(ctx, o, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			w.n++
			return c.Delete(ctx, o, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			w.n++
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
	}
}

// forbidden returns interceptor funcs that fail the test on any call.
func forbidden(t *testing.T) interceptor.Funcs {
	fail := func() error {
		t.Error("unexpected remote call")
		return errors.New("unexpected remote call")
	}
	return interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return fail()
		},
		List:   func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error { return fail() },
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return fail() },
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error { return fail() },
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return fail()
		},
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error { return fail() },
	}
}

func TestReconcile(t *testing.T) {
	tests := []struct {
		name string
		fc   *corev1alpha1.ForeignCluster // nil: no ForeignCluster
		// local is the local object; deleting deletes it before reconciling.
		local    *corev1alpha1.ResourceSlice
		deleting bool
		remote   []client.Object
		// noRemote makes every remote call fail the test.
		noRemote  bool
		clientErr error

		want         ctrl.Result
		wantTerminal bool
		wantLocal    *view
		wantRemote   *view
		wantWrites   int // local + remote writes; -1: don't check
		wantNoClient bool
	}{
		{
			name:   "create remote copy",
			fc:     fc(false),
			local:  localSlice("4", false, corev1alpha1.ResourceSliceStatus{}),
			want:   ctrl.Result{RequeueAfter: firstLook},
			remote: nil,
			wantLocal: &view{
				Namespace: localNS, Name: sliceNm,
				Labels:      map[string]string{corev1alpha1.LabelRemoteClusterID: peer, "team": "a"},
				Annotations: map[string]string{"note": "keep", "kubectl.kubernetes.io/last-applied-configuration": "{}", AnnotationReplicatedTo: peer},
				Finalizers:  []string{Finalizer},
				Spec:        spec("4"),
			},
			wantRemote: &view{
				Namespace: remoteNS, Name: sliceNm,
				Labels: remoteLabels(), Annotations: remoteAnnotations(),
				Spec: spec("4"),
			},
			wantWrites: 2,
		},
		{
			name:       "remote status not populated yet: short requeue, nothing written",
			fc:         fc(false),
			local:      localSlice("4", true, corev1alpha1.ResourceSliceStatus{}),
			remote:     []client.Object{remoteSlice("4", corev1alpha1.ResourceSliceStatus{})},
			want:       ctrl.Result{RequeueAfter: pending},
			wantLocal:  viewOf(localSlice("4", true, corev1alpha1.ResourceSliceStatus{})),
			wantRemote: viewOf(remoteSlice("4", corev1alpha1.ResourceSliceStatus{})),
			wantWrites: 0,
		},
		{
			name:       "remote status copied back",
			fc:         fc(false),
			local:      localSlice("4", true, corev1alpha1.ResourceSliceStatus{}),
			remote:     []client.Object{remoteSlice("4", accepted("4"))},
			want:       ctrl.Result{RequeueAfter: resync},
			wantLocal:  viewOf(localSlice("4", true, accepted("4"))),
			wantRemote: viewOf(remoteSlice("4", accepted("4"))),
			wantWrites: 1,
		},
		{
			name:       "steady state writes nothing",
			fc:         fc(false),
			local:      localSlice("4", true, accepted("4")),
			remote:     []client.Object{remoteSlice("4", accepted("4"))},
			want:       ctrl.Result{RequeueAfter: resync},
			wantLocal:  viewOf(localSlice("4", true, accepted("4"))),
			wantRemote: viewOf(remoteSlice("4", accepted("4"))),
			wantWrites: 0,
		},
		{
			name:       "spec change goes out and status is looked at again soon",
			fc:         fc(false),
			local:      localSlice("8", true, accepted("4")),
			remote:     []client.Object{remoteSlice("4", accepted("4"))},
			want:       ctrl.Result{RequeueAfter: firstLook},
			wantLocal:  viewOf(localSlice("8", true, accepted("4"))),
			wantRemote: viewOf(remoteSlice("8", accepted("4"))),
			wantWrites: 1,
		},
		{
			name:       "deletion deletes the remote copy, then the finalizer",
			fc:         fc(false),
			local:      localSlice("4", true, accepted("4")),
			deleting:   true,
			remote:     []client.Object{remoteSlice("4", accepted("4"))},
			want:       ctrl.Result{},
			wantWrites: -1,
		},
		{
			name:     "deletion waits while the remote copy is being deleted",
			fc:       fc(false),
			local:    localSlice("4", true, accepted("4")),
			deleting: true,
			remote: []client.Object{func() client.Object {
				rs := remoteSlice("4", accepted("4"))
				rs.Finalizers = []string{"provider.example/hold"}
				return rs
			}()},
			want: ctrl.Result{RequeueAfter: pending},
			wantLocal: func() *view {
				v := viewOf(localSlice("4", true, accepted("4")))
				return v
			}(),
			wantRemote: func() *view {
				v := viewOf(remoteSlice("4", accepted("4")))
				v.Finalizers = []string{"provider.example/hold"}
				return v
			}(),
			wantWrites: -1,
		},
		{
			name:         "unreachable peer: finalizer dropped without any remote call",
			fc:           fc(true),
			local:        localSlice("4", true, accepted("4")),
			deleting:     true,
			noRemote:     true,
			want:         ctrl.Result{},
			wantNoClient: true,
			wantWrites:   -1,
		},
		{
			name:         "ForeignCluster gone: finalizer dropped without any remote call",
			fc:           nil,
			local:        localSlice("4", true, accepted("4")),
			deleting:     true,
			noRemote:     true,
			want:         ctrl.Result{},
			wantNoClient: true,
			wantWrites:   -1,
		},
		{
			name:         "unreachable peer: nothing replicated",
			fc:           fc(true),
			local:        localSlice("4", false, corev1alpha1.ResourceSliceStatus{}),
			noRemote:     true,
			want:         ctrl.Result{},
			wantLocal:    viewOf(localSlice("4", false, corev1alpha1.ResourceSliceStatus{})),
			wantNoClient: true,
			wantWrites:   0,
		},
		{
			name:       "peer temporarily unreachable: no error, no requeue",
			fc:         fc(false),
			local:      localSlice("4", true, accepted("4")),
			noRemote:   true,
			clientErr:  errors.New("peer beta is unreachable"),
			want:       ctrl.Result{},
			wantLocal:  viewOf(localSlice("4", true, accepted("4"))),
			wantWrites: 0,
		},
		{
			name:       "peer temporarily unreachable during deletion: finalizer kept, no requeue",
			fc:         fc(false),
			local:      localSlice("4", true, accepted("4")),
			deleting:   true,
			noRemote:   true,
			clientErr:  errors.New("peer beta is unreachable"),
			want:       ctrl.Result{},
			wantLocal:  viewOf(localSlice("4", true, accepted("4"))),
			wantWrites: -1,
		},
		{
			name: "label removed: remote copy deleted, finalizer removed",
			fc:   fc(false),
			local: func() *corev1alpha1.ResourceSlice {
				rs := localSlice("4", true, accepted("4"))
				delete(rs.Labels, corev1alpha1.LabelRemoteClusterID)
				return rs
			}(),
			remote: []client.Object{remoteSlice("4", accepted("4"))},
			want:   ctrl.Result{},
			wantLocal: &view{
				Namespace: localNS, Name: sliceNm,
				Labels:      map[string]string{"team": "a"},
				Annotations: map[string]string{"note": "keep", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
				Spec:        spec("4"), Status: accepted("4"),
			},
			wantWrites: -1,
		},
		{
			name:  "remote object not ours: refused, left alone",
			fc:    fc(false),
			local: localSlice("4", true, corev1alpha1.ResourceSliceStatus{}),
			remote: []client.Object{func() client.Object {
				rs := remoteSlice("1", corev1alpha1.ResourceSliceStatus{})
				rs.Labels = nil
				rs.Annotations = nil
				return rs
			}()},
			wantTerminal: true,
			wantLocal:    viewOf(localSlice("4", true, corev1alpha1.ResourceSliceStatus{})),
			wantRemote: &view{
				Namespace: remoteNS, Name: sliceNm, Spec: spec("1"),
			},
			wantWrites: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := testScheme(t)
			objs := []client.Object{tc.local}
			if tc.fc != nil {
				objs = append(objs, tc.fc)
			}
			var writes writeCounter
			localC := fake.NewClientBuilder().WithScheme(s).
				WithStatusSubresource(&corev1alpha1.ResourceSlice{}).
				WithObjects(objs...).Build()
			if tc.deleting {
				if err := localC.Delete(ctx, tc.local.DeepCopy()); err != nil {
					t.Fatal(err)
				}
			}
			remoteBase := fake.NewClientBuilder().WithScheme(s).
				WithStatusSubresource(&corev1alpha1.ResourceSlice{}).
				WithObjects(tc.remote...).Build()
			var remoteC client.Client = interceptor.NewClient(remoteBase, writes.funcs())
			if tc.noRemote {
				remoteC = interceptor.NewClient(remoteBase, forbidden(t))
			}
			remotes := &fakeRemotes{client: remoteC, err: tc.clientErr}
			r := New(interceptor.NewClient(localC, writes.funcs()), remotes, local, gvk, Options{})

			got, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: localNS, Name: sliceNm}})
			switch {
			case tc.wantTerminal:
				if !errors.Is(err, reconcile.TerminalError(nil)) {
					t.Fatalf("Reconcile() error = %v, want a terminal error", err)
				}
			case err != nil:
				t.Fatalf("Reconcile() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if tc.wantNoClient && remotes.calls != 0 {
				t.Errorf("Remotes.Client called %d times, want 0", remotes.calls)
			}
			if diff := cmp.Diff(tc.wantLocal, viewOf(get(t, localC, localNS)), cmpOpts...); diff != "" {
				t.Errorf("local object (-want +got):\n%s", diff)
			}
			gotRemote := viewOf(get(t, remoteBase, remoteNS))
			if diff := cmp.Diff(tc.wantRemote, gotRemote, cmpOpts...); diff != "" {
				t.Errorf("remote object (-want +got):\n%s", diff)
			}
			if tc.wantWrites >= 0 && writes.n != tc.wantWrites {
				t.Errorf("writes = %d, want %d", writes.n, tc.wantWrites)
			}
		})
	}
}

// TestLifecycle follows one object from creation to deletion.
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	s := testScheme(t)
	localC := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&corev1alpha1.ResourceSlice{}).
		WithObjects(fc(false), localSlice("4", false, corev1alpha1.ResourceSliceStatus{})).Build()
	remoteC := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&corev1alpha1.ResourceSlice{}).Build()
	r := New(localC, &fakeRemotes{client: remoteC}, local, gvk, Options{PendingRequeue: time.Second, ResyncPeriod: time.Minute})
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: localNS, Name: sliceNm}}
	reconcileOnce := func(want ctrl.Result) {
		t.Helper()
		got, err := r.Reconcile(ctx, req)
		if err != nil {
			t.Fatalf("Reconcile() error = %v", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("result (-want +got):\n%s", diff)
		}
	}

	reconcileOnce(ctrl.Result{RequeueAfter: firstLook})
	if rs := get(t, remoteC, remoteNS); rs == nil || !rs.Spec.Resources.Cpu().Equal(q("4")) {
		t.Fatalf("remote copy = %+v, want cpu 4", rs)
	}

	// The provider accepts.
	rs := get(t, remoteC, remoteNS)
	rs.Status = accepted("4")
	if err := remoteC.Status().Update(ctx, rs); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(ctrl.Result{RequeueAfter: time.Minute})
	if diff := cmp.Diff(accepted("4"), get(t, localC, localNS).Status, cmpOpts...); diff != "" {
		t.Fatalf("local status (-want +got):\n%s", diff)
	}

	// The consumer asks for more.
	l := get(t, localC, localNS)
	l.Spec.Resources[corev1.ResourceCPU] = q("8")
	if err := localC.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(ctrl.Result{RequeueAfter: firstLook})
	if got := get(t, remoteC, remoteNS).Spec.Resources.Cpu(); !got.Equal(q("8")) {
		t.Fatalf("remote cpu = %s, want 8", got)
	}

	// The consumer deletes the slice.
	if err := localC.Delete(ctx, get(t, localC, localNS)); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(ctrl.Result{})
	if rs := get(t, remoteC, remoteNS); rs != nil {
		t.Errorf("remote copy still exists: %+v", rs)
	}
	if rs := get(t, localC, localNS); rs != nil {
		t.Errorf("local object still exists (finalizers %v)", rs.Finalizers)
	}
}

func TestRequestsForPeer(t *testing.T) {
	s := testScheme(t)
	mk := func(ns, name string, labels, ann map[string]string) *corev1alpha1.ResourceSlice {
		return &corev1alpha1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: ann}, Spec: spec("1")}
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		mk("a", "to-beta", map[string]string{corev1alpha1.LabelRemoteClusterID: peer}, nil),
		mk("a", "was-beta", nil, map[string]string{AnnotationReplicatedTo: peer}),
		mk("b", "to-gamma", map[string]string{corev1alpha1.LabelRemoteClusterID: "gamma"}, nil),
		mk("b", "plain", nil, nil),
		mk(corev1alpha1.TenantNamespaceName("gamma"), "tenant-wrote", map[string]string{corev1alpha1.LabelRemoteClusterID: peer}, nil),
	).Build()
	r := New(c, &fakeRemotes{}, local, gvk, Options{})
	got := r.requestsForPeer(context.Background(), peer)
	want := []reconcile.Request{
		{NamespacedName: types.NamespacedName{Namespace: "a", Name: "to-beta"}},
		{NamespacedName: types.NamespacedName{Namespace: "a", Name: "was-beta"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

// TestReplicaIgnored: whatever sits in a tenant namespace was written there
// by that tenant; it is never replicated, nor gets a finalizer this cluster
// could not release — with or without the origin annotation (the tenant
// controls it), and whichever cluster its label names.
func TestReplicaIgnored(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*corev1alpha1.ResourceSlice)
	}{
		{name: "replica naming its origin", mutate: func(*corev1alpha1.ResourceSlice) {}},
		{name: "tenant's unannotated object labelled for a third cluster (confused deputy)", mutate: func(rs *corev1alpha1.ResourceSlice) {
			rs.Annotations = nil
			rs.Labels = map[string]string{corev1alpha1.LabelRemoteClusterID: peer}
		}},
		{name: "tenant's object carrying a finalizer and replicated-to", mutate: func(rs *corev1alpha1.ResourceSlice) {
			rs.Annotations = map[string]string{AnnotationReplicatedTo: peer}
			rs.Labels = map[string]string{corev1alpha1.LabelRemoteClusterID: peer}
			rs.Finalizers = []string{Finalizer}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testScheme(t)
			replica := remoteSlice("2", corev1alpha1.ResourceSliceStatus{})
			replica.Namespace = corev1alpha1.TenantNamespaceName("gamma") // what tenant gamma wrote here
			tc.mutate(replica)
			writes := &writeCounter{}
			lc := fake.NewClientBuilder().WithScheme(s).WithObjects(replica, fc(false)).WithInterceptorFuncs(writes.funcs()).Build()
			remotes := &fakeRemotes{client: fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(forbidden(t)).Build()}
			r := New(lc, remotes, local, corev1alpha1.GroupVersion.WithKind("ResourceSlice"), Options{})
			r.reader = lc
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(replica)}); err != nil {
				t.Fatal(err)
			}
			if writes.n != 0 || remotes.calls != 0 {
				t.Errorf("replica touched: %d local writes, %d remote client requests", writes.n, remotes.calls)
			}
			if replicated(replica) {
				t.Error("the watch predicate selects it")
			}
		})
	}
}

// TestRefused: rule annex-replicator — an object goes to a peer only from
// that peer's peer namespace. Elsewhere it is refused with an Event naming
// the rule, and a copy it had is deleted.
func TestRefused(t *testing.T) {
	tests := []struct {
		name      string
		namespace string
		tracked   bool // replicated before: finalizer, replicated-to and a remote copy
	}{
		{name: "labelled for beta in gamma's peer namespace", namespace: corev1alpha1.PeerNamespaceName("gamma")},
		{name: "labelled for beta in an ordinary namespace", namespace: "default"},
		{name: "replicated before from an ordinary namespace: copy deleted", namespace: "default", tracked: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := testScheme(t)
			obj := localSlice("4", tc.tracked, corev1alpha1.ResourceSliceStatus{})
			obj.Namespace = tc.namespace
			lc := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&corev1alpha1.ResourceSlice{}).WithObjects(obj, fc(false)).Build()
			var rc client.Client = fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(forbidden(t)).Build()
			remoteBase := rc
			if tc.tracked {
				copy := remoteSlice("4", corev1alpha1.ResourceSliceStatus{})
				copy.Annotations[AnnotationOriginNamespace] = tc.namespace
				remoteBase = fake.NewClientBuilder().WithScheme(s).WithObjects(copy).Build()
				rc = remoteBase
			}
			rec := events.NewFakeRecorder(4)
			r := New(lc, &fakeRemotes{client: rc}, local, gvk, Options{Recorder: rec})
			got, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ctrl.Result{}, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			after := get(t, lc, tc.namespace)
			if len(after.Finalizers) != 0 || after.Annotations[AnnotationReplicatedTo] != "" {
				t.Errorf("refused object still tracked: finalizers %v, annotations %v", after.Finalizers, after.Annotations)
			}
			if tc.tracked {
				if rs := get(t, remoteBase, remoteNS); rs != nil {
					t.Errorf("the copy made before is still on beta: %+v", rs)
				}
			}
			want := "Warning ReplicationRefused annex-replicator: ResourceSlice " + tc.namespace + "/" + sliceNm +
				" is labelled annex.dev/remote-cluster-id=beta but only objects in namespace annex-peer-beta are replicated to beta; not replicated"
			select {
			case e := <-rec.Events:
				if e != want {
					t.Errorf("event = %q, want %q", e, want)
				}
			default:
				t.Error("no event")
			}
		})
	}
}

func TestPendingWait(t *testing.T) {
	for _, tc := range []struct{ age, want time.Duration }{
		{0, firstLook},
		{500 * time.Millisecond, firstLook},
		{2 * time.Second, 500 * time.Millisecond},
		{8 * time.Second, 2 * time.Second},
		{time.Hour, 2 * time.Second},
	} {
		if got := pendingWait(tc.age, 2*time.Second); got != tc.want {
			t.Errorf("pendingWait(%v) = %v, want %v", tc.age, got, tc.want)
		}
	}
}
