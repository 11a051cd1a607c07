package replicator

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/controller/predicates"
)

// SetupWithManager registers a controller named "replicator-<kind>" on mgr.
// It reads local objects and ForeignClusters from the manager's cache and is
// triggered by: local objects of the kind that carry the
// annex.dev/remote-cluster-id label or the replication finalizer;
// ForeignCluster creation, deletion and spec changes (for example
// spec.unreachable being set); and reachability transitions from
// Remotes.Subscribe. The last two enqueue every local object replicated, or
// to be replicated, to that cluster.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.reader = mgr.GetCache()
	forPeer := func(ctx context.Context, fc *corev1alpha1.ForeignCluster) []reconcile.Request {
		return r.requestsForPeer(ctx, fc.Name)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("replicator-"+strings.ToLower(r.gvk.Kind)).
		For(r.newObject(), builder.WithPredicates(predicate.NewPredicateFuncs(replicated))).
		Watches(&corev1alpha1.ForeignCluster{},
			handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
				return r.requestsForPeer(ctx, o.GetName())
			}),
			builder.WithPredicates(predicates.SpecChanged())).
		WatchesRawSource(source.Channel(r.remotes.Subscribe(),
			handler.TypedEnqueueRequestsFromMapFunc(forPeer))).
		Complete(r)
}

// replicated selects the local objects the replicator acts on: those asked to
// be replicated and those it still holds a finalizer on, never what a peer
// wrote here.
func replicated(o client.Object) bool {
	if IsReplica(o) || InTenantNamespace(o) {
		return false
	}
	_, ok := o.GetLabels()[corev1alpha1.LabelRemoteClusterID]
	return ok || controllerutil.ContainsFinalizer(o, Finalizer)
}

// requestsForPeer returns a request for every local object of the kind that
// is, or is to be, replicated to peer.
func (r *Reconciler) requestsForPeer(ctx context.Context, peer string) []reconcile.Request {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err := r.reader.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list objects to replicate", "peer", peer, "kind", r.gvk.Kind)
		return nil
	}
	var reqs []reconcile.Request
	for _, o := range list.Items {
		if IsReplica(&o) || InTenantNamespace(&o) {
			continue
		}
		if o.GetLabels()[corev1alpha1.LabelRemoteClusterID] == peer || o.GetAnnotations()[AnnotationReplicatedTo] == peer {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}})
		}
	}
	return reqs
}

// IsReplica reports whether o is a copy another cluster's replicator made
// here: it names its origin namespace (annex.dev/origin-namespace). Its
// remote-cluster-id label names its origin, not a target. This is what the
// object says about itself, which its writer controls: it is no trust
// boundary. The replicator never acts on an object of a tenant namespace
// (InTenantNamespace), annotated or not, and admission policy
// annex-tenant-namespace makes every object a tenant writes carry the
// annotation.
func IsReplica(o client.Object) bool {
	_, ok := o.GetAnnotations()[AnnotationOriginNamespace]
	return ok
}

// InTenantNamespace reports whether o lives in a tenant namespace
// ("annex-tenant-<peer>"), where a peer writes with its credential: nothing
// there is this cluster's own, whatever its labels and annotations say.
func InTenantNamespace(o client.Object) bool {
	return strings.HasPrefix(o.GetNamespace(), corev1alpha1.TenantNamespacePrefix)
}
