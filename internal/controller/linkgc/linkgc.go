// Package linkgc owns the removal of network links whose peering is gone.
// A NetworkConfiguration made for a peering (label
// annex.dev/link-purpose=peering, written by `annexctl peer` and by
// `network connect` between clusters that peer) lives only as long as this
// cluster has a ForeignCluster for its remote cluster: an unpeering that
// stopped after the ForeignCluster went, or a ForeignCluster deleted by
// hand, leaves a link that nothing else would remove. The agent deletes it
// on its own, with a Warning Event LinkRemoved, without any command. (The
// gateway stops programming such a link as soon as the ForeignCluster is
// gone from the agent's cache, before this controller deletes it: see
// gatewayconfig and netview.CheckPeering.)
//
// Links for direct connections (link-purpose=direct) need no peering, and
// links made before the label existed are kept, not programmed without a
// ForeignCluster, until `network connect` records their purpose or
// `network disconnect` removes them.
package linkgc

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/netview"
)

// EventLinkRemoved is the reason of the Warning Event on a
// NetworkConfiguration the agent deleted because its peering is gone.
const EventLinkRemoved = "LinkRemoved"

// +kubebuilder:rbac:groups=networking.annex.dev,resources=networkconfigurations,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=core.annex.dev,resources=foreignclusters,verbs=get;list;watch

// Reconciler deletes the NetworkConfigurations of peerings that are gone.
type Reconciler struct {
	// Client reads NetworkConfigurations and ForeignClusters from the
	// manager's cache and deletes.
	Client client.Client
	// APIReader reads from the API server: a link is deleted only when the
	// API server confirms that no ForeignCluster is left for its peer (a
	// cache that has not seen a new peering's ForeignCluster yet must not
	// cost it its link).
	APIReader client.Reader
	Recorder  events.EventRecorder
}

// Reconcile checks one NetworkConfiguration.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	nc := &networkingv1alpha1.NetworkConfiguration{}
	if err := r.Client.Get(ctx, req.NamespacedName, nc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if gone, err := r.orphaned(ctx, r.Client, nc); err != nil || !gone {
		return ctrl.Result{}, err
	}
	// The cache says the peering is gone: ask the API server.
	live := &networkingv1alpha1.NetworkConfiguration{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, live); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if gone, err := r.orphaned(ctx, r.APIReader, live); err != nil || !gone {
		return ctrl.Result{}, err
	}
	// Only the link read just now: one written since (`network connect`
	// recording another purpose, or a new peering's) is decided again.
	uid, version := live.UID, live.ResourceVersion
	err := r.Client.Delete(ctx, live, client.Preconditions{UID: &uid, ResourceVersion: &version})
	switch {
	case apierrors.IsNotFound(err):
		return ctrl.Result{}, nil
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: time.Second}, nil // changed meanwhile: decided again
	case err != nil:
		return ctrl.Result{}, err
	}
	peer := live.Spec.RemoteClusterID
	ctrl.LoggerFrom(ctx).Info("Removed a network link whose peering is gone", "networkConfiguration", req.NamespacedName, "peer", peer)
	if r.Recorder != nil {
		r.Recorder.Eventf(live, nil, corev1.EventTypeWarning, EventLinkRemoved, "RemoveLink",
			"the link was made for the peering with %s, and this cluster has no ForeignCluster for %s any more: removed it", peer, peer)
	}
	return ctrl.Result{}, nil
}

// orphaned reports whether nc, as read through reader, was made for a
// peering of which reader shows no ForeignCluster.
func (r *Reconciler) orphaned(ctx context.Context, reader client.Reader, nc *networkingv1alpha1.NetworkConfiguration) (bool, error) {
	if !nc.DeletionTimestamp.IsZero() || netview.LinkPurpose(nc) != networkingv1alpha1.LinkPurposePeering {
		return false, nil
	}
	peered, err := Peered(ctx, reader, nc.Spec.RemoteClusterID)
	if err != nil {
		return false, err
	}
	return netview.Orphaned(nc, peered), nil
}

// Peered reports whether reader shows a ForeignCluster for cluster id (by
// spec.clusterID) that is not being deleted.
func Peered(ctx context.Context, reader client.Reader, id string) (bool, error) {
	fcs := &corev1alpha1.ForeignClusterList{}
	if err := reader.List(ctx, fcs); err != nil {
		return false, fmt.Errorf("list ForeignClusters: %w", err)
	}
	for i := range fcs.Items {
		if fc := &fcs.Items[i]; fc.Spec.ClusterID == id && fc.DeletionTimestamp.IsZero() {
			return true, nil
		}
	}
	return false, nil
}

// linksOf maps a ForeignCluster to the NetworkConfigurations with its
// cluster.
func (r *Reconciler) linksOf(ctx context.Context, o client.Object) []reconcile.Request {
	fc, ok := o.(*corev1alpha1.ForeignCluster)
	if !ok {
		return nil
	}
	list := &networkingv1alpha1.NetworkConfigurationList{}
	if err := r.Client.List(ctx, list, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list the network links of a ForeignCluster", "foreignCluster", fc.Name)
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if nc := &list.Items[i]; nc.Spec.RemoteClusterID == fc.Spec.ClusterID {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nc)})
		}
	}
	return out
}

// SetupWithManager registers the controller "linkgc": a change of a
// NetworkConfiguration, or a ForeignCluster appearing, changing or going,
// checks the links with that cluster.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("linkgc").
		For(&networkingv1alpha1.NetworkConfiguration{}).
		Watches(&corev1alpha1.ForeignCluster{}, handler.EnqueueRequestsFromMapFunc(r.linksOf)).
		Complete(r)
}
