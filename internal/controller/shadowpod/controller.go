// Package shadowpod owns the provider side of pod offloading: for every
// ShadowPod a consumer creates in one of its remote namespaces, it creates
// the real pod (same name and namespace, labels spec.podLabels plus
// annex.dev/shadowpod=<name>, annotations spec.podAnnotations, spec
// spec.pod), keeps it alive and mirrors its status into the ShadowPod's
// status.
//
// Only ShadowPods in namespaces labelled annex.dev/managed-by=annex and
// annex.dev/remote-cluster-id=<C> are handled; C, from the namespace's label
// (never from the ShadowPod itself), is the consumer. The consumer is an
// untrusted tenant: before a pod is created its spec is checked by Validate
// (host namespaces, hostPath, host ports, privileged containers, privilege
// escalation, extra capabilities, unconfined profiles are refused unless
// --allow-privileged-shadowpods) and its requests by CheckQuota against
// what the consumer's accepted ResourceSlices granted, counting the
// consumer's other admitted, unfinished ShadowPods in all of its
// namespaces. A refused ShadowPod gets status phase Failed with reason
// Forbidden or QuotaExceeded, a message naming the field and the rule, and a
// Warning Event; no pod is created, and none ever will be for it.
//
// The pod has a controller ownerReference to its ShadowPod and no finalizer
// is used: deleting the ShadowPod lets the garbage collector delete the pod,
// with the pod's own terminationGracePeriodSeconds (the grace period of a
// custom resource's deletion is not visible to controllers). A pod deleted
// while its ShadowPod exists is created again, unless the ShadowPod's status
// already says Succeeded or Failed: finished pods never run again. A terminal
// phase that a pod reaches because it is being deleted (a drain, a manual
// deletion) is not mirrored, so such a pod is re-created once it is gone.
// Mirroring writes the status only when it differs, so nothing is written at
// steady state. Label and annotation changes in the ShadowPod's spec are
// added to the pod (keys are never removed: others, such as network
// plugins, annotate pods too); other spec changes are not propagated, as a
// pod's spec is immutable.
package shadowpod

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/replicator"
)

// +kubebuilder:rbac:groups=offloading.annex.dev,resources=shadowpods,verbs=get;list;watch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=shadowpods/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=shadowpods/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=create
// +kubebuilder:rbac:groups=core.annex.dev,resources=resourceslices,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

const (
	// LabelShadowPod is set on every pod this controller creates; its value
	// is the ShadowPod's name.
	LabelShadowPod = "annex.dev/shadowpod"

	// DefaultPendingRequeue is how soon a ShadowPod is looked at again while
	// a previous pod of the same name is still going away.
	DefaultPendingRequeue = 2 * time.Second
)

// Options are the provider's pod policy.
type Options struct {
	// AllowPrivileged lets consumers run pods that Validate otherwise
	// refuses (host namespaces, hostPath, privileged containers, ...).
	AllowPrivileged bool
	// PendingRequeue is how soon to look again while a previous pod of the
	// same name is being deleted (DefaultPendingRequeue).
	PendingRequeue time.Duration
	// MaxConcurrentReconciles is the number of workers
	// (DefaultMaxConcurrentReconciles). Only the quota check of each
	// admission is serialized; pod creations and status mirroring run in
	// parallel.
	MaxConcurrentReconciles int
}

// DefaultMaxConcurrentReconciles is the number of workers of the
// controller. Nearly all of a reconcile's time is API round trips (the
// pod's creation, status mirror patches as the pod is scheduled and starts,
// label syncs), while the serialized quota check takes a few milliseconds
// of CPU. With one worker a burst of 1000 ShadowPods waited for each round
// trip in turn (bench: 10 pods/s against the 55 pods/s of the provider's
// own ReplicaSet controller and scheduler). A busy API server answers a pod
// creation in 150-250 ms (bench, both clusters on 2 CPUs), and a pod costs
// about two round trips, so 16 workers keep up with 40-50 pods/s even
// then, and with hundreds on an API server that answers in tens of
// milliseconds. More (64 was tried) only adds contention on a machine
// whose CPUs are the limit, and lets one consumer's burst crowd out the
// provider's other clients.
const DefaultMaxConcurrentReconciles = 16

// BindFlags registers --allow-privileged-shadowpods on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.AllowPrivileged, "allow-privileged-shadowpods", o.AllowPrivileged,
		"let consumers run pods that use host namespaces, hostPath volumes, host ports, privileged containers, privilege escalation, capabilities beyond the runtime's defaults or unconfined security profiles (refused by default)")
}

// Reconciler runs the consumers' ShadowPods as real pods.
type Reconciler struct {
	client   client.Client
	recorder events.EventRecorder
	opts     Options

	// admitMu serializes the quota check of an admission and the
	// reservation of the room it takes (reserve). Nothing else (the pod's
	// creation, status writes, ServiceAccounts) is done under it.
	admitMu sync.Mutex
	// mu guards admitted, inFlight, requests and bounds.
	mu sync.Mutex
	// admitted holds the ShadowPods whose pod is being created, or was
	// created but may not be in the cache yet, so that the quota counts
	// them meanwhile.
	admitted map[types.NamespacedName]types.UID
	// inFlight counts the pod creations under way (reserve to settle).
	inFlight int
	// bounds are the consumers' usage bounds (see usageBound).
	bounds map[string]usageBound
	clock  clock.PassiveClock
	// requests memoizes PodRequests of each ShadowPod: the quota check adds
	// up those of every admitted ShadowPod of the consumer at every
	// admission, and computing them is most of its cost.
	requests map[types.NamespacedName]memoRequests
}

// memoRequests are the PodRequests of one version of a ShadowPod's spec.
type memoRequests struct {
	uid        types.UID
	generation int64
	requests   corev1.ResourceList
}

// New returns the reconciler. c reads ShadowPods, pods, namespaces and
// ResourceSlices (from the cache), creates and patches pods and patches
// ShadowPod status; recorder receives a Warning Event for every refusal.
func New(c client.Client, recorder events.EventRecorder, opts Options) *Reconciler {
	if opts.PendingRequeue <= 0 {
		opts.PendingRequeue = DefaultPendingRequeue
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	return &Reconciler{client: c, recorder: recorder, opts: opts, clock: clock.RealClock{},
		admitted: map[types.NamespacedName]types.UID{}, requests: map[types.NamespacedName]memoRequests{},
		bounds: map[string]usageBound{}}
}

// CacheByObject restricts the manager's cache to the pods this controller
// creates (labelled annex.dev/shadowpod). Passing it to the manager's cache
// options is optional (the controller filters events by that label itself)
// and affects every reader of the manager's cache: do not set it if another
// component reads other pods from it.
func CacheByObject() map[client.Object]cache.ByObject {
	req, _ := labels.NewRequirement(LabelShadowPod, selection.Exists, nil)
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.NewSelector().Add(*req)},
	}
}

// Reconcile runs one ShadowPod.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	sp := &offloadingv1alpha1.ShadowPod{}
	if err := r.client.Get(ctx, req.NamespacedName, sp); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			r.deleteRequests(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ns := &corev1.Namespace{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: sp.Namespace}, ns); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	consumer := consumerOf(ns)
	if consumer == "" || !sp.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("consumer", consumer)
	ctx = ctrl.LoggerInto(ctx, log)
	if r.specChanged(sp) {
		// Its requests may have grown: the consumer's usage bound no
		// longer holds.
		r.dropBound(consumer)
	}

	pod := &corev1.Pod{}
	err := r.client.Get(ctx, req.NamespacedName, pod)
	switch {
	case apierrors.IsNotFound(err):
		if Finished(sp.Status.Phase) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return r.create(ctx, sp, consumer)
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get pod: %w", err)
	}
	if !metav1.IsControlledBy(pod, sp) {
		if Finished(sp.Status.Phase) {
			return ctrl.Result{}, nil
		}
		if !pod.DeletionTimestamp.IsZero() || isShadowPodRef(metav1.GetControllerOf(pod)) {
			// The pod of a previous ShadowPod with this name: the garbage
			// collector is deleting it.
			return ctrl.Result{RequeueAfter: r.opts.PendingRequeue}, nil
		}
		return ctrl.Result{}, r.refuse(ctx, sp, offloadingv1alpha1.ReasonCreationFailed,
			fmt.Sprintf("pod %s already exists on this provider and does not belong to this ShadowPod", pod.Name))
	}
	// The pod is in the cache: the quota sees it without our help.
	r.forget(req.NamespacedName)
	if err := r.syncMetadata(ctx, sp, pod); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.mirror(ctx, sp, pod)
}

// create admits the ShadowPod (Validate, CheckQuota) and creates its pod.
// Only the quota check and the reservation of the room it takes are
// serialized (reserve); the pod's creation, a refusal or the first status
// mirror are written outside of it.
func (r *Reconciler) create(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, consumer string) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if errs := Validate(&sp.Spec, r.opts.AllowPrivileged); len(errs) > 0 {
		return ctrl.Result{}, r.refuse(ctx, sp, offloadingv1alpha1.ReasonForbidden, errs.ToAggregate().Error())
	}
	pod, err := r.desiredPod(sp)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Before the quota check, outside the serialized admission: a
	// ServiceAccount left by a refused ShadowPod grants nothing.
	if err := r.ensureServiceAccount(ctx, pod); err != nil {
		return ctrl.Result{}, err
	}

	key := client.ObjectKeyFromObject(sp)
	refusal, retry, err := r.reserve(ctx, sp, consumer)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case retry:
		return ctrl.Result{RequeueAfter: admissionRetry}, nil
	case refusal != "":
		return ctrl.Result{}, r.refuse(ctx, sp, offloadingv1alpha1.ReasonQuotaExceeded, refusal)
	}
	err = r.client.Create(ctx, pod)
	r.settle(key, err == nil)
	if err != nil {
		switch {
		case apierrors.IsAlreadyExists(err):
			// Our cache is behind, or a pod our cache does not hold is in
			// the way: retry with backoff.
			return ctrl.Result{}, fmt.Errorf("pod exists but is not in the cache: %w", err)
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			return ctrl.Result{}, r.refuse(ctx, sp, offloadingv1alpha1.ReasonCreationFailed, "cannot create the pod: "+err.Error())
		default:
			// Possibly transient (a ServiceAccount not created yet, an
			// unavailable webhook, a provider ResourceQuota): say why and retry.
			if serr := r.setStatus(ctx, sp, offloadingv1alpha1.ShadowPodStatus{
				Phase: corev1.PodPending, Reason: offloadingv1alpha1.ReasonCreationFailed,
				Message: truncate("cannot create the pod yet, retrying: "+err.Error(), maxMessage),
			}); serr != nil {
				log.Error(serr, "Cannot write status")
			}
			return ctrl.Result{}, fmt.Errorf("create pod: %w", err)
		}
	}
	log.Info("Created pod")
	if apiequality.Semantic.DeepEqual(sp.Status, offloadingv1alpha1.ShadowPodStatus{}) {
		// Nothing to correct: the pod's creation event reconciles sp
		// again, and mirrors the status the pod has by then (usually
		// scheduled already). Mirroring the just-created pod would cost
		// one more write of the ShadowPod, and of its local pod on the
		// consumer, per pod.
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.mirror(ctx, sp, pod)
}

// admissionRetry is how soon a ShadowPod that does not fit is checked again
// while other admissions' pods are still being created: one of them may
// fail and free its room, so it is not refused yet.
const admissionRetry = 200 * time.Millisecond

// reserve is the serialized part of admission (admitMu): it checks sp's
// requests against the consumer's quota and, if they fit, remembers sp as
// admitted before its pod is created, so that no other admission counts on
// the same room while the creation is in flight (settle ends the
// reservation). The creation itself, an API round trip, is not serialized.
// It returns the quota's refusal message; retry instead when sp does not
// fit while creations are in flight (a failed one frees its room), so that
// a ShadowPod is only refused for what admitted pods really take.
func (r *Reconciler) reserve(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, consumer string) (refusal string, retry bool, err error) {
	r.admitMu.Lock()
	defer r.admitMu.Unlock()
	granted, accepted, err := r.granted(ctx, consumer)
	if err != nil {
		return "", false, err
	}
	request := r.podRequests(sp)
	r.mu.Lock()
	bound, ok := r.bounds[consumer]
	r.mu.Unlock()
	if !ok || r.clock.Since(bound.at) >= usageBoundTTL || CheckQuota(consumer, request, bound.used, granted, accepted) != "" {
		// No bound, or sp does not fit under it: count exactly.
		used, err := r.used(ctx, consumer, sp)
		if err != nil {
			return "", false, err
		}
		if msg := CheckQuota(consumer, request, used, granted, accepted); msg != "" {
			r.mu.Lock()
			inFlight := r.inFlight
			r.bounds[consumer] = usageBound{used: used, at: r.clock.Now()}
			r.mu.Unlock()
			return msg, inFlight > 0, nil
		}
		bound = usageBound{used: used, at: r.clock.Now()}
	}
	// Admitted: sp counts from now on, in the bound too.
	bound.used = bound.used.DeepCopy()
	add(bound.used, request)
	r.mu.Lock()
	r.bounds[consumer] = bound
	r.admitted[client.ObjectKeyFromObject(sp)] = sp.UID
	r.inFlight++
	r.mu.Unlock()
	return "", false, nil
}

// usageBound is an upper bound of what a consumer's admitted ShadowPods
// use (see reserve): the exact sum at the time at, plus every admission
// since. What the admitted ShadowPods use grows only by admissions (a pod
// of a ShadowPod runs only once admitted here) or by a ShadowPod's spec
// changing its requests, which drops the bound (dropBound); pods that
// finish or go make it only more cautious. So a ShadowPod that fits under
// the bound fits, and only one that does not is checked against the exact
// sum: during a burst of N ShadowPods, the quota check costs O(1) instead
// of a scan of the consumer's N ShadowPods and pods (O(N²) in all: 46% of
// the provider agent's CPU in a burst of 1000 in the bench).
type usageBound struct {
	used corev1.ResourceList
	at   time.Time
}

// usageBoundTTL bounds how long a usage bound is used before the exact sum
// is computed again, should something this reasoning missed have made a
// ShadowPod use more.
const usageBoundTTL = 30 * time.Second

// dropBound forgets the usage bound of consumer.
func (r *Reconciler) dropBound(consumer string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.bounds, consumer)
}

// settle ends the reservation of the ShadowPod key once its pod's creation
// returned: created, it stays admitted until its pod is in the cache;
// otherwise it no longer counts.
func (r *Reconciler) settle(key types.NamespacedName, created bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight--
	if !created {
		delete(r.admitted, key)
	}
}

// ensureServiceAccount creates, in the pod's namespace, the ServiceAccount
// the pod runs as when it is not "default" (which the provider's
// controller-manager creates in every namespace). It grants nothing: it only
// lets the provider mint the pod's token, which authenticates to the
// provider's API server with whatever the provider grants that
// ServiceAccount (nothing, unless its administrator binds a role).
func (r *Reconciler) ensureServiceAccount(ctx context.Context, pod *corev1.Pod) error {
	name := pod.Spec.ServiceAccountName
	if name == "" || name == "default" {
		return nil
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: name,
		Labels: map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}}}
	if err := r.client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s/%s for the pod: %w", pod.Namespace, name, err)
	}
	return nil
}

// granted sums status.resources of the consumer's accepted ResourceSlices:
// replicas in its tenant namespace that name it as consumer.
func (r *Reconciler) granted(ctx context.Context, consumer string) (corev1.ResourceList, int, error) {
	list := &corev1alpha1.ResourceSliceList{}
	tenant := corev1alpha1.TenantNamespaceName(consumer)
	if err := r.client.List(ctx, list, client.InNamespace(tenant)); err != nil {
		return nil, 0, fmt.Errorf("list ResourceSlices in %s: %w", tenant, err)
	}
	sum, n := corev1.ResourceList{}, 0
	for i := range list.Items {
		rs := &list.Items[i]
		if !replicator.IsReplica(rs) || rs.Spec.ConsumerClusterID != consumer ||
			rs.Status.Phase != corev1alpha1.ResourceSliceAccepted || !rs.DeletionTimestamp.IsZero() {
			continue
		}
		add(sum, rs.Status.Resources)
		n++
	}
	return sum, n, nil
}

// used sums PodRequests over the consumer's admitted, unfinished ShadowPods
// other than self, in every namespace labelled for the consumer. A ShadowPod
// is admitted when its pod exists (and has not finished) or was just
// created by this reconciler.
func (r *Reconciler) used(ctx context.Context, consumer string, self *offloadingv1alpha1.ShadowPod) (corev1.ResourceList, error) {
	// The lists below come from the cache without deep copies (an
	// admission used to copy every ShadowPod and pod of the consumer: a
	// burst of N cost O(N²) copies). They are only read, never modified.
	namespaces := &corev1.NamespaceList{}
	if err := r.client.List(ctx, namespaces, client.MatchingLabels{
		corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex,
	}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list namespaces of consumer %s: %w", consumer, err)
	}
	sum := corev1.ResourceList{}
	for _, ns := range namespaces.Items {
		sps := &offloadingv1alpha1.ShadowPodList{}
		if err := r.client.List(ctx, sps, client.InNamespace(ns.Name), client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list ShadowPods in %s: %w", ns.Name, err)
		}
		if len(sps.Items) == 0 {
			continue
		}
		pods := &corev1.PodList{}
		if err := r.client.List(ctx, pods, client.InNamespace(ns.Name), client.HasLabels{LabelShadowPod}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list pods in %s: %w", ns.Name, err)
		}
		running := map[types.UID]bool{}
		for i := range pods.Items {
			p := &pods.Items[i]
			if ref := metav1.GetControllerOf(p); isShadowPodRef(ref) && !Finished(p.Status.Phase) {
				running[ref.UID] = true
			}
		}
		for i := range sps.Items {
			o := &sps.Items[i]
			if o.UID == self.UID || Finished(o.Status.Phase) {
				continue
			}
			if running[o.UID] || r.remembered(client.ObjectKeyFromObject(o), o.UID) {
				add(sum, r.podRequests(o))
			}
		}
	}
	return sum, nil
}

// desiredPod is the pod of sp.
func (r *Reconciler) desiredPod(sp *offloadingv1alpha1.ShadowPod) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        sp.Name,
			Namespace:   sp.Namespace,
			Labels:      desiredLabels(sp),
			Annotations: maps.Clone(sp.Spec.PodAnnotations),
		},
		Spec: *sp.Spec.Pod.DeepCopy(),
	}
	if err := controllerutil.SetControllerReference(sp, pod, r.client.Scheme()); err != nil {
		return nil, fmt.Errorf("set owner: %w", err)
	}
	return pod, nil
}

func desiredLabels(sp *offloadingv1alpha1.ShadowPod) map[string]string {
	l := make(map[string]string, len(sp.Spec.PodLabels)+1)
	maps.Copy(l, sp.Spec.PodLabels)
	l[LabelShadowPod] = sp.Name
	return l
}

// syncMetadata adds the ShadowPod's labels and annotations to pod.
func (r *Reconciler) syncMetadata(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, pod *corev1.Pod) error {
	wantLabels := desiredLabels(sp)
	if hasAll(pod.Labels, wantLabels) && hasAll(pod.Annotations, sp.Spec.PodAnnotations) {
		return nil
	}
	orig := pod.DeepCopy()
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	maps.Copy(pod.Labels, wantLabels)
	if len(sp.Spec.PodAnnotations) > 0 {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		maps.Copy(pod.Annotations, sp.Spec.PodAnnotations)
	}
	if err := r.client.Patch(ctx, pod, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("update pod labels and annotations: %w", err)
	}
	return nil
}

// mirror copies pod's status into sp's status when it differs.
func (r *Reconciler) mirror(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, pod *corev1.Pod) error {
	if !pod.DeletionTimestamp.IsZero() && Finished(pod.Status.Phase) {
		// Stopped by its deletion, not finished on its own: it is created
		// again once it is gone.
		return nil
	}
	return r.setStatus(ctx, sp, StatusFromPod(pod))
}

// refuse marks sp Failed with reason and msg and records a Warning Event.
func (r *Reconciler) refuse(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, reason, msg string) error {
	changed := !apiequality.Semantic.DeepEqual(sp.Status, offloadingv1alpha1.ShadowPodStatus{
		Phase: corev1.PodFailed, Reason: reason, Message: truncate(msg, maxMessage)})
	if err := r.setStatus(ctx, sp, offloadingv1alpha1.ShadowPodStatus{
		Phase: corev1.PodFailed, Reason: reason, Message: truncate(msg, maxMessage),
	}); err != nil {
		return err
	}
	if changed {
		ctrl.LoggerFrom(ctx).Info("Refused ShadowPod", "reason", reason, "message", msg)
		r.recorder.Eventf(sp, nil, corev1.EventTypeWarning, reason, "Refuse", "%s", msg)
	}
	return nil
}

// setStatus patches sp's status to want when it differs.
func (r *Reconciler) setStatus(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, want offloadingv1alpha1.ShadowPodStatus) error {
	if apiequality.Semantic.DeepEqual(sp.Status, want) {
		return nil
	}
	orig := sp.DeepCopy()
	sp.Status = want
	if err := r.client.Status().Patch(ctx, sp, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}

// forget drops what is remembered about the ShadowPod key: it is gone or
// its pod is in the cache. The memoized requests go with the ShadowPod only
// (deleteRequests).
func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.admitted, key)
}

// podRequests returns PodRequests of sp's pod spec, computed once per
// ShadowPod UID and generation. The result is shared: do not modify it.
func (r *Reconciler) podRequests(sp *offloadingv1alpha1.ShadowPod) corev1.ResourceList {
	key := client.ObjectKeyFromObject(sp)
	r.mu.Lock()
	m, ok := r.requests[key]
	r.mu.Unlock()
	if ok && m.uid == sp.UID && m.generation == sp.Generation {
		return m.requests
	}
	req := PodRequests(&sp.Spec.Pod)
	r.mu.Lock()
	r.requests[key] = memoRequests{uid: sp.UID, generation: sp.Generation, requests: req}
	r.mu.Unlock()
	return req
}

// specChanged reports whether sp's requests were memoized for another
// generation of its spec.
func (r *Reconciler) specChanged(sp *offloadingv1alpha1.ShadowPod) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.requests[client.ObjectKeyFromObject(sp)]
	return ok && m.uid == sp.UID && m.generation != sp.Generation
}

// deleteRequests drops the memoized requests of a deleted ShadowPod.
func (r *Reconciler) deleteRequests(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.requests, key)
}

func (r *Reconciler) remembered(key types.NamespacedName, uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.admitted[key] == uid
}

// consumerOf returns the consumer that namespace ns belongs to, or "" when
// it is not a namespace Annex manages for a consumer.
func consumerOf(ns *corev1.Namespace) string {
	if ns.Labels[corev1alpha1.LabelManagedBy] != corev1alpha1.ManagedByAnnex {
		return ""
	}
	return ns.Labels[corev1alpha1.LabelRemoteClusterID]
}

// isShadowPodRef reports whether ref refers to a ShadowPod.
func isShadowPodRef(ref *metav1.OwnerReference) bool {
	if ref == nil || ref.Kind != "ShadowPod" {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == offloadingv1alpha1.GroupVersion.Group
}

func hasAll(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// SetupWithManager registers the controller "shadowpod" on mgr. It is
// triggered by ShadowPod creation and spec changes (not by its own status
// writes) and by every change of a pod labelled annex.dev/shadowpod, which
// wakes the pod's controlling ShadowPod (status mirroring, re-creation after
// a deletion).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	hasLabel := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetLabels()[LabelShadowPod]
		return ok
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("shadowpod").
		For(&offloadingv1alpha1.ShadowPod{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&corev1.Pod{}, builder.WithPredicates(hasLabel))
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles}).Complete(r)
}
