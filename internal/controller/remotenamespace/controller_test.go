package remotenamespace

import (
	"context"
	"maps"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
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
	// oursPSA are the labels of a remote namespace of alpha at the default
	// Pod Security level.
	oursPSA = withPSA(oursLabels, "baseline")
)

// withPSA returns l with the Pod Security Admission labels of level.
func withPSA(l map[string]string, level string) map[string]string {
	out := maps.Clone(l)
	for _, mode := range []string{"enforce", "warn", "audit"} {
		out["pod-security.kubernetes.io/"+mode] = level
		out["pod-security.kubernetes.io/"+mode+"-version"] = "latest"
	}
	return out
}

// tenantOf is the tenant namespace of another consumer.
func tenantOf(consumer string) *corev1.Namespace {
	ns := tenant(consumer)
	ns.Name = "annex-tenant-" + consumer
	return ns
}

// countQuotas stands in for the quota controller: it counts every
// ResourceQuota as soon as it is written (nothing used).
var countQuotas = interceptor.Funcs{
	Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		count(obj)
		return c.Create(ctx, obj, opts...)
	},
	Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		count(obj)
		return c.Update(ctx, obj, opts...)
	},
}

func count(obj client.Object) {
	if q, ok := obj.(*corev1.ResourceQuota); ok {
		q.Status.Hard = q.Spec.Hard.DeepCopy()
		q.Status.Used = corev1.ResourceList{}
		for name := range q.Spec.Hard {
			q.Status.Used[name] = resource.MustParse("0")
		}
	}
}

// wantQuota is the ResourceQuota the controller keeps in a remote namespace
// of alpha with options o.
func wantQuota(ns string, o Options) *corev1.ResourceQuota {
	o.complete()
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: QuotaName, Namespace: ns, Labels: oursLabels},
		Spec:       corev1.ResourceQuotaSpec{Hard: o.ObjectQuota},
	}
}

// wantLimitRange is the LimitRange of default requests in ns.
func wantLimitRange(ns string, requests corev1.ResourceList) *corev1.LimitRange {
	return &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: LimitRangeName, Namespace: ns, Labels: oursLabels},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type: corev1.LimitTypeContainer, DefaultRequest: requests,
		}}},
	}
}

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
		opts          Options
		objs          []client.Object
		rn            *offloadingv1alpha1.RemoteNamespace
		want          offloadingv1alpha1.RemoteNamespaceStatus
		wantFinalizer bool
		wantRequeue   bool
		// wantNamespace is the namespace spec.remoteNamespace after the
		// reconcile (nil: it must not exist).
		wantNamespace *corev1.Namespace
		wantBinding   *rbacv1.RoleBinding
		// wantPolicies: the namespace holds the ResourceQuota and the
		// LimitRange of tc.opts.
		wantPolicies bool
		wantEvents   []string
	}{
		{
			name:          "DefaultName: namespace and RoleBinding created",
			objs:          []client.Object{tenant("alpha")},
			rn:            replica("web", "web-alpha"),
			want:          status(offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled, "namespace web-alpha is ready for consumer alpha"),
			wantFinalizer: true,
			wantNamespace: namespace("web-alpha", oursPSA, fromWeb),
			wantBinding:   consumerBinding("web-alpha"),
			wantPolicies:  true,
			wantEvents:    []string{"Normal NamespaceCreated created namespace web-alpha"},
		},
		{
			name: "restricted level, other quota and requests",
			opts: Options{PodSecurity: PodSecurityRestricted,
				ObjectQuota:     corev1.ResourceList{corev1.ResourcePods: resource.MustParse("50"), "count/jobs.batch": resource.MustParse("3")},
				DefaultRequests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}},
			objs:          []client.Object{tenant("alpha")},
			rn:            replica("web", "web-alpha"),
			want:          status(offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled, "namespace web-alpha is ready for consumer alpha"),
			wantFinalizer: true,
			wantNamespace: namespace("web-alpha", withPSA(oursLabels, "restricted"), fromWeb),
			wantBinding:   consumerBinding("web-alpha"),
			wantPolicies:  true,
			wantEvents:    []string{"Normal NamespaceCreated created namespace web-alpha"},
		},
		{
			name:          "EnforceSameName with --allow-same-name-namespaces",
			opts:          Options{AllowSameName: true},
			objs:          []client.Object{tenant("alpha")},
			rn:            replica("web", "web"),
			want:          status(offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled, "namespace web is ready for consumer alpha"),
			wantFinalizer: true,
			wantNamespace: namespace("web", oursPSA, fromWeb),
			wantBinding:   consumerBinding("web"),
			wantPolicies:  true,
			wantEvents:    []string{"Normal NamespaceCreated created namespace web"},
		},
		{
			name: "refused: EnforceSameName without --allow-same-name-namespaces",
			objs: []client.Object{tenant("alpha")},
			rn:   replica("web", "web"),
			want: status(offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden,
				`spec.remoteNamespace "web" (EnforceSameName) is not allowed on this provider (it was not started with --allow-same-name-namespaces): ask for "web-alpha" (DefaultName)`),
			wantEvents: []string{`Warning Forbidden spec.remoteNamespace "web" (EnforceSameName) is not allowed on this provider (it was not started with --allow-same-name-namespaces): ask for "web-alpha" (DefaultName)`},
		},
		{
			name:          "EnforceSameName kept without the flag when the namespace already is the consumer's",
			objs:          []client.Object{tenant("alpha"), namespace("web", oursPSA, fromWeb)},
			rn:            replica("web", "web"),
			want:          status(offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled, "namespace web is ready for consumer alpha"),
			wantFinalizer: true,
			wantNamespace: namespace("web", oursPSA, fromWeb),
			wantBinding:   consumerBinding("web"),
			wantPolicies:  true,
		},
		{
			name: "refused: EnforceSameName name of another peer's DefaultName",
			opts: Options{AllowSameName: true},
			objs: []client.Object{tenant("alpha"), tenantOf("gamma")},
			rn:   replica("web-gamma", "web-gamma"),
			want: status(offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden,
				`spec.remoteNamespace "web-gamma" (EnforceSameName) is refused: it reads as the DefaultName of a namespace of another cluster this provider is peered with`),
			wantEvents: []string{`Warning Forbidden spec.remoteNamespace "web-gamma" (EnforceSameName) is refused: it reads as the DefaultName of a namespace of another cluster this provider is peered with`},
		},
		{
			name: "refused: DefaultName that reads as the DefaultName of a peer with a longer ID",
			objs: []client.Object{tenant("alpha"), tenantOf("x-alpha")},
			rn:   replica("web-x", "web-x-alpha"),
			want: status(offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden,
				`spec.remoteNamespace "web-x-alpha" is refused: it also reads as the DefaultName of a namespace of another cluster this provider is peered with, whose cluster ID is longer and keeps such names (rename namespace "web-x")`),
			wantEvents: []string{`Warning Forbidden spec.remoteNamespace "web-x-alpha" is refused: it also reads as the DefaultName of a namespace of another cluster this provider is peered with, whose cluster ID is longer and keeps such names (rename namespace "web-x")`},
		},
		{
			name: "refused: the consumer's bound of remote namespaces",
			opts: Options{MaxNamespacesPerTenant: 2},
			objs: []client.Object{tenant("alpha"),
				namespace("a-alpha", oursPSA, map[string]string{AnnotationSourceNamespace: "a"}),
				namespace("b-alpha", oursPSA, map[string]string{AnnotationSourceNamespace: "b"}, terminating),
				namespace("c-gamma", map[string]string{corev1alpha1.LabelRemoteClusterID: "gamma", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}, nil)},
			rn: replica("web", "web-alpha"),
			want: status(offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonQuotaExceeded,
				"namespace web-alpha is not created: consumer alpha already has 2 remote namespaces on this provider, the most it may have (--max-remote-namespaces-per-tenant=2)"),
			wantRequeue: true,
			wantEvents:  []string{"Warning QuotaExceeded namespace web-alpha is not created: consumer alpha already has 2 remote namespaces on this provider, the most it may have (--max-remote-namespaces-per-tenant=2)"},
		},
		{
			name:          "under the bound: created",
			opts:          Options{MaxNamespacesPerTenant: 2},
			objs:          []client.Object{tenant("alpha"), namespace("a-alpha", oursPSA, map[string]string{AnnotationSourceNamespace: "a"})},
			rn:            replica("web", "web-alpha"),
			want:          status(offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled, "namespace web-alpha is ready for consumer alpha"),
			wantFinalizer: true,
			wantNamespace: namespace("web-alpha", oursPSA, fromWeb),
			wantBinding:   consumerBinding("web-alpha"),
			wantPolicies:  true,
			wantEvents:    []string{"Normal NamespaceCreated created namespace web-alpha"},
		},
		{
			name: "existing namespace: Pod Security labels, quota and LimitRange corrected",
			objs: []client.Object{tenant("alpha"), consumerBinding("web-alpha"),
				namespace("web-alpha", map[string]string{
					corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex,
					"pod-security.kubernetes.io/enforce": "privileged", "pod-security.kubernetes.io/warn-version": "v1.25", "team": "web",
				}, fromWeb),
				&corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: QuotaName, Namespace: "web-alpha"},
					Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1000000")}}},
				&corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: LimitRangeName, Namespace: "web-alpha", Labels: oursLabels}},
			},
			rn:            replica("web", "web-alpha"),
			want:          status(offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled, "namespace web-alpha is ready for consumer alpha"),
			wantFinalizer: true,
			wantNamespace: namespace("web-alpha", func() map[string]string { l := maps.Clone(oursPSA); l["team"] = "web"; return l }(), fromWeb),
			wantBinding:   consumerBinding("web-alpha"),
			wantPolicies:  true,
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
			wantNamespace: namespace("web-alpha", oursPSA, fromWeb),
			wantBinding:   consumerBinding("web-alpha"),
			wantPolicies:  true,
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
			wantNamespace: namespace("web-alpha", oursPSA, fromWeb),
			wantBinding:   consumerBinding("web-alpha"),
			wantPolicies:  true,
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
				WithInterceptorFuncs(countQuotas).
				WithObjects(append(tc.objs, tc.rn)...).Build()
			rec := events.NewFakeRecorder(10)
			opts := tc.opts
			opts.Clock = clocktesting.NewFakePassiveClock(now)
			r := New(c, rec, opts)
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

			var quota *corev1.ResourceQuota
			var limits *corev1.LimitRange
			if tc.wantPolicies {
				quota, limits = wantQuota(remote, tc.opts), wantLimitRange(remote, tc.opts.EffectiveDefaultRequests())
			}
			gotQuota := &corev1.ResourceQuota{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: remote, Name: QuotaName}, gotQuota); err != nil {
				if !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
				gotQuota = nil
			}
			if diff := cmp.Diff(quota, gotQuota, ignoreMeta, cmpopts.IgnoreTypes(metav1.TypeMeta{}, corev1.ResourceQuotaStatus{})); diff != "" {
				t.Errorf("ResourceQuota (-want +got):\n%s", diff)
			}
			gotLimits := &corev1.LimitRange{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: remote, Name: LimitRangeName}, gotLimits); err != nil {
				if !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
				gotLimits = nil
			}
			if diff := cmp.Diff(limits, gotLimits, ignoreMeta, cmpopts.IgnoreTypes(metav1.TypeMeta{})); diff != "" {
				t.Errorf("LimitRange (-want +got):\n%s", diff)
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

// TestPolicies follows a namespace's ResourceQuota and LimitRange: the
// consumer is granted access only once the quota is counted, both are
// recreated after their deletion, and the tenant namespace gets its quota.
func TestPolicies(t *testing.T) {
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	c := fake.NewClientBuilder().WithScheme(scheme(t)).
		WithStatusSubresource(&offloadingv1alpha1.RemoteNamespace{}).
		WithObjects(tenant("alpha"), replica("web", "web-alpha")).Build()
	r := New(c, events.NewFakeRecorder(10), Options{Clock: clocktesting.NewFakePassiveClock(now), MaxNamespacesPerTenant: 7,
		PodCIDR:           netip.MustParsePrefix("10.200.0.0/16"),
		TenantObjectQuota: corev1.ResourceList{ResourceRemoteNamespaces: resource.MustParse("14"), ResourceResourceSlices: resource.MustParse("20")}})
	req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: tenantNS, Name: "web"}}
	reconcileOnce := func() offloadingv1alpha1.RemoteNamespaceStatus {
		t.Helper()
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatalf("Reconcile() error = %v", err)
		}
		got := &offloadingv1alpha1.RemoteNamespace{}
		if err := c.Get(ctx, req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		return got.Status
	}

	// The quota is not counted yet: no RoleBinding.
	want := status(offloadingv1alpha1.RemoteNamespacePending, offloadingv1alpha1.ReasonPending,
		"namespace web-alpha is created; waiting for the cluster to count its ResourceQuota annex-tenant-quota before the consumer may write there")
	if diff := cmp.Diff(want, reconcileOnce()); diff != "" {
		t.Errorf("status before the quota is counted (-want +got):\n%s", diff)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "web-alpha", Name: RoleBindingName}, &rbacv1.RoleBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("RoleBinding before the quota is counted: err = %v, want NotFound", err)
	}

	// Counted: Ready.
	q := &corev1.ResourceQuota{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "web-alpha", Name: QuotaName}, q); err != nil {
		t.Fatal(err)
	}
	count(q)
	if err := c.Update(ctx, q); err != nil {
		t.Fatal(err)
	}
	want = status(offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled, "namespace web-alpha is ready for consumer alpha")
	if diff := cmp.Diff(want, reconcileOnce()); diff != "" {
		t.Errorf("status once the quota is counted (-want +got):\n%s", diff)
	}

	// Deleted: recreated. The consumer keeps its access meanwhile.
	for _, o := range []client.Object{
		&corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "web-alpha", Name: QuotaName}},
		&corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Namespace: "web-alpha", Name: LimitRangeName}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "web-alpha", Name: NetworkPolicyName}},
	} {
		if err := c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(want, reconcileOnce()); diff != "" {
		t.Errorf("status after the quota's deletion (-want +got):\n%s", diff)
	}
	gotQuota := &corev1.ResourceQuota{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "web-alpha", Name: QuotaName}, gotQuota); err != nil {
		t.Fatalf("ResourceQuota after its deletion: %v", err)
	}
	if diff := cmp.Diff(DefaultObjectQuota(), gotQuota.Spec.Hard); diff != "" {
		t.Errorf("recreated quota (-want +got):\n%s", diff)
	}
	gotLimits := &corev1.LimitRange{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "web-alpha", Name: LimitRangeName}, gotLimits); err != nil {
		t.Fatalf("LimitRange after its deletion: %v", err)
	}
	if diff := cmp.Diff(wantLimitRange("web-alpha", DefaultRequests()), gotLimits, ignoreMeta, cmpopts.IgnoreTypes(metav1.TypeMeta{})); diff != "" {
		t.Errorf("recreated LimitRange (-want +got):\n%s", diff)
	}

	gotPolicy := &networkingv1.NetworkPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "web-alpha", Name: NetworkPolicyName}, gotPolicy); err != nil {
		t.Fatalf("NetworkPolicy after its deletion: %v", err)
	}
	if diff := cmp.Diff(desiredNetworkPolicy("web-alpha", "alpha", r.opts.PodCIDR, []netip.Addr{}).Spec, gotPolicy.Spec); diff != "" {
		t.Errorf("recreated NetworkPolicy (-want +got):\n%s", diff)
	}

	// The tenant namespace's quota, when the provider asks for one.
	tenantQuota := &corev1.ResourceQuota{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: QuotaName}, tenantQuota); err != nil {
		t.Fatalf("tenant namespace's ResourceQuota: %v", err)
	}
	wantHard := corev1.ResourceList{ResourceRemoteNamespaces: resource.MustParse("14"), ResourceResourceSlices: resource.MustParse("20")}
	if diff := cmp.Diff(wantHard, tenantQuota.Spec.Hard); diff != "" {
		t.Errorf("tenant namespace's quota (-want +got):\n%s", diff)
	}

	// No default requests: the LimitRange goes.
	r.opts.DefaultRequests = corev1.ResourceList{}
	reconcileOnce()
	if err := c.Get(ctx, client.ObjectKey{Namespace: "web-alpha", Name: LimitRangeName}, &corev1.LimitRange{}); !apierrors.IsNotFound(err) {
		t.Errorf("LimitRange without default requests: err = %v, want NotFound", err)
	}
}

// TestRecount: a quota the quota controller counted without the usage of
// some kinds (it did not know them yet) is created again, and the consumer
// is not granted access meanwhile.
func TestRecount(t *testing.T) {
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	withShadowPods := Options{ObjectQuota: corev1.ResourceList{ResourceShadowPods: resource.MustParse("10000")}}
	partial := wantQuota("web-alpha", withShadowPods)
	count(partial)
	delete(partial.Status.Used, ResourceShadowPods)
	c := fake.NewClientBuilder().WithScheme(scheme(t)).
		WithStatusSubresource(&offloadingv1alpha1.RemoteNamespace{}).
		WithObjects(tenant("alpha"), namespace("web-alpha", oursPSA, fromWeb), partial, replica("web", "web-alpha")).Build()
	withShadowPods.Clock = clocktesting.NewFakePassiveClock(now)
	r := New(c, events.NewFakeRecorder(10), withShadowPods)
	req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: tenantNS, Name: "web"}}
	res, err := r.Reconcile(ctx, req)
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("Reconcile() = %+v, %v; want a requeue", res, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(partial), &corev1.ResourceQuota{}); !apierrors.IsNotFound(err) {
		t.Errorf("quota counted in part: err = %v, want NotFound (deleted to be created again)", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "web-alpha", Name: RoleBindingName}, &rbacv1.RoleBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("RoleBinding: err = %v, want NotFound", err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	q := &corev1.ResourceQuota{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(partial), q); err != nil {
		t.Fatalf("quota not created again: %v", err)
	}
}
