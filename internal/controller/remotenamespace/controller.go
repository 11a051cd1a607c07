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
// "<sourceNamespace>-<C>" (DefaultName) or, only when the agent runs with
// --allow-same-name-namespaces, "<sourceNamespace>" (EnforceSameName); a
// valid DNS label, not "default" and not "kube-*" or "annex-*"; and a
// namespace of that name that already exists must carry
// annex.dev/remote-cluster-id=<C>, annex.dev/managed-by=annex and
// annex.dev/source-namespace=<sourceNamespace>. A name is given out only if
// it does not also read as another peer's DefaultName (see ValidateNewName),
// and only while C has fewer remote namespaces than
// --max-remote-namespaces-per-tenant. Anything else is refused (status
// Failed, reason Forbidden or QuotaExceeded, a Warning Event) and no
// existing namespace is ever modified or deleted.
//
// Every remote namespace is kept with (recreated when deleted, corrected
// when changed):
//   - the Pod Security Admission labels enforce, warn and audit at the level
//     of --tenant-pod-security (baseline by default), version latest, so the
//     API server refuses pods beyond that level whoever creates them;
//   - the ResourceQuota "annex-tenant-quota" of object counts
//     (--tenant-object-quota; the consumer is granted access only once the
//     cluster's quota controller has counted it, and a quota it counted in
//     part, not knowing Annex's kinds yet, is created again: see
//     tenantquota.Recount);
//   - the LimitRange "annex-tenant-defaults" of default container requests
//     (--tenant-default-requests; no default limits).
//
// With a tenant budget (Options.ShareQuota), the consumer is granted access
// only once the namespace's share of it, the ResourceQuota the tenantquota
// controller keeps, is counted too.
//
// Each tenant namespace that holds a request also gets a ResourceQuota
// "annex-tenant-quota" counting RemoteNamespaces and ResourceSlices.
// Consumers have no access to ResourceQuotas or LimitRanges.
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
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/fairqueue"
	"github.com/annexhq/annex/internal/controller/predicates"
	"github.com/annexhq/annex/internal/controller/replicator"
	"github.com/annexhq/annex/internal/controller/tenantquota"
)

// +kubebuilder:rbac:groups=offloading.annex.dev,resources=remotenamespaces,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=remotenamespaces/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=remotenamespaces/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=resourcequotas,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=limitranges,verbs=get;list;watch;create;update;patch;delete
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

	// ClusterRoleName is the ClusterRole (charts/annex/templates/rbac/remote_consumer_clusterrole.yaml)
	// bound to the consumer in each of its remote namespaces.
	ClusterRoleName = "annex-remote-consumer"

	// RoleBindingName is the RoleBinding, in each remote namespace, that
	// binds ClusterRoleName to the consumer's ServiceAccount.
	RoleBindingName = corev1alpha1.ConsumerServiceAccountName

	// QuotaName is the ResourceQuota of object counts kept in every remote
	// namespace and in every tenant namespace that holds a request.
	QuotaName = "annex-tenant-quota"

	// LimitRangeName is the LimitRange of default container requests kept
	// in every remote namespace.
	LimitRangeName = "annex-tenant-defaults"

	// indexRemoteNamespace indexes RemoteNamespaces by spec.remoteNamespace.
	indexRemoteNamespace = "spec.remoteNamespace"
)

// The Pod Security Admission labels of remote namespaces.
const (
	labelPodSecurityEnforce        = "pod-security.kubernetes.io/enforce"
	labelPodSecurityEnforceVersion = "pod-security.kubernetes.io/enforce-version"
	labelPodSecurityWarn           = "pod-security.kubernetes.io/warn"
	labelPodSecurityWarnVersion    = "pod-security.kubernetes.io/warn-version"
	labelPodSecurityAudit          = "pod-security.kubernetes.io/audit"
	labelPodSecurityAuditVersion   = "pod-security.kubernetes.io/audit-version"
)

// Reconciler creates and deletes the namespaces that consumers ask for.
type Reconciler struct {
	client   client.Client
	recorder events.EventRecorder
	opts     Options
}

// New returns the reconciler. c reads and writes RemoteNamespaces,
// Namespaces, RoleBindings, ResourceQuotas and LimitRanges; recorder
// receives a Warning Event for every refusal and a Normal Event when a
// namespace is created or deleted.
func New(c client.Client, recorder events.EventRecorder, opts Options) *Reconciler {
	opts.complete()
	if opts.Reader == nil {
		opts.Reader = c
	}
	return &Reconciler{client: c, recorder: recorder, opts: opts}
}

// CacheByObject restricts the manager's cache to what this controller needs
// of the kinds it watches but does not own: only RoleBindings,
// ResourceQuotas, LimitRanges and NetworkPolicies labelled
// annex.dev/managed-by=annex.
// Passing it to the manager's cache options is optional (the controller
// works on a full cache) and affects every reader of the manager's cache.
func CacheByObject() map[client.Object]cache.ByObject {
	managed, _ := labels.NewRequirement(corev1alpha1.LabelManagedBy, selection.Equals, []string{corev1alpha1.ManagedByAnnex})
	sel := labels.NewSelector().Add(*managed)
	return map[client.Object]cache.ByObject{
		&rbacv1.RoleBinding{}:         {Label: sel},
		&corev1.ResourceQuota{}:       {Label: sel},
		&corev1.LimitRange{}:          {Label: sel},
		&networkingv1.NetworkPolicy{}: {Label: sel},
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
	// recheck is how soon a quota counted in part is looked at again.
	var recheck time.Duration
	if tenant.DeletionTimestamp.IsZero() && len(r.opts.TenantObjectQuota) > 0 {
		q, err := r.ensureQuota(ctx, rn.Namespace, consumer, r.opts.TenantObjectQuota)
		if err == nil {
			recheck, err = tenantquota.Recount(ctx, r.client, q, r.opts.Clock)
		}
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	if msg := ValidateRequest(rn.Spec.SourceNamespace, rn.Spec.RemoteNamespace, consumer); msg != "" {
		return ctrl.Result{}, r.setStatus(ctx, rn, offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden, msg)
	}

	ns := &corev1.Namespace{}
	err := r.client.Get(ctx, client.ObjectKey{Name: rn.Spec.RemoteNamespace}, ns)
	switch {
	case apierrors.IsNotFound(err):
		if res, refused, err := r.admitNew(ctx, rn, consumer); refused || err != nil {
			return res, err
		}
		// The finalizer goes on first, so a namespace is never left behind.
		if err := r.setFinalizer(ctx, rn, true); err != nil {
			return ctrl.Result{}, err
		}
		ns = r.desiredNamespace(rn.Spec.RemoteNamespace, consumer, rn.Spec.SourceNamespace)
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
		log.Info("Created remote namespace", "podSecurity", r.opts.PodSecurity)
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
		if err := r.ensureNamespaceLabels(ctx, ns, consumer); err != nil {
			return ctrl.Result{}, err
		}
	}

	q, err := r.ensureQuota(ctx, ns.Name, consumer, r.opts.ObjectQuota)
	if err != nil {
		return ctrl.Result{}, err
	}
	if again, err := tenantquota.Recount(ctx, r.client, q, r.opts.Clock); err != nil {
		return ctrl.Result{}, err
	} else if again > 0 && (recheck == 0 || again < recheck) {
		recheck = again
	}
	if err := r.ensureLimitRange(ctx, ns.Name, consumer); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.ensureNetworkPolicy(ctx, ns.Name, consumer); err != nil {
		return ctrl.Result{}, err
	}
	if wait, name, err := r.awaitQuotas(ctx, q); err != nil || wait {
		if err == nil {
			err = r.setStatus(ctx, rn, offloadingv1alpha1.RemoteNamespacePending, offloadingv1alpha1.ReasonPending,
				fmt.Sprintf("namespace %s is created; waiting for the cluster to count its ResourceQuota %s before the consumer may write there", ns.Name, name))
		}
		return ctrl.Result{RequeueAfter: r.opts.PendingRequeue}, err
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
	return ctrl.Result{RequeueAfter: recheck}, r.setStatus(ctx, rn, offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.ReasonReconciled,
		fmt.Sprintf("namespace %s is ready for consumer %s", ns.Name, consumer))
}

// admitNew decides whether the namespace rn asks for, which does not exist
// yet, may be created: its name (ValidateNewName, against this provider's
// peers) and the consumer's bound of remote namespaces. A refusal is written
// to rn's status (refused is true).
func (r *Reconciler) admitNew(ctx context.Context, rn *offloadingv1alpha1.RemoteNamespace, consumer string) (res ctrl.Result, refused bool, err error) {
	tenants := &corev1.NamespaceList{}
	if err := r.client.List(ctx, tenants, client.MatchingLabels{corev1alpha1.LabelTenant: "true"}); err != nil {
		return ctrl.Result{}, false, fmt.Errorf("list tenant namespaces: %w", err)
	}
	var peers []string
	for _, t := range tenants.Items {
		if id := t.Labels[corev1alpha1.LabelRemoteClusterID]; id != "" {
			peers = append(peers, id)
		}
	}
	if msg := ValidateNewName(rn.Spec.SourceNamespace, rn.Spec.RemoteNamespace, consumer, r.opts.AllowSameName, peers); msg != "" {
		return ctrl.Result{}, true, r.setStatus(ctx, rn, offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonForbidden, msg)
	}

	// The cache may miss the latest creations, the API server's answer
	// (asked only when the cache sees room) does not.
	n, err := r.countNamespaces(ctx, r.client, &corev1.NamespaceList{}, consumer)
	if err == nil && n < r.opts.MaxNamespacesPerTenant {
		names := &metav1.PartialObjectMetadataList{}
		names.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
		n, err = r.countNamespaces(ctx, r.opts.Reader, names, consumer)
	}
	if err != nil {
		return ctrl.Result{}, false, err
	}
	if n >= r.opts.MaxNamespacesPerTenant {
		err := r.setStatus(ctx, rn, offloadingv1alpha1.RemoteNamespaceFailed, offloadingv1alpha1.ReasonQuotaExceeded,
			fmt.Sprintf("namespace %s is not created: consumer %s already has %d remote namespaces on this provider, the most it may have (--max-remote-namespaces-per-tenant=%d)",
				rn.Spec.RemoteNamespace, consumer, n, r.opts.MaxNamespacesPerTenant))
		// Looked at again: room is made by namespaces that go away.
		return ctrl.Result{RequeueAfter: r.opts.LimitRequeue}, true, err
	}
	return ctrl.Result{}, false, nil
}

// countNamespaces counts the remote namespaces of consumer that c sees,
// those being deleted included, listing them into list (Namespaces from the
// cache, which holds them whole; only their metadata from the API server).
func (r *Reconciler) countNamespaces(ctx context.Context, c client.Reader, list client.ObjectList, consumer string) (int, error) {
	sel := labels.SelectorFromSet(labels.Set{corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex})
	notTenant, _ := labels.NewRequirement(corev1alpha1.LabelTenant, selection.DoesNotExist, nil)
	if err := c.List(ctx, list, client.MatchingLabelsSelector{Selector: sel.Add(*notTenant)}); err != nil {
		return 0, fmt.Errorf("count the remote namespaces of %s: %w", consumer, err)
	}
	return meta.LenList(list), nil
}

// ensureNamespaceLabels adds or corrects the Pod Security Admission labels
// of the consumer's existing namespace ns.
func (r *Reconciler) ensureNamespaceLabels(ctx context.Context, ns *corev1.Namespace, consumer string) error {
	want := r.desiredNamespace(ns.Name, consumer, "").Labels
	if hasLabels(ns.Labels, want) {
		return nil
	}
	orig := ns.DeepCopy()
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	maps.Copy(ns.Labels, want)
	if err := r.client.Patch(ctx, ns, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("label namespace %s: %w", ns.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Corrected the Pod Security labels of the remote namespace", "podSecurity", r.opts.PodSecurity)
	return nil
}

// ensureQuota creates or corrects the ResourceQuota QuotaName in ns with
// the object counts hard, and returns it as it is now.
func (r *Reconciler) ensureQuota(ctx context.Context, ns, consumer string, hard corev1.ResourceList) (*corev1.ResourceQuota, error) {
	want := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: QuotaName, Namespace: ns, Labels: managedLabels(consumer)},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard.DeepCopy()},
	}
	got := &corev1.ResourceQuota{}
	created, err := r.ensure(ctx, "ResourceQuota", want, got, func() bool {
		if apiequality.Semantic.DeepEqual(got.Spec, want.Spec) && hasLabels(got.Labels, want.Labels) {
			return false
		}
		got.Spec = *want.Spec.DeepCopy()
		got.Labels = withLabels(got.Labels, want.Labels)
		return true
	})
	if created {
		return want, err
	}
	return got, err
}

// ensureLimitRange creates or corrects the LimitRange LimitRangeName in ns
// (or deletes it when there are no default requests). It sets default
// requests only: a default limit would throttle or kill containers that ask
// for nothing, which they do not expect; the quota that matters, the
// consumer's grant, counts requests.
func (r *Reconciler) ensureLimitRange(ctx context.Context, ns, consumer string) error {
	want := &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: LimitRangeName, Namespace: ns, Labels: managedLabels(consumer)},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type:           corev1.LimitTypeContainer,
			DefaultRequest: r.opts.DefaultRequests.DeepCopy(),
		}}},
	}
	got := &corev1.LimitRange{}
	if len(r.opts.DefaultRequests) == 0 {
		err := r.client.Get(ctx, client.ObjectKeyFromObject(want), got)
		if err != nil {
			return client.IgnoreNotFound(err)
		}
		uid := got.UID
		if err := r.client.Delete(ctx, got, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete LimitRange %s/%s: %w", ns, LimitRangeName, err)
		}
		return nil
	}
	_, err := r.ensure(ctx, "LimitRange", want, got, func() bool {
		if apiequality.Semantic.DeepEqual(got.Spec, want.Spec) && hasLabels(got.Labels, want.Labels) {
			return false
		}
		got.Spec = *want.Spec.DeepCopy()
		got.Labels = withLabels(got.Labels, want.Labels)
		return true
	})
	return err
}

// ensure creates want (of kind), or, when an object of its name exists (read
// into got), corrects it with fix, which reports whether it changed got. It
// reports whether it created want.
func (r *Reconciler) ensure(ctx context.Context, kind string, want, got client.Object, fix func() bool) (bool, error) {
	key := client.ObjectKeyFromObject(want)
	err := r.client.Get(ctx, key, got)
	switch {
	case apierrors.IsNotFound(err):
		err = r.client.Create(ctx, want)
		if err == nil {
			ctrl.LoggerFrom(ctx).Info("Created "+kind, "namespace", key.Namespace, "name", key.Name)
			return true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("create %s %s: %w", kind, key, err)
		}
		// One the cache does not hold: not labelled as ours (the cache
		// holds only those) or just created. Read it past the cache.
		if err := r.opts.Reader.Get(ctx, key, got); err != nil {
			return false, fmt.Errorf("get %s %s: %w", kind, key, err)
		}
	case err != nil:
		return false, fmt.Errorf("get %s %s: %w", kind, key, err)
	}
	if !fix() {
		return false, nil
	}
	if err := r.client.Update(ctx, got); err != nil {
		return false, fmt.Errorf("correct %s %s: %w", kind, key, err)
	}
	ctrl.LoggerFrom(ctx).Info("Corrected "+kind, "namespace", key.Namespace, "name", key.Name)
	return false, nil
}

// awaitQuotas reports whether the consumer must wait before it is granted
// access to the namespace of q, its ResourceQuota QuotaName as it is now,
// and the name of the quota it waits for: the cluster's quota controller
// has not counted q, or (with Options.ShareQuota) the namespace's share of
// the consumer's budget, yet (until it has, the API server refuses every
// object the quota counts), and the consumer has no access yet. A consumer
// that has access keeps it meanwhile.
func (r *Reconciler) awaitQuotas(ctx context.Context, q *corev1.ResourceQuota) (bool, string, error) {
	name := QuotaName
	ready := tenantquota.Counted(q)
	if ready && r.opts.ShareQuota {
		share := &corev1.ResourceQuota{}
		err := r.client.Get(ctx, client.ObjectKey{Namespace: q.Namespace, Name: tenantquota.ShareQuotaName}, share)
		if err != nil && !apierrors.IsNotFound(err) {
			return false, "", fmt.Errorf("get ResourceQuota %s/%s: %w", q.Namespace, tenantquota.ShareQuotaName, err)
		}
		name, ready = tenantquota.ShareQuotaName, err == nil && tenantquota.Counted(share)
	}
	if ready {
		return false, "", nil
	}
	err := r.client.Get(ctx, client.ObjectKey{Namespace: q.Namespace, Name: RoleBindingName}, &rbacv1.RoleBinding{})
	switch {
	case apierrors.IsNotFound(err):
		return true, name, nil
	case err != nil:
		return false, "", fmt.Errorf("get RoleBinding %s/%s: %w", q.Namespace, RoleBindingName, err)
	}
	return false, "", nil
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

// desiredNamespace is the remote namespace for source of consumer: owned
// by consumer, with the Pod Security Admission labels of r's level.
func (r *Reconciler) desiredNamespace(name, consumer, source string) *corev1.Namespace {
	l := managedLabels(consumer)
	level := string(r.opts.PodSecurity)
	for _, k := range []string{labelPodSecurityEnforce, labelPodSecurityWarn, labelPodSecurityAudit} {
		l[k] = level
	}
	for _, k := range []string{labelPodSecurityEnforceVersion, labelPodSecurityWarnVersion, labelPodSecurityAuditVersion} {
		l[k] = "latest"
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Labels:      l,
		Annotations: map[string]string{AnnotationSourceNamespace: source},
	}}
}

// managedLabels are the labels of what this controller keeps for consumer.
func managedLabels(consumer string) map[string]string {
	return map[string]string{
		corev1alpha1.LabelRemoteClusterID: consumer,
		corev1alpha1.LabelManagedBy:       corev1alpha1.ManagedByAnnex,
	}
}

// withLabels returns got with the labels of want added.
func withLabels(got, want map[string]string) map[string]string {
	if got == nil {
		got = map[string]string{}
	}
	maps.Copy(got, want)
	return got
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
// field index of RemoteNamespaces by spec.remoteNamespace and a queue that
// serves the tenants in turn (fairqueue). Besides changes of
// the replicas it answers, it is triggered by every change of a namespace
// (its replicas are looked up by name: a refused request is retried when the
// namespace in the way disappears, a deleted replica's finalizer is removed
// when its namespace is gone, changed labels are corrected), of a
// RoleBinding "annex-consumer", of the spec, labels or counted limits of
// a ResourceQuota QuotaName, LimitRange LimitRangeName or NetworkPolicy
// NetworkPolicyName (not of the usage the quota controller writes at every
// creation in the namespace), and of the addresses of the nodes (every
// replica then: each remote namespace's NetworkPolicy keeps them out).
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
	policyChanged := predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return isPolicy(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return isPolicy(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return isPolicy(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			if !isPolicy(e.ObjectOld) && !isPolicy(e.ObjectNew) {
				return false
			}
			return !apiequality.Semantic.DeepEqual(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) ||
				!apiequality.Semantic.DeepEqual(policyOf(e.ObjectOld), policyOf(e.ObjectNew))
		},
	}
	policyRequests := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.requestsForPolicy(ctx, o.GetNamespace())
	})
	newQueue, err := fairqueue.ForTenants(mgr)
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("remotenamespace").
		For(&offloadingv1alpha1.RemoteNamespace{}, builder.WithPredicates(isReplica, replicaChanged)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.requestsFor(ctx, o.GetName())
		})).
		Watches(&rbacv1.RoleBinding{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.requestsFor(ctx, o.GetNamespace())
		}), builder.WithPredicates(isConsumerBinding)).
		Watches(&corev1.ResourceQuota{}, policyRequests, builder.WithPredicates(policyChanged)).
		Watches(&corev1.LimitRange{}, policyRequests, builder.WithPredicates(policyChanged)).
		Watches(&networkingv1.NetworkPolicy{}, policyRequests, builder.WithPredicates(policyChanged)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allReplicas), builder.WithPredicates(nodeAddressesChanged)).
		WithOptions(controller.Options{NewQueue: newQueue}).
		Complete(r)
}

// replicaChanged passes the updates of a RemoteNamespace that change what
// Reconcile reads: its spec (and its deletion, which bumps the generation
// of an object with finalizers), its UID, its finalizers and whether it is
// a replica. The tenant writes the rest (labels, other annotations) at
// will; each change would otherwise cost a reconcile.
var replicaChanged = predicate.Or[client.Object](predicates.SpecChanged(),
	predicates.AnnotationChanged(replicator.AnnotationOriginNamespace),
	predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld != nil && e.ObjectNew != nil &&
			(!slices.Equal(e.ObjectOld.GetFinalizers(), e.ObjectNew.GetFinalizers()) ||
				e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero())
	}})

// isPolicy reports whether o is a ResourceQuota, LimitRange or
// NetworkPolicy of this controller (by name: one that lost its labels is
// corrected too), or a namespace's share of its consumer's budget (kept by
// tenantquota; access waits until it is counted).
func isPolicy(o client.Object) bool {
	switch o.(type) {
	case *corev1.ResourceQuota:
		return o.GetName() == QuotaName || o.GetName() == tenantquota.ShareQuotaName
	case *corev1.LimitRange:
		return o.GetName() == LimitRangeName
	case *networkingv1.NetworkPolicy:
		return o.GetName() == NetworkPolicyName
	}
	return false
}

// policyOf is what this controller keeps of a ResourceQuota or LimitRange
// (the spec), and whether a quota is counted (the quota controller's hard
// limits, without the usage).
func policyOf(o client.Object) any {
	switch p := o.(type) {
	case *corev1.ResourceQuota:
		return []any{p.Spec, p.Status.Hard}
	case *corev1.LimitRange:
		return p.Spec
	case *networkingv1.NetworkPolicy:
		return p.Spec
	}
	return nil
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

// requestsForPolicy returns the replicas to reconcile when a ResourceQuota
// or LimitRange in namespace ns changes: those that ask for ns, and, in a
// tenant namespace, one of its replicas (each keeps the tenant namespace's
// quota).
func (r *Reconciler) requestsForPolicy(ctx context.Context, ns string) []reconcile.Request {
	reqs := r.requestsFor(ctx, ns)
	if !strings.HasPrefix(ns, corev1alpha1.TenantNamespacePrefix) {
		return reqs
	}
	list := &offloadingv1alpha1.RemoteNamespaceList{}
	if err := r.client.List(ctx, list, client.InNamespace(ns)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list RemoteNamespaces", "namespace", ns)
		return reqs
	}
	for i := range list.Items {
		if rn := &list.Items[i]; replicator.IsReplica(rn) && rn.DeletionTimestamp.IsZero() {
			return append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rn)})
		}
	}
	return reqs
}
