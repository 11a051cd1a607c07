// Package heartbeat owns the consumer's liveness signal to its providers: for
// every provider it renews a Lease in its tenant namespace there, so that a
// provider can tell a consumer that is gone (forcibly unpeered, deleted) from
// one that is merely quiet, and clean up after it — or fence it (stop the
// pods of its namespaces offloaded with failover). It also remembers, for
// failover, the last renewal it sent to each provider (Sent).
package heartbeat

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/controller/predicates"
)

// Remotes gives clients for peers.
type Remotes interface {
	Client(clusterID string) (client.Client, error)
}

// Reconciler renews the heartbeat Lease on each provider.
type Reconciler struct {
	Client         client.Client
	Remotes        Remotes
	LocalClusterID string
	Clock          clock.PassiveClock
	// Interval between renewals.
	Interval time.Duration
	// Sent, when set, records every renewal before it is sent.
	Sent *Sent
}

// Sent records, per provider, the renewTime of the last renewal this agent
// sent (whether or not it arrived: one that timed out may still have
// landed). A provider fences by the renewTime it holds, which is never
// later than this, so a release counted from it always comes after the
// fence. Renewals are not sent while a provider is unreachable.
type Sent struct {
	mu    sync.Mutex
	since time.Time
	last  map[string]time.Time
}

// Start marks the instant this agent became the one that renews the
// heartbeats (its start, or when it won the leader election): an earlier
// agent may have sent renewals up to then that this one never saw.
func (s *Sent) Start(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.since = now
}

// Last returns when the last renewal to clusterID was sent, never earlier
// than Start; false before Start.
func (s *Sent) Last(clusterID string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since.IsZero() {
		return time.Time{}, false
	}
	if t := s.last[clusterID]; t.After(s.since) {
		return t, true
	}
	return s.since, true
}

func (s *Sent) record(clusterID string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]time.Time{}
	}
	s.last[clusterID] = t
}

// Reconcile renews the heartbeat on one provider and schedules the next renewal.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	fc := &corev1alpha1.ForeignCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, fc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if fc.Spec.Unreachable || !fc.DeletionTimestamp.IsZero() || fc.Spec.CredentialsSecretRef == nil {
		return ctrl.Result{}, nil // not a provider we talk to
	}
	remote, err := r.Remotes.Client(fc.Spec.ClusterID)
	if err != nil {
		return ctrl.Result{RequeueAfter: r.Interval}, nil // reachability events do not matter: the next tick retries
	}
	now := metav1.NewMicroTime(r.Clock.Now())
	if r.Sent != nil {
		r.Sent.record(fc.Spec.ClusterID, now.Time)
	}
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: corev1alpha1.TenantNamespaceName(r.LocalClusterID), Name: corev1alpha1.HeartbeatLeaseName}
	switch err := remote.Get(ctx, key, lease); {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{corev1alpha1.LabelRemoteClusterID: r.LocalClusterID, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(r.LocalClusterID), AcquireTime: &now, RenewTime: &now,
				LeaseDurationSeconds: ptr.To(int32(r.Interval.Seconds()))},
		}
		if err := remote.Create(ctx, lease); err != nil {
			return r.failed(ctx, fc.Spec.ClusterID, err)
		}
	case err != nil:
		return r.failed(ctx, fc.Spec.ClusterID, err)
	default:
		patch := client.MergeFrom(lease.DeepCopy())
		if prev := lease.Spec.RenewTime; prev != nil && now.Sub(prev.Time) > 2*r.Interval {
			// A lapse: say so, for a provider that could not watch it.
			if lease.Annotations == nil {
				lease.Annotations = map[string]string{}
			}
			lease.Annotations[corev1alpha1.AnnotationHeartbeatLapseFrom] = prev.UTC().Format(time.RFC3339Nano)
			lease.Annotations[corev1alpha1.AnnotationHeartbeatLapseTo] = now.UTC().Format(time.RFC3339Nano)
		}
		lease.Spec.RenewTime = &now
		lease.Spec.HolderIdentity = ptr.To(r.LocalClusterID)
		if err := remote.Patch(ctx, lease, patch); err != nil {
			return r.failed(ctx, fc.Spec.ClusterID, err)
		}
	}
	return ctrl.Result{RequeueAfter: r.Interval}, nil
}

// failed logs a renewal that did not succeed and retries it within a
// second: returned as an error it would wait the work queue's growing
// backoff, and a provider that answers again after a few failures would
// see its heartbeat lapse (and fence) although this cluster is alive.
func (r *Reconciler) failed(ctx context.Context, provider string, err error) (ctrl.Result, error) {
	ctrl.LoggerFrom(ctx).Info("Heartbeat not renewed, retrying", "provider", provider, "error", err.Error())
	return ctrl.Result{RequeueAfter: min(r.Interval, time.Second)}, nil
}

// SetupWithManager runs one heartbeat per ForeignCluster.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Sent != nil {
		// Runs once this agent is the leader, as the reconciler does.
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			r.Sent.Start(r.Clock.Now())
			<-ctx.Done()
			return nil
		})); err != nil {
			return err
		}
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("heartbeat").
		For(&corev1alpha1.ForeignCluster{}, builder.WithPredicates(predicates.SpecChanged()))
	if sub, ok := r.Remotes.(subscriber); ok {
		// A provider that answers again is renewed at once, not at the
		// next tick: over a flapping link the ticks may keep missing the
		// moments it answers, and its fence would fall although this
		// cluster is alive.
		b = b.WatchesRawSource(source.Channel(sub.Subscribe(), &handler.TypedEnqueueRequestForObject[*corev1alpha1.ForeignCluster]{}))
	}
	return b.Complete(r)
}

// subscriber is what Remotes may also do: tell reachability changes.
type subscriber interface {
	Subscribe() <-chan event.TypedGenericEvent[*corev1alpha1.ForeignCluster]
}
