// Package tenantgc owns the provider's clean-up after consumers that are
// gone: a tenant whose consumer has not renewed its heartbeat Lease for a
// grace period (forcibly unpeered, deleted, or never came back) loses its
// remote namespaces with all their workloads, its tenant namespace with its
// credentials and RBAC, its ForeignCluster and the network link with it
// (NetworkConfiguration) — so nothing offloaded runs forever after its
// consumer forgot it. When this cluster also consumes that peer (a two-way
// peering), only the tenant goes: this cluster's own objects for the peer
// live in another namespace (annex-peer-<peer>), and the ForeignCluster and
// the network link stay, with role Provider.
package tenantgc

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
)

// Reconciler removes tenants whose consumer stopped renewing its heartbeat.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	// GracePeriod is how long a consumer may stay silent.
	GracePeriod time.Duration
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
	if !isTenant(ns) || !ns.DeletionTimestamp.IsZero() || consumer == "" {
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
	last := ns.CreationTimestamp.Time
	lease := &coordinationv1.Lease{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: corev1alpha1.HeartbeatLeaseName}, lease); {
	case err == nil && lease.Spec.RenewTime != nil && !lease.CreationTimestamp.Before(&ns.CreationTimestamp):
		last = lease.Spec.RenewTime.Time
	case err == nil && lease.Spec.RenewTime != nil:
		// A Lease older than its namespace is the heartbeat of an earlier
		// tenant namespace of the same name, still in the cache: a peering
		// made again right after this one was removed must not lose its new
		// tenant to its predecessor's silence (measured: the bench's
		// re-peering after a forced unpeer did).
		log.V(1).Info("ignoring a heartbeat Lease older than its tenant namespace", "consumer", consumer, "leaseCreated", lease.CreationTimestamp, "namespaceCreated", ns.CreationTimestamp)
	case err != nil && !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	deadline := last.Add(r.GracePeriod)
	now := r.Clock.Now()
	if now.Before(deadline) {
		return ctrl.Result{RequeueAfter: deadline.Sub(now) + time.Second}, nil
	}

	silent := now.Sub(last).Round(time.Second)
	log.Info("consumer silent for longer than the grace period, removing its tenant", "consumer", consumer, "silentFor", silent)
	nss := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, nss, client.MatchingLabels{corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}); err != nil {
		return ctrl.Result{}, err
	}
	both := fcErr == nil && fc.Status.Role == corev1alpha1.RoleBoth
	// The remote namespaces and the tenant namespace ns itself (labelled
	// alike; our own peer namespace for that cluster is labelled otherwise).
	for i := range nss.Items {
		if err := r.Client.Delete(ctx, &nss.Items[i]); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
	}
	if !both {
		if err := r.deleteLinks(ctx, consumer); err != nil {
			return ctrl.Result{}, err
		}
	}
	msg := fmt.Sprintf("consumer %s has not renewed its heartbeat for %s (grace period %s): removed its tenant, %d namespace(s) and the network link", consumer, silent, r.GracePeriod, len(nss.Items))
	if both {
		msg = fmt.Sprintf("consumer %s has not renewed its heartbeat for %s (grace period %s): removed its tenant and %d namespace(s); it stays a provider of this cluster", consumer, silent, r.GracePeriod, len(nss.Items))
	}
	if fcErr == nil {
		r.Recorder.Eventf(fc, nil, corev1.EventTypeWarning, "TenantRemoved", "RemoveTenant", msg)
		if both {
			patch := client.MergeFrom(fc.DeepCopy())
			fc.Status.Role, fc.Status.TenantNamespace = corev1alpha1.RoleProvider, ""
			if err := r.Client.Status().Patch(ctx, fc, patch); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, err
			}
		} else if err := r.Client.Delete(ctx, fc); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
	} else {
		r.Recorder.Eventf(ns, nil, corev1.EventTypeWarning, "TenantRemoved", "RemoveTenant", msg)
	}
	return ctrl.Result{}, nil
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

// SetupWithManager watches tenant namespaces and their heartbeat Leases.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	toNamespace := func(_ context.Context, o client.Object) []reconcile.Request {
		if o.GetName() != corev1alpha1.HeartbeatLeaseName {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.GetNamespace()}}}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("tenantgc").
		For(&corev1.Namespace{}, builder.WithPredicates(predicate.NewPredicateFuncs(isTenant))).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(toNamespace)).
		Complete(r)
}
