package podreflector

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/podstatus"
	"github.com/annexhq/annex/internal/remote"
)

var everything = labels.Everything()

// Client-side rate limits of the watch client when the provider's config
// sets none: a session starts with one list per remote namespace.
const (
	watchQPS   = 20
	watchBurst = 50
)

// session is the reflector's view of the provider while it is reachable:
// a ShadowPod and a pod informer per remote namespace. Cancelling ctx stops
// the informers and aborts every remote call made with it.
type session struct {
	ctx     context.Context
	cancel  context.CancelFunc
	cfg     *rest.Config // the provider's config the session was built from
	rest    rest.Interface
	core    kubernetes.Interface // protobuf-encoded, for the provider's pods
	watches map[string]*nsWatch  // by local namespace
}

// nsWatch holds the informers of one remote namespace: its ShadowPods, and
// the pods the provider runs for them (labelled annex.dev/shadowpod), whose
// status is what the local pods show.
type nsWatch struct {
	local, remote string
	informer      cache.SharedIndexInformer
	pods          cache.SharedIndexInformer
	cancel        context.CancelFunc
	synced        atomic.Bool
}

// startSessionLocked starts a session if Run started and none runs.
func (r *Reflector) startSessionLocked() {
	if r.runCtx == nil || r.sess != nil || r.runCtx.Err() != nil {
		return
	}
	cfg, err := r.cfg.Remotes.RESTConfig(r.cfg.ProviderID)
	if err != nil {
		r.cfg.Log.Info("Cannot watch the provider's ShadowPods", "error", err.Error())
		return
	}
	rc, err := shadowPodRESTClient(cfg, r.cfg.Scheme)
	if err != nil {
		r.cfg.Log.Error(err, "Cannot build the provider's ShadowPod client")
		return
	}
	core, err := podClient(cfg)
	if err != nil {
		r.cfg.Log.Error(err, "Cannot build the provider's pod client")
		return
	}
	ctx, cancel := context.WithCancel(r.runCtx)
	r.sess = &session{ctx: ctx, cancel: cancel, cfg: cfg, rest: rc, core: core, watches: map[string]*nsWatch{}}
	r.syncWatchesLocked()
	r.cfg.Log.V(1).Info("Provider session started", "namespaces", len(r.sess.watches))
}

// credentialsRecheck is how often the reflector checks whether the
// provider's connection settings changed (a renewed token): the watches of a
// session keep the credentials they started with.
const credentialsRecheck = 15 * time.Second

// recheckSession restarts the session when the provider's connection
// settings changed since it started, and queues every pod then.
func (r *Reflector) recheckSession() {
	r.mu.Lock()
	if r.sess == nil || r.reach != Reachable {
		r.mu.Unlock()
		return
	}
	cfg, err := r.cfg.Remotes.RESTConfig(r.cfg.ProviderID)
	if err != nil || remote.SameConnection(cfg, r.sess.cfg) {
		r.mu.Unlock()
		return
	}
	r.cfg.Log.Info("The provider's credentials changed: restarting its watches")
	r.stopSessionLocked()
	r.startSessionLocked()
	r.mu.Unlock()
	r.enqueueAllPods()
}

// stopSessionLocked stops the session, if any.
func (r *Reflector) stopSessionLocked() {
	if r.sess == nil {
		return
	}
	r.sess.cancel()
	r.sess = nil
	r.cfg.Log.V(1).Info("Provider session stopped")
}

// syncWatchesLocked starts and stops namespace informers to match
// r.namespaces.
func (r *Reflector) syncWatchesLocked() {
	s := r.sess
	for local, w := range s.watches {
		if r.namespaces[local] != w.remote {
			w.cancel()
			delete(s.watches, local)
		}
	}
	for local, remote := range r.namespaces {
		if _, ok := s.watches[local]; ok {
			continue
		}
		w := &nsWatch{local: local, remote: remote, informer: r.newShadowPodInformer(s.rest, remote),
			pods: r.newPodInformer(s.core, remote)}
		_, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { r.onShadowPod(w, obj) },
			UpdateFunc: func(old, obj any) { r.onShadowPodUpdate(w, old, obj) },
			DeleteFunc: func(obj any) { r.onShadowPod(w, obj) },
		})
		if err == nil {
			// A change of a provider's pod can only change the status of
			// the local pod of the same name.
			_, err = w.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(obj any) { r.onRemotePod(w, obj) },
				UpdateFunc: func(_, obj any) { r.onRemotePod(w, obj) },
				DeleteFunc: func(obj any) { r.onRemotePod(w, obj) },
			})
		}
		if err != nil {
			r.cfg.Log.Error(err, "Cannot watch the remote namespace", "remoteNamespace", remote)
			continue
		}
		ctx, cancel := context.WithCancel(s.ctx)
		w.cancel = cancel
		s.watches[local] = w
		go w.informer.RunWithContext(ctx)
		go w.pods.RunWithContext(ctx)
		go func() {
			if !cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced, w.pods.HasSynced) {
				return
			}
			w.synced.Store(true)
			r.cfg.Log.V(1).Info("ShadowPods and their pods listed", "namespace", local, "remoteNamespace", remote,
				"shadowPods", len(w.informer.GetStore().ListKeys()), "pods", len(w.pods.GetStore().ListKeys()))
			// Reconcile the namespace with the remote truth: its pods, and
			// the ShadowPods whose pod may be gone (orphans).
			r.enqueueNamespace(local)
			for _, k := range w.informer.GetStore().ListKeys() {
				_, name, _ := cache.SplitMetaNamespaceKey(k)
				r.enqueue(podKey(local, name))
			}
		}()
	}
}

// onRemotePod queues the status of the local pod a provider's pod runs for.
func (r *Reflector) onRemotePod(w *nsWatch, obj any) {
	if o, ok := metaOf(obj); ok {
		r.statusQ.Add(podKey(w.local, o.GetName()))
	}
}

func (r *Reflector) onShadowPod(w *nsWatch, obj any) {
	if o, ok := metaOf(obj); ok {
		r.enqueue(podKey(w.local, o.GetName()))
	}
}

// onShadowPodUpdate queues the status of the ShadowPod's pod, and its
// remote sync only when what that acts on changed (not for a status
// change, most of a ShadowPod's updates).
func (r *Reflector) onShadowPodUpdate(w *nsWatch, oldObj, obj any) {
	old, ok1 := oldObj.(*offloadingv1alpha1.ShadowPod)
	sp, ok2 := obj.(*offloadingv1alpha1.ShadowPod)
	if !ok1 || !ok2 {
		r.onShadowPod(w, obj)
		return
	}
	key := podKey(w.local, sp.Name)
	r.statusQ.Add(key)
	if old.UID != sp.UID || old.Generation != sp.Generation || !old.DeletionTimestamp.Equal(sp.DeletionTimestamp) ||
		!maps.Equal(old.Annotations, sp.Annotations) || !maps.Equal(old.Spec.PodLabels, sp.Spec.PodLabels) ||
		!maps.Equal(old.Spec.PodAnnotations, sp.Spec.PodAnnotations) {
		r.remoteQ.Add(key)
	}
}

// lookup returns the ShadowPod of local pod namespace/name from the
// informers. known is false when the provider's view of that namespace is
// not available (provider not reachable, namespace not offloaded, informer
// not synced): then nothing may be concluded from a missing ShadowPod. The
// returned object belongs to the informer's cache: do not modify it. It is
// trimmed (trimShadowPod): of spec.pod it holds only what the reflector
// reads.
func (r *Reflector) lookup(namespace, name string) (sp *offloadingv1alpha1.ShadowPod, known bool) {
	w := r.watchOf(namespace)
	if w == nil || !w.synced.Load() {
		return nil, false
	}
	obj, ok, err := w.informer.GetStore().GetByKey(w.remote + "/" + name)
	if err != nil || !ok {
		return nil, true
	}
	sp, ok = obj.(*offloadingv1alpha1.ShadowPod)
	if !ok {
		return nil, true
	}
	return sp, true
}

// watchOf returns the informers of local namespace namespace in the current
// session, nil without a session or without a watch of that namespace.
func (r *Reflector) watchOf(namespace string) *nsWatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sess == nil {
		return nil
	}
	return r.sess.watches[namespace]
}

// remotePod returns the status of the provider's pod that runs sp (in the
// remote namespace of local namespace namespace), nil when there is none:
// not created yet, gone, not sp's (a previous ShadowPod's of the same name),
// or stopped by its deletion rather than finished on its own. The returned
// status belongs to the informer's cache and holds only what trimPod keeps.
func (r *Reflector) remotePod(namespace string, sp *offloadingv1alpha1.ShadowPod) *corev1.PodStatus {
	w := r.watchOf(namespace)
	if w == nil {
		return nil
	}
	obj, ok, err := w.pods.GetStore().GetByKey(w.remote + "/" + sp.Name)
	if err != nil || !ok {
		return nil
	}
	pod, ok := obj.(*providerPod)
	if !ok || pod.controller == "" || pod.controller != sp.UID {
		return nil
	}
	if pod.DeletionTimestamp != nil && podstatus.Finished(pod.status.Phase) {
		return nil
	}
	return &pod.status
}

// remoteStatus returns what the provider says about sp's pod: the status of
// its pod while there is one (remotePod), else the ShadowPod's own status (a
// refusal, a creation being retried, the final state of a pod that is gone).
func (r *Reflector) remoteStatus(namespace string, sp *offloadingv1alpha1.ShadowPod) offloadingv1alpha1.ShadowPodStatus {
	if st := r.remotePod(namespace, sp); st != nil {
		return podstatus.FromStatus(st)
	}
	return sp.Status
}

// remoteSaysNothing reports, without copying anything, that what the
// provider says about sp's pod says nothing yet: its pod is only being
// scheduled and started, or there is no pod and the ShadowPod has no
// status. Most events of a burst are such.
func (r *Reflector) remoteSaysNothing(namespace string, sp *offloadingv1alpha1.ShadowPod) bool {
	if st := r.remotePod(namespace, sp); st != nil {
		return podstatus.Starting(st)
	}
	return equality.Semantic.DeepEqual(sp.Status, offloadingv1alpha1.ShadowPodStatus{})
}

// sessionContext returns the context of the current session, nil without
// one. Remote calls use it so that they end when the provider becomes
// unreachable.
func (r *Reflector) sessionContext() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sess == nil {
		return nil
	}
	return r.sess.ctx
}

// newShadowPodInformer lists and watches the ShadowPods of this consumer in
// one remote namespace. Its cache holds them trimmed (trimShadowPod).
func (r *Reflector) newShadowPodInformer(rc rest.Interface, remoteNamespace string) cache.SharedIndexInformer {
	newLW := r.listWatch
	if newLW == nil {
		newLW = r.restListWatch
	}
	return trimmedInformer(newLW(rc, remoteNamespace), &offloadingv1alpha1.ShadowPod{}, trimShadowPod)
}

// trimmedInformer is an informer of lw's objects whose cache holds them
// as trim leaves them.
func trimmedInformer(lw cache.ListerWatcher, obj runtime.Object, trim cache.TransformFunc) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	_ = inf.SetTransform(trim) // only fails once the informer runs
	return inf
}

// trimShadowPod is the transform of the ShadowPod informers: the cache
// keeps a ShadowPod's metadata without managedFields and labels (the
// informer selects on them; nothing reads them), its podLabels,
// podAnnotations and status, and of spec.pod only
// terminationGracePeriodSeconds (syncGone). That is all the reflector
// reads of a cached ShadowPod. The pod spec and the managedFields of the
// status writes were more than half of a cached ShadowPod: with 1000
// offloaded pods this keeps megabytes of the consumer agent's heap.
func trimShadowPod(obj any) (any, error) {
	sp, ok := obj.(*offloadingv1alpha1.ShadowPod)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown
	}
	sp.ManagedFields, sp.Labels = nil, nil
	sp.Spec.Pod = corev1.PodSpec{TerminationGracePeriodSeconds: sp.Spec.Pod.TerminationGracePeriodSeconds}
	return sp, nil
}

// newPodInformer lists and watches the pods the provider runs for
// ShadowPods in one remote namespace (labelled annex.dev/shadowpod: the
// namespace is this consumer's alone). Its cache holds them trimmed
// (trimPod).
func (r *Reflector) newPodInformer(cs kubernetes.Interface, remoteNamespace string) cache.SharedIndexInformer {
	newLW := r.podListWatch
	if newLW == nil {
		newLW = podListWatch
	}
	return trimmedInformer(newLW(cs, remoteNamespace), &corev1.Pod{}, trimPod)
}

// providerPod is what the pod informers' caches keep of a provider's pod
// (trimPod): its name, namespace, resourceVersion and deletion timestamp,
// the UID of its controller, and of its status what podstatus.FromStatus
// and podstatus.Starting read. At 5000 offloaded pods, a whole *corev1.Pod
// per cached pod was megabytes of the consumer agent's heap for fields
// nothing reads.
type providerPod struct {
	metav1.ObjectMeta
	controller types.UID
	status     corev1.PodStatus
}

// trimPod is the transform of the pod informers: it turns a provider's pod
// into the providerPod that the cache keeps.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown
	}
	out := &providerPod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, ResourceVersion: pod.ResourceVersion,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		status: corev1.PodStatus{
			Phase: pod.Status.Phase, Reason: pod.Status.Reason, Message: pod.Status.Message,
			PodIP: pod.Status.PodIP, PodIPs: pod.Status.PodIPs, StartTime: pod.Status.StartTime,
			Conditions:            pod.Status.Conditions,
			InitContainerStatuses: pod.Status.InitContainerStatuses,
			ContainerStatuses:     pod.Status.ContainerStatuses,
		},
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		out.controller = ref.UID
	}
	return out, nil
}

// podSelector selects the pods a provider runs for ShadowPods: those with
// the label, whatever its value.
const podSelector = offloadingv1alpha1.LabelShadowPod

// podListWatch lists and watches the pods of podSelector in a remote
// namespace.
func podListWatch(cs kubernetes.Interface, remoteNamespace string) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = podSelector
			return cs.CoreV1().Pods(remoteNamespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = podSelector
			return cs.CoreV1().Pods(remoteNamespace).Watch(ctx, o)
		},
	}
}

// podClient returns a clientset for the provider's core API that speaks
// protobuf: pods decode several times faster than JSON.
func podClient(cfg *rest.Config) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if c.QPS == 0 && c.RateLimiter == nil {
		c.QPS, c.Burst = watchQPS, watchBurst
	}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("build the provider's pod client: %w", err)
	}
	return cs, nil
}

// shadowPodSelector selects the ShadowPods of this consumer.
func (r *Reflector) shadowPodSelector() string {
	return labels.SelectorFromSet(labels.Set{corev1alpha1.LabelRemoteClusterID: r.cfg.LocalClusterID}).String()
}

// restListWatch lists and watches ShadowPods with the provider's REST client.
func (r *Reflector) restListWatch(rc rest.Interface, remoteNamespace string) cache.ListerWatcher {
	selector := r.shadowPodSelector()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			list := &offloadingv1alpha1.ShadowPodList{}
			err := rc.Get().Namespace(remoteNamespace).Resource("shadowpods").
				VersionedParams(&o, r.paramCodec).Do(ctx).Into(list)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			o.Watch = true
			return rc.Get().Namespace(remoteNamespace).Resource("shadowpods").
				VersionedParams(&o, r.paramCodec).Watch(ctx)
		},
	}
}

// shadowPodRESTClient returns a REST client for the offloading API group of
// the cluster cfg reaches.
func shadowPodRESTClient(cfg *rest.Config, scheme *runtime.Scheme) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	gv := offloadingv1alpha1.GroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.QPS == 0 && c.RateLimiter == nil {
		c.QPS, c.Burst = watchQPS, watchBurst
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("build ShadowPod REST client: %w", err)
	}
	return rc, nil
}
