package virtualnode

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corev1listers "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
)

// The virtual nodes read their pods from the manager's pod informer, the
// one every controller of the agent shares (trimmed by the agent's cache
// transform), not from an informer of their own: a second cache of the
// same pods was a third of the consumer agent's heap at 5000 offloaded
// pods. nodeIndex indexes that informer by spec.nodeName; each node
// subscribes with a filter on its name and reads through nodePods.

// nodeIndex is the name of the pod informer's index on spec.nodeName.
const nodeIndex = "annex.dev/virtual-node"

// sharedPods returns the manager's pod informer with nodeIndex added. It
// does not wait for the cache to start.
func sharedPods(c ctrlcache.Cache) (toolscache.SharedIndexInformer, error) {
	inf, err := c.GetInformer(context.Background(), &corev1.Pod{}, ctrlcache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("virtual nodes: get the pod informer: %w", err)
	}
	sii, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("virtual nodes: the manager's pod informer is a %T, not a SharedIndexInformer", inf)
	}
	if err := sii.AddIndexers(toolscache.Indexers{nodeIndex: byNodeName}); err != nil {
		return nil, fmt.Errorf("virtual nodes: index pods by node: %w", err)
	}
	return sii, nil
}

func byNodeName(obj any) ([]string, error) {
	if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
		return []string{pod.Spec.NodeName}, nil
	}
	return nil, nil
}

// onNode returns a filter that passes the pods bound to node (a pod that
// gets bound passes as an addition).
func onNode(node string) func(any) bool {
	return func(obj any) bool {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		pod, ok := obj.(*corev1.Pod)
		return ok && pod.Spec.NodeName == node
	}
}

// fanOut hands each event to every handler, in order: a node's pod
// reflector and event reflector share one filtered subscription.
type fanOut []toolscache.ResourceEventHandler

func (f fanOut) OnAdd(obj any, isInInitialList bool) {
	for _, h := range f {
		h.OnAdd(obj, isInInitialList)
	}
}

func (f fanOut) OnUpdate(oldObj, newObj any) {
	for _, h := range f {
		h.OnUpdate(oldObj, newObj)
	}
}

func (f fanOut) OnDelete(obj any) {
	for _, h := range f {
		h.OnDelete(obj)
	}
}

// nodePods lists the pods bound to one node from the indexed informer.
type nodePods struct {
	indexer toolscache.Indexer
	node    string
}

var _ corev1listers.PodLister = nodePods{}

func (l nodePods) List(sel labels.Selector) ([]*corev1.Pod, error) {
	return l.list("", sel)
}

func (l nodePods) Pods(namespace string) corev1listers.PodNamespaceLister {
	return nodeNamespacePods{l: l, namespace: namespace}
}

func (l nodePods) list(namespace string, sel labels.Selector) ([]*corev1.Pod, error) {
	objs, err := l.indexer.ByIndex(nodeIndex, l.node)
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, o := range objs {
		pod, ok := o.(*corev1.Pod)
		if ok && (namespace == "" || pod.Namespace == namespace) && sel.Matches(labels.Set(pod.Labels)) {
			out = append(out, pod)
		}
	}
	return out, nil
}

type nodeNamespacePods struct {
	l         nodePods
	namespace string
}

func (n nodeNamespacePods) List(sel labels.Selector) ([]*corev1.Pod, error) {
	return n.l.list(n.namespace, sel)
}

// Get returns the pod if it is bound to the node; NotFound otherwise.
func (n nodeNamespacePods) Get(name string) (*corev1.Pod, error) {
	obj, exists, err := n.l.indexer.GetByKey(n.namespace + "/" + name)
	if err != nil {
		return nil, err
	}
	if pod, ok := obj.(*corev1.Pod); exists && ok && pod.Spec.NodeName == n.l.node {
		return pod, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("pod"), name)
}
