// Package tenantgc owns the provider's clean-up after consumers that are
// gone: a tenant whose consumer has not renewed its heartbeat Lease for a
// grace period (forcibly unpeered, deleted, or never came back) loses, in
// this order, the network link with it (NetworkConfiguration), its remote
// namespaces with all their workloads, its tenant namespace with its
// credentials and RBAC, and its ForeignCluster — so nothing offloaded runs
// forever after its consumer forgot it, and no stop half-way leaves a link
// without its peering. A tenant namespace being deleted (by an unpeering,
// by hand, or by this controller before a restart) takes the link and the
// ForeignCluster with it. When this cluster also consumes that peer (a
// two-way peering), only the tenant goes: this cluster's own objects for
// the peer live in another namespace (annex-peer-<peer>), and the
// ForeignCluster and the network link stay, with role Provider.
package tenantgc

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
)

// Reconciler removes tenants whose consumer stopped renewing its heartbeat.
//
// Silence counts only while this agent runs and its API server answers: a
// consumer cannot renew a Lease on an API server that is down, so the
// agent's start and every failed read from the API server restart the count
// for every consumer. A provider back from a long outage thus gives each
// consumer a full grace period to be heard again instead of removing every
// tenant at once.
//
// When the consumer was last heard is Heard's word: the renewTime it wrote
// on its Lease, never later than when this agent saw that renewal, so a
// tenant cannot keep its namespaces past the grace period by writing a
// renewTime in the future (nor by anything else on its Lease: no other
// field is read).
type Reconciler struct {
	// Client reads from the manager's cache and deletes.
	Client client.Client
	// APIReader reads from the API server: a tenant is removed only when
	// the API server itself confirms the silence (a cache that has not yet
	// seen a new peering's namespace or Lease must not remove it).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// GracePeriod is how long a consumer may stay silent.
	GracePeriod time.Duration
	// Heard records when each heartbeat was seen; shared with fencing.
	// One on Clock is made when nil.
	Heard *Heard

	mu sync.Mutex
	// answering is when the API server was last seen to start answering
	// (the agent's start, or the first success after a failed read).
	answering time.Time
	failed    bool
}

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch
// +kubebuilder:rbac:groups=core.annex.dev,resources=foreignclusters,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=core.annex.dev,resources=foreignclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=networking.annex.dev,resources=networkconfigurations,verbs=get;list;watch;delete

// Reconcile checks one tenant namespace.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, req.NamespacedName, ns); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	consumer := ns.Labels[corev1alpha1.LabelRemoteClusterID]
	if !isTenant(ns) || consumer == "" {
		return ctrl.Result{}, nil
	}
	fc := &corev1alpha1.ForeignCluster{}
	fcErr := r.Client.Get(ctx, client.ObjectKey{Name: consumer}, fc)
	if fcErr != nil && !apierrors.IsNotFound(fcErr) {
		return ctrl.Result{}, fcErr
	}
	if fcErr == nil && fc.Status.Role == corev1alpha1.RoleProvider {
		// We only consume that peer: it has no tenant here. (Clusters peered
		// before peer namespaces existed kept their own objects for a
		// provider in a namespace labelled like this one: never touch it.)
		return ctrl.Result{}, nil
	}
	if !ns.DeletionTimestamp.IsZero() {
		return r.finish(ctx, ns, consumer)
	}
	last, err := r.lastHeard(ctx, r.Client, ns, consumer)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	if deadline := last.Add(r.GracePeriod); now.Before(deadline) {
		return ctrl.Result{RequeueAfter: deadline.Sub(now) + time.Second}, nil
	}
	// The cache says the consumer is silent: ask the API server, which may
	// know a namespace or a Lease of a new peering that the cache has not
	// seen yet.
	live := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, live); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, r.readFailed(err)
	}
	r.readSucceeded()
	if !isTenant(live) || !live.DeletionTimestamp.IsZero() || live.Labels[corev1alpha1.LabelRemoteClusterID] != consumer {
		return ctrl.Result{}, nil
	}
	if last, err = r.lastHeard(ctx, r.APIReader, live, consumer); err != nil {
		return ctrl.Result{}, r.readFailed(err)
	}
	if deadline := last.Add(r.GracePeriod); now.Before(deadline) {
		return ctrl.Result{RequeueAfter: deadline.Sub(now) + time.Second}, nil
	}
	silent := now.Sub(last).Round(time.Second)
	log.Info("consumer silent for longer than the grace period, removing its tenant", "consumer", consumer, "silentFor", silent)
	if fcErr != nil {
		fc = nil
	}
	return ctrl.Result{}, r.remove(ctx, live, consumer, fc, silent)
}

// remove removes the tenant of consumer, whose tenant namespace is ns and
// ForeignCluster fc (nil when there is none), silent for silent. Access
// goes first: the network link (unless this cluster also consumes that
// peer, which keeps it), then the namespaces (the remote namespaces with
// the workloads, the tenant namespace with the consumer's credentials and
// RBAC), then the ForeignCluster (or, both ways, its tenant role). A stop
// at any point leaves no link without its peering; a stop after the
// namespaces is finished by finish.
func (r *Reconciler) remove(ctx context.Context, ns *corev1.Namespace, consumer string, fc *corev1alpha1.ForeignCluster, silent time.Duration) error {
	nss := &corev1.NamespaceList{}
	if err := r.APIReader.List(ctx, nss, client.MatchingLabels{corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}); err != nil {
		return r.readFailed(err)
	}
	both := fc != nil && fc.Status.Role == corev1alpha1.RoleBoth
	if !both {
		if err := r.deleteLinks(ctx, consumer); err != nil {
			return err
		}
	}
	// The remote namespaces and the tenant namespace ns itself (labelled
	// alike; our own peer namespace for that cluster is labelled otherwise).
	for i := range nss.Items {
		// Only the namespaces read just now: one made again under the same
		// name since (a new peering) is not this tenant's.
		uid := nss.Items[i].UID
		if err := r.Client.Delete(ctx, &nss.Items[i], client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return err
		}
	}
	r.heard().Forget(ns.Name)
	msg := fmt.Sprintf("consumer %s has not renewed its heartbeat for %s (grace period %s): removed the network link, its tenant and %d namespace(s)", consumer, silent, r.GracePeriod, len(nss.Items))
	if both {
		msg = fmt.Sprintf("consumer %s has not renewed its heartbeat for %s (grace period %s): removed its tenant and %d namespace(s); it stays a provider of this cluster", consumer, silent, r.GracePeriod, len(nss.Items))
	}
	if fc == nil {
		r.Recorder.Eventf(ns, nil, corev1.EventTypeWarning, "TenantRemoved", "RemoveTenant", msg)
		return nil
	}
	r.Recorder.Eventf(fc, nil, corev1.EventTypeWarning, "TenantRemoved", "RemoveTenant", msg)
	// As the API server has it now (the cache's may be older): dropTenant
	// holds only for the ForeignCluster read.
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(fc), fc); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return r.readFailed(err)
	}
	if fc.Status.Role == corev1alpha1.RoleProvider {
		return nil
	}
	return r.dropTenant(ctx, fc)
}

// finish completes the removal of a tenant whose tenant namespace ns is
// being deleted (by this controller before it stopped, by an unpeering, or
// by hand): its network link (unless this cluster also consumes that peer)
// and its ForeignCluster (or, both ways, its tenant role) go too, so that a
// removal stopped after the namespaces leaves nothing behind. Both are read
// from the API server first: a cache that still shows an earlier tenant
// namespace terminating must not cost a new peering its ForeignCluster.
func (r *Reconciler) finish(ctx context.Context, ns *corev1.Namespace, consumer string) (ctrl.Result, error) {
	live := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ns), live); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if live.UID != ns.UID || live.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	fc := &corev1alpha1.ForeignCluster{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Name: consumer}, fc); {
	case apierrors.IsNotFound(err):
		fc = nil
	case err != nil:
		return ctrl.Result{}, err
	case fc.Status.Role == corev1alpha1.RoleProvider:
		return ctrl.Result{}, nil // the tenant role is gone already
	}
	if fc == nil || fc.Status.Role != corev1alpha1.RoleBoth {
		if err := r.deleteLinks(ctx, consumer); err != nil {
			return ctrl.Result{}, err
		}
	}
	if fc == nil {
		return ctrl.Result{}, nil
	}
	ctrl.LoggerFrom(ctx).Info("tenant namespace being deleted: removing the rest of its tenant", "consumer", consumer, "namespace", ns.Name)
	r.Recorder.Eventf(fc, nil, corev1.EventTypeWarning, "TenantRemoved", "RemoveTenant",
		"tenant namespace %s of consumer %s is being deleted: removed the rest of its tenant (the network link, unless this cluster consumes %s too, and the tenant's ForeignCluster role)", ns.Name, consumer, consumer)
	err := r.dropTenant(ctx, fc)
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: time.Second}, nil // changed meanwhile: decided again
	}
	return ctrl.Result{}, err
}

// dropTenant deletes the ForeignCluster fc of a consumer whose tenant went
// or, when this cluster also consumes that peer, keeps it with role
// Provider. The deletion holds only for fc as read (its UID and
// resourceVersion): a peering made again since keeps its ForeignCluster.
func (r *Reconciler) dropTenant(ctx context.Context, fc *corev1alpha1.ForeignCluster) error {
	if fc.Status.Role == corev1alpha1.RoleBoth {
		patch := client.MergeFromWithOptions(fc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		fc.Status.Role, fc.Status.TenantNamespace = corev1alpha1.RoleProvider, ""
		return client.IgnoreNotFound(r.Client.Status().Patch(ctx, fc, patch))
	}
	uid, version := fc.UID, fc.ResourceVersion
	return client.IgnoreNotFound(r.Client.Delete(ctx, fc, client.Preconditions{UID: &uid, ResourceVersion: &version}))
}

// lastHeard is when the consumer that owns tenant namespace ns was last
// heard of, read through reader: its heartbeat Lease's renewal as Heard
// judges it (never later than this agent saw it), or the namespace's
// creation when it has none, and never before the API server started
// answering this agent. A renewTime too far ahead of this clock is reported
// once (Warning Event HeartbeatRenewTimeAhead on the Lease).
func (r *Reconciler) lastHeard(ctx context.Context, reader client.Reader, ns *corev1.Namespace, consumer string) (time.Time, error) {
	last := ns.CreationTimestamp.Time
	lease := &coordinationv1.Lease{}
	switch err := reader.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: corev1alpha1.HeartbeatLeaseName}, lease); {
	case err == nil && Released(lease) && !lease.CreationTimestamp.Before(&ns.CreationTimestamp):
		// The consumer said goodbye (a graceful unpeer): no grace at all,
		// whatever the agent's own start or outages.
		return lease.Spec.RenewTime.Time, nil
	case err == nil && lease.Spec.RenewTime != nil && !lease.CreationTimestamp.Before(&ns.CreationTimestamp):
		o, report := r.heard().report(lease)
		last = o.Last
		if report {
			ctrl.LoggerFrom(ctx).Info("consumer's heartbeat renewTime is ahead of this provider's clock: not believed, counted from when it was seen",
				"consumer", consumer, "renewTime", lease.Spec.RenewTime.Time, "ahead", o.Ahead.Round(time.Second), "heard", o.Last)
			r.Recorder.Eventf(lease, nil, corev1.EventTypeWarning, "HeartbeatRenewTimeAhead", "JudgeHeartbeat",
				"consumer %s wrote renewTime %s on its heartbeat Lease, %s ahead of this provider's clock: not believed; its silence counts from when this provider saw the renewal (%s), by its own clock",
				consumer, lease.Spec.RenewTime.UTC().Format(time.RFC3339), o.Ahead.Round(time.Second), o.Last.UTC().Format(time.RFC3339))
		}
	case err == nil && lease.Spec.RenewTime != nil:
		// A Lease older than its namespace is the heartbeat of an earlier
		// tenant namespace of the same name, still in the cache: a peering
		// made again right after this one was removed must not lose its new
		// tenant to its predecessor's silence (measured: the bench's
		// re-peering after a forced unpeer did).
		ctrl.LoggerFrom(ctx).V(1).Info("ignoring a heartbeat Lease older than its tenant namespace", "consumer", consumer, "leaseCreated", lease.CreationTimestamp, "namespaceCreated", ns.CreationTimestamp)
	case err != nil && !apierrors.IsNotFound(err):
		return time.Time{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answering.After(last) {
		last = r.answering
	}
	return last, nil
}

// heard returns the shared record of heartbeats, made on first use.
func (r *Reconciler) heard() *Heard {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Heard == nil {
		r.Heard = NewHeard(r.Clock)
	}
	return r.Heard
}

// Released reports whether lease is a released heartbeat (renewed at
// corev1alpha1.HeartbeatReleasedUnix by a consumer that unpeered).
func Released(lease *coordinationv1.Lease) bool {
	return lease.Spec.RenewTime != nil && lease.Spec.RenewTime.Unix() == corev1alpha1.HeartbeatReleasedUnix
}

// readFailed notes that the API server did not answer a read, so that the
// count of every consumer's silence starts again once it does, and returns
// err.
func (r *Reconciler) readFailed(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	return err
}

// readSucceeded notes that the API server answered: after a failure, the
// count of silence starts from now.
func (r *Reconciler) readSucceeded() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed {
		r.answering, r.failed = r.Clock.Now(), false
	}
}

// probe reads from the API server every interval until ctx ends, so that an
// outage is noticed even when no tenant is due.
func (r *Reconciler) probe(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		callCtx, cancel := context.WithTimeout(ctx, interval)
		err := r.APIReader.List(callCtx, &corev1.NamespaceList{}, client.Limit(1))
		cancel()
		if err != nil && ctx.Err() == nil {
			_ = r.readFailed(err)
		} else if err == nil {
			r.readSucceeded()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// deleteLinks deletes the NetworkConfigurations with consumer.
func (r *Reconciler) deleteLinks(ctx context.Context, consumer string) error {
	list := &networkingv1alpha1.NetworkConfigurationList{}
	if err := r.Client.List(ctx, list, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
		return err
	}
	for i := range list.Items {
		if list.Items[i].Spec.RemoteClusterID != consumer {
			continue
		}
		if err := r.Client.Delete(ctx, &list.Items[i]); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

func isTenant(o client.Object) bool {
	l := o.GetLabels()
	return l[corev1alpha1.LabelTenant] == "true" && l[corev1alpha1.LabelManagedBy] == corev1alpha1.ManagedByAnnex
}

// leaseHandler queues the tenant namespace of every heartbeat Lease event
// and stamps every renewal on this agent's clock as its informer delivers
// it, before anything is queued: the instant it was heard.
func (r *Reconciler) leaseHandler() handler.Funcs {
	toNamespace := func(o client.Object) (reconcile.Request, bool) {
		if o.GetName() != corev1alpha1.HeartbeatLeaseName {
			return reconcile.Request{}, false
		}
		return reconcile.Request{NamespacedName: client.ObjectKey{Name: o.GetNamespace()}}, true
	}
	heard := r.heard()
	onLease := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request], observe bool) {
		req, ok := toNamespace(o)
		if !ok {
			return
		}
		if lease, isLease := o.(*coordinationv1.Lease); isLease && observe {
			heard.Observe(lease)
		}
		q.Add(req)
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			onLease(e.Object, q, true)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			onLease(e.ObjectNew, q, true)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			onLease(e.Object, q, false)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			onLease(e.Object, q, false)
		},
	}
}

// SetupWithManager watches tenant namespaces and their heartbeat Leases.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.mu.Lock()
	r.answering = r.Clock.Now() // the agent's start restarts every count
	r.mu.Unlock()
	interval := min(max(r.GracePeriod/20, time.Second), 30*time.Second)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return r.probe(ctx, interval) })); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("tenantgc").
		For(&corev1.Namespace{}, builder.WithPredicates(predicate.NewPredicateFuncs(isTenant))).
		Watches(&coordinationv1.Lease{}, r.leaseHandler()).
		Complete(r)
}
