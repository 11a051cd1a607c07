package resourceslice

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/controller/fairqueue"
	"github.com/annexhq/annex/internal/controller/predicates"
)

// +kubebuilder:rbac:groups=core.annex.dev,resources=resourceslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=core.annex.dev,resources=resourceslices/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

const (
	// LabelNodeType and NodeTypeVirtual mark virtual nodes (label
	// type=virtual-node), whose capacity is borrowed and never granted
	// again. Nodes carrying the annex.dev/virtual-node taint are excluded too.
	LabelNodeType   = "type"
	NodeTypeVirtual = "virtual-node"
)

// Reconciler accepts or denies the ResourceSlices consumers send to this
// provider.
type Reconciler struct {
	client         client.Client
	recorder       events.EventRecorder
	localClusterID string
	opts           Options

	// decideMu serializes decisions: each one counts every grant decided
	// before it.
	decideMu sync.Mutex
	// decided holds the answers this controller wrote (guarded by
	// decideMu) until the cache shows them, so that a decision counts a
	// grant the cache does not show yet.
	decided map[types.NamespacedName]written
}

// written is an answer written into a slice's status.
type written struct {
	uid   types.UID
	phase corev1alpha1.ResourceSlicePhase
	// granted is what the answer grants (nil when denied).
	granted corev1.ResourceList
}

// IndexPhase indexes the ResourceSlices this provider answers (see
// PhaseIndexer) by status.phase.
const IndexPhase = "annex.dev/resourceslice-phase"

// PhaseIndexer returns the indexer of IndexPhase for the provider
// localClusterID: the status.phase of each slice it answers, "" for one not
// answered yet; nothing for the others.
func PhaseIndexer(localClusterID string) client.IndexerFunc {
	return func(o client.Object) []string {
		rs, ok := o.(*corev1alpha1.ResourceSlice)
		if !ok || !ours(rs, localClusterID) {
			return nil
		}
		return []string{string(rs.Status.Phase)}
	}
}

// New returns the reconciler. c reads (from the cache, with the IndexPhase
// index that SetupWithManager adds) and patches ResourceSlices and reads
// Namespaces and Nodes; recorder receives an Event on every answer written;
// localClusterID is this cluster's ID (only slices whose
// spec.providerClusterID equals it are answered).
func New(c client.Client, recorder events.EventRecorder, localClusterID string, opts Options) *Reconciler {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Reconciler{client: c, recorder: recorder, localClusterID: localClusterID, opts: opts,
		decided: map[types.NamespacedName]written{}}
}

// Reconcile answers one ResourceSlice.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	r.decideMu.Lock()
	defer r.decideMu.Unlock()
	rs := &corev1alpha1.ResourceSlice{}
	if err := r.client.Get(ctx, req.NamespacedName, rs); err != nil {
		if apierrors.IsNotFound(err) {
			delete(r.decided, req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !rs.DeletionTimestamp.IsZero() || !ours(rs, r.localClusterID) {
		return ctrl.Result{}, nil
	}

	ns := &corev1.Namespace{}
	if err := r.client.Get(ctx, types.NamespacedName{Name: rs.Namespace}, ns); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("get namespace %s: %w", rs.Namespace, err)
	}
	in := Request{
		Slice:             rs,
		NamespaceConsumer: ns.Labels[corev1alpha1.LabelRemoteClusterID],
		AlreadyAccepted:   alreadyAccepted(rs),
		Limit:             r.opts.MaxPerConsumer,
	}
	if !in.AlreadyAccepted {
		var err error
		if in.GrantedToConsumer, err = r.grantedToConsumer(ctx, rs); err != nil {
			return ctrl.Result{}, err
		}
		if in.Capacity, err = r.capacity(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	d := Decide(in)

	orig := rs.DeepCopy()
	r.apply(rs, d)
	if apiequality.Semantic.DeepEqual(orig.Status, rs.Status) {
		return ctrl.Result{}, nil
	}
	// Remembered before it is written: should the write fail after all
	// reached the API server, the grant is counted until the retry
	// decides again (see grantedToConsumer: never less than the cache).
	r.decided[req.NamespacedName] = written{uid: rs.UID, phase: rs.Status.Phase, granted: rs.Status.Resources}
	if err := r.client.Status().Patch(ctx, rs, client.MergeFrom(orig)); err != nil {
		return ctrl.Result{}, fmt.Errorf("write answer: %w", err)
	}
	log = log.WithValues("consumer", rs.Spec.ConsumerClusterID, "reason", d.Reason)
	if d.Accepted {
		log.Info("Accepted ResourceSlice", "granted", FormatResourceList(d.Granted))
		r.recorder.Eventf(rs, nil, corev1.EventTypeNormal, d.Reason, "Accept", "%s", d.Message)
	} else {
		log.Info("Denied ResourceSlice", "message", d.Message)
		r.recorder.Eventf(rs, nil, corev1.EventTypeWarning, d.Reason, "Deny", "%s", d.Message)
	}
	return ctrl.Result{}, nil
}

// ours reports whether rs is a request to the provider localClusterID in a
// tenant namespace.
func ours(rs *corev1alpha1.ResourceSlice, localClusterID string) bool {
	return strings.HasPrefix(rs.Namespace, corev1alpha1.TenantNamespacePrefix) &&
		rs.Spec.ProviderClusterID == localClusterID
}

// apply writes decision d into rs's status.
func (r *Reconciler) apply(rs *corev1alpha1.ResourceSlice, d Decision) {
	status, phase := metav1.ConditionFalse, corev1alpha1.ResourceSliceDenied
	if d.Accepted {
		status, phase = metav1.ConditionTrue, corev1alpha1.ResourceSliceAccepted
	}
	rs.Status.Phase = phase
	rs.Status.Resources = d.Granted
	now := metav1.NewTime(r.opts.Clock.Now())
	for _, t := range []string{corev1alpha1.ConditionAccepted, corev1alpha1.ConditionReady} {
		meta.SetStatusCondition(&rs.Status.Conditions, metav1.Condition{
			Type:               t,
			Status:             status,
			ObservedGeneration: rs.Generation,
			LastTransitionTime: now,
			Reason:             d.Reason,
			Message:            d.Message,
		})
	}
}

// alreadyAccepted reports whether rs was accepted for its current spec.
func alreadyAccepted(rs *corev1alpha1.ResourceSlice) bool {
	c := meta.FindStatusCondition(rs.Status.Conditions, corev1alpha1.ConditionAccepted)
	return rs.Status.Phase == corev1alpha1.ResourceSliceAccepted &&
		c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == rs.Generation &&
		apiequality.Semantic.DeepEqual(rs.Status.Resources, rs.Spec.Resources)
}

// grantedToConsumer sums what the other accepted slices in rs's tenant
// namespace (the same consumer) were granted. The cache may not show the
// answers this controller wrote last yet: for a slice whose cached status is
// not the one remembered in r.decided, the larger of the two grants counts.
// It lists only the accepted slices (IndexPhase) and the remembered ones,
// and forgets the answers that the cache shows. It is called under decideMu.
func (r *Reconciler) grantedToConsumer(ctx context.Context, rs *corev1alpha1.ResourceSlice) (corev1.ResourceList, error) {
	list := &corev1alpha1.ResourceSliceList{}
	if err := r.client.List(ctx, list, client.InNamespace(rs.Namespace),
		client.MatchingFields{IndexPhase: string(corev1alpha1.ResourceSliceAccepted)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list accepted ResourceSlices in %s: %w", rs.Namespace, err)
	}
	counts := func(o *corev1alpha1.ResourceSlice) bool {
		return o.Name != rs.Name && o.DeletionTimestamp.IsZero() && ours(o, r.localClusterID) &&
			o.Spec.ConsumerClusterID == rs.Spec.ConsumerClusterID
	}
	grants := map[string]corev1.ResourceList{}
	for i := range list.Items {
		if o := &list.Items[i]; counts(o) && o.Status.Phase == corev1alpha1.ResourceSliceAccepted {
			grants[o.Name] = o.Status.Resources
		}
	}
	for key, a := range r.decided {
		if key.Namespace != rs.Namespace || key.Name == rs.Name {
			continue
		}
		o := &corev1alpha1.ResourceSlice{}
		if err := r.client.Get(ctx, key, o); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("get ResourceSlice %s: %w", key, err)
			}
			delete(r.decided, key)
			continue
		}
		if o.UID != a.uid || (o.Status.Phase == a.phase && apiequality.Semantic.DeepEqual(o.Status.Resources, a.granted)) {
			// Another slice of that name, or the cache shows the answer.
			delete(r.decided, key)
			continue
		}
		if counts(o) {
			g := grants[o.Name].DeepCopy()
			if g == nil {
				g = corev1.ResourceList{}
			}
			maxInto(g, a.granted)
			grants[o.Name] = g
		}
	}
	sum := corev1.ResourceList{}
	for _, g := range grants {
		addTo(sum, g)
	}
	return sum, nil
}

// capacity sums the allocatable resources of the Ready, schedulable,
// non-virtual nodes.
func (r *Reconciler) capacity(ctx context.Context) (corev1.ResourceList, error) {
	nodes := &corev1.NodeList{}
	if err := r.client.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	sum := corev1.ResourceList{}
	for i := range nodes.Items {
		if n := &nodes.Items[i]; counts(n) {
			addTo(sum, n.Status.Allocatable)
		}
	}
	return sum, nil
}

// counts reports whether node n's allocatable resources can be granted.
func counts(n *corev1.Node) bool {
	if n.Labels[LabelNodeType] == NodeTypeVirtual || n.Spec.Unschedulable || !n.DeletionTimestamp.IsZero() {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1alpha1.TaintKeyVirtualNode {
			return false
		}
	}
	return nodeReady(n)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func maxInto(dst, l corev1.ResourceList) {
	for name, q := range l {
		if cur, ok := dst[name]; !ok || q.Cmp(cur) > 0 {
			dst[name] = q.DeepCopy()
		}
	}
}

func addTo(sum, l corev1.ResourceList) {
	for name, q := range l {
		cur := sum[name]
		cur.Add(q)
		sum[name] = cur
	}
}

// SetupWithManager registers the controller "resourceslice" on mgr, and the
// IndexPhase index. Besides spec changes of the slices it answers, it
// re-evaluates: every slice of a tenant namespace whose
// annex.dev/remote-cluster-id label changes; denied slices when a node's
// capacity, readiness or schedulability changes; and a consumer's denied
// slices when room is freed among its grants (one of its accepted slices is
// deleted, or its answer changes). Denied slices are found through the
// index, without listing whole namespaces. Decisions are serialized; its
// queue serves the tenants in turn (fairqueue.NewQueue), so a tenant's
// thousands of slices do not delay another tenant's decision.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1alpha1.ResourceSlice{}, IndexPhase, PhaseIndexer(r.localClusterID)); err != nil {
		return fmt.Errorf("index ResourceSlices by phase: %w", err)
	}
	inTenantNamespace := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return strings.HasPrefix(o.GetNamespace(), corev1alpha1.TenantNamespacePrefix)
	})
	newQueue, err := fairqueue.ForTenants(mgr)
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("resourceslice").
		For(&corev1alpha1.ResourceSlice{}, builder.WithPredicates(inTenantNamespace, predicates.SpecChanged())).
		Watches(&corev1alpha1.ResourceSlice{},
			handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
				return r.deniedSlices(ctx, client.InNamespace(o.GetNamespace()))
			}),
			builder.WithPredicates(inTenantNamespace, roomFreed())).
		Watches(&corev1.Namespace{},
			handler.EnqueueRequestsFromMapFunc(r.slicesInNamespace),
			builder.WithPredicates(tenantNamespaceLabelChanged())).
		Watches(&corev1.Node{},
			handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
				return r.deniedSlices(ctx)
			}),
			builder.WithPredicates(nodeCapacityChanged())).
		WithOptions(controller.Options{NewQueue: newQueue}).
		Complete(r)
}

// slicesInNamespace enqueues every slice in the namespace o.
func (r *Reconciler) slicesInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	list := &corev1alpha1.ResourceSliceList{}
	if err := r.client.List(ctx, list, client.InNamespace(o.GetName()), client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list ResourceSlices", "namespace", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// deniedSlices enqueues the denied slices this provider answers (IndexPhase).
func (r *Reconciler) deniedSlices(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	list := &corev1alpha1.ResourceSliceList{}
	opts = append(opts, client.MatchingFields{IndexPhase: string(corev1alpha1.ResourceSliceDenied)}, client.UnsafeDisableDeepCopy)
	if err := r.client.List(ctx, list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list denied ResourceSlices")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// roomFreed passes the slice events that may leave room for a consumer's
// denied slices: an accepted slice deleted or being deleted, or whose grant
// changes (denied after a spec change, or granted something else).
func roomFreed() predicate.Predicate {
	accepted := func(o client.Object) (*corev1alpha1.ResourceSlice, bool) {
		rs, ok := o.(*corev1alpha1.ResourceSlice)
		return rs, ok && rs.Status.Phase == corev1alpha1.ResourceSliceAccepted
	}
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, wasAccepted := accepted(e.ObjectOld)
			n, ok := e.ObjectNew.(*corev1alpha1.ResourceSlice)
			return wasAccepted && ok && (n.Status.Phase != corev1alpha1.ResourceSliceAccepted ||
				!apiequality.Semantic.DeepEqual(o.Status.Resources, n.Status.Resources) ||
				(o.DeletionTimestamp.IsZero() && !n.DeletionTimestamp.IsZero()))
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			_, ok := accepted(e.Object)
			return ok
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// tenantNamespaceLabelChanged passes tenant namespaces that appear or whose
// annex.dev/remote-cluster-id label changes.
func tenantNamespaceLabelChanged() predicate.Predicate {
	tenant := func(o client.Object) bool {
		return strings.HasPrefix(o.GetName(), corev1alpha1.TenantNamespacePrefix)
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return tenant(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return tenant(e.ObjectNew) &&
				e.ObjectOld.GetLabels()[corev1alpha1.LabelRemoteClusterID] != e.ObjectNew.GetLabels()[corev1alpha1.LabelRemoteClusterID]
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// nodeCapacityChanged passes node events that can change the capacity.
func nodeCapacityChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			return !ok1 || !ok2 || counts(o) != counts(n) ||
				!apiequality.Semantic.DeepEqual(o.Status.Allocatable, n.Status.Allocatable)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
