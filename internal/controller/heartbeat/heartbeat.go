// Package heartbeat owns the consumer's liveness signal to its providers: for
// every provider it renews a Lease in its tenant namespace there, so that a
// provider can tell a consumer that is gone (forcibly unpeered, deleted) from
// one that is merely quiet, and clean up after it.
package heartbeat

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
			return ctrl.Result{RequeueAfter: r.Interval}, err
		}
	case err != nil:
		return ctrl.Result{RequeueAfter: r.Interval}, err
	default:
		patch := client.MergeFrom(lease.DeepCopy())
		lease.Spec.RenewTime = &now
		lease.Spec.HolderIdentity = ptr.To(r.LocalClusterID)
		if err := remote.Patch(ctx, lease, patch); err != nil {
			return ctrl.Result{RequeueAfter: r.Interval}, err
		}
	}
	return ctrl.Result{RequeueAfter: r.Interval}, nil
}

// SetupWithManager runs one heartbeat per ForeignCluster.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("heartbeat").
		For(&corev1alpha1.ForeignCluster{}, builder.WithPredicates(predicates.SpecChanged())).
		Complete(r)
}
