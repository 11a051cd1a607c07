package podreflector

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
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
// one ShadowPod informer per remote namespace. Cancelling ctx stops the
// informers and aborts every remote call made with it.
type session struct {
	ctx     context.Context
	cancel  context.CancelFunc
	cfg     *rest.Config // the provider's config the session was built from
	rest    rest.Interface
	watches map[string]*nsWatch // by local namespace
}

// nsWatch is the ShadowPod informer of one remote namespace.
type nsWatch struct {
	local, remote string
	informer      cache.SharedIndexInformer
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
	ctx, cancel := context.WithCancel(r.runCtx)
	r.sess = &session{ctx: ctx, cancel: cancel, cfg: cfg, rest: rc, watches: map[string]*nsWatch{}}
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
		w := &nsWatch{local: local, remote: remote, informer: r.newShadowPodInformer(s.rest, remote)}
		_, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { r.onShadowPod(w, obj) },
			UpdateFunc: func(old, obj any) { r.onShadowPodUpdate(w, old, obj) },
			DeleteFunc: func(obj any) { r.onShadowPod(w, obj) },
		})
		if err != nil {
			r.cfg.Log.Error(err, "Cannot watch ShadowPods", "remoteNamespace", remote)
			continue
		}
		ctx, cancel := context.WithCancel(s.ctx)
		w.cancel = cancel
		s.watches[local] = w
		go w.informer.RunWithContext(ctx)
		go func() {
			if !cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
				return
			}
			w.synced.Store(true)
			r.cfg.Log.V(1).Info("ShadowPods listed", "namespace", local, "remoteNamespace", remote,
				"count", len(w.informer.GetStore().ListKeys()))
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
	r.mu.Lock()
	var w *nsWatch
	if r.sess != nil {
		w = r.sess.watches[namespace]
	}
	r.mu.Unlock()
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
	inf := cache.NewSharedIndexInformer(newLW(rc, remoteNamespace), &offloadingv1alpha1.ShadowPod{}, 0, cache.Indexers{})
	// Only fails once the informer runs.
	_ = inf.SetTransform(trimShadowPod)
	return inf
}

// trimShadowPod is the transform of the ShadowPod informers: the cache
// keeps a ShadowPod's metadata without managedFields, its podLabels,
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
	sp.ManagedFields = nil
	sp.Spec.Pod = corev1.PodSpec{TerminationGracePeriodSeconds: sp.Spec.Pod.TerminationGracePeriodSeconds}
	return sp, nil
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
