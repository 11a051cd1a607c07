// Package remotenamespace owns the provider side of namespace offloading: it
// turns the RemoteNamespaces that consumers replicate into their tenant
// namespaces ("annex-tenant-<consumer>") into real namespaces on this
// cluster, each with the RoleBinding "annex-consumer" that grants the
// consumer's ServiceAccount (and only it) the ClusterRole
// "annex-remote-consumer" in that namespace.
//
// It acts only on replicas (objects carrying the replicator's
// annex.dev/origin-namespace annotation) in a namespace
// "annex-tenant-<C>" labelled annex.dev/remote-cluster-id=<C>; C is the
// consumer. Requests are untrusted: spec.remoteNamespace must be
// "<sourceNamespace>-<C>" or "<sourceNamespace>", a valid DNS label, not
// "default" and not "kube-*" or "annex-*", and a namespace of that name that
// already exists must carry annex.dev/remote-cluster-id=<C>,
// annex.dev/managed-by=annex and annex.dev/source-namespace=<sourceNamespace>.
// Anything else is refused (status Failed, reason Forbidden, a Warning
// Event) and no existing namespace is ever modified or deleted.
//
// A finalizer ("annex.dev/remote-namespace") is added to the replica just
// before its namespace is created; when the replica is deleted the namespace
// (and everything in it) is deleted, and the finalizer is removed once the
// namespace's deletion has started. Kubernetes finishes it (nothing new can
// be created in a terminating namespace, and its pods keep their grace
// periods); waiting for the contents too would make every unoffload and
// graceful unpeer wait out the namespace controller's estimate, the pods'
// grace period (30 s by default), even when the pods are gone sooner.
package remotenamespace

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/replicator"
)

// +kubebuilder:rbac:groups=offloading.annex.dev,resources=remotenamespaces,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=remotenamespaces/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=remotenamespaces/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=annex-remote-consumer
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

const (
	// Finalizer is held on a replicated RemoteNamespace until the deletion
	// of its namespace on this provider has started.
	Finalizer = "annex.dev/remote-namespace"

	// AnnotationSourceNamespace, on a remote namespace, names the consumer's
	// namespace it was created for.
	AnnotationSourceNamespace = "annex.dev/source-namespace"

	// ClusterRoleName is the ClusterRole (config/rbac/remote_consumer_clusterrole.yaml)
	// bound to the consumer in each of its remote namespaces.
	ClusterRoleName = "annex-remote-consumer"

	// RoleBindingName is the RoleBinding, in each remote namespace, that
	// binds ClusterRoleName to the consumer's ServiceAccount.
	RoleBindingName = corev1alpha1.ConsumerServiceAccountName

	// DefaultPendingRequeue is how soon a RemoteNamespace is looked at again
	// while its namespace is being deleted.
	DefaultPendingRequeue = 2 * time.Second

	// indexRemoteNamespace indexes RemoteNamespaces by spec.remoteNamespace.
	indexRemoteNamespace = "spec.remoteNamespace"
)

// Options tune the reconciler. The zero value means the defaults.
type Options struct {
	// Clock stamps condition transition times (default: the real clock).
	Clock clock.PassiveClock
	// PendingRequeue is how soon to look again while a namespace is being
	// deleted (DefaultPendingRequeue).
	PendingRequeue time.Duration
}

// Reconciler creates and deletes the namespaces that consumers ask for.
type Reconciler struct {
	client   client.Client
	recorder events.EventRecorder
	opts     Options
}

// New returns the reconciler. c reads and writes RemoteNamespaces,
// Namespaces and RoleBindings; recorder receives a Warning Event for every
// refusal and a Normal Event when a namespace is created or deleted.
func New(c client.Client, recorder events.EventRecorder, opts Options) *Reconciler {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.PendingRequeue <= 0 {
		opts.PendingRequeue = DefaultPendingRequeue
	}
	return &Reconciler{client: c, recorder: recorder, opts: opts}
}

// CacheByObject restricts the manager's cache to what this controller needs
// of the kinds it watches but does not own: only RoleBindings labelled
// annex.dev/managed-by=annex. Passing it to the manager's cache options is
// optional (the controller works on a full cache) and affects every reader of
// the manager's cache.
func CacheByObject() map[client.Object]cache.ByObject {
	managed, _ := labels.NewRequirement(corev1alpha1.LabelManagedBy, selection.Equals, []string{corev1alpha1.ManagedByAnnex})
	return map[client.Object]cache.ByObject{
		&rbacv1.RoleBinding{}: {Label: labels.NewSelector().Add(*managed)},
	}
}

// Reconcile answers one RemoteNamespace replica.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	rn := &offloadingv1alpha1.RemoteNamespace{}
	if err := r.client.Get(ctx, req.NamespacedName, rn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	consumer, ok := strings.CutPrefix(rn.Namespace, corev1alpha1.TenantNamespacePrefix)
	if !replicator.IsReplica(rn) || !ok || consumer == "" {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("consumer", consumer, "remoteNamespace", rn.Spec.RemoteNamespace)
	ctx = ctrl.LoggerInto(ctx, log)
	if !rn.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, rn, consumer)
	}

	tenant := &corev1.Namespace{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: rn.Namespace}, tenant); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if tenant.Labels[corev1alpha1.LabelRemoteClusterID] != consumer {
		log.V(1).Info("Not a tenant namespace of this consumer, ignoring", "namespace", rn.Namespace)
		return ctrl.Result{}, nil
	}
	if msg := ValidateRequest(rn.Spec.SourceNamespace, rn.Spec.RemoteNamespace, consumer); msg != "" {
		return ctrl.Result{}, r.setStatus(ctx, rn, offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden, msg)
	}

	ns := &corev1.Namespace{}
	err := r.client.Get(ctx, client.ObjectKey{Name: rn.Spec.RemoteNamespace}, ns)
	switch {
	case apierrors.IsNotFound(err):
		// The finalizer goes on first, so a namespace is never left behind.
		if err := r.setFinalizer(ctx, rn, true); err != nil {
			return ctrl.Result{}, err
		}
		ns = desiredNamespace(rn.Spec.RemoteNamespace, consumer, rn.Spec.SourceNamespace)
		if err := r.client.Create(ctx, ns); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Our cache is behind: look again once it has caught up.
				return ctrl.Result{RequeueAfter: r.opts.PendingRequeue}, nil
			}
			if terminal(err) {
				return ctrl.Result{}, r.setStatus(ctx, rn, offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonCreationFailed,
					fmt.Sprintf("cannot create namespace %s: %v", rn.Spec.RemoteNamespace, err))
			}
			return ctrl.Result{}, fmt.Errorf("create namespace %s: %w", rn.Spec.RemoteNamespace, err)
		}
		log.Info("Created remote namespace")
		r.recorder.Eventf(rn, nil, corev1.EventTypeNormal, "NamespaceCreated", "Create", "created namespace %s", ns.Name)
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get namespace %s: %w", rn.Spec.RemoteNamespace, err)
	default:
		if ours, msg := Owner(ns, consumer, rn.Spec.SourceNamespace); !ours {
			return ctrl.Result{}, r.setStatus(ctx, rn, offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden, msg)
		}
		if err := r.setFinalizer(ctx, rn, true); err != nil {
			return ctrl.Result{}, err
		}
		if !ns.DeletionTimestamp.IsZero() {
			err := r.setStatus(ctx, rn, offloadingv1alpha1.RemoteNamespacePending, offloadingv1alpha1.ReasonPending,
				fmt.Sprintf("namespace %s is being deleted; it is created again once it is gone", ns.Name))
			return ctrl.Result{RequeueAfter: r.opts.PendingRequeue}, err
		}
	}

	if err := r.ensureRoleBinding(ctx, ns.Name, consumer); err != nil {
		if terminal(err) {
			// Most likely the agent may not bind the ClusterRole: say so, and retry.
			serr := r.setStatus(ctx, rn, offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonCreationFailed,
				fmt.Sprintf("cannot grant the consumer access to namespace %s: %v", ns.Name, err))
			return ctrl.Result{}, errors.Join(err, serr)
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.setStatus(ctx, rn, offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled,
		fmt.Sprintf("namespace %s is ready for consumer %s", ns.Name, consumer))
}

// finalize deletes the namespace of a deleted replica, waits until it is
// gone and then removes the finalizer. A namespace that is not the replica's
// (a refused request) is left alone.
func (r *Reconciler) finalize(ctx context.Context, rn *offloadingv1alpha1.RemoteNamespace, consumer string) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(rn, Finalizer) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	ns := &corev1.Namespace{}
	err := r.client.Get(ctx, client.ObjectKey{Name: rn.Spec.RemoteNamespace}, ns)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get namespace %s: %w", rn.Spec.RemoteNamespace, err)
	default:
		if ours, _ := Owner(ns, consumer, rn.Spec.SourceNamespace); ours {
			if ns.DeletionTimestamp.IsZero() {
				uid := ns.UID
				if err := r.client.Delete(ctx, ns, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
					return ctrl.Result{}, fmt.Errorf("delete namespace %s: %w", ns.Name, err)
				}
				log.Info("Deleting remote namespace")
				r.recorder.Eventf(rn, nil, corev1.EventTypeNormal, "NamespaceDeleted", "Delete", "deleting namespace %s", ns.Name)
			}
		}
	}
	log.Info("Remote namespace gone or terminating, removing finalizer")
	return ctrl.Result{}, r.setFinalizer(ctx, rn, false)
}

// setFinalizer adds (or removes) the finalizer, writing only on change.
func (r *Reconciler) setFinalizer(ctx context.Context, rn *offloadingv1alpha1.RemoteNamespace, add bool) error {
	orig := rn.DeepCopy()
	var changed bool
	if add {
		changed = controllerutil.AddFinalizer(rn, Finalizer)
	} else {
		changed = controllerutil.RemoveFinalizer(rn, Finalizer)
	}
	if !changed {
		return nil
	}
	err := r.client.Patch(ctx, rn, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) && !add {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update finalizer: %w", err)
	}
	return nil
}

// ensureRoleBinding creates or repairs the consumer's RoleBinding in ns.
func (r *Reconciler) ensureRoleBinding(ctx context.Context, ns, consumer string) error {
	want := desiredRoleBinding(ns, consumer)
	got := &rbacv1.RoleBinding{}
	err := r.client.Get(ctx, client.ObjectKeyFromObject(want), got)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create RoleBinding %s/%s: %w", ns, want.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("get RoleBinding %s/%s: %w", ns, want.Name, err)
	}
	if got.RoleRef != want.RoleRef {
		// roleRef is immutable: replace the binding.
		uid := got.UID
		if err := r.client.Delete(ctx, got, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replace RoleBinding %s/%s: %w", ns, want.Name, err)
		}
		if err := r.client.Create(ctx, want); err != nil {
			return fmt.Errorf("create RoleBinding %s/%s: %w", ns, want.Name, err)
		}
		return nil
	}
	if apiequality.Semantic.DeepEqual(got.Subjects, want.Subjects) && hasLabels(got.Labels, want.Labels) {
		return nil
	}
	got.Subjects = want.Subjects
	if got.Labels == nil {
		got.Labels = map[string]string{}
	}
	maps.Copy(got.Labels, want.Labels)
	if err := r.client.Update(ctx, got); err != nil {
		return fmt.Errorf("update RoleBinding %s/%s: %w", ns, want.Name, err)
	}
	return nil
}

// setStatus writes phase, message and the Ready condition, and records an
// Event when the answer changes to Failed. It writes only on change.
func (r *Reconciler) setStatus(ctx context.Context, rn *offloadingv1alpha1.RemoteNamespace, phase offloadingv1alpha1.RemoteNamespacePhase, reason, msg string) error {
	orig := rn.DeepCopy()
	status := metav1.ConditionFalse
	if phase == offloadingv1alpha1.RemoteNamespaceReady {
		status = metav1.ConditionTrue
	}
	rn.Status.Phase = phase
	rn.Status.Message = ""
	if phase != offloadingv1alpha1.RemoteNamespaceReady {
		rn.Status.Message = msg
	}
	meta.SetStatusCondition(&rn.Status.Conditions, metav1.Condition{
		Type:               offloadingv1alpha1.ConditionReady,
		Status:             status,
		ObservedGeneration: rn.Generation,
		LastTransitionTime: metav1.NewTime(r.opts.Clock.Now()),
		Reason:             reason,
		Message:            msg,
	})
	if apiequality.Semantic.DeepEqual(orig.Status, rn.Status) {
		return nil
	}
	if err := r.client.Status().Patch(ctx, rn, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	if phase == offloadingv1alpha1.RemoteNamespaceFailed {
		ctrl.LoggerFrom(ctx).Info("Refused RemoteNamespace", "reason", reason, "message", msg)
		r.recorder.Eventf(rn, nil, corev1.EventTypeWarning, reason, "Refuse", "%s", msg)
	}
	return nil
}

// desiredNamespace is the remote namespace for source of consumer.
func desiredNamespace(name, consumer, source string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: consumer,
			corev1alpha1.LabelManagedBy:       corev1alpha1.ManagedByAnnex,
		},
		Annotations: map[string]string{AnnotationSourceNamespace: source},
	}}
}

// desiredRoleBinding grants consumer's ServiceAccount the ClusterRole
// ClusterRoleName in ns.
func desiredRoleBinding(ns, consumer string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name:      RoleBindingName,
			Namespace: ns,
			Labels: map[string]string{
				corev1alpha1.LabelRemoteClusterID: consumer,
				corev1alpha1.LabelManagedBy:       corev1alpha1.ManagedByAnnex,
			},
		},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleName},
		Subjects: []rbacv1.Subject{{
			Kind:      rbacv1.ServiceAccountKind,
			Name:      corev1alpha1.ConsumerServiceAccountName,
			Namespace: corev1alpha1.TenantNamespaceName(consumer),
		}},
	}
}

// hasLabels reports whether got carries every label of want.
func hasLabels(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// terminal reports whether err is an API answer that retrying the same
// request cannot change.
func terminal(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)
}

// SetupWithManager registers the controller "remotenamespace" on mgr, with a
// field index of RemoteNamespaces by spec.remoteNamespace. Besides changes of
// the replicas it answers, it is triggered by every change of a namespace
// (its replicas are looked up by name: a refused request is retried when the
// namespace in the way disappears, a deleted replica's finalizer is removed
// when its namespace is gone) and of a RoleBinding "annex-consumer".
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &offloadingv1alpha1.RemoteNamespace{}, indexRemoteNamespace,
		func(o client.Object) []string {
			rn, ok := o.(*offloadingv1alpha1.RemoteNamespace)
			if !ok || rn.Spec.RemoteNamespace == "" {
				return nil
			}
			return []string{rn.Spec.RemoteNamespace}
		})
	if err != nil {
		return fmt.Errorf("index RemoteNamespaces: %w", err)
	}
	isReplica := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return replicator.IsReplica(o) && strings.HasPrefix(o.GetNamespace(), corev1alpha1.TenantNamespacePrefix)
	})
	isConsumerBinding := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetName() == RoleBindingName && o.GetLabels()[corev1alpha1.LabelManagedBy] == corev1alpha1.ManagedByAnnex
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("remotenamespace").
		For(&offloadingv1alpha1.RemoteNamespace{}, builder.WithPredicates(isReplica)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.requestsFor(ctx, o.GetName())
		})).
		Watches(&rbacv1.RoleBinding{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.requestsFor(ctx, o.GetNamespace())
		}), builder.WithPredicates(isConsumerBinding)).
		Complete(r)
}

// requestsFor returns the replicas that ask for namespace name.
func (r *Reconciler) requestsFor(ctx context.Context, name string) []reconcile.Request {
	list := &offloadingv1alpha1.RemoteNamespaceList{}
	if err := r.client.List(ctx, list, client.MatchingFields{indexRemoteNamespace: name}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list RemoteNamespaces", "remoteNamespace", name)
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if rn := &list.Items[i]; replicator.IsReplica(rn) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rn)})
		}
	}
	return reqs
}
