package remotenamespace

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/replicator"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const tenantNS = "annex-tenant-alpha"

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, offloadingv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func tenant(consumer string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS, Labels: map[string]string{
		corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelTenant: "true"}}}
}

func replica(source, remote string, mutate ...func(*offloadingv1alpha1.RemoteNamespace)) *offloadingv1alpha1.RemoteNamespace {
	rn := &offloadingv1alpha1.RemoteNamespace{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: tenantNS, Name: source, Generation: 3,
			Labels:      map[string]string{corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex},
			Annotations: map[string]string{replicator.AnnotationOriginNamespace: "annex-tenant-beta"},
		},
		Spec: offloadingv1alpha1.RemoteNamespaceSpec{SourceNamespace: source, RemoteNamespace: remote},
	}
	for _, m := range mutate {
		m(rn)
	}
	return rn
}

func namespace(name string, labels, annotations map[string]string, mutate ...func(*corev1.Namespace)) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations}}
	for _, m := range mutate {
		m(ns)
	}
	return ns
}

var (
	oursLabels = map[string]string{corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}
	fromWeb    = map[string]string{AnnotationSourceNamespace: "web"}
)

func status(phase offloadingv1alpha1.RemoteNamespacePhase, reason, msg string) offloadingv1alpha1.RemoteNamespaceStatus {
	cs := metav1.ConditionFalse
	statusMsg := msg
	if phase == offloadingv1alpha1.RemoteNamespaceReady {
		cs, statusMsg = metav1.ConditionTrue, ""
	}
	return offloadingv1alpha1.RemoteNamespaceStatus{
		Phase:   phase,
		Message: statusMsg,
		Conditions: []metav1.Condition{{
			Type: offloadingv1alpha1.ConditionReady, Status: cs, ObservedGeneration: 3,
			LastTransitionTime: metav1.NewTime(now), Reason: reason, Message: msg,
		}},
	}
}

func consumerBinding(ns string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "annex-consumer", Namespace: ns, Labels: oursLabels},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "annex-remote-consumer"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "annex-consumer", Namespace: tenantNS}},
	}
}

var ignoreMeta = cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion", "UID", "CreationTimestamp", "Generation")

func TestReconcile(t *testing.T) {
	s := scheme(t)
	tests := []struct {
		name          string
		objs          []client.Object
		rn            *offloadingv1alpha1.RemoteNamespace
		want          offloadingv1alpha1.RemoteNamespaceStatus
		wantFinalizer bool
		wantRequeue   bool
		// wantNamespace is the namespace spec.remoteNamespace after the
		// reconcile (nil: it must not exist).
		wantNamespace *corev1.Namespace
		wantBinding   *rbacv1.RoleBinding
		wantEvents    []string
	}{
		{
			name:          "DefaultName: namespace and RoleBinding created",
			objs:          []client.Object{tenant("alpha")},
			rn:            replica("web", "web-alpha"),
			want:          status(offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled, "namespace web-alpha is ready for consumer alpha"),
			wantFinalizer: true,
			wantNamespace: namespace("web-alpha", oursLabels, fromWeb),
			wantBinding:   consumerBinding("web-alpha"),
			wantEvents:    []string{"Normal NamespaceCreated created namespace web-alpha"},
		},
		{
			name:          "EnforceSameName",
			objs:          []client.Object{tenant("alpha")},
			rn:            replica("web", "web"),
			want:          status(offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled, "namespace web is ready for consumer alpha"),
			wantFinalizer: true,
			wantNamespace: namespace("web", oursLabels, fromWeb),
			wantBinding:   consumerBinding("web"),
			wantEvents:    []string{"Normal NamespaceCreated created namespace web"},
		},
		{
			name: "existing namespace of the consumer: RoleBinding repaired",
			objs: []client.Object{tenant("alpha"), namespace("web-alpha", oursLabels, fromWeb), func() client.Object {
				rb := consumerBinding("web-alpha")
				rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: "intruder", Namespace: "default"})
				return rb
			}()},
			rn:            replica("web", "web-alpha"),
			want:          status(offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled, "namespace web-alpha is ready for consumer alpha"),
			wantFinalizer: true,
			wantNamespace: namespace("web-alpha", oursLabels, fromWeb),
			wantBinding:   consumerBinding("web-alpha"),
		},
		{
			name: "RoleBinding with another role is replaced",
			objs: []client.Object{tenant("alpha"), namespace("web-alpha", oursLabels, fromWeb), func() client.Object {
				rb := consumerBinding("web-alpha")
				rb.RoleRef.Name = "cluster-admin"
				return rb
			}()},
			rn:            replica("web", "web-alpha"),
			want:          status(offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled, "namespace web-alpha is ready for consumer alpha"),
			wantFinalizer: true,
			wantNamespace: namespace("web-alpha", oursLabels, fromWeb),
			wantBinding:   consumerBinding("web-alpha"),
		},
		{
			name: "refused: not a name derived from the source namespace",
			objs: []client.Object{tenant("alpha"), namespace("shop", nil, nil)},
			rn:   replica("web", "shop"),
			want: status(offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden,
				`spec.remoteNamespace "shop" must be "web-alpha" (DefaultName) or "web" (EnforceSameName)`),
			wantNamespace: namespace("shop", nil, nil),
			wantEvents:    []string{`Warning Forbidden spec.remoteNamespace "shop" must be "web-alpha" (DefaultName) or "web" (EnforceSameName)`},
		},
		{
			name: "refused: kube-system",
			objs: []client.Object{tenant("alpha"), namespace("kube-system", nil, nil)},
			rn:   replica("kube-system", "kube-system"),
			want: status(offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden,
				`spec.remoteNamespace "kube-system" is reserved on this provider: names starting with "kube-" cannot be requested`),
			wantNamespace: namespace("kube-system", nil, nil),
			wantEvents:    []string{`Warning Forbidden spec.remoteNamespace "kube-system" is reserved on this provider: names starting with "kube-" cannot be requested`},
		},
		{
			name: "refused: default",
			objs: []client.Object{tenant("alpha"), namespace("default", nil, nil)},
			rn:   replica("default", "default"),
			want: status(offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden,
				`spec.remoteNamespace "default" is reserved on this provider`),
			wantNamespace: namespace("default", nil, nil),
			wantEvents:    []string{`Warning Forbidden spec.remoteNamespace "default" is reserved on this provider`},
		},
		{
			name: "refused: existing namespace not managed by Annex",
			objs: []client.Object{tenant("alpha"), namespace("web", map[string]string{"team": "payments"}, nil)},
			rn:   replica("web", "web"),
			want: status(offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden,
				"namespace web already exists on this provider and is not managed by Annex"),
			wantNamespace: namespace("web", map[string]string{"team": "payments"}, nil),
			wantEvents:    []string{"Warning Forbidden namespace web already exists on this provider and is not managed by Annex"},
		},
		{
			name: "refused: another consumer's namespace",
			objs: []client.Object{tenant("alpha"),
				namespace("web", map[string]string{corev1alpha1.LabelRemoteClusterID: "gamma", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}, fromWeb)},
			rn: replica("web", "web"),
			want: status(offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden,
				"namespace web already exists on this provider and belongs to another cluster"),
			wantNamespace: namespace("web", map[string]string{corev1alpha1.LabelRemoteClusterID: "gamma", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}, fromWeb),
			wantEvents:    []string{"Warning Forbidden namespace web already exists on this provider and belongs to another cluster"},
		},
		{
			name: "refused: the consumer's namespace for another source namespace",
			objs: []client.Object{tenant("alpha"), namespace("web-alpha", oursLabels, map[string]string{AnnotationSourceNamespace: "web-alpha"})},
			rn:   replica("web", "web-alpha"),
			want: status(offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden,
				`namespace web-alpha already exists on this provider for another namespace of this consumer ("web-alpha")`),
			wantNamespace: namespace("web-alpha", oursLabels, map[string]string{AnnotationSourceNamespace: "web-alpha"}),
			wantEvents:    []string{`Warning Forbidden namespace web-alpha already exists on this provider for another namespace of this consumer ("web-alpha")`},
		},
		{
			name: "namespace still being deleted: Pending",
			objs: []client.Object{tenant("alpha"), namespace("web-alpha", oursLabels, fromWeb, terminating)},
			rn:   replica("web", "web-alpha"),
			want: status(offloadingv1alpha1.RemoteNamespacePending, offloadingv1alpha1.ReasonPending,
				"namespace web-alpha is being deleted; it is created again once it is gone"),
			wantFinalizer: true,
			wantRequeue:   true,
			wantNamespace: namespace("web-alpha", oursLabels, fromWeb, terminating),
		},
		{
			name:          "not a replica: left alone",
			objs:          []client.Object{tenant("alpha")},
			rn:            replica("web", "web-alpha", func(rn *offloadingv1alpha1.RemoteNamespace) { rn.Annotations = nil }),
			wantNamespace: nil,
		},
		{
			name:          "tenant namespace labelled for another consumer: left alone",
			objs:          []client.Object{tenant("gamma")},
			rn:            replica("web", "web-alpha"),
			wantNamespace: nil,
		},
		{
			name: "deleted: the namespace's deletion is started and the finalizer released",
			objs: []client.Object{tenant("alpha"), namespace("web-alpha", oursLabels, fromWeb, func(ns *corev1.Namespace) {
				ns.Finalizers = []string{"test/hold"}
			})},
			rn: replica("web", "web-alpha", deleted),
			wantNamespace: namespace("web-alpha", oursLabels, fromWeb, func(ns *corev1.Namespace) {
				ns.Finalizers = []string{"test/hold"}
				terminating(ns)
			}),
			wantEvents: []string{"Normal NamespaceDeleted deleting namespace web-alpha"},
		},
		{
			name:          "deleted: a namespace that is not the replica's is left alone",
			objs:          []client.Object{tenant("alpha"), namespace("web", nil, nil)},
			rn:            replica("web", "web", deleted),
			wantNamespace: namespace("web", nil, nil),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
			c := fake.NewClientBuilder().WithScheme(s).
				WithStatusSubresource(&offloadingv1alpha1.RemoteNamespace{}).
				WithObjects(append(tc.objs, tc.rn)...).Build()
			rec := events.NewFakeRecorder(10)
			r := New(c, rec, Options{Clock: clocktesting.NewFakePassiveClock(now)})
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tc.rn)}

			// Twice: the second pass must change nothing and record no Event.
			for range 2 {
				res, err := r.Reconcile(ctx, req)
				if err != nil {
					t.Fatalf("Reconcile() error = %v", err)
				}
				if got := res.RequeueAfter > 0; got != tc.wantRequeue {
					t.Errorf("Reconcile() = %+v, want requeue %v", res, tc.wantRequeue)
				}
			}

			got := &offloadingv1alpha1.RemoteNamespace{}
			err := c.Get(ctx, req.NamespacedName, got)
			switch {
			case apierrors.IsNotFound(err):
				if tc.wantFinalizer {
					t.Errorf("RemoteNamespace is gone, want it kept by the finalizer")
				}
			case err != nil:
				t.Fatal(err)
			default:
				if diff := cmp.Diff(tc.want, got.Status); diff != "" {
					t.Errorf("status (-want +got):\n%s", diff)
				}
				if has := len(got.Finalizers) == 1 && got.Finalizers[0] == Finalizer; has != tc.wantFinalizer {
					t.Errorf("finalizers = %v, want %s: %v", got.Finalizers, Finalizer, tc.wantFinalizer)
				}
			}

			remote := tc.rn.Spec.RemoteNamespace
			ns := &corev1.Namespace{}
			if err := c.Get(ctx, client.ObjectKey{Name: remote}, ns); err != nil {
				if !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
				ns = nil
			}
			if diff := cmp.Diff(tc.wantNamespace, ns, ignoreMeta, cmpopts.IgnoreTypes(metav1.TypeMeta{}),
				cmpopts.IgnoreFields(metav1.ObjectMeta{}, "DeletionTimestamp"), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("namespace %s (-want +got):\n%s", remote, diff)
			}
			if tc.wantNamespace != nil && (tc.wantNamespace.DeletionTimestamp != nil) != (ns.DeletionTimestamp != nil) {
				t.Errorf("namespace deletionTimestamp = %v, want set: %v", ns.DeletionTimestamp, tc.wantNamespace.DeletionTimestamp != nil)
			}

			rb := &rbacv1.RoleBinding{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: remote, Name: "annex-consumer"}, rb); err != nil {
				if !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
				rb = nil
			}
			if diff := cmp.Diff(tc.wantBinding, rb, ignoreMeta, cmpopts.IgnoreTypes(metav1.TypeMeta{})); diff != "" {
				t.Errorf("RoleBinding (-want +got):\n%s", diff)
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

func terminating(ns *corev1.Namespace) {
	ts := metav1.NewTime(now)
	ns.DeletionTimestamp = &ts
	if len(ns.Finalizers) == 0 {
		ns.Finalizers = []string{"test/hold"}
	}
}

func deleted(rn *offloadingv1alpha1.RemoteNamespace) {
	ts := metav1.NewTime(now)
	rn.DeletionTimestamp = &ts
	rn.Finalizers = []string{Finalizer}
}

// TestDeletionCompletes follows a deleted replica until its namespace is gone
// and the finalizer released.
func TestDeletionCompletes(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme(t)).
		WithStatusSubresource(&offloadingv1alpha1.RemoteNamespace{}).
		WithObjects(tenant("alpha"), namespace("web-alpha", oursLabels, fromWeb), replica("web", "web-alpha", deleted)).Build()
	r := New(c, events.NewFakeRecorder(10), Options{})
	req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: tenantNS, Name: "web"}}

	// One pass: the namespace (no finalizers in the fake) is deleted, the
	// finalizer removed and the replica disappears.
	if res, err := r.Reconcile(ctx, req); err != nil || !res.IsZero() {
		t.Fatalf("Reconcile() = %+v, %v; want done", res, err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "web-alpha"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace web-alpha: err = %v, want NotFound", err)
	}
	if err := c.Get(ctx, req.NamespacedName, &offloadingv1alpha1.RemoteNamespace{}); !apierrors.IsNotFound(err) {
		t.Fatalf("RemoteNamespace: err = %v, want NotFound", err)
	}
}
