// Package tenantquota owns each tenant's object budget: how many objects of
// a kind (by default ConfigMaps, Secrets, Services, ShadowEndpointSlices,
// and ShadowPods in proportion to the tenant's grant) one consumer may
// store on this provider in all its remote namespaces together, so that
// what it stores is bounded per tenant in bytes (count × the size bounds of
// the admission policies), however many namespaces it has.
//
// Kubernetes counts objects only per namespace (ResourceQuota), so the
// budget is divided: every remote namespace of the consumer gets a
// ResourceQuota ShareQuotaName whose limits are the namespace's share (see
// Plan), and the API server's quota admission enforces each share. The
// shares never add up to more than the budget; when a namespace runs low,
// the free part of the budget is divided again. The ResourceQuota
// "annex-tenant-quota" of the remotenamespace controller stays as each
// namespace's own ceiling; an object must fit both. The remotenamespace
// controller grants the consumer access to a namespace only once its share
// is counted (Counted).
//
// One reconcile key per consumer (its ID as the name); it reads the
// consumer's namespaces from the cache, and its shares from the cache to
// decide whether anything is to be done, then from the API server (the
// usage the quota admission writes at every creation, which a cache may
// not have yet) to decide what.
package tenantquota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/controller/replicator"
)

// ShareQuotaName is the ResourceQuota of a remote namespace's share of its
// consumer's budget.
const ShareQuotaName = "annex-tenant-share"

// DefaultRetry is how soon a tenant is looked at again while a raise waits
// for a lowering to reach the quota controller.
const DefaultRetry = time.Second

// +kubebuilder:rbac:groups="",resources=resourcequotas,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reconciler keeps the shares of every consumer's budget.
type Reconciler struct {
	// Client reads namespaces and ResourceSlices from the manager's cache
	// and writes quotas.
	Client client.Client
	// APIReader reads the shares from the API server.
	APIReader client.Reader
	// Options are the budget.
	Options Options
	// Clock dates shares the quota controller counted in part (default:
	// the real clock).
	Clock clock.PassiveClock
	// Retry is how soon to look again at a raise that waits (DefaultRetry).
	Retry time.Duration
}

// Reconcile divides one consumer's budget among its remote namespaces.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	consumer := req.Name
	budget, err := r.budget(ctx, consumer)
	if err != nil {
		return ctrl.Result{}, err
	}
	namespaces := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, namespaces, client.MatchingLabels(managedLabels(consumer))); err != nil {
		return ctrl.Result{}, fmt.Errorf("list the namespaces of consumer %s: %w", consumer, err)
	}
	// The cache decides whether anything is to be done: every creation in
	// a namespace changes its share's usage, and most need nothing. A
	// share not counted (yet, or in part) is looked at on the API server.
	cached, changes, retry, err := r.plan(ctx, r.Client, consumer, budget, namespaces, false)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(changes) == 0 && !retry && allCounted(cached) {
		return ctrl.Result{}, nil
	}
	// The API server decides what: the cache may lag behind the usage the
	// quota admission wrote, and a raise counts on every other share.
	shares, changes, retry, err := r.plan(ctx, r.APIReader, consumer, budget, namespaces, true)
	var wait *waitError
	if errors.As(err, &wait) {
		return ctrl.Result{RequeueAfter: wait.after}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	quotaOf := map[string]*corev1.ResourceQuota{}
	for _, s := range shares {
		quotaOf[s.Namespace] = s.Quota
	}
	var errs []error
	for _, c := range changes {
		if err := r.apply(ctx, consumer, quotaOf[c.Namespace], c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, err
	}
	if retry || !allCounted(shares) {
		// A raise waits for a lowering, or a share for the quota
		// controller (Recount writes it again if it counts it in part).
		return ctrl.Result{RequeueAfter: r.retry()}, nil
	}
	return ctrl.Result{}, nil
}

// allCounted reports whether every share of shares that exists is counted.
func allCounted(shares []Share) bool {
	for _, s := range shares {
		if s.Quota != nil && !Counted(s.Quota) {
			return false
		}
	}
	return true
}

// waitError is plan's answer when a share counted in part is written
// again: what its namespace uses is not known, so nothing is divided until
// after.
type waitError struct{ after time.Duration }

func (e *waitError) Error() string {
	return fmt.Sprintf("a share is counted again; look again in %s", e.after)
}

// plan reads consumer's shares through reader and plans budget's division
// among namespaces (see Plan). With recount, shares the quota controller
// counted in part are written again (Recount) and a *waitError returned.
func (r *Reconciler) plan(ctx context.Context, reader client.Reader, consumer string, budget corev1.ResourceList,
	namespaces *corev1.NamespaceList, recount bool) ([]Share, []Change, bool, error) {
	quotas := &corev1.ResourceQuotaList{}
	if err := reader.List(ctx, quotas, client.MatchingLabels(managedLabels(consumer))); err != nil {
		return nil, nil, false, fmt.Errorf("list the quotas of consumer %s: %w", consumer, err)
	}
	byNamespace := map[string]*corev1.ResourceQuota{}
	var after time.Duration
	for i := range quotas.Items {
		q := &quotas.Items[i]
		if q.Name != ShareQuotaName {
			continue
		}
		byNamespace[q.Namespace] = q
		if !recount {
			continue
		}
		wait, err := Recount(ctx, r.Client, q, r.clock())
		if err != nil {
			return nil, nil, false, err
		}
		if wait > 0 && (after == 0 || wait < after) {
			after = wait
		}
	}
	if after > 0 {
		return nil, nil, false, &waitError{after: after}
	}
	var shares []Share
	for _, ns := range namespaces.Items {
		if !remoteNamespace(&ns, consumer) {
			continue
		}
		shares = append(shares, Share{Namespace: ns.Name, Active: ns.DeletionTimestamp.IsZero(), Quota: byNamespace[ns.Name]})
		delete(byNamespace, ns.Name)
	}
	// A share whose namespace the cache does not show (yet, or any more)
	// still counts: its namespace gets nothing new from here.
	for ns, q := range byNamespace {
		shares = append(shares, Share{Namespace: ns, Quota: q})
	}
	changes, retry := Plan(budget, shares)
	return shares, changes, retry, nil
}

// apply creates the share c or sets its limits. An update carries the
// resourceVersion read, so a share changed since (by the quota admission
// counting a creation) is planned again from a fresh read.
func (r *Reconciler) apply(ctx context.Context, consumer string, q *corev1.ResourceQuota, c Change) error {
	log := ctrl.LoggerFrom(ctx).WithValues("resourceQuota", types.NamespacedName{Namespace: c.Namespace, Name: ShareQuotaName})
	if q == nil {
		q = &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: ShareQuotaName, Namespace: c.Namespace, Labels: managedLabels(consumer)},
			Spec:       corev1.ResourceQuotaSpec{Hard: c.Hard},
		}
		if err := r.Client.Create(ctx, q); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ResourceQuota %s/%s: %w", c.Namespace, ShareQuotaName, err)
		}
		log.V(1).Info("Created a namespace's share of its consumer's budget", "hard", format(c.Hard))
		return nil
	}
	if apiequality.Semantic.DeepEqual(q.Spec.Hard, c.Hard) {
		return nil
	}
	q = q.DeepCopy()
	q.Spec.Hard = c.Hard
	if err := r.Client.Update(ctx, q); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // changed or gone meanwhile: the watch brings it back
		}
		return fmt.Errorf("update ResourceQuota %s/%s: %w", c.Namespace, ShareQuotaName, err)
	}
	log.V(1).Info("Divided the consumer's budget again", "hard", format(c.Hard))
	return nil
}

// budget is consumer's budget: Options.Budget and, unless that names
// ShadowPods, Options.ShadowPodsPerGrantedPod times its granted pods plus
// ShadowPodsSlack.
func (r *Reconciler) budget(ctx context.Context, consumer string) (corev1.ResourceList, error) {
	out := r.Options.Budget.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	if _, named := out[ResourceShadowPods]; named || r.Options.ShadowPodsPerGrantedPod <= 0 {
		return out, nil
	}
	list := &corev1alpha1.ResourceSliceList{}
	tenant := corev1alpha1.TenantNamespaceName(consumer)
	if err := r.Client.List(ctx, list, client.InNamespace(tenant)); err != nil {
		return nil, fmt.Errorf("list ResourceSlices in %s: %w", tenant, err)
	}
	var pods int64
	for i := range list.Items {
		if rs := &list.Items[i]; granted(rs, consumer) {
			if q, ok := rs.Status.Resources[corev1.ResourcePods]; ok && q.Sign() > 0 {
				pods += min(q.Value(), 1<<40) // a grant's pods are bounded by the provider itself
			}
		}
	}
	out[ResourceShadowPods] = *resource.NewQuantity(r.Options.ShadowPodsPerGrantedPod*pods+ShadowPodsSlack, resource.DecimalSI)
	return out, nil
}

// granted reports whether rs is an accepted ResourceSlice of consumer, one
// whose status counts in its grant (as the shadowpod controller counts it).
func granted(rs *corev1alpha1.ResourceSlice, consumer string) bool {
	return replicator.IsReplica(rs) && rs.Spec.ConsumerClusterID == consumer &&
		rs.Status.Phase == corev1alpha1.ResourceSliceAccepted && rs.DeletionTimestamp.IsZero()
}

func (r *Reconciler) clock() clock.PassiveClock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

func (r *Reconciler) retry() time.Duration {
	if r.Retry > 0 {
		return r.Retry
	}
	return DefaultRetry
}

// remoteNamespace reports whether ns is a remote namespace of consumer
// (not its tenant namespace, which holds no objects of the budget).
func remoteNamespace(ns *corev1.Namespace, consumer string) bool {
	return ns.Labels[corev1alpha1.LabelRemoteClusterID] == consumer &&
		ns.Labels[corev1alpha1.LabelManagedBy] == corev1alpha1.ManagedByAnnex &&
		!strings.HasPrefix(ns.Name, corev1alpha1.TenantNamespacePrefix)
}

func managedLabels(consumer string) map[string]string {
	return map[string]string{
		corev1alpha1.LabelRemoteClusterID: consumer,
		corev1alpha1.LabelManagedBy:       corev1alpha1.ManagedByAnnex,
	}
}

func format(l corev1.ResourceList) string {
	var parts []string
	for _, name := range sortedNames(l) {
		q := l[name]
		parts = append(parts, string(name)+"="+q.String())
	}
	return strings.Join(parts, ",")
}

// consumerOf is the reconcile key of an object labelled with a consumer.
func consumerOf(_ context.Context, o client.Object) []reconcile.Request {
	c := o.GetLabels()[corev1alpha1.LabelRemoteClusterID]
	if c == "" || o.GetLabels()[corev1alpha1.LabelManagedBy] != corev1alpha1.ManagedByAnnex {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: c}}}
}

// sliceConsumer is the reconcile key of a ResourceSlice replica in a
// tenant namespace: its grant sets the consumer's budget of ShadowPods.
func sliceConsumer(_ context.Context, o client.Object) []reconcile.Request {
	c, ok := strings.CutPrefix(o.GetNamespace(), corev1alpha1.TenantNamespacePrefix)
	if !ok || c == "" || !replicator.IsReplica(o) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: c}}}
}

// SetupWithManager registers the controller "tenantquota": a remote
// namespace appearing, starting its deletion or going, every change of a
// share (its limits, or the usage the quota admission and the quota
// controller write), and every change of a consumer's ResourceSlices (its
// grant), divides that consumer's budget again. With no budget it registers
// nothing.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if !r.Options.Enabled() {
		return nil
	}
	isShare := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == ShareQuotaName })
	namespaceChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero() ||
			e.ObjectOld.GetLabels()[corev1alpha1.LabelRemoteClusterID] != e.ObjectNew.GetLabels()[corev1alpha1.LabelRemoteClusterID]
	}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("tenantquota").
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(consumerOf), builder.WithPredicates(namespaceChanged)).
		Watches(&corev1.ResourceQuota{}, handler.EnqueueRequestsFromMapFunc(consumerOf), builder.WithPredicates(isShare)).
		Watches(&corev1alpha1.ResourceSlice{}, handler.EnqueueRequestsFromMapFunc(sliceConsumer)).
		Complete(r)
}

// ParseBudget parses "configmaps=250,secrets=250": key=count pairs, keys
// from BudgetKeys or count/<resource>[.<group>], counts non-negative
// integers.
func ParseBudget(s string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return nil, fmt.Errorf("%q is not key=count", kv)
		}
		name, known := BudgetKeys[k]
		if !known {
			if !strings.HasPrefix(k, "count/") || len(k) == len("count/") {
				return nil, fmt.Errorf("%q is not one of %s nor count/<resource>.<group>", k, strings.Join(sortedKeys(), ", "))
			}
			name = corev1.ResourceName(k)
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		if n, isInt := q.AsInt64(); !isInt || n < 0 {
			return nil, fmt.Errorf("%s: %s is not a count (a non-negative integer)", k, q.String())
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%q given twice", k)
		}
		out[name] = q
	}
	return out, nil
}
