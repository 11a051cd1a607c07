package podreflector

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// FieldManager is the field manager of every write of the virtual node.
const FieldManager = "annex-virtual-node"

// Remotes gives access to providers; *remote.Manager implements it. Both
// methods fail while the provider cannot be used.
type Remotes interface {
	// Client returns a client whose every call is bounded by a timeout.
	Client(clusterID string) (client.Client, error)
	// Clientset is Client as a typed clientset: the reflector creates
	// ShadowPods with its REST client (see createShadowPod).
	Clientset(clusterID string) (kubernetes.Interface, error)
	// RESTConfig returns a config without a call timeout, for watches.
	RESTConfig(clusterID string) (*rest.Config, error)
}

// Config configures a Reflector.
type Config struct {
	// NodeName is the virtual node's name; NodeIP its InternalIP.
	NodeName string
	NodeIP   string
	// ProviderID is the provider's cluster ID; LocalClusterID this
	// cluster's, which labels every ShadowPod.
	ProviderID     string
	LocalClusterID string

	// Local is the local cluster's clientset (pod status writes and
	// deletions).
	Local kubernetes.Interface
	// Pods lists the pods bound to the node; PodsSynced reports its sync.
	// Its pods may carry only podstatus.StatusSpec of their spec.
	Pods       corev1listers.PodLister
	PodsSynced cache.InformerSynced

	// Remotes reaches the provider; Scheme decodes ShadowPods.
	Remotes Remotes
	Scheme  *runtime.Scheme

	// Recorder records Events on local pods; nil records none.
	Recorder events.EventRecorder
	// IPTranslator translates pod IPs; nil means IdentityIPTranslator.
	IPTranslator PodIPTranslator
	// Workers is the number of workers of each queue; default 4.
	Workers int
	// Log is the logger; Clock stamps conditions (default: real clock).
	Log   logr.Logger
	Clock clock.PassiveClock
}

// Reflector owns the pods of one virtual node (see the package
// documentation).
type Reflector struct {
	cfg        Config
	paramCodec runtime.ParameterCodec

	remoteQ workqueue.TypedRateLimitingInterface[string]
	statusQ workqueue.TypedRateLimitingInterface[string]

	// written holds, by pod key, the pod as the last status write returned
	// it, until the informer shows that write (see freshest).
	writtenMu sync.Mutex
	written   map[string]writtenPod

	mu     sync.Mutex
	runCtx context.Context // Run's context, nil before Run
	reach  Reachability
	// unreachableSince is when the provider was last found unreachable.
	unreachableSince time.Time
	namespaces       map[string]string // local namespace -> remote namespace (Ready ones)
	// namespacesSet: SetNamespaces was called once. Until then (a virtual
	// node just started, its reconciler not done yet) a namespace missing
	// from namespaces says nothing.
	namespacesSet bool
	virtualLabels map[string]string // VirtualNode.spec.labels
	sess          *session
	pending       map[string]pendingCreate
	deps          seenDependencies // ConfigMaps and Secrets seen on the provider
	seen          map[string]seenShadow
	// deleted holds the UID of each local pod the reflector deleted for
	// good (grace period 0) that the informer may still show: a sync of it
	// before the informer's deletion event has nothing left to do.
	deleted map[string]types.UID
	// reported are the problems of each pod's provider status already
	// recorded as Events; refusedPatch the metadata patch the provider
	// refused last for each pod (not sent again).
	reported     map[string]*reportedProblems
	refusedPatch map[string]refusedPatch

	// listWatch builds the ShadowPod list-watch of a remote namespace;
	// nil means restListWatch. Tests replace it.
	listWatch func(rc rest.Interface, remoteNamespace string) cache.ListerWatcher
	// podListWatch builds the list-watch of the provider's pods in a
	// remote namespace; nil means podListWatch. Tests replace it.
	podListWatch func(cs kubernetes.Interface, remoteNamespace string) cache.ListerWatcher
}

// seenShadow records that the pod with key (and UID) has a ShadowPod: the
// reflector created or adopted it (at), or saw it in the provider's
// informer (observed). It tells an informer lagging behind a creation from
// a ShadowPod deleted on the provider, without a remote call.
type seenShadow struct {
	uid      types.UID
	at       time.Time
	observed bool
}

// informerLag is how long after creating a ShadowPod the reflector trusts
// that the informer has not caught up yet, rather than reading the
// provider.
const informerLag = 5 * time.Second

// pendingCreate records why the pod with key has no ShadowPod yet.
type pendingCreate struct {
	uid     types.UID
	reason  string
	message string
	// failed: the provider refused the pod for good; it is Failed.
	failed bool
}

// New returns a Reflector. Its reachability is Unknown until
// SetReachability.
func New(cfg Config) *Reflector {
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.IPTranslator == nil {
		cfg.IPTranslator = IdentityIPTranslator
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	newQueue := func(name string, base, maxDelay time.Duration) workqueue.TypedRateLimitingInterface[string] {
		// controller-runtime's queue (the one its controllers use, all
		// priorities equal here) reports its metrics to controller-runtime's
		// registry, which the agent serves. client-go's own queue would
		// report to the metrics provider registered first in the process,
		// which is k8s.io/component-base's (imported with the kubelet
		// endpoint's API server library) and served nowhere.
		return priorityqueue.New(name, func(o *priorityqueue.Opts[string]) {
			o.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[string](base, maxDelay)
			o.Log = cfg.Log.WithName("queue")
		})
	}
	return &Reflector{
		cfg:        cfg,
		paramCodec: runtime.NewParameterCodec(cfg.Scheme),
		// Status writes only talk to the local API server: retry fast.
		statusQ:      newQueue(StatusQueueName(cfg.NodeName), 10*time.Millisecond, 10*time.Second),
		remoteQ:      newQueue(RemoteQueueName(cfg.NodeName), 100*time.Millisecond, 30*time.Second),
		written:      map[string]writtenPod{},
		namespaces:   map[string]string{},
		pending:      map[string]pendingCreate{},
		seen:         map[string]seenShadow{},
		deleted:      map[string]types.UID{},
		reported:     map[string]*reportedProblems{},
		refusedPatch: map[string]refusedPatch{},
	}
}

// StatusQueueName and RemoteQueueName name the work queues of the
// reflector of node nodeName: each queue's metrics (workqueue_adds_total,
// workqueue_depth, workqueue_queue_duration_seconds, ...) are reported
// under its name (labels name and controller) on the agent's metrics
// endpoint.
func StatusQueueName(nodeName string) string { return "pod-status-" + nodeName }

// RemoteQueueName: see StatusQueueName.
func RemoteQueueName(nodeName string) string { return "pod-remote-" + nodeName }

// Run runs the workers until ctx ends, and returns nil then. It waits for the pod informer to
// sync first: before that, a missing pod could not be told from a deleted
// one.
func (r *Reflector) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.runCtx != nil {
		r.mu.Unlock()
		return errors.New("podreflector: Run called twice")
	}
	r.runCtx = ctx
	if r.reach == Reachable {
		r.startSessionLocked()
	}
	r.mu.Unlock()

	var shutDown sync.Once // the queues' ShutDown may be called once
	stopQueues := func() {
		shutDown.Do(func() {
			r.remoteQ.ShutDown()
			r.statusQ.ShutDown()
		})
	}
	defer func() {
		stopQueues()
		r.mu.Lock()
		r.stopSessionLocked()
		r.mu.Unlock()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), r.cfg.PodsSynced) {
		return nil // stopped before the pods were listed
	}
	var wg sync.WaitGroup
	for range r.cfg.Workers {
		wg.Go(func() { r.work(ctx, r.statusQ, r.syncStatus) })
		wg.Go(func() { r.work(ctx, r.remoteQ, r.syncRemote) })
	}
	r.enqueueAllPods()
	wg.Go(func() {
		t := time.NewTicker(credentialsRecheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.recheckSession()
			}
		}
	})
	<-ctx.Done()
	stopQueues()
	wg.Wait()
	return nil
}

// work processes q with sync until q shuts down. An error requeues the key
// with backoff.
func (r *Reflector) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) error) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		func() {
			defer q.Done(key)
			defer utilruntime.HandleCrashWithContext(ctx)
			if err := sync(ctx, key); err != nil {
				if ctx.Err() == nil {
					r.cfg.Log.V(1).Info("Requeuing pod", "pod", key, "error", err.Error())
				}
				q.AddRateLimited(key)
				return
			}
			q.Forget(key)
		}()
	}
}

// enqueue queues key on both queues.
func (r *Reflector) enqueue(key string) {
	r.statusQ.Add(key)
	r.remoteQ.Add(key)
}

// enqueueAllPods queues every pod of the node, status first: marking pods
// NotReady must not wait behind remote work.
func (r *Reflector) enqueueAllPods() {
	pods, err := r.cfg.Pods.List(everything)
	if err != nil {
		r.cfg.Log.Error(err, "Cannot list the node's pods")
		return
	}
	for _, p := range pods {
		r.statusQ.Add(podKey(p.Namespace, p.Name))
	}
	for _, p := range pods {
		r.remoteQ.Add(podKey(p.Namespace, p.Name))
	}
}

// ResyncStatus queues the status of every pod of the node: something the
// translation depends on (the network link's view of the provider's pod
// CIDR) changed.
func (r *Reflector) ResyncStatus() {
	pods, err := r.cfg.Pods.List(everything)
	if err != nil {
		r.cfg.Log.Error(err, "Cannot list the node's pods")
		return
	}
	for _, p := range pods {
		r.statusQ.Add(podKey(p.Namespace, p.Name))
	}
}

// enqueueNamespace queues every pod of the node in local namespace ns.
func (r *Reflector) enqueueNamespace(ns string) {
	pods, err := r.cfg.Pods.Pods(ns).List(everything)
	if err != nil {
		r.cfg.Log.Error(err, "Cannot list the node's pods", "namespace", ns)
		return
	}
	for _, p := range pods {
		r.enqueue(podKey(p.Namespace, p.Name))
	}
}

// Reachability returns what the reflector knows about its provider.
func (r *Reflector) Reachability() Reachability {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reach
}

// SetVirtualLabels sets the labels of VirtualNode.spec.labels, which the
// pod spec sanitiser strips from node selectors.
func (r *Reflector) SetVirtualLabels(l map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.virtualLabels = copyMap(l)
}

func (r *Reflector) nodeIdentity() NodeIdentity {
	r.mu.Lock()
	defer r.mu.Unlock()
	return NodeIdentity{Name: r.cfg.NodeName, Labels: r.virtualLabels}
}

// SetNamespaces sets the local namespaces offloaded to the provider, each
// with the name of its Ready remote namespace. ShadowPods are watched in
// exactly those remote namespaces.
func (r *Reflector) SetNamespaces(m map[string]string) {
	r.mu.Lock()
	var changed []string
	for local, remote := range m {
		if r.namespaces[local] != remote {
			changed = append(changed, local)
		}
	}
	for local := range r.namespaces {
		if _, ok := m[local]; !ok {
			changed = append(changed, local)
		}
	}
	r.namespaces = copyMap(m)
	r.namespacesSet = true
	if r.sess != nil {
		r.syncWatchesLocked()
	}
	r.mu.Unlock()
	for _, ns := range changed {
		// New namespaces are queued again once their informer synced;
		// this surfaces the change in the pods' status at once.
		r.enqueueNamespace(ns)
	}
}

// remoteNamespace returns the remote namespace of local namespace ns.
func (r *Reflector) remoteNamespace(ns string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	remote, ok := r.namespaces[ns]
	return remote, ok
}

// namespacesKnown reports whether SetNamespaces was called: before, no
// namespace is known to be offloaded or not.
func (r *Reflector) namespacesKnown() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.namespacesSet
}

func (r *Reflector) statusContext() StatusContext {
	return StatusContext{
		ProviderID: r.cfg.ProviderID,
		NodeIP:     r.cfg.NodeIP,
		IPs:        r.cfg.IPTranslator,
		Now:        metav1.NewTime(r.cfg.Clock.Now()).Rfc3339Copy(),
	}
}

func (r *Reflector) setPending(key string, p pendingCreate) {
	r.mu.Lock()
	old, had := r.pending[key]
	r.pending[key] = p
	r.mu.Unlock()
	if !had || old != p {
		r.statusQ.Add(key)
	}
}

func (r *Reflector) clearPending(key string) {
	r.mu.Lock()
	delete(r.pending, key)
	r.mu.Unlock()
}

// markSeen records that the pod key with uid has a ShadowPod.
func (r *Reflector) markSeen(key string, uid types.UID, observed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.seen[key]; ok && old.uid == uid && (old.observed || !observed) {
		return
	}
	r.seen[key] = seenShadow{uid: uid, at: r.cfg.Clock.Now(), observed: observed}
}

// seenFor returns what is recorded about the ShadowPod of pod key with uid.
func (r *Reflector) seenFor(key string, uid types.UID) (seenShadow, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.seen[key]
	if !ok || s.uid != uid {
		return seenShadow{}, false
	}
	return s, true
}

func (r *Reflector) pendingFor(key string, uid types.UID) (pendingCreate, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pending[key]
	if !ok || p.uid != uid {
		return pendingCreate{}, false
	}
	return p, true
}

// maxReportedProblems bounds the distinct problems recorded as Events per
// pod: a provider that makes up a new one on every status change costs at
// most that many Events per pod.
const maxReportedProblems = 16

// reportedProblems are the problems recorded for the pod with uid.
type reportedProblems struct {
	uid  types.UID
	keys map[string]struct{}
	full bool
}

// reportProblems records a Warning Event on pod (key) for each problem of
// its provider status not recorded before, up to maxReportedProblems.
func (r *Reflector) reportProblems(key string, pod *corev1.Pod, problems []StatusProblem) {
	if len(problems) == 0 {
		return
	}
	var fresh []StatusProblem
	full := false
	r.mu.Lock()
	m := r.reported[key]
	if m == nil || m.uid != pod.UID {
		m = &reportedProblems{uid: pod.UID, keys: map[string]struct{}{}}
		r.reported[key] = m
	}
	for _, p := range problems {
		if _, ok := m.keys[p.key()]; ok || m.full {
			continue
		}
		if len(m.keys) == maxReportedProblems {
			m.full, full = true, true
			break
		}
		m.keys[p.key()] = struct{}{}
		fresh = append(fresh, p)
	}
	r.mu.Unlock()
	for _, p := range fresh {
		r.cfg.Log.Info("Refused part of the provider's pod status", "pod", key, "problem", p.String())
		r.event(pod, corev1.EventTypeWarning, ReasonProviderStatusRefused, "ReflectStatus",
			"%s: provider %s: %s", RuleProviderStatus, r.cfg.ProviderID, p)
	}
	if full {
		r.event(pod, corev1.EventTypeWarning, ReasonProviderStatusRefused, "ReflectStatus",
			"%s: provider %s: more than %d problems in the pod's status: the rest are not reported",
			RuleProviderStatus, r.cfg.ProviderID, maxReportedProblems)
	}
}

// refusedPatch is a metadata patch of a pod's ShadowPod that the provider
// refused.
type refusedPatch struct {
	uid  types.UID
	data string
}

// patchRefused says whether the provider already refused data for pod key
// with uid.
func (r *Reflector) patchRefused(key string, uid types.UID, data string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.refusedPatch[key]
	return ok && p.uid == uid && p.data == data
}

func (r *Reflector) setPatchRefused(key string, uid types.UID, data string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if data == "" {
		delete(r.refusedPatch, key)
		return
	}
	r.refusedPatch[key] = refusedPatch{uid: uid, data: data}
}

// forgetPod drops what the reflector remembers of the pod with key (it is
// gone).
func (r *Reflector) forgetPod(key string) {
	r.forgetWritten(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, key)
	delete(r.deleted, key)
	delete(r.reported, key)
	delete(r.refusedPatch, key)
}

// event records an Event on a local pod.
func (r *Reflector) event(pod *corev1.Pod, eventType, reason, action, note string, args ...any) {
	if r.cfg.Recorder != nil {
		r.cfg.Recorder.Eventf(pod, nil, eventType, reason, action, note, args...)
	}
}

// PodEventHandler returns the handler to add to the node's pod informer.
// A pod added or deleted is queued on both queues; an update only on the
// queues whose work it can change (onPodUpdate).
func (r *Reflector) PodEventHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.enqueueObject(obj) },
		UpdateFunc: r.onPodUpdate,
		DeleteFunc: func(obj any) {
			if o, ok := metaOf(obj); ok {
				r.forgetWritten(podKey(o.GetNamespace(), o.GetName()))
			}
			r.enqueueObject(obj)
		},
	}
}

func (r *Reflector) enqueueObject(obj any) {
	if o, ok := metaOf(obj); ok {
		r.enqueue(podKey(o.GetNamespace(), o.GetName()))
	}
}

func metaOf(obj any) (metav1.Object, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(metav1.Object)
	return o, ok
}

// onPodUpdate queues an updated local pod. The echo of the reflector's own
// status write queues nothing (whatever changed since that write was
// computed queued the pod itself); any other update queues the status, and
// the remote queue only when something it acts on changed (metadata,
// deletion, phase, the Offloaded condition), not for status churn.
func (r *Reflector) onPodUpdate(oldObj, obj any) {
	old, ok1 := oldObj.(*corev1.Pod)
	pod, ok2 := obj.(*corev1.Pod)
	if !ok1 || !ok2 {
		r.enqueueObject(obj)
		return
	}
	key := podKey(pod.Namespace, pod.Name)
	if r.isOwnWrite(key, pod) {
		return
	}
	r.statusQ.Add(key)
	if old.UID != pod.UID || !maps.Equal(old.Labels, pod.Labels) || !maps.Equal(old.Annotations, pod.Annotations) ||
		!old.DeletionTimestamp.Equal(pod.DeletionTimestamp) || old.Status.Phase != pod.Status.Phase ||
		wasOffloaded(old) != wasOffloaded(pod) {
		r.remoteQ.Add(key)
	}
}

// writtenPod is a pod as a status write returned it, and the
// resourceVersion the write was computed from.
type writtenPod struct {
	from string
	pod  *corev1.Pod
}

// recordWritten records the pod a status write of key returned (computed
// from resourceVersion from).
func (r *Reflector) recordWritten(key, from string, pod *corev1.Pod) {
	pod.ManagedFields = nil
	r.writtenMu.Lock()
	defer r.writtenMu.Unlock()
	r.written[key] = writtenPod{from: from, pod: pod}
}

func (r *Reflector) forgetWritten(key string) {
	r.writtenMu.Lock()
	defer r.writtenMu.Unlock()
	delete(r.written, key)
}

// isOwnWrite reports whether pod, from the informer, is what the last
// status write of key returned; the record is dropped then: the informer
// caught up.
func (r *Reflector) isOwnWrite(key string, pod *corev1.Pod) bool {
	r.writtenMu.Lock()
	defer r.writtenMu.Unlock()
	w, ok := r.written[key]
	if !ok || w.pod.UID != pod.UID || w.pod.ResourceVersion != pod.ResourceVersion {
		return false
	}
	delete(r.written, key)
	return true
}

// freshest returns the pod to compute key's status from: pod, from the
// informer, unless the informer has not caught up with the reflector's last
// status write of it yet (it still shows the version that write was
// computed from). A write from that older version would lose a conflict to
// the reflector's own write, and cost a read and a write more.
func (r *Reflector) freshest(key string, pod *corev1.Pod) *corev1.Pod {
	r.writtenMu.Lock()
	defer r.writtenMu.Unlock()
	w, ok := r.written[key]
	switch {
	case !ok:
		return pod
	case w.pod.UID == pod.UID && w.from == pod.ResourceVersion:
		return w.pod
	default:
		delete(r.written, key)
		return pod
	}
}

// --- helpers ---

func podKey(namespace, name string) string { return namespace + "/" + name }

func splitKey(key string) (string, string) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return "", key
	}
	return ns, name
}

// deleteLocal deletes the local pod (UID precondition) with grace period
// grace (nil: the pod's own). NotFound and a UID conflict are success. A
// pod deleted for good (grace 0) is remembered until the informer shows
// it gone (deletedFor), so that it is not deleted a second time: in a
// stream of deletions, one pod in three was synced again before the
// informer caught up, and its second deletion found nothing (404).
func (r *Reflector) deleteLocal(ctx context.Context, pod *corev1.Pod, grace *int64) error {
	uid := pod.UID
	err := r.cfg.Local.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: grace,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	if grace != nil && *grace == 0 {
		r.mu.Lock()
		r.deleted[podKey(pod.Namespace, pod.Name)] = uid
		r.mu.Unlock()
	}
	return nil
}

// deletedFor reports whether the local pod key with uid was deleted for
// good by deleteLocal.
func (r *Reflector) deletedFor(key string, uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.deleted[key]
	return ok && u == uid
}

// ShadowPodOrigin returns the origin UID (AnnotationOriginUID) of the
// ShadowPod of local pod namespace/name, "" when it has none; known is
// false while the provider's view of that namespace is not available (see
// lookup).
func (r *Reflector) ShadowPodOrigin(namespace, name string) (uid string, known bool) {
	sp, known := r.lookup(namespace, name)
	if sp == nil {
		return "", known
	}
	return OriginUID(sp), true
}
