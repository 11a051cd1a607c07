package virtualnode

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	vknode "github.com/virtual-kubelet/virtual-kubelet/node"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/virtualnode/eventreflector"
	"github.com/annexhq/annex/internal/virtualnode/podreflector"
)

// nodeDeps are what every virtual node shares with the reconciler.
type nodeDeps struct {
	cs             kubernetes.Interface
	pods           toolscache.SharedIndexInformer // the manager's, with nodeIndex
	remotes        podreflector.Remotes
	scheme         *runtime.Scheme
	recorder       events.EventRecorder
	localClusterID string
	opts           Options
	clock          clock.PassiveClock
	// wake queues a reconcile of the VirtualNode (registration, exit).
	wake func(types.NamespacedName)
}

// virtualNode is one running virtual node: virtual-kubelet's node
// controller (Node, status, lease), the pod reflector, which owns the
// node's pods alone, and the event reflector. Both read the node's pods
// from the manager's pod informer (nodepods.go).
type virtualNode struct {
	key       types.NamespacedName
	clusterID string
	name      string
	deps      *nodeDeps
	log       logr.Logger
	reflector *podreflector.Reflector
	events    *eventreflector.Reflector

	mu         sync.Mutex
	spec       corev1alpha1.VirtualNodeSpec
	probe      podreflector.Reachability // Unknown, Reachable or Unreachable
	reported   podreflector.Reachability // last pushed to the reflector
	permanent  bool
	carried    *corev1.NodeCondition // the Node's Ready condition at start
	ready      corev1.NodeCondition  // last Ready condition built
	created    metav1.Time
	registered bool
	statusCb   func(*corev1.Node)
	cbCtx      context.Context

	dirty       chan struct{} // the Node's status must be pushed
	taintsDirty chan struct{} // the Node's taints must be synced
	cancel      context.CancelFunc
	done        chan struct{}
}

var _ vknode.NodeProvider = (*virtualNode)(nil)

func newVirtualNode(vn *corev1alpha1.VirtualNode, deps *nodeDeps, log logr.Logger) *virtualNode {
	name := vn.NodeName()
	return &virtualNode{
		key:         types.NamespacedName{Namespace: vn.Namespace, Name: vn.Name},
		clusterID:   vn.Spec.ClusterID,
		name:        name,
		deps:        deps,
		log:         log.WithValues("node", name, "clusterID", vn.Spec.ClusterID),
		spec:        *vn.Spec.DeepCopy(),
		created:     metav1.NewTime(deps.clock.Now()).Rfc3339Copy(),
		dirty:       make(chan struct{}, 1),
		taintsDirty: make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
}

// start starts the node's goroutines under parent; stop ends them.
func (n *virtualNode) start(parent context.Context) error {
	cs := n.deps.cs
	// Keep the existing Node's Ready condition until the provider's first
	// verdict (see readyCondition).
	if old, err := cs.CoreV1().Nodes().Get(parent, n.name, metav1.GetOptions{}); err == nil {
		for _, c := range old.Status.Conditions {
			if c.Type == corev1.NodeReady {
				n.carried = c.DeepCopy()
			}
		}
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("read Node %s: %w", n.name, err)
	}

	pods := nodePods{indexer: n.deps.pods.GetIndexer(), node: n.name}
	var reg toolscache.ResourceEventHandlerRegistration // set below, before anything runs
	synced := func() bool { return reg.HasSynced() }
	n.reflector = podreflector.New(podreflector.Config{
		NodeName:       n.name,
		NodeIP:         n.deps.opts.NodeIP,
		ProviderID:     n.clusterID,
		LocalClusterID: n.deps.localClusterID,
		Local:          cs,
		Pods:           pods,
		PodsSynced:     synced,
		Remotes:        n.deps.remotes,
		Scheme:         n.deps.scheme,
		Recorder:       n.deps.recorder,
		IPTranslator:   n.deps.opts.PodIPTranslator,
		Workers:        n.deps.opts.Workers,
		Log:            n.log.WithName("pods"),
		Clock:          n.deps.clock,
	})
	n.reflector.SetVirtualLabels(n.spec.Labels)
	n.events = eventreflector.New(eventreflector.Config{
		NodeName:   n.name,
		ProviderID: n.clusterID,
		Local:      cs,
		Pods:       pods,
		PodsSynced: synced,
		Remotes:    n.deps.remotes,
		Origin:     n.reflector.ShadowPodOrigin,
		Log:        n.log.WithName("events"),
		Clock:      n.deps.clock,
	})
	reg, err := n.deps.pods.AddEventHandler(toolscache.FilteringResourceEventHandler{FilterFunc: onNode(n.name),
		Handler: fanOut{n.reflector.PodEventHandler(), n.events.PodEventHandler()}})
	if err != nil {
		return fmt.Errorf("subscribe to the pods of node %s: %w", n.name, err)
	}
	ctx, cancel := context.WithCancel(parent)
	ctx = vklog.WithLogger(ctx, vkLogger{l: n.log.WithName("vk")})
	n.cancel = cancel
	n.pushReachability()

	var wg sync.WaitGroup
	wg.Go(func() {
		if err := n.reflector.Run(ctx); err != nil && ctx.Err() == nil {
			n.log.Error(err, "Pod reflector stopped")
		}
	})
	wg.Go(func() {
		if err := n.events.Run(ctx); err != nil && ctx.Err() == nil {
			n.log.Error(err, "Event reflector stopped")
		}
	})
	wg.Go(func() { n.runNodeController(ctx) })
	wg.Go(func() { n.runStatusNotifier(ctx) })
	wg.Go(func() { n.runTaintSync(ctx) })
	go func() {
		wg.Wait()
		_ = n.deps.pods.RemoveEventHandler(reg) // fails only once the informer stopped
		close(n.done)
	}()
	n.log.Info("Virtual node started")
	return nil
}

// stop stops the node and waits for its goroutines. The Node object is left
// as is.
func (n *virtualNode) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	<-n.done
	n.log.Info("Virtual node stopped")
}

// isRegistered reports whether the node controller registered the Node.
func (n *virtualNode) isRegistered() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.registered
}

// update applies a new VirtualNode spec (resources, labels, taints).
func (n *virtualNode) update(spec *corev1alpha1.VirtualNodeSpec) {
	n.mu.Lock()
	if equality.Semantic.DeepEqual(&n.spec, spec) {
		n.mu.Unlock()
		return
	}
	n.spec = *spec.DeepCopy()
	n.mu.Unlock()
	n.reflector.SetVirtualLabels(spec.Labels)
	signal(n.dirty)
	signal(n.taintsDirty)
}

// reachability is the provider's effective reachability.
func (n *virtualNode) reachability() podreflector.Reachability {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reachabilityLocked()
}

func (n *virtualNode) reachabilityLocked() podreflector.Reachability {
	if n.permanent {
		return podreflector.PermanentlyUnreachable
	}
	return n.probe
}

// setProbe records a probe verdict (Reachable or Unreachable). It does not
// block: remote.Manager calls it from OnTransition.
func (n *virtualNode) setProbe(st podreflector.Reachability) {
	n.mu.Lock()
	changed := n.probe != st
	n.probe = st
	n.mu.Unlock()
	if changed {
		n.pushReachability()
	}
}

// refreshProbe re-evaluates the probe state from remote.Manager's current
// verdict (reachable) and the ForeignCluster's APIServerReachable condition
// (reportedDown): it catches a transition that happened before the node
// started. It never goes back to Unknown.
func (n *virtualNode) refreshProbe(reachable, reportedDown bool) {
	n.mu.Lock()
	cur := n.probe
	n.mu.Unlock()
	switch {
	case reachable:
		n.setProbe(podreflector.Reachable)
	case cur == podreflector.Reachable || reportedDown:
		n.setProbe(podreflector.Unreachable)
	}
}

// setPermanent records whether the provider is permanently unreachable.
func (n *virtualNode) setPermanent(v bool) {
	n.mu.Lock()
	changed := n.permanent != v
	n.permanent = v
	n.mu.Unlock()
	if changed {
		n.pushReachability()
	}
}

// pushReachability hands the effective reachability to the reflector and
// schedules a Node status write.
func (n *virtualNode) pushReachability() {
	n.mu.Lock()
	st := n.reachabilityLocked()
	prev := n.reported
	n.reported = st
	n.mu.Unlock()
	if n.reflector != nil {
		n.reflector.SetReachability(st)
	}
	if n.events != nil {
		n.events.SetReachability(st)
	}
	signal(n.dirty)
	n.reachabilityEvent(prev, st)
}

// reachabilityEvent records an Event on the Node when the provider becomes
// unreachable or reachable again.
func (n *virtualNode) reachabilityEvent(prev, st podreflector.Reachability) {
	if n.deps.recorder == nil || prev == st {
		return
	}
	ref := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, UID: types.UID(n.name)}}
	switch st {
	case podreflector.Unreachable:
		n.deps.recorder.Eventf(ref, nil, corev1.EventTypeWarning, podreflector.ReasonProviderUnreachable, "MarkNotReady",
			"provider %s does not answer its health probes: node and its pods marked NotReady", n.clusterID)
	case podreflector.PermanentlyUnreachable:
		n.deps.recorder.Eventf(ref, nil, corev1.EventTypeWarning, podreflector.ReasonProviderUnreachable, "MarkNotReady",
			"provider %s is marked permanently unreachable (forced unpeer): node and its pods marked NotReady", n.clusterID)
	case podreflector.Reachable:
		if prev != podreflector.Unknown {
			n.deps.recorder.Eventf(ref, nil, corev1.EventTypeNormal, "ProviderReachable", "Resync",
				"provider %s answers again: pods follow the remote truth", n.clusterID)
		}
	}
}

// setNamespaces sets the offloaded namespaces (local -> remote).
func (n *virtualNode) setNamespaces(m map[string]string) {
	n.reflector.SetNamespaces(m)
	n.events.SetNamespaces(m)
}

// node builds the Node object from the current state.
func (n *virtualNode) node() *corev1.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	ready := readyCondition(n.clusterID, n.reachabilityLocked(), n.carried)
	switch {
	case n.ready.Type == "" && n.carried != nil && ready.Status == n.carried.Status:
		ready.LastTransitionTime = n.carried.LastTransitionTime
	case n.ready.Type != "" && n.ready.Status == ready.Status:
		ready.LastTransitionTime = n.ready.LastTransitionTime
	default:
		ready.LastTransitionTime = metav1.NewTime(n.deps.clock.Now()).Rfc3339Copy()
	}
	if ready.LastTransitionTime.IsZero() {
		ready.LastTransitionTime = n.created
	}
	n.ready = ready
	return buildNode(nodeParams{
		Name: n.name, ClusterID: n.clusterID, NodeIP: n.deps.opts.NodeIP, KubeletPort: n.deps.opts.KubeletPort,
		Spec: &n.spec, Ready: ready, Created: n.created,
	})
}

// Ping implements node.NodeProvider. It always succeeds: the node is as
// alive as the agent, and a failed ping would stop virtual-kubelet from
// writing the NotReady status of an unreachable provider.
func (n *virtualNode) Ping(context.Context) error { return nil }

// NotifyNodeStatus implements node.NodeProvider.
func (n *virtualNode) NotifyNodeStatus(ctx context.Context, cb func(*corev1.Node)) {
	n.mu.Lock()
	n.statusCb, n.cbCtx = cb, ctx
	n.mu.Unlock()
}

// runNodeController runs virtual-kubelet's node controller (registration,
// status, lease), restarting it with backoff when it fails.
func (n *virtualNode) runNodeController(ctx context.Context) {
	nodes := n.deps.cs.CoreV1().Nodes()
	leases := n.deps.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	backoff := time.Second
	for ctx.Err() == nil {
		nc, err := vknode.NewNodeController(n, n.node(), nodes,
			vknode.WithNodeEnableLeaseV1(leases, int32(n.deps.opts.LeaseDuration/time.Second)), //nolint:gosec // G115: seconds of a lease; 2^31 s is 68 years
			vknode.WithNodeStatusUpdateInterval(n.deps.opts.StatusUpdateInterval),
			vknode.WithNodeStatusUpdateErrorHandler(n.recreateNode),
		)
		if err != nil {
			n.log.Error(err, "Cannot create the node controller")
			return
		}
		ncCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-nc.Ready():
				n.onRegistered()
			case <-nc.Done():
			}
		}()
		err = nc.Run(ncCtx)
		cancel()
		n.mu.Lock()
		n.statusCb, n.registered = nil, false
		n.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		n.log.Error(err, "Node controller stopped; restarting", "after", backoff)
		n.deps.wake(n.key)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (n *virtualNode) onRegistered() {
	n.mu.Lock()
	n.registered = true
	n.mu.Unlock()
	n.log.Info("Node registered")
	signal(n.dirty)
	signal(n.taintsDirty)
	n.deps.wake(n.key)
}

// recreateNode is the node controller's status-update error handler: it
// creates the Node again when someone deleted it.
func (n *virtualNode) recreateNode(ctx context.Context, err error) error {
	if !apierrors.IsNotFound(err) {
		return err
	}
	n.log.Info("Node deleted behind the agent's back; creating it again")
	_, cerr := n.deps.cs.CoreV1().Nodes().Create(ctx, n.node(), metav1.CreateOptions{FieldManager: podreflector.FieldManager})
	if cerr != nil && !apierrors.IsAlreadyExists(cerr) {
		return cerr
	}
	signal(n.taintsDirty)
	return nil
}

// runStatusNotifier pushes the Node's status to the node controller each
// time it changes.
func (n *virtualNode) runStatusNotifier(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.dirty:
		}
		n.mu.Lock()
		cb, cbCtx, registered := n.statusCb, n.cbCtx, n.registered
		n.mu.Unlock()
		if cb == nil || !registered {
			continue // onRegistered signals again
		}
		node := n.node()
		// The callback blocks while the controller writes; it is abandoned
		// (and its goroutine ends with the controller's loop) if that
		// controller stops meanwhile.
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			cb(node)
		}()
		select {
		case <-sent:
		case <-cbCtx.Done():
		case <-ctx.Done():
			return
		}
	}
}

// runTaintSync keeps the Node's taints in line with the VirtualNode (the
// node controller only writes status, labels and annotations).
func (n *virtualNode) runTaintSync(ctx context.Context) {
	retryAfter := time.Duration(0)
	for {
		var timer <-chan time.Time
		if retryAfter > 0 {
			timer = time.After(retryAfter)
		}
		select {
		case <-ctx.Done():
			return
		case <-n.taintsDirty:
		case <-timer:
		}
		if !n.isRegistered() {
			retryAfter = 0
			continue
		}
		if err := n.syncTaints(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			n.log.Error(err, "Cannot update the Node's taints")
			retryAfter = min(max(2*retryAfter, time.Second), 30*time.Second)
			continue
		}
		retryAfter = 0
	}
}

func (n *virtualNode) syncTaints(ctx context.Context) error {
	n.mu.Lock()
	wanted := desiredTaints(n.clusterID, n.spec.Taints)
	n.mu.Unlock()
	nodes := n.deps.cs.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := nodes.Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		merged, changed := mergeTaints(node.Spec.Taints, decodeApplied(node.Annotations[AnnotationAppliedTaints]), wanted)
		applied := encodeApplied(wanted)
		if !changed && node.Annotations[AnnotationAppliedTaints] == applied {
			return nil
		}
		node.Spec.Taints = merged
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[AnnotationAppliedTaints] = applied
		_, err = nodes.Update(ctx, node, metav1.UpdateOptions{FieldManager: podreflector.FieldManager})
		return err
	})
}

// signal sets a level-triggered flag channel of capacity 1.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
