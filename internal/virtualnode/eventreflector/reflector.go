package eventreflector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	"github.com/annexhq/annex/internal/remote"
	"github.com/annexhq/annex/internal/virtualnode/podreflector"
)

// The agent lists the local Events of its sources when a session starts
// (seed), and writes Events (create, patch; declared elsewhere).
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// Limits of the local Events written per virtual node, given to client-go's
// EventCorrelator (see the package doc).
const (
	// SpamBurst and SpamQPS are the token bucket of the correlator's spam
	// filter, per local pod and event type: 25 Events at once, then one
	// every 5 minutes (client-go's defaults, set here on purpose).
	SpamBurst = 25
	SpamQPS   = 1.0 / 300
	// correlatorCache bounds the correlator's caches (LRU, entries).
	correlatorCache = 4096
	// aggregateMax and aggregateInterval: the correlator's aggregation of
	// similar Events (only of one provider Event here, see aggregateKey).
	aggregateMax      = 10
	aggregateInterval = 600
)

// DefaultRemoteTimeout bounds every list of the provider and of the local
// Events.
const DefaultRemoteTimeout = 30 * time.Second

// Remotes gives the provider's connection settings; *remote.Manager
// implements it.
type Remotes interface {
	RESTConfig(clusterID string) (*rest.Config, error)
}

// Config configures a Reflector.
type Config struct {
	// NodeName is the virtual node's name; ProviderID the provider's
	// cluster ID.
	NodeName, ProviderID string
	// Local is the local clientset (Events are written and listed there).
	Local kubernetes.Interface
	// Pods lists the pods bound to the node.
	Pods corev1listers.PodLister
	// PodsSynced reports whether Pods has listed once; until then a pod
	// it does not have may only be not listed yet. Nil: always synced.
	PodsSynced func() bool
	// Remotes reaches the provider.
	Remotes Remotes
	// Origin returns the origin UID of the ShadowPod of local pod
	// namespace/name (podreflector's ShadowPodOrigin); known is false while
	// the provider's ShadowPods are not listed.
	Origin func(namespace, name string) (uid string, known bool)
	// Recorder writes the local Events; nil: Run builds one on client-go's
	// EventBroadcaster with the limits above.
	Recorder record.EventRecorder
	// RemoteTimeout bounds every list; default DefaultRemoteTimeout.
	RemoteTimeout time.Duration
	Log           logr.Logger
	Clock         clock.PassiveClock
}

// Reflector reflects the provider Events of one virtual node's pods (see
// the package doc).
type Reflector struct {
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[string]
	state *reflected

	mu         sync.Mutex
	runCtx     context.Context
	recorder   record.EventRecorder
	reach      podreflector.Reachability
	namespaces map[string]string // local -> remote
	locals     map[string]string // remote -> local
	sess       *session
	seeded     bool
}

// session is the reflector's view of the provider while it is reachable.
type session struct {
	ctx     context.Context
	cancel  context.CancelFunc
	cfg     *rest.Config // the provider's config the session was built from
	cs      kubernetes.Interface
	watches map[string]*nsWatch // by remote namespace
	ready   chan struct{}       // closed once seeded
}

type nsWatch struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
}

// QueueName names the work queue of node nodeName's reflector: its
// client-go work queue metrics carry this name.
func QueueName(nodeName string) string { return "pod-events-" + nodeName }

// New returns a Reflector; its reachability is Unknown until
// SetReachability.
func New(cfg Config) *Reflector {
	if cfg.RemoteTimeout <= 0 {
		cfg.RemoteTimeout = DefaultRemoteTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	// controller-runtime's queue reports to the registry the agent serves
	// (see podreflector.New).
	q := priorityqueue.New(QueueName(cfg.NodeName), func(o *priorityqueue.Opts[string]) {
		o.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second)
		o.Log = cfg.Log.WithName("queue")
	})
	return &Reflector{
		cfg:        cfg,
		queue:      q,
		state:      newReflected(),
		recorder:   cfg.Recorder,
		namespaces: map[string]string{},
		locals:     map[string]string{},
	}
}

// Run reflects Events until ctx ends.
func (r *Reflector) Run(ctx context.Context) error {
	var broadcaster record.EventBroadcaster
	r.mu.Lock()
	if r.runCtx != nil {
		r.mu.Unlock()
		return errors.New("eventreflector: Run called twice")
	}
	r.runCtx = ctx
	if r.recorder == nil {
		broadcaster = record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{
			LRUCacheSize:         correlatorCache,
			BurstSize:            SpamBurst,
			QPS:                  SpamQPS,
			KeyFunc:              aggregateKey,
			MaxEvents:            aggregateMax,
			MaxIntervalInSeconds: aggregateInterval,
			Clock:                r.cfg.Clock,
		}))
		broadcaster.StartRecordingToSink(&annotatingSink{inner: &typedcorev1.EventSinkImpl{Interface: r.cfg.Local.CoreV1().Events("")}})
		r.recorder = broadcaster.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{
			Component: SourceComponent(r.cfg.ProviderID), Host: r.cfg.NodeName})
	}
	if r.reach == podreflector.Reachable {
		r.startSessionLocked()
	}
	r.mu.Unlock()

	done := make(chan struct{})
	go func() {
		defer close(done)
		for r.process(ctx) {
		}
	}()
	recheck := time.NewTicker(credentialsRecheck)
	defer recheck.Stop()
	for loop := true; loop; {
		select {
		case <-ctx.Done():
			loop = false
		case <-recheck.C:
			r.recheckSession()
		}
	}
	r.queue.ShutDown()
	<-done
	r.mu.Lock()
	r.stopSessionLocked()
	r.mu.Unlock()
	if broadcaster != nil {
		broadcaster.Shutdown()
	}
	return nil
}

// aggregateKey groups Events for the correlator's aggregation by the
// provider Event they reflect as well as by client-go's default key: Events
// reflected from different provider Events are never merged into one
// "(combined from similar events)" Event, which would lose the
// annotations that keep a restart from writing them again.
func aggregateKey(ev *corev1.Event) (string, string) {
	key, msg := record.EventAggregatorByReasonFunc(ev)
	return key + ev.Annotations[AnnotationProviderEventUID], msg
}

// annotatingSink is client-go's Event sink, except that a patch of an
// existing Event (a repeat the correlator counts) also updates the
// annotations, so that they always name the count last reflected.
type annotatingSink struct {
	inner record.EventSink
}

func (s *annotatingSink) Create(ev *corev1.Event) (*corev1.Event, error) { return s.inner.Create(ev) }
func (s *annotatingSink) Update(ev *corev1.Event) (*corev1.Event, error) { return s.inner.Update(ev) }

func (s *annotatingSink) Patch(ev *corev1.Event, data []byte) (*corev1.Event, error) {
	if len(ev.Annotations) > 0 {
		var p map[string]any
		if err := json.Unmarshal(data, &p); err == nil {
			p["metadata"] = map[string]any{"annotations": ev.Annotations}
			if d, err := json.Marshal(p); err == nil {
				data = d
			}
		}
	}
	return s.inner.Patch(ev, data)
}

// SetReachability starts the session when the provider becomes reachable
// and ends it otherwise.
func (r *Reflector) SetReachability(st podreflector.Reachability) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reach = st
	if st == podreflector.Reachable {
		r.startSessionLocked()
	} else {
		r.stopSessionLocked()
	}
}

// SetNamespaces sets the offloaded namespaces (local -> remote).
func (r *Reflector) SetNamespaces(m map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.namespaces = make(map[string]string, len(m))
	r.locals = make(map[string]string, len(m))
	for l, rem := range m {
		r.namespaces[l] = rem
		r.locals[rem] = l
	}
	if r.sess != nil {
		r.syncWatchesLocked()
	}
}

// PodEventHandler is the handler of the node's pod informer: it forgets
// what was reflected for pods that are gone.
func (r *Reflector) PodEventHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			r.state.forgetPod(p.Namespace + "/" + p.Name)
		}
	}}
}

func (r *Reflector) startSessionLocked() {
	if r.runCtx == nil || r.sess != nil || r.runCtx.Err() != nil {
		return
	}
	cfg, err := r.cfg.Remotes.RESTConfig(r.cfg.ProviderID)
	if err != nil {
		r.cfg.Log.Info("Cannot watch the provider's Events", "error", err.Error())
		return
	}
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf // Events are a core type
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		r.cfg.Log.Error(err, "Cannot build the provider's client")
		return
	}
	ctx, cancel := context.WithCancel(r.runCtx)
	s := &session{ctx: ctx, cancel: cancel, cfg: cfg, cs: cs, watches: map[string]*nsWatch{}, ready: make(chan struct{})}
	r.sess = s
	if r.seeded {
		close(s.ready)
	} else {
		go r.seed(s)
	}
	r.syncWatchesLocked()
}

// credentialsRecheck is how often the reflector checks whether the
// provider's connection settings changed (a renewed token): the watches of
// a session keep the credentials they started with.
const credentialsRecheck = 15 * time.Second

// recheckSession restarts the session when the provider's connection
// settings changed since it started. Its informers list again; what was
// reflected is not written again.
func (r *Reflector) recheckSession() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sess == nil || r.reach != podreflector.Reachable {
		return
	}
	cfg, err := r.cfg.Remotes.RESTConfig(r.cfg.ProviderID)
	if err != nil || remote.SameConnection(cfg, r.sess.cfg) {
		return
	}
	r.cfg.Log.Info("The provider's credentials changed: restarting its Event watches")
	r.stopSessionLocked()
	r.startSessionLocked()
}

func (r *Reflector) stopSessionLocked() {
	if r.sess == nil {
		return
	}
	r.sess.cancel()
	r.sess = nil
}

// seed reads what was already reflected from the local Events of this
// reflector's source, retrying until it succeeds or the session ends; the
// session's Events are processed only after.
func (r *Reflector) seed(s *session) {
	backoff := time.Second
	for {
		events, err := r.listLocal(s.ctx)
		if err == nil {
			r.state.seed(events)
			r.mu.Lock()
			r.seeded = true
			r.mu.Unlock()
			r.cfg.Log.V(1).Info("Reflected Events read", "events", len(events))
			close(s.ready)
			return
		}
		r.cfg.Log.Info("Cannot list the reflected Events; retrying", "error", err.Error(), "after", backoff)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
}

// listLocal lists the local Events whose source is this reflector's, page
// by page.
func (r *Reflector) listLocal(ctx context.Context) ([]corev1.Event, error) {
	var out []corev1.Event
	opts := metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("source", SourceComponent(r.cfg.ProviderID)).String(),
		Limit:         500,
	}
	for {
		lctx, cancel := context.WithTimeout(ctx, r.cfg.RemoteTimeout)
		list, err := r.cfg.Local.CoreV1().Events("").List(lctx, opts)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, ev := range list.Items {
			if ev.Source.Host == r.cfg.NodeName {
				out = append(out, ev)
			}
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

// syncWatchesLocked starts and stops the Event informers of the remote
// namespaces to match r.namespaces.
func (r *Reflector) syncWatchesLocked() {
	s := r.sess
	for remote, w := range s.watches {
		if _, ok := r.locals[remote]; !ok {
			w.cancel()
			delete(s.watches, remote)
		}
	}
	for remote := range r.locals {
		if _, ok := s.watches[remote]; ok {
			continue
		}
		inf := cache.NewSharedIndexInformer(r.listWatch(s.cs, remote), &corev1.Event{}, 0, cache.Indexers{})
		_ = inf.SetTransform(trimEvent) // only fails once the informer runs
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { r.enqueue(obj) },
			UpdateFunc: func(_, obj any) { r.enqueue(obj) },
			DeleteFunc: r.onDelete,
		})
		if err != nil {
			r.cfg.Log.Error(err, "Cannot watch Events", "remoteNamespace", remote)
			continue
		}
		ctx, cancel := context.WithCancel(s.ctx)
		s.watches[remote] = &nsWatch{informer: inf, cancel: cancel}
		go func() {
			// Nothing is processed before the reflected Events are read.
			select {
			case <-ctx.Done():
				return
			case <-s.ready:
			}
			inf.RunWithContext(ctx)
		}()
	}
}

// notScheduled is the field selector of the provider Events watched: the
// provider scheduler's Scheduled Event of every pod is never reflected
// (Reflectable), and the provider's API server keeps it for an hour, so an
// informer that received it would hold one entry per pod the provider ran
// in that hour (9.5 MB after 35,000 pods, measured) and decode one watch
// event per offloaded pod for nothing. The scheduler records no Warning of
// that reason (its failures are FailedScheduling).
var notScheduled = fields.OneTermNotEqualSelector("reason", ReasonScheduled).String()

// listWatch lists and watches the Events of one remote namespace but the
// Scheduled ones (notScheduled); each list is bounded by the remote timeout
// (a watch by the API server's).
func (r *Reflector) listWatch(cs kubernetes.Interface, remote string) cache.ListerWatcher {
	events := cs.CoreV1().Events(remote)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			ctx, cancel := context.WithTimeout(ctx, r.cfg.RemoteTimeout)
			defer cancel()
			o.FieldSelector = notScheduled
			return events.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = notScheduled
			return events.Watch(ctx, o)
		},
	}
}

// trimEvent keeps of a provider Event what the reflector reads, its message
// already bounded: the informer's cache holds no more per Event than that.
// Of an Event that is never reflected (Reflectable: Events about other
// objects, malformed ones; Scheduled Events are not even watched) it keeps
// only the name, as metadata: the cache must still list it (a relist
// compares keys) but nothing reads it, and it is not queued.
func trimEvent(obj any) (any, error) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return obj, nil
	}
	if !Reflectable(ev) {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name: ev.Name, Namespace: ev.Namespace, ResourceVersion: ev.ResourceVersion,
		}}, nil
	}
	ev.ManagedFields = nil
	ev.Annotations, ev.Labels = nil, nil
	ev.Message = truncate(ev.Message, MaxMessageBytes)
	ev.Reason = truncate(ev.Reason, MaxReasonLength+1)
	ev.Related = nil
	return ev, nil
}

func (r *Reflector) enqueue(obj any) {
	if ev, ok := obj.(*corev1.Event); ok {
		r.queue.Add(ev.Namespace + "/" + ev.Name)
	}
}

func (r *Reflector) onDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return
	}
	if refl, ok := Translate(ev, r.cfg.ProviderID, r.localNamespace); ok {
		r.state.forgetEvent(refl.Pod, refl.UID)
	}
}

func (r *Reflector) localNamespace(remote string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.locals[remote]
	return l, ok
}

// errNotKnown: the Event's pod or its ShadowPod is not known yet.
var errNotKnown = errors.New("the pod's ShadowPod is not known yet")

func (r *Reflector) process(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	defer utilruntime.HandleCrashWithContext(ctx)
	err := r.sync(key)
	switch {
	case errors.Is(err, errNotKnown):
		// Until the node's pod informer and podreflector's informers of
		// the namespace have listed (the same session lifecycle): with backoff, at most every 30 s; the
		// key is gone with the session's Event.
		r.queue.AddRateLimited(key)
	case err != nil:
		r.cfg.Log.V(1).Info("Provider Event not reflected", "event", key, "error", err.Error())
		r.queue.Forget(key)
	default:
		r.queue.Forget(key)
	}
	return true
}

// sync reflects the provider Event with key "<remote namespace>/<name>" if
// it maps to a pod of this node and was not reflected yet.
func (r *Reflector) sync(key string) error {
	ev, err := r.cached(key)
	if ev == nil || err != nil {
		return err
	}
	refl, ok := Translate(ev, r.cfg.ProviderID, r.localNamespace)
	if !ok || !r.state.advanced(refl) {
		return nil
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(refl.Pod)
	pod, err := r.cfg.Pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		if r.cfg.PodsSynced != nil && !r.cfg.PodsSynced() {
			// Not listed yet, not gone: an Event listed as the agent
			// (re)starts must not be dropped for good.
			return errNotKnown
		}
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName != r.cfg.NodeName {
		return nil
	}
	uid, known := r.cfg.Origin(ns, name)
	if !known {
		return errNotKnown
	}
	if uid != string(pod.UID) {
		return nil // a ShadowPod of another pod of that name
	}
	r.mu.Lock()
	rec := r.recorder
	r.mu.Unlock()
	if rec == nil {
		return nil
	}
	rec.AnnotatedEventf(pod, refl.Annotations(), refl.Type, refl.Reason, "%s", refl.Message)
	r.state.set(refl.Pod, refl.UID, refl.Count, refl.Last)
	return nil
}

// cached returns the provider Event with key from the session's informers;
// nil without a session or when it is gone.
func (r *Reflector) cached(key string) (*corev1.Event, error) {
	ns, _, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, fmt.Errorf("bad key %q: %w", key, err)
	}
	r.mu.Lock()
	var w *nsWatch
	if r.sess != nil {
		w = r.sess.watches[ns]
	}
	r.mu.Unlock()
	if w == nil {
		return nil, nil
	}
	obj, ok, err := w.informer.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil, err
	}
	ev, _ := obj.(*corev1.Event)
	return ev, nil
}
