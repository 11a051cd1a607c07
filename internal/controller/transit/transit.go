// Package transit owns the transit addresses of a consumer's offloaded pods.
//
// Every pod bound to a virtual node gets one address of the consumer's
// external CIDR, written in its annotation annex.dev/transit-address, as
// soon as the cluster has more than one peer. When the consumer reflects an
// EndpointSlice to provider P, the endpoints whose pods run on another
// provider Q are expressed by their transit address (internal/netview): P
// routes to the consumer, the consumer forwards to Q. With a single peer no
// pod runs on "another" provider and none needs one: an address would cost
// every offloaded pod one more write of it for nothing. When a second peer
// appears every pod on a virtual node is given one.
//
// The annotation is the only record: after a restart the allocator is
// rebuilt from the annotations in the cache before anything new is handed
// out, so an address never changes while its pod lives and is never given to
// two pods. An annotation that cannot be kept (outside the external CIDR,
// or also claimed by an older pod) is replaced. An address is released when
// its pod is deleted, finishes (Succeeded or Failed) or leaves the virtual
// nodes; the allocator is next-fit, so it is not handed out again soon.
package transit

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/netview"
	"github.com/annexhq/annex/internal/network"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=core.annex.dev,resources=foreignclusters,verbs=get;list;watch

// Reconciler gives each pod on a virtual node a transit address.
type Reconciler struct {
	client client.Client
	alloc  *network.Allocator

	mu       sync.Mutex
	restored bool
}

// New returns a Reconciler handing out addresses of externalCIDR. c reads
// from the manager's cache and patches pods.
func New(c client.Client, externalCIDR netip.Prefix) (*Reconciler, error) {
	alloc, err := network.NewAllocator(externalCIDR, netip.PrefixFrom(network.GatewayAddr(externalCIDR.Masked()), 32))
	if err != nil {
		return nil, fmt.Errorf("transit addresses from %s: %w", externalCIDR, err)
	}
	return &Reconciler{client: c, alloc: alloc}, nil
}

// Reconcile keeps one pod's transit address.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	if err := r.restore(ctx); err != nil {
		return ctrl.Result{}, err
	}
	key := req.String()
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, req.NamespacedName, pod); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.alloc.Release(key)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	nodes, err := netview.VirtualNodes(ctx, r.client)
	if err != nil {
		return ctrl.Result{}, err
	}
	current, has := pod.Annotations[corev1alpha1.AnnotationTransitAddress]
	if !needsAddress(pod, nodes) || (len(nodes) < 2 && !has) {
		r.alloc.Release(key)
		return ctrl.Result{}, nil
	}
	addr, ok := r.alloc.Lookup(key)
	if !ok {
		if a, err := netip.ParseAddr(current); err == nil && r.alloc.Assign(key, a) == nil {
			return ctrl.Result{}, nil
		}
		if addr, err = r.alloc.Allocate(key); err != nil {
			return ctrl.Result{}, err
		}
	}
	if current == addr.String() {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFrom(pod.DeepCopy())
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[corev1alpha1.AnnotationTransitAddress] = addr.String()
	if err := r.client.Patch(ctx, pod, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Assigned a transit address", "address", addr.String())
	return ctrl.Result{}, nil
}

// needsAddress says whether pod runs, or will run, on a virtual node.
func needsAddress(pod *corev1.Pod, virtualNodes map[string]string) bool {
	if _, ok := virtualNodes[pod.Spec.NodeName]; !ok {
		return false
	}
	return !finished(pod)
}

func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// restore rebuilds the allocator from the annotations of live pods on
// virtual nodes, once, before the first address is handed out.
func (r *Reconciler) restore(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.restored {
		return nil
	}
	nodes, err := netview.VirtualNodes(ctx, r.client)
	if err != nil {
		return err
	}
	pods := &corev1.PodList{}
	if err := r.client.List(ctx, pods); err != nil {
		return err
	}
	// The oldest pod keeps a contested address.
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	kept := 0
	for i := range pods.Items {
		pod := &pods.Items[i]
		a, err := netip.ParseAddr(pod.Annotations[corev1alpha1.AnnotationTransitAddress])
		if err != nil || !needsAddress(pod, nodes) {
			continue
		}
		// A conflict leaves the pod without an entry: its own reconcile
		// gives it a new address.
		if r.alloc.Assign(client.ObjectKeyFromObject(pod).String(), a) == nil {
			kept++
		}
	}
	ctrl.LoggerFrom(ctx).Info("Restored transit addresses", "cidr", r.alloc.CIDR().String(), "addresses", kept)
	r.restored = true
	return nil
}

// SetupWithManager watches pods on virtual nodes and pods that carry a
// transit address, and ForeignClusters: a new peer may make every pod on a
// virtual node need an address.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	c := mgr.GetClient()
	allOnVirtualNodes := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.UnsafeDisableDeepCopy); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Cannot list pods")
			return nil
		}
		var out []reconcile.Request
		for i := range pods.Items {
			if p := &pods.Items[i]; strings.HasPrefix(p.Spec.NodeName, corev1alpha1.VirtualNodeNamePrefix) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
			}
		}
		return out
	})
	relevant := predicate.NewPredicateFuncs(func(o client.Object) bool {
		pod, ok := o.(*corev1.Pod)
		if !ok {
			return false
		}
		_, has := pod.Annotations[corev1alpha1.AnnotationTransitAddress]
		return has || strings.HasPrefix(pod.Spec.NodeName, corev1alpha1.VirtualNodeNamePrefix)
	})
	// Of a pod's updates only those that change what Reconcile looks at:
	// status churn (an offloaded pod's status written as it starts) is
	// not.
	changed := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Pod)
		n, ok2 := e.ObjectNew.(*corev1.Pod)
		if !ok1 || !ok2 {
			return true
		}
		return o.Spec.NodeName != n.Spec.NodeName || finished(o) != finished(n) ||
			o.Annotations[corev1alpha1.AnnotationTransitAddress] != n.Annotations[corev1alpha1.AnnotationTransitAddress]
	}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("transit").
		For(&corev1.Pod{}, builder.WithPredicates(relevant, changed)).
		Watches(&corev1alpha1.ForeignCluster{}, allOnVirtualNodes, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				return e.ObjectOld.(*corev1alpha1.ForeignCluster).Spec.ClusterID != e.ObjectNew.(*corev1alpha1.ForeignCluster).Spec.ClusterID
			},
		})).
		Complete(r)
}
