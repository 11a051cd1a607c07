package podreflector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	vknode "github.com/virtual-kubelet/virtual-kubelet/node"
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

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// FieldManager is the field manager of every write of the virtual node.
const FieldManager = "annex-virtual-node"

// Remotes gives access to providers; *remote.Manager implements it. Both
// methods fail while the provider cannot be used.
type Remotes interface {
	// Client returns a client whose every call is bounded by a timeout.
	Client(clusterID string) (client.Client, error)
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
	// Pods lists the pods bound to the node (an informer with a
	// spec.nodeName field selector); PodsSynced reports its sync.
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

// Reflector is the provider of one virtual node. It implements
// node.PodLifecycleHandler and node.PodNotifier.
type Reflector struct {
	cfg        Config
	paramCodec runtime.ParameterCodec

	remoteQ workqueue.TypedRateLimitingInterface[string]
	statusQ workqueue.TypedRateLimitingInterface[string]

	mu     sync.Mutex
	runCtx context.Context // Run's context, nil before Run
	reach  Reachability
	// unreachableSince is when the provider was last found unreachable.
	unreachableSince time.Time
	namespaces       map[string]string // local namespace -> remote namespace (Ready ones)
	virtualLabels    map[string]string // VirtualNode.spec.labels
	sess             *session
	pending          map[string]pendingCreate
	deps             seenDependencies // ConfigMaps and Secrets seen on the provider
	seen             map[string]seenShadow
	// reported are the problems of each pod's provider status already
	// recorded as Events; refusedPatch the metadata patch the provider
	// refused last for each pod (not sent again).
	reported     map[string]*reportedProblems
	refusedPatch map[string]refusedPatch

	// listWatch builds the ShadowPod list-watch of a remote namespace;
	// nil means restListWatch. Tests replace it.
	listWatch func(rc rest.Interface, remoteNamespace string) cache.ListerWatcher
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

var (
	_ vknode.PodLifecycleHandler = (*Reflector)(nil)
	_ vknode.PodNotifier         = (*Reflector)(nil)
)

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
		return workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](base, maxDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
	}
	return &Reflector{
		cfg:        cfg,
		paramCodec: runtime.NewParameterCodec(cfg.Scheme),
		// Status writes only talk to the local API server: retry fast.
		statusQ:      newQueue("", 10*time.Millisecond, 10*time.Second),
		remoteQ:      newQueue("", 100*time.Millisecond, 30*time.Second),
		namespaces:   map[string]string{},
		pending:      map[string]pendingCreate{},
		seen:         map[string]seenShadow{},
		reported:     map[string]*reportedProblems{},
		refusedPatch: map[string]refusedPatch{},
	}
}

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

	defer func() {
		r.remoteQ.ShutDown()
		r.statusQ.ShutDown()
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
	r.remoteQ.ShutDown()
	r.statusQ.ShutDown()
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
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, key)
	delete(r.reported, key)
	delete(r.refusedPatch, key)
}

// event records an Event on a local pod.
func (r *Reflector) event(pod *corev1.Pod, eventType, reason, action, note string, args ...any) {
	if r.cfg.Recorder != nil {
		r.cfg.Recorder.Eventf(pod, nil, eventType, reason, action, note, args...)
	}
}

// PodEventHandler returns the handler to add to the node's pod informer:
// every event queues the pod.
func (r *Reflector) PodEventHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.enqueueObject(obj) },
		UpdateFunc: func(_, obj any) { r.enqueueObject(obj) },
		DeleteFunc: func(obj any) { r.enqueueObject(obj) },
	}
}

func (r *Reflector) enqueueObject(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if o, ok := obj.(metav1.Object); ok {
		r.enqueue(podKey(o.GetNamespace(), o.GetName()))
	}
}

// --- node.PodLifecycleHandler ---

// CreatePod queues pod; the remote queue creates its ShadowPod. It never
// fails: virtual-kubelet marks a pod whose creation failed as Failed when
// its restartPolicy is Never, and a provider that is unreachable or a remote
// namespace that is not Ready yet are not reasons for a pod to fail. Until
// the ShadowPod exists the pod's ConditionOffloaded says why.
func (r *Reflector) CreatePod(_ context.Context, pod *corev1.Pod) error {
	r.enqueue(podKey(pod.Namespace, pod.Name))
	return nil
}

// UpdatePod queues pod; the remote queue pushes label and annotation
// changes to its ShadowPod.
func (r *Reflector) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	r.enqueue(podKey(pod.Namespace, pod.Name))
	return nil
}

// DeletePod queues pod; the remote queue deletes its ShadowPod and, once it
// is gone, the local pod. While the provider is unreachable (or not probed
// yet) it fails, so that virtual-kubelet does not delete the local pod
// after its grace period: the pod stays terminating until the provider is
// back and its ShadowPod is deleted (see unreachable.go).
func (r *Reflector) DeletePod(_ context.Context, pod *corev1.Pod) error {
	r.enqueue(podKey(pod.Namespace, pod.Name))
	switch st := r.Reachability(); st {
	case Reachable, PermanentlyUnreachable:
		return nil
	default:
		return fmt.Errorf("provider %s is %s: deleting pod %s/%s is postponed until it answers again",
			r.cfg.ProviderID, st, pod.Namespace, pod.Name)
	}
}

// GetPod returns the pod as the provider runs it, from the ShadowPod
// informers; NotFound when there is no ShadowPod or the provider's view is
// not available.
func (r *Reflector) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	sp, known := r.lookup(namespace, name)
	if !known || sp == nil {
		return nil, errdefs.NotFoundf("no ShadowPod for pod %s/%s on provider %s", namespace, name, r.cfg.ProviderID)
	}
	return podFromShadow(sp, namespace, r.statusContext()), nil
}

// GetPodStatus returns the translated status of the pod's ShadowPod.
func (r *Reflector) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := r.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods returns the pods of every ShadowPod the reflector sees.
func (r *Reflector) GetPods(context.Context) ([]*corev1.Pod, error) {
	var pods []*corev1.Pod
	sc := r.statusContext()
	for _, w := range r.syncedWatches() {
		for _, obj := range w.informer.GetStore().List() {
			if sp, ok := obj.(*offloadingv1alpha1.ShadowPod); ok {
				pods = append(pods, podFromShadow(sp, w.local, sc))
			}
		}
	}
	return pods, nil
}

// NotifyPods implements node.PodNotifier. The callback is not used: the
// reflector writes pod status itself (see the package documentation), and
// implementing PodNotifier keeps virtual-kubelet from polling GetPodStatus.
func (r *Reflector) NotifyPods(context.Context, func(*corev1.Pod)) {}

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
// grace (nil: the pod's own). NotFound and a UID conflict are success.
func (r *Reflector) deleteLocal(ctx context.Context, pod *corev1.Pod, grace *int64) error {
	uid := pod.UID
	err := r.cfg.Local.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: grace,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
