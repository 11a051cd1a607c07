package virtualnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/predicates"
	"github.com/annexhq/annex/internal/grant"
	"github.com/annexhq/annex/internal/virtualnode/podreflector"
)

// Finalizer is held on every VirtualNode whose virtual node runs, so that
// its Node never outlives it.
const Finalizer = "annex.dev/virtual-node"

// Remotes is what the reconciler needs of internal/remote's Manager.
type Remotes interface {
	podreflector.Remotes
	// Reachable reports whether a provider currently passes its probes.
	Reachable(clusterID string) bool
	// OnTransition registers a callback for reachability transitions.
	OnTransition(fn func(clusterID string, reachable bool))
	// Subscribe returns a channel of reachability transition events.
	Subscribe() <-chan event.TypedGenericEvent[*corev1alpha1.ForeignCluster]
}

// Reconciler hosts one in-process virtual node per VirtualNode. Its RBAC
// markers are in internal/agent/rbac_virtualnode.go (controller-gen skips
// this package).
type Reconciler struct {
	client         client.Client
	remotes        Remotes
	localClusterID string
	opts           Options
	log            logr.Logger

	deps *nodeDeps
	wake chan event.TypedGenericEvent[*corev1alpha1.VirtualNode]

	mu      sync.Mutex
	runCtx  context.Context // the runnable's context; nil before it starts
	started chan struct{}   // closed when runCtx is set
	nodes   map[types.NamespacedName]*virtualNode
	// grantReported is, by ResourceSlice, the problems of its grant last
	// reported in an Event (grant.EventReason).
	grantReported map[types.NamespacedName]string
}

// NewReconciler returns the virtual node reconciler of the cluster
// localClusterID; remotes reaches the providers (a *remote.Manager). Call
// SetupWithManager to register it.
func NewReconciler(mgr ctrl.Manager, remotes Remotes, localClusterID string, opts Options) *Reconciler {
	return &Reconciler{
		client:         mgr.GetClient(),
		remotes:        remotes,
		localClusterID: localClusterID,
		opts:           opts.withDefaults(),
		log:            mgr.GetLogger().WithName("virtualnode"),
		wake:           make(chan event.TypedGenericEvent[*corev1alpha1.VirtualNode], 64),
		started:        make(chan struct{}),
		nodes:          map[types.NamespacedName]*virtualNode{},
		grantReported:  map[types.NamespacedName]string{},
	}
}

// SetupWithManager registers the controller and the runnable that hosts the
// virtual nodes (both run on the leader only), and subscribes to the
// providers' reachability transitions.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := r.opts.Validate(); err != nil {
		return err
	}
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.QPS, cfg.Burst = r.opts.KubeAPIQPS, r.opts.KubeAPIBurst
	cfg.UserAgent = "annex-virtual-node"
	// Pods, Nodes, Leases and Events are core types: protobuf saves the
	// agent and the API server a JSON encoding and decoding of every pod
	// event and status write (the API server encodes a watch event once
	// per format its watchers asked for, and the rest speak protobuf).
	cfg.ContentType = runtime.ContentTypeProtobuf
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("virtual nodes: build clientset: %w", err)
	}
	pods, err := sharedPods(mgr.GetCache())
	if err != nil {
		return err
	}
	r.deps = &nodeDeps{
		cs:             cs,
		pods:           pods,
		remotes:        r.remotes,
		scheme:         mgr.GetScheme(),
		recorder:       mgr.GetEventRecorder("annex-virtual-node"),
		localClusterID: r.localClusterID,
		opts:           r.opts,
		clock:          clock.RealClock{},
		wake:           r.enqueue,
	}
	if err := mgr.Add(manager.RunnableFunc(r.run)); err != nil {
		return err
	}
	r.remotes.OnTransition(r.onTransition)

	return ctrl.NewControllerManagedBy(mgr).
		Named("virtualnode").
		For(&corev1alpha1.VirtualNode{}, builder.WithPredicates(predicate.Or(predicates.SpecChanged(), deletionPredicate()))).
		Watches(&offloadingv1alpha1.NamespaceOffloading{}, r.namespaceOffloadingHandler()).
		Watches(&corev1alpha1.ForeignCluster{},
			handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
				return r.virtualNodesFor(ctx, foreignClusterID(o))
			}),
			builder.WithPredicates(predicate.Or(predicates.SpecChanged(), reachabilityConditionChanged()))).
		WatchesRawSource(source.Channel(r.remotes.Subscribe(),
			handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, fc *corev1alpha1.ForeignCluster) []reconcile.Request {
				return r.virtualNodesFor(ctx, fc.Name)
			}))).
		WatchesRawSource(source.Channel(r.wake, &handler.TypedEnqueueRequestForObject[*corev1alpha1.VirtualNode]{})).
		Watches(&corev1alpha1.ResourceSlice{},
			handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
				rs, ok := o.(*corev1alpha1.ResourceSlice)
				if !ok {
					return nil
				}
				return r.virtualNodesFor(ctx, rs.Spec.ProviderClusterID)
			})).
		Watches(&networkingv1alpha1.NetworkConfiguration{}, r.networkConfigurationHandler(),
			builder.WithPredicates(podCIDRViewChanged())).
		Complete(r)
}

// networkConfigurationHandler writes again the status of every pod on the
// virtual nodes of a NetworkConfiguration's remote cluster: which pod IPs
// are published, and how, depends on its view of the provider's pod CIDR
// (see netview.View.PodIP). It queues no reconcile.
func (r *Reconciler) networkConfigurationHandler() handler.EventHandler {
	resync := func(o client.Object) {
		nc, ok := o.(*networkingv1alpha1.NetworkConfiguration)
		if !ok {
			return
		}
		r.mu.Lock()
		var nodes []*virtualNode
		for _, n := range r.nodes {
			if n.clusterID == nc.Spec.RemoteClusterID {
				nodes = append(nodes, n)
			}
		}
		r.mu.Unlock()
		for _, n := range nodes {
			n.reflector.ResyncStatus()
		}
	}
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	return handler.Funcs{
		CreateFunc:  func(_ context.Context, e event.CreateEvent, _ queue) { resync(e.Object) },
		UpdateFunc:  func(_ context.Context, e event.UpdateEvent, _ queue) { resync(e.ObjectNew) },
		DeleteFunc:  func(_ context.Context, e event.DeleteEvent, _ queue) { resync(e.Object) },
		GenericFunc: func(_ context.Context, e event.GenericEvent, _ queue) { resync(e.Object) },
	}
}

// podCIDRViewChanged passes the NetworkConfiguration events that can change
// how a provider's pod IPs look here: creations, deletions, and updates of
// the remote pod CIDR, its remapping or the deletion timestamp.
func podCIDRViewChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*networkingv1alpha1.NetworkConfiguration)
			n, ok2 := e.ObjectNew.(*networkingv1alpha1.NetworkConfiguration)
			if !ok1 || !ok2 {
				return false
			}
			return o.Spec.RemoteClusterID != n.Spec.RemoteClusterID || o.Spec.Remote.PodCIDR != n.Spec.Remote.PodCIDR ||
				!equality.Semantic.DeepEqual(o.Status.RemappedRemote, n.Status.RemappedRemote) ||
				o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
		},
	}
}

// run is the runnable hosting the virtual nodes: they live as long as it.
func (r *Reconciler) run(ctx context.Context) error {
	r.mu.Lock()
	r.runCtx = ctx
	close(r.started)
	r.mu.Unlock()
	<-ctx.Done()
	r.mu.Lock()
	nodes := r.nodes
	r.nodes = map[types.NamespacedName]*virtualNode{}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(n.stop)
	}
	wg.Wait()
	return nil
}

// enqueue queues a reconcile of a VirtualNode without blocking.
func (r *Reconciler) enqueue(key types.NamespacedName) {
	ev := event.TypedGenericEvent[*corev1alpha1.VirtualNode]{Object: &corev1alpha1.VirtualNode{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
	select {
	case r.wake <- ev:
	default:
		go func() { r.wake <- ev }()
	}
}

// onTransition forwards a reachability transition to the provider's virtual
// nodes at once: their pods are marked within the transition, not at the
// next reconcile.
func (r *Reconciler) onTransition(clusterID string, reachable bool) {
	st := podreflector.Unreachable
	if reachable {
		st = podreflector.Reachable
	}
	r.mu.Lock()
	var nodes []*virtualNode
	for _, n := range r.nodes {
		if n.clusterID == clusterID {
			nodes = append(nodes, n)
		}
	}
	r.mu.Unlock()
	for _, n := range nodes {
		n.setProbe(st)
	}
}

// Reconcile starts, updates or stops the virtual node of one VirtualNode.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	select {
	case <-r.started:
	case <-ctx.Done():
		return ctrl.Result{}, ctx.Err()
	}
	log := logf.FromContext(ctx)
	vn := &corev1alpha1.VirtualNode{}
	if err := r.client.Get(ctx, req.NamespacedName, vn); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		// Gone without our finalizer (it was removed by hand): still clean up.
		if n := r.takeNode(req.NamespacedName); n != nil {
			n.stop()
			return ctrl.Result{}, r.deleteNode(ctx, n.name)
		}
		return ctrl.Result{}, nil
	}
	if !vn.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, vn)
	}
	if !controllerutil.ContainsFinalizer(vn, Finalizer) {
		patch := client.MergeFrom(vn.DeepCopy())
		controllerutil.AddFinalizer(vn, Finalizer)
		if err := r.client.Patch(ctx, vn, patch); err != nil {
			return ctrl.Result{}, err
		}
	}

	advertised, err := r.advertised(ctx, vn)
	if err != nil {
		return ctrl.Result{}, err
	}
	n, conflict, err := r.ensureNode(ctx, advertised)
	if err != nil {
		_ = r.writeStatus(ctx, vn, metav1.ConditionFalse, corev1alpha1.ReasonNodeNotRegistered, err.Error())
		return ctrl.Result{}, err
	}
	if conflict != "" {
		return ctrl.Result{}, r.writeStatus(ctx, vn, metav1.ConditionFalse, corev1alpha1.ReasonNodeNotRegistered, conflict)
	}

	permanent, reportedDown, err := r.foreignClusterState(ctx, vn.Spec.ClusterID)
	if err != nil {
		return ctrl.Result{}, err
	}
	n.setPermanent(permanent)
	n.refreshProbe(r.remotes.Reachable(vn.Spec.ClusterID), reportedDown)
	namespaces, err := r.namespacesFor(ctx, vn.Spec.ClusterID)
	if err != nil {
		return ctrl.Result{}, err
	}
	n.setNamespaces(namespaces)
	log.V(1).Info("Virtual node reconciled", "node", n.name, "reachability", n.reachability().String(), "namespaces", len(namespaces))

	status, reason, msg := virtualNodeCondition(n.isRegistered(), n.reachability(), n.name, vn.Spec.ClusterID)
	return ctrl.Result{}, r.writeStatus(ctx, vn, status, reason, msg)
}

// advertised returns vn with spec.resources as its Node advertises them:
// while the VirtualNode's namespace holds ResourceSlices for its provider,
// each resource is capped to what the provider granted them, and no more
// than they requested (grant.FromSlices); without any, spec.resources as
// they are (nothing there came from a provider). Granted amounts cut or
// ignored are reported once per change as a Warning Event on their
// ResourceSlice.
func (r *Reconciler) advertised(ctx context.Context, vn *corev1alpha1.VirtualNode) (*corev1alpha1.VirtualNode, error) {
	var list corev1alpha1.ResourceSliceList
	if err := r.client.List(ctx, &list, client.InNamespace(vn.Namespace)); err != nil {
		return nil, fmt.Errorf("list ResourceSlices in %s: %w", vn.Namespace, err)
	}
	granted, found, problems := grant.FromSlices(vn.Spec.ClusterID, list.Items)
	r.reportGrantProblems(ctx, vn.Namespace, vn.Spec.ClusterID, list.Items, problems)
	if !found {
		return vn, nil
	}
	out := vn.DeepCopy()
	out.Spec.Resources = grant.Cap(vn.Spec.Resources, granted)
	return out, nil
}

// reportGrantProblems records a Warning Event grant.EventReason on each
// ResourceSlice of provider in namespace whose grant has problems, when
// they differ from the ones reported last, and forgets the slices without.
func (r *Reconciler) reportGrantProblems(ctx context.Context, namespace, provider string, all []corev1alpha1.ResourceSlice, problems []grant.SliceProblems) {
	log := logf.FromContext(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	current := map[types.NamespacedName]bool{}
	for _, p := range problems {
		key := client.ObjectKeyFromObject(p.Slice)
		current[key] = true
		msg := grant.Describe(p.Problems)
		if r.grantReported[key] == msg {
			continue
		}
		r.grantReported[key] = msg
		log.Info("Provider's grant not advertised as written", "resourceSlice", key, "provider", provider, "problems", msg)
		if r.deps != nil && r.deps.recorder != nil {
			r.deps.recorder.Eventf(p.Slice, nil, corev1.EventTypeWarning, grant.EventReason, "Advertise",
				"provider %s: %s (the virtual node advertises at most what was requested)", provider, msg)
		}
	}
	for i := range all {
		if key := client.ObjectKeyFromObject(&all[i]); all[i].Spec.ProviderClusterID == provider && !current[key] {
			delete(r.grantReported, key)
		}
	}
	for key := range r.grantReported {
		if key.Namespace == namespace && !slices.ContainsFunc(all, func(rs corev1alpha1.ResourceSlice) bool { return rs.Name == key.Name }) {
			delete(r.grantReported, key) // the slice is gone
		}
	}
}

// ensureNode starts the virtual node of vn, restarts it when it failed or
// its identity changed, or updates it. conflict is set when another
// VirtualNode already hosts a Node of the same name.
func (r *Reconciler) ensureNode(ctx context.Context, vn *corev1alpha1.VirtualNode) (*virtualNode, string, error) {
	key := types.NamespacedName{Namespace: vn.Namespace, Name: vn.Name}
	r.mu.Lock()
	n := r.nodes[key]
	for k, other := range r.nodes {
		if k != key && other.name == vn.NodeName() {
			r.mu.Unlock()
			return nil, fmt.Sprintf("Node %s is already hosted for VirtualNode %s", other.name, k), nil
		}
	}
	r.mu.Unlock()
	if n != nil && (n.clusterID != vn.Spec.ClusterID || n.name != vn.NodeName()) {
		r.takeNode(key)
		n.stop()
		if n.name != vn.NodeName() {
			if err := r.deleteNode(ctx, n.name); err != nil {
				return nil, "", err
			}
		}
		n = nil
	}
	if n != nil {
		n.update(&vn.Spec)
		return n, "", nil
	}
	r.mu.Lock()
	runCtx := r.runCtx
	r.mu.Unlock()
	n = newVirtualNode(vn, r.deps, r.log)
	if err := n.start(runCtx); err != nil {
		return nil, "", fmt.Errorf("start virtual node %s: %w", vn.NodeName(), err)
	}
	r.mu.Lock()
	r.nodes[key] = n
	r.mu.Unlock()
	return n, "", nil
}

func (r *Reconciler) takeNode(key types.NamespacedName) *virtualNode {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.nodes[key]
	delete(r.nodes, key)
	return n
}

// drainPoll is how often a draining virtual node is looked at again.
const drainPoll = time.Second

// finalize removes the virtual node of a deleted VirtualNode. With a
// provider that is not permanently unreachable it first drains the node: it
// cordons it and deletes every pod bound to it with the pod's own grace
// period, while the virtual node keeps running and carries the deletions to
// the provider; replacements are scheduled elsewhere. It waits (requeueing)
// until no pod is left; a provider that stops answering meanwhile holds the
// drain until it answers again or is marked unreachable. With a permanently
// unreachable provider (forced unpeer) the pods are deleted at once, without
// a remote call. Then it stops the virtual node, deletes its Node and Lease,
// and releases the finalizer.
func (r *Reconciler) finalize(ctx context.Context, vn *corev1alpha1.VirtualNode) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(vn, Finalizer) {
		return ctrl.Result{}, nil
	}
	log := logf.FromContext(ctx)
	key := types.NamespacedName{Namespace: vn.Namespace, Name: vn.Name}
	name := vn.NodeName()
	permanent, _, err := r.foreignClusterState(ctx, vn.Spec.ClusterID)
	if err != nil {
		return ctrl.Result{}, err
	}
	if permanent {
		if err := r.forceDeletePods(ctx, name); err != nil {
			return ctrl.Result{}, err
		}
	} else {
		left, err := r.drain(ctx, name)
		if err != nil {
			return ctrl.Result{}, err
		}
		if left > 0 {
			log.Info("Draining the virtual node", "node", name, "podsLeft", left)
			return ctrl.Result{RequeueAfter: drainPoll}, nil
		}
	}
	if n := r.takeNode(key); n != nil {
		n.stop()
	}
	if err := r.deleteNode(ctx, name); err != nil {
		return ctrl.Result{}, err
	}
	patch := client.MergeFrom(vn.DeepCopy())
	controllerutil.RemoveFinalizer(vn, Finalizer)
	if err := r.client.Patch(ctx, vn, patch); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	log.Info("Virtual node removed", "node", name)
	return ctrl.Result{}, nil
}

// drain cordons Node name and deletes the pods bound to it that are not
// being deleted yet; it returns how many pods are still bound to it.
func (r *Reconciler) drain(ctx context.Context, name string) (int, error) {
	cs := r.deps.cs
	_, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("cordon Node %s: %w", name, err)
	}
	list, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		uid := p.UID
		err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	return len(list.Items), errors.Join(errs...)
}

// deleteNode deletes a Node and its Lease.
func (r *Reconciler) deleteNode(ctx context.Context, name string) error {
	cs := r.deps.cs
	if err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Node %s: %w", name, err)
	}
	err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Lease %s/%s: %w", corev1.NamespaceNodeLease, name, err)
	}
	return nil
}

// forceDeletePods deletes every pod bound to Node name with no grace period.
func (r *Reconciler) forceDeletePods(ctx context.Context, name string) error {
	pods := r.deps.cs.CoreV1().Pods(metav1.NamespaceAll)
	list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range list.Items {
		uid := p.UID
		err := r.deps.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// foreignClusterState reads the provider's ForeignCluster: permanent when it
// is gone or has spec.unreachable; reportedDown when its
// APIServerReachable condition is False.
func (r *Reconciler) foreignClusterState(ctx context.Context, clusterID string) (permanent, reportedDown bool, err error) {
	fc := &corev1alpha1.ForeignCluster{}
	err = r.client.Get(ctx, client.ObjectKey{Name: clusterID}, fc)
	if apierrors.IsNotFound(err) {
		var list corev1alpha1.ForeignClusterList
		if err := r.client.List(ctx, &list); err != nil {
			return false, false, err
		}
		fc = nil
		for i := range list.Items {
			if list.Items[i].Spec.ClusterID == clusterID {
				fc = &list.Items[i]
				break
			}
		}
		if fc == nil {
			return true, true, nil
		}
	} else if err != nil {
		return false, false, err
	}
	c := meta.FindStatusCondition(fc.Status.Conditions, corev1alpha1.ConditionAPIServerReachable)
	return fc.Spec.Unreachable, c != nil && c.Status == metav1.ConditionFalse, nil
}

// namespacesFor maps each local namespace offloaded to provider clusterID
// to its Ready remote namespace (NamespaceOffloading status).
func (r *Reconciler) namespacesFor(ctx context.Context, clusterID string) (map[string]string, error) {
	var list offloadingv1alpha1.NamespaceOffloadingList
	if err := r.client.List(ctx, &list); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, nso := range list.Items {
		if nso.Name != offloadingv1alpha1.NamespaceOffloadingName || !nso.DeletionTimestamp.IsZero() {
			continue
		}
		for _, e := range nso.Status.RemoteNamespaces {
			if e.ClusterID == clusterID && e.Phase == offloadingv1alpha1.RemoteNamespaceReady && e.RemoteNamespace != "" {
				out[nso.Namespace] = e.RemoteNamespace
			}
		}
	}
	return out, nil
}

// namespaceOffloadingHandler queues the VirtualNodes of the providers a
// NamespaceOffloading's status names, before or after a change: they gain
// or lose a remote namespace.
func (r *Reconciler) namespaceOffloadingHandler() handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		ids := map[string]bool{}
		for _, o := range objs {
			if nso, ok := o.(*offloadingv1alpha1.NamespaceOffloading); ok {
				for _, e := range nso.Status.RemoteNamespaces {
					ids[e.ClusterID] = true
				}
			}
		}
		for id := range ids {
			for _, req := range r.virtualNodesFor(ctx, id) {
				q.Add(req)
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
	}
}

// virtualNodesFor returns the requests of the VirtualNodes of provider
// clusterID, of every VirtualNode when clusterID is empty.
func (r *Reconciler) virtualNodesFor(ctx context.Context, clusterID string) []reconcile.Request {
	var list corev1alpha1.VirtualNodeList
	if err := r.client.List(ctx, &list); err != nil {
		logf.FromContext(ctx).Error(err, "Cannot list VirtualNodes")
		return nil
	}
	var reqs []reconcile.Request
	for _, vn := range list.Items {
		if clusterID == "" || vn.Spec.ClusterID == clusterID {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: vn.Namespace, Name: vn.Name}})
		}
	}
	return reqs
}

// virtualNodeCondition is the VirtualNode's Ready condition.
func virtualNodeCondition(registered bool, st podreflector.Reachability, node, clusterID string) (metav1.ConditionStatus, string, string) {
	switch {
	case !registered:
		return metav1.ConditionFalse, corev1alpha1.ReasonNodeNotRegistered, fmt.Sprintf("Node %s is not registered yet", node)
	case st == podreflector.Reachable:
		return metav1.ConditionTrue, corev1alpha1.ReasonNodeRegistered, fmt.Sprintf("Node %s is registered and provider %s is reachable", node, clusterID)
	case st == podreflector.Unknown:
		return metav1.ConditionUnknown, corev1alpha1.ReasonNodeRegistered, fmt.Sprintf("Node %s is registered; waiting for the first health probe of provider %s", node, clusterID)
	default:
		return metav1.ConditionFalse, corev1alpha1.ReasonProviderUnreachable,
			fmt.Sprintf("provider %s is %s, so Node %s is NotReady (see ForeignCluster %s)", clusterID, st, node, clusterID)
	}
}

// writeStatus patches the VirtualNode's status when it changes.
func (r *Reconciler) writeStatus(ctx context.Context, vn *corev1alpha1.VirtualNode, status metav1.ConditionStatus, reason, msg string) error {
	before := vn.DeepCopy()
	vn.Status.NodeName = vn.NodeName()
	meta.SetStatusCondition(&vn.Status.Conditions, metav1.Condition{
		Type: offloadingv1alpha1.ConditionReady, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: vn.Generation,
	})
	if equality.Semantic.DeepEqual(before.Status, vn.Status) {
		return nil
	}
	if err := r.client.Status().Patch(ctx, vn, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

func foreignClusterID(o client.Object) string {
	if fc, ok := o.(*corev1alpha1.ForeignCluster); ok && fc.Spec.ClusterID != "" {
		return fc.Spec.ClusterID
	}
	return o.GetName()
}

// deletionPredicate passes updates that set or clear the deletion
// timestamp.
func deletionPredicate() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

// reachabilityConditionChanged passes ForeignCluster updates that change
// its APIServerReachable condition's status.
func reachabilityConditionChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1alpha1.ForeignCluster)
		n, ok2 := e.ObjectNew.(*corev1alpha1.ForeignCluster)
		if !ok1 || !ok2 {
			return false
		}
		co := meta.FindStatusCondition(o.Status.Conditions, corev1alpha1.ConditionAPIServerReachable)
		cn := meta.FindStatusCondition(n.Status.Conditions, corev1alpha1.ConditionAPIServerReachable)
		return (co == nil) != (cn == nil) || (co != nil && cn != nil && co.Status != cn.Status)
	}}
}
