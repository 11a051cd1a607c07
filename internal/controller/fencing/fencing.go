// Package fencing owns the provider's side of failover: a consumer that
// offloads a namespace with failover asks, on its RemoteNamespace here
// (spec.fenceAfterSeconds, F), that its pods in that namespace be stopped
// once its heartbeat Lease has not been renewed for F. The reconciler arms
// that fence (status.fenceAfterSeconds, which the consumer reads before it
// ever releases a pod) and carries it out: once the Lease's renewTime is F
// old, it deletes the consumer's ShadowPods in the namespace that existed
// at that instant, and the pods made by then (also those whose ShadowPod
// is already gone) with a grace period of at most FenceGracePeriodSeconds,
// so that the consumer, which releases the pods only after a longer time
// T, never has two copies of one running.
//
// The fence counts from the renewTime the consumer wrote, never later than
// when this agent first saw that renewal (tenantgc.Heard, on this agent's
// clock): a renewTime in the past keeps its instant, so neither a restart
// of this agent nor an outage of its API server moves the deadline (a
// provider whose API server comes back after an outage longer than F stops
// the pods as soon as its agent leads again and reads them; an outage long
// enough to lose the leader election costs the agent a restart, a few
// seconds; the consumer may delete the orphaned ShadowPods first, and their
// pods are then stopped here all the same, within the bound, not with their
// own grace period), and a renewTime in the future is never believed. A
// Lease the tenant deletes does not disarm the fence: the count goes on
// from its last renewal this agent saw (from when it first found none, if
// it never saw one). F is the RemoteNamespace's, which the tenant writes:
// the CRD bounds it (10 s to MaxFenceAfterSeconds) and this agent never
// fences later than that bound, whatever the API server let through.
// The clocks of the two clusters are assumed to agree within the fencing
// margin (docs/failover.md).
package fencing

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/fairqueue"
	"github.com/annexhq/annex/internal/controller/replicator"
	"github.com/annexhq/annex/internal/controller/tenantgc"
)

// MinFenceAfterSeconds and MaxFenceAfterSeconds bound the fence a consumer
// may ask for: the same bounds as the RemoteNamespace CRD's
// spec.fenceAfterSeconds (and NamespaceOffloading's spec.failover), checked
// again here so that a CRD that lost them cannot make a fence longer.
const (
	MinFenceAfterSeconds = 10
	MaxFenceAfterSeconds = 86400
)

// retry is how soon a fence that could not be read or carried out is tried
// again: fixed, not the work queue's growing backoff, so that a provider
// back from an outage fences within a second of answering.
const retry = time.Second

// Reconciler arms and carries out the fences of the consumers' remote
// namespaces.
type Reconciler struct {
	// Client reads from the manager's cache and writes.
	Client client.Client
	// APIReader reads from the API server: a fence is carried out only when
	// the API server itself confirms the Lease is stale.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Heard records when each heartbeat was seen; shared with tenantgc.
	// One on Clock is made when nil.
	Heard *tenantgc.Heard

	mu sync.Mutex
	// lapses are the past lapses already fenced, by RemoteNamespace.
	lapses map[client.ObjectKey]string
}

// +kubebuilder:rbac:groups=offloading.annex.dev,resources=remotenamespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=remotenamespaces/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=shadowpods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete

// Reconcile arms or carries out the fence of one RemoteNamespace replica.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	rn := &offloadingv1alpha1.RemoteNamespace{}
	if err := r.Client.Get(ctx, req.NamespacedName, rn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	consumer, ok := strings.CutPrefix(rn.Namespace, corev1alpha1.TenantNamespacePrefix)
	if !replicator.IsReplica(rn) || !ok || consumer == "" || !rn.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("consumer", consumer, "remoteNamespace", rn.Spec.RemoteNamespace)
	if err := r.arm(ctx, rn); err != nil {
		return ctrl.Result{}, err
	}
	f := FenceAfter(rn)
	if f == nil || rn.Status.Phase != offloadingv1alpha1.RemoteNamespaceReady {
		return ctrl.Result{}, nil
	}
	fenceAfter := time.Duration(*f) * time.Second
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: rn.Namespace, Name: corev1alpha1.HeartbeatLeaseName}
	if err := r.Client.Get(ctx, key, lease); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		// No heartbeat (never made, or deleted by the tenant): the count
		// goes on from the last renewal this agent saw, or from when it
		// first found none. Its creation queues this again.
		lease = nil
	}
	now := r.Clock.Now()
	if lease != nil {
		if cutoff, lapse, ok := PastLapse(lease, fenceAfter); ok && r.unhandled(req.NamespacedName, lapse) {
			// A lapse longer than the fence that this agent did not see (it or
			// its API server was down): fence now what existed when it fell.
			stopped, err := r.fence(ctx, rn.Spec.RemoteNamespace, consumer, cutoff)
			if err != nil {
				log.Info("Fence of a past lapse not carried out yet, retrying", "error", err.Error())
				return ctrl.Result{RequeueAfter: retry}, nil
			}
			r.handled(req.NamespacedName, lapse)
			if stopped > 0 {
				log.Info("Consumer's heartbeat lapsed for longer than the fence while this agent could not act, stopped its pods", "lapse", lapse, "fenceAfter", fenceAfter, "pods", stopped)
				r.Recorder.Eventf(rn, nil, corev1.EventTypeWarning, "Fenced", "Fence",
					"consumer %s's heartbeat lapsed (%s) for longer than the fence (%s) while this provider could not act: stopped %d of its pod(s) in namespace %s",
					consumer, lapse, fenceAfter, stopped, rn.Spec.RemoteNamespace)
			}
		}
	}
	if deadline := r.lastHeardFor(rn, key, lease).Add(fenceAfter); now.Before(deadline) {
		return ctrl.Result{RequeueAfter: deadline.Sub(now) + 100*time.Millisecond}, nil
	}
	// The cache says the heartbeat is stale: the API server may know a
	// renewal the cache has not seen yet.
	live := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, key, live); err != nil {
		if !apierrors.IsNotFound(err) {
			log.V(1).Info("Cannot confirm a stale heartbeat, retrying", "error", err.Error())
			return ctrl.Result{RequeueAfter: retry}, nil
		}
		live = nil
	}
	last := r.lastHeardFor(rn, key, live)
	deadline := last.Add(fenceAfter)
	if now.Before(deadline) {
		return ctrl.Result{RequeueAfter: deadline.Sub(now) + 100*time.Millisecond}, nil
	}
	// ShadowPods made after the deadline come from a consumer heard again;
	// a released heartbeat (the consumer unpeered) has no such thing.
	cutoff := deadline
	if live != nil && tenantgc.Released(live) {
		cutoff = now
	}
	stopped, err := r.fence(ctx, rn.Spec.RemoteNamespace, consumer, cutoff)
	if err != nil {
		log.Info("Fence not carried out yet, retrying", "error", err.Error())
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	if stopped > 0 {
		silent := now.Sub(last).Round(time.Second)
		log.Info("Consumer's heartbeat is older than the fence, stopped its pods", "silentFor", silent, "fenceAfter", fenceAfter, "pods", stopped)
		r.Recorder.Eventf(rn, nil, corev1.EventTypeWarning, "Fenced", "Fence",
			"consumer %s has not renewed its heartbeat for %s (fence after %s): stopped %d of its pod(s) in namespace %s; it may replace them elsewhere",
			consumer, silent, fenceAfter, stopped, rn.Spec.RemoteNamespace)
	}
	return ctrl.Result{}, nil
}

// lastHeard is when the consumer of the heartbeat Lease key (lease, nil
// when there is none) was last heard, on this agent's clock
// (tenantgc.Heard): its last renewal (its creation if it was never
// renewed), never later than when this agent first saw it. A released
// heartbeat (a graceful unpeer) is renewed at the epoch: its fence has long
// fallen.
func (r *Reconciler) lastHeard(key client.ObjectKey, lease *coordinationv1.Lease) time.Time {
	if lease == nil {
		return r.heard().Missing(key)
	}
	return r.heard().Observe(lease).Last
}

// lastHeardFor is lastHeard for rn: without a Lease, never before rn was
// made (a tenant namespace made again for a new peering does not inherit
// the silence of the previous one's Lease).
func (r *Reconciler) lastHeardFor(rn *offloadingv1alpha1.RemoteNamespace, key client.ObjectKey, lease *coordinationv1.Lease) time.Time {
	last := r.lastHeard(key, lease)
	if lease == nil && rn.CreationTimestamp.After(last) {
		return rn.CreationTimestamp.Time
	}
	return last
}

func (r *Reconciler) heard() *tenantgc.Heard {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Heard == nil {
		r.Heard = tenantgc.NewHeard(r.Clock)
	}
	return r.Heard
}

// FenceAfter is the fence this agent arms and carries out for rn, in
// seconds (nil: none): what the consumer asks for, within
// MinFenceAfterSeconds and MaxFenceAfterSeconds. A request outside them
// (which the CRD refuses) is armed at the bound, which the consumer does
// not take for its own value: it does not release the pods.
func FenceAfter(rn *offloadingv1alpha1.RemoteNamespace) *int32 {
	if rn.Spec.FenceAfterSeconds == nil {
		return nil
	}
	return ptr.To(min(max(*rn.Spec.FenceAfterSeconds, MinFenceAfterSeconds), MaxFenceAfterSeconds))
}

// PastLapse reads the last lapse the consumer recorded on its heartbeat
// lease (AnnotationHeartbeatLapseFrom/To): when it lasted at least
// fenceAfter, cutoff is when the fence fell (its start + fenceAfter) and
// lapse names it.
func PastLapse(lease *coordinationv1.Lease, fenceAfter time.Duration) (cutoff time.Time, lapse string, ok bool) {
	from, err1 := time.Parse(time.RFC3339Nano, lease.Annotations[corev1alpha1.AnnotationHeartbeatLapseFrom])
	to, err2 := time.Parse(time.RFC3339Nano, lease.Annotations[corev1alpha1.AnnotationHeartbeatLapseTo])
	if err1 != nil || err2 != nil || to.Sub(from) < fenceAfter {
		return time.Time{}, "", false
	}
	return from.Add(fenceAfter), from.Format(time.RFC3339) + " to " + to.Format(time.RFC3339), true
}

// unhandled reports whether the past lapse of key's consumer has not been
// fenced yet by this agent (each is looked at once per agent start).
func (r *Reconciler) unhandled(key client.ObjectKey, lapse string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lapses[key] != lapse
}

func (r *Reconciler) handled(key client.ObjectKey, lapse string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lapses == nil {
		r.lapses = map[client.ObjectKey]string{}
	}
	r.lapses[key] = lapse
}

// arm records in rn's status the fence this agent carries out for it.
func (r *Reconciler) arm(ctx context.Context, rn *offloadingv1alpha1.RemoteNamespace) error {
	want := FenceAfter(rn)
	if ptr.Equal(want, rn.Status.FenceAfterSeconds) {
		return nil
	}
	orig := rn.DeepCopy()
	rn.Status.FenceAfterSeconds = nil
	if want != nil {
		rn.Status.FenceAfterSeconds = ptr.To(*want)
	}
	if err := r.Client.Status().Patch(ctx, rn, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("arm the fence: %w", err)
	}
	if want != nil {
		ctrl.LoggerFrom(ctx).Info("Fence armed", "remoteNamespace", rn.Spec.RemoteNamespace, "fenceAfterSeconds", *want)
	}
	return nil
}

// fence deletes the ShadowPods of namespace ns that existed at cutoff
// (later ones were created by the consumer after it was heard again; the
// API server's creation times have whole seconds, so one made within a
// second after the cutoff may be fenced too and is then made again) and
// their pods with a grace period of at most FenceGracePeriodSeconds. It
// returns how many pods it stopped.
func (r *Reconciler) fence(ctx context.Context, ns, consumer string, cutoff time.Time) (int, error) {
	// Only the consumer's own namespace: a RemoteNamespace that names
	// another one (refused by the remotenamespace controller, but its status
	// may lag) fences nothing.
	namespace := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: ns}, namespace); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	if namespace.Labels[corev1alpha1.LabelManagedBy] != corev1alpha1.ManagedByAnnex || namespace.Labels[corev1alpha1.LabelRemoteClusterID] != consumer {
		return 0, nil
	}
	sps := &offloadingv1alpha1.ShadowPodList{}
	if err := r.APIReader.List(ctx, sps, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	for i := range sps.Items {
		sp := &sps.Items[i]
		if sp.CreationTimestamp.After(cutoff) || !sp.DeletionTimestamp.IsZero() {
			continue
		}
		uid := sp.UID
		if err := r.Client.Delete(ctx, sp, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return 0, fmt.Errorf("delete ShadowPod %s/%s: %w", ns, sp.Name, err)
		}
	}
	// The pods, also those whose ShadowPod is already gone (the consumer
	// deleted it as an orphan, or it was fenced before a restart): the
	// garbage collector gives them their own grace period. A pod made at or
	// before the cutoff belongs to a ShadowPod made no later.
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(ns), client.HasLabels{offloadingv1alpha1.LabelShadowPod}); err != nil {
		return 0, err
	}
	stopped := 0
	for i := range pods.Items {
		if pod := &pods.Items[i]; !pod.CreationTimestamp.After(cutoff) {
			n, err := r.stopPod(ctx, pod)
			if err != nil {
				return stopped, err
			}
			stopped += n
		}
	}
	return stopped, nil
}

// stopPod deletes pod, if it still runs, with a grace period of at most
// FenceGracePeriodSeconds (the garbage collector would give it its own,
// which may be longer than the fencing margin). It returns 1 when it did.
func (r *Reconciler) stopPod(ctx context.Context, pod *corev1.Pod) (int, error) {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return 0, nil
	}
	grace := int64(offloadingv1alpha1.FenceGracePeriodSeconds)
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil && *g < grace {
		grace = *g
	}
	if pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds <= grace {
		return 0, nil // already stopping within the bound
	}
	uid := pod.UID
	if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &uid}, client.GracePeriodSeconds(grace)); client.IgnoreNotFound(err) != nil {
		return 0, fmt.Errorf("stop pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return 1, nil
}

// SetupWithManager watches the RemoteNamespace replicas (fenceChanged) and
// the heartbeat Leases of their tenant namespaces. Its queue serves the
// tenants in turn (fairqueue.NewQueue): a tenant renewing its Lease, or
// changing its RemoteNamespaces, as fast as it can does not delay another
// tenant's fence.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	byLease := func(ctx context.Context, o client.Object) []reconcile.Request {
		if o.GetName() != corev1alpha1.HeartbeatLeaseName || !replicator.InTenantNamespace(o) {
			return nil
		}
		if lease, ok := o.(*coordinationv1.Lease); ok {
			// Stamped as the informer delivers it (the first sight counts;
			// tenantgc, sharing Heard, stamps it too).
			r.heard().Observe(lease)
		}
		// Only read: no copy of each of the tenant's RemoteNamespaces at
		// every renewal. Only those a fence is carried out for (Reconcile
		// does nothing else with the Lease); one becoming Ready is queued
		// by its own update.
		list := &offloadingv1alpha1.RemoteNamespaceList{}
		if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			if rn := &list.Items[i]; rn.Spec.FenceAfterSeconds != nil && rn.Status.Phase == offloadingv1alpha1.RemoteNamespaceReady {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rn)})
			}
		}
		return out
	}
	newQueue, err := fairqueue.ForTenants(mgr)
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("fencing").
		For(&offloadingv1alpha1.RemoteNamespace{}, builder.WithPredicates(fenceChanged())).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(byLease)).
		WithOptions(controller.Options{NewQueue: newQueue}).
		Complete(r)
}

// fenceChanged passes creations, deletions and generic events of
// RemoteNamespaces, and the updates that change what Reconcile reads: the
// UID, whether it is a replica (its origin annotation), its deletion, the
// fence asked for, the namespace it names, its phase and the fence armed.
// The tenant writes the RemoteNamespace and may change anything else (other
// annotations and labels) at will.
func fenceChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*offloadingv1alpha1.RemoteNamespace)
			n, ok2 := e.ObjectNew.(*offloadingv1alpha1.RemoteNamespace)
			if !ok1 || !ok2 {
				return true
			}
			return o.UID != n.UID || replicator.IsReplica(o) != replicator.IsReplica(n) ||
				!o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
				!ptr.Equal(o.Spec.FenceAfterSeconds, n.Spec.FenceAfterSeconds) ||
				o.Spec.RemoteNamespace != n.Spec.RemoteNamespace ||
				o.Status.Phase != n.Status.Phase ||
				!ptr.Equal(o.Status.FenceAfterSeconds, n.Status.FenceAfterSeconds)
		},
	}
}
