package reflection

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/predicates"
)

// SetupWithManager registers one controller per kind, named
// "reflection-<kind>", on mgr. Each reconciles one namespace at a time and is
// triggered by:
//
//   - local objects of the kind (EndpointSlices: also Services, whose
//     skip-reflection annotation decides whether their slices are
//     reflected), but only in namespaces that have a NamespaceOffloading;
//   - the namespace's NamespaceOffloading (a remote namespace becomes Ready);
//   - EndpointSlices only: pods whose transit address changes, and the
//     NetworkConfiguration with each provider (the EndpointTranslator reads
//     both);
//   - ForeignCluster creation, deletion and spec changes, and the
//     reachability transitions of Remotes.Subscribe: every namespace
//     offloaded to that provider.
//
// What the manager's cache holds: NamespaceOffloadings, ForeignClusters,
// Services and EndpointSlices in full, and only the metadata of ConfigMaps
// and Secrets (all cluster-wide, as informers cannot select namespaces by
// label). The data of ConfigMaps and Secrets is never cached: it is read
// with the uncached API reader, one namespace at a time, when an offloaded
// namespace is reconciled. Events from namespaces that are not offloaded are
// dropped before they are queued.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.reader = mgr.GetCache()
	if r.opts.LiveReader == nil {
		r.live = mgr.GetAPIReader()
	}
	if r.opts.Recorder == nil {
		r.recorder = mgr.GetEventRecorder("annex-reflection")
	}
	for _, kind := range r.opts.Kinds {
		if err := r.setupKind(mgr, kind); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reconciler) setupKind(mgr ctrl.Manager, kind Kind) error {
	ref := r.reflectors[kind]
	local := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.requestsForObject(ctx, kind, o)
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("reflection-" + strings.ToLower(string(kind))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles})
	switch kind {
	case KindConfigMap, KindSecret:
		b = b.WatchesMetadata(ref.object(), local)
	case KindEndpointSlice:
		b = b.Watches(ref.object(), local).Watches(&corev1.Service{}, local).
			Watches(&corev1.Pod{}, local, builder.WithPredicates(transitAddressChanged())).
			Watches(&networkingv1alpha1.NetworkConfiguration{},
				handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
					return r.requestsForProvider(ctx, kind, o.(*networkingv1alpha1.NetworkConfiguration).Spec.RemoteClusterID)
				}))
	default:
		b = b.Watches(ref.object(), local)
	}
	return b.
		Watches(&offloadingv1alpha1.NamespaceOffloading{},
			handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				return []reconcile.Request{request(kind, o.GetNamespace())}
			})).
		Watches(&corev1alpha1.ForeignCluster{},
			handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
				return r.requestsForProvider(ctx, kind, o.GetName())
			}),
			builder.WithPredicates(predicates.SpecChanged())).
		WatchesRawSource(source.Channel(r.remotes.Subscribe(),
			handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, fc *corev1alpha1.ForeignCluster) []reconcile.Request {
				return r.requestsForProvider(ctx, kind, fc.Name)
			}))).
		Complete(kindReconciler{Reconciler: r, kind: kind})
}

// transitAddressChanged passes pod events that change the pod's transit
// address, which the EndpointTranslator may use.
func transitAddressChanged() predicate.Predicate {
	addr := func(o client.Object) string { return o.GetAnnotations()[corev1alpha1.AnnotationTransitAddress] }
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return addr(e.Object) != "" },
		UpdateFunc:  func(e event.UpdateEvent) bool { return addr(e.ObjectOld) != addr(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// request is the request for kind in namespace: the name only makes logs
// readable.
func request(kind Kind, namespace string) reconcile.Request {
	return reconcile.Request{NamespacedName: client.ObjectKey{Namespace: namespace, Name: strings.ToLower(string(kind))}}
}

// requestsForObject queues the namespace of a local object if it is offloaded.
func (r *Reconciler) requestsForObject(ctx context.Context, kind Kind, o client.Object) []reconcile.Request {
	nso := &offloadingv1alpha1.NamespaceOffloading{}
	key := client.ObjectKey{Namespace: o.GetNamespace(), Name: offloadingv1alpha1.NamespaceOffloadingName}
	if err := r.reader.Get(ctx, key, nso); err != nil {
		if client.IgnoreNotFound(err) != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Cannot read the NamespaceOffloading", "namespace", o.GetNamespace())
		}
		return nil
	}
	return []reconcile.Request{request(kind, o.GetNamespace())}
}

// requestsForProvider queues every namespace offloaded to provider.
func (r *Reconciler) requestsForProvider(ctx context.Context, kind Kind, provider string) []reconcile.Request {
	list := &offloadingv1alpha1.NamespaceOffloadingList{}
	if err := r.reader.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list NamespaceOffloadings", "provider", provider)
		return nil
	}
	var reqs []reconcile.Request
	for _, nso := range list.Items {
		for _, s := range nso.Status.RemoteNamespaces {
			if s.ClusterID == provider {
				reqs = append(reqs, request(kind, nso.Namespace))
				break
			}
		}
	}
	return reqs
}
