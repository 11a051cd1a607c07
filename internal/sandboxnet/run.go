package sandboxnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

// Timing of RunPods.
const (
	// resyncPeriod re-checks every pod (repairing what was changed behind
	// RunPods' back) and removes namespaces of pods that are gone.
	resyncPeriod = 30 * time.Second
	// retryBase and retryMax bound the backoff of a failing pod.
	retryBase = 250 * time.Millisecond
	retryMax  = 30 * time.Second
)

// gcKey is the queue item that removes the namespaces of gone pods; it
// cannot be a pod key (those have a slash).
const gcKey = "\x00gc"

// RunPods runs until ctx ends, giving every pod of the clusters that carries
// LabelSandboxNetns="true", is bound to a kwok node (KwokNodeAnnotation; pods
// on other nodes, such as Annex's virtual nodes, are skipped) and has an
// IPv4 status.podIP a namespace (PodNetns) attached to the cluster's router
// (see the package documentation) with an echo server on podIP:EchoPort.
// When a pod goes away (deleted, terminal, no longer labelled) its
// namespace, veth and route go too. It adopts namespaces an earlier run
// left (repairing them) and removes those whose pod is gone. A failing pod
// is logged and retried with backoff; only a kubeconfig it cannot load is
// an error. Setup must have made the routers (a missing one is retried like
// any other failure). Echo servers stop when RunPods returns; the
// namespaces stay for the next run (Teardown removes them).
func RunPods(ctx context.Context, log logr.Logger, clusters []Cluster) error {
	return defaultNaming.runPods(ctx, log, clusters)
}

func (n naming) runPods(ctx context.Context, log logr.Logger, clusters []Cluster) error {
	if err := requireRoot(); err != nil {
		return err
	}
	if err := validateClusters(clusters); err != nil {
		return err
	}
	var ctrls []*podController
	for _, c := range clusters {
		cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			return fmt.Errorf("cluster %s: kubeconfig %s: %w", c.Name, c.Kubeconfig, err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		ctrls = append(ctrls, newPodController(n, c.Name, cs, log.WithValues("cluster", c.Name)))
	}
	var wg sync.WaitGroup
	for _, pc := range ctrls {
		wg.Go(func() { pc.run(ctx) })
	}
	wg.Wait()
	return nil
}

// podController keeps one cluster's pod namespaces in step with its pods.
type podController struct {
	cluster string
	log     logr.Logger
	mgr     *podManager

	podInformer  cache.SharedIndexInformer
	nodeInformer cache.SharedIndexInformer
	pods         corelisters.PodLister
	nodes        corelisters.NodeLister
	podFactory   informers.SharedInformerFactory
	nodeFactory  informers.SharedInformerFactory
	queue        workqueue.TypedRateLimitingInterface[string]

	// made maps a pod key to the UID whose namespace this run ensured.
	made map[string]types.UID
}

func newPodController(n naming, cluster string, cs kubernetes.Interface, log logr.Logger) *podController {
	podFactory := informers.NewSharedInformerFactoryWithOptions(cs, resyncPeriod,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelSandboxNetns + "=true" }))
	nodeFactory := informers.NewSharedInformerFactory(cs, 0)
	pc := &podController{
		cluster:      cluster,
		log:          log,
		mgr:          newPodManager(n, cluster, log),
		podInformer:  podFactory.Core().V1().Pods().Informer(),
		nodeInformer: nodeFactory.Core().V1().Nodes().Informer(),
		pods:         podFactory.Core().V1().Pods().Lister(),
		nodes:        nodeFactory.Core().V1().Nodes().Lister(),
		podFactory:   podFactory,
		nodeFactory:  nodeFactory,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBase, retryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "sandboxnet-" + cluster}),
		made: map[string]types.UID{},
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			pc.queue.Add(key)
		}
	}
	_, _ = pc.podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	// A pod waits for its node (retrying); a node's arrival speeds that up.
	_, _ = pc.nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			node, ok := obj.(*corev1.Node)
			if !ok {
				return
			}
			pods, _ := pc.pods.List(labels.Everything())
			for _, p := range pods {
				if p.Spec.NodeName == node.Name {
					enqueue(p)
				}
			}
		},
	})
	return pc
}

func (pc *podController) run(ctx context.Context) {
	defer pc.mgr.close()
	defer pc.queue.ShutDown()
	pc.podFactory.Start(ctx.Done())
	pc.nodeFactory.Start(ctx.Done())
	defer pc.podFactory.Shutdown()
	defer pc.nodeFactory.Shutdown()
	pc.log.Info("Watching pods", "label", LabelSandboxNetns+"=true", "router", pc.mgr.naming.router(pc.cluster))
	if !cache.WaitForCacheSync(ctx.Done(), pc.podInformer.HasSynced, pc.nodeInformer.HasSynced) {
		return
	}
	pc.log.Info("Pods listed; adopting and cleaning up namespaces")
	pc.queue.Add(gcKey)
	go func() {
		t := time.NewTicker(resyncPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				pc.queue.Add(gcKey)
			}
		}
	}()
	go func() {
		<-ctx.Done()
		pc.queue.ShutDown()
	}()
	for pc.next() {
	}
}

// next handles one queue item; false when the queue shut down.
func (pc *podController) next() bool {
	key, quit := pc.queue.Get()
	if quit {
		return false
	}
	defer pc.queue.Done(key)
	var err error
	if key == gcKey {
		err = pc.gc()
	} else {
		err = pc.sync(key)
	}
	if err != nil {
		pc.log.Error(err, "Pod network not in step; retrying", "pod", key, "retries", pc.queue.NumRequeues(key))
		pc.queue.AddRateLimited(key)
		return true
	}
	pc.queue.Forget(key)
	return true
}

// wanted says whether pod should have a namespace, and with what; err means
// it cannot be told yet (its node is not known).
func (pc *podController) wanted(pod *corev1.Pod) (podInfo, bool, error) {
	if pod.Labels[LabelSandboxNetns] != "true" || pod.Spec.HostNetwork ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
		pod.Spec.NodeName == "" || pod.Status.PodIP == "" {
		return podInfo{}, false, nil
	}
	node, err := pc.nodes.Get(pod.Spec.NodeName)
	if apierrors.IsNotFound(err) {
		return podInfo{}, false, fmt.Errorf("node %s of the pod is not known yet", pod.Spec.NodeName)
	}
	if err != nil {
		return podInfo{}, false, err
	}
	if _, kwok := node.Annotations[KwokNodeAnnotation]; !kwok {
		return podInfo{}, false, nil
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil || !ip.Is4() {
		return podInfo{}, false, nil
	}
	return podInfo{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, IP: ip}, true, nil
}

// sync makes the namespace of the pod with key match the pod.
func (pc *podController) sync(key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	var want podInfo
	ok := false
	pod, err := pc.pods.Pods(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		if want, ok, err = pc.wanted(pod); err != nil {
			return err
		}
	}
	log := pc.log.WithValues("pod", key)
	if uid, had := pc.made[key]; had && (!ok || uid != want.UID) {
		if err := pc.mgr.remove(uid); err != nil {
			return err
		}
		delete(pc.made, key)
		log.Info("Pod network removed", "uid", uid, "netns", pc.mgr.naming.pod(pc.cluster, uid))
	}
	if !ok {
		return nil
	}
	changed, err := pc.mgr.ensure(want)
	pc.made[key] = want.UID // remove it even if ensure failed half-way
	if err != nil {
		return err
	}
	if changed {
		log.Info("Pod network ready", "uid", want.UID, "podIP", want.IP, "netns", pc.mgr.naming.pod(pc.cluster, want.UID))
	}
	return nil
}

// gc removes the namespaces of pods that should have none.
func (pc *podController) gc() error {
	pods, err := pc.pods.List(labels.Everything())
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	var pending []error
	for _, pod := range pods {
		want, ok, err := pc.wanted(pod)
		if err != nil {
			// Unknown yet: keep whatever it has.
			keep[pc.mgr.naming.pod(pc.cluster, pod.UID)] = true
			pending = append(pending, err)
			continue
		}
		if ok {
			keep[pc.mgr.naming.pod(pc.cluster, want.UID)] = true
		}
	}
	removed, err := pc.mgr.gc(keep)
	for _, name := range removed {
		pc.log.Info("Removed the namespace of a gone pod", "netns", name)
	}
	for key, uid := range pc.made {
		if !keep[pc.mgr.naming.pod(pc.cluster, uid)] {
			delete(pc.made, key)
		}
	}
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		pc.log.V(1).Info("Some pods wait for their node", "reason", errors.Join(pending...).Error())
	}
	return nil
}
