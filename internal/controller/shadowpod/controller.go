// Package shadowpod owns the provider side of pod offloading: for every
// ShadowPod a consumer creates in one of its remote namespaces, it creates
// the real pod (same name and namespace, labels spec.podLabels plus
// annex.dev/shadowpod=<name>, annotations spec.podAnnotations, spec
// spec.pod with the provider's default requests) and keeps it alive. Of
// spec.podLabels and spec.podAnnotations, the pod carries the keys without
// a domain and those of the domains the provider allows
// (--tenant-pod-label-domains, --tenant-pod-annotation-domains; never
// annex.dev): network plugins, meshes and policies of the provider act on
// prefixed keys. The others are left out, with a Warning Event
// MetadataDropped on the ShadowPod. The
// consumer reads the running pod's status from the pod itself; the
// ShadowPod's status records only what the pod cannot say: a refusal, a
// creation being retried, or the pod's final state.
//
// Only ShadowPods in namespaces labelled annex.dev/managed-by=annex and
// annex.dev/remote-cluster-id=<C> are handled; C, from the namespace's label
// (never from the ShadowPod itself), is the consumer. The consumer is an
// untrusted tenant: before a pod is created its spec is checked by Validate
// (every resource quantity non-negative and at most 1P, no overhead; host
// namespaces, hostPath, host ports, privileged containers, privilege
// escalation, extra capabilities, unconfined profiles are refused unless
// --allow-privileged-shadowpods), every container that neither requests nor
// limits cpu or memory is given the provider's default request for it
// (--tenant-default-requests), and the pod's requests are checked by
// CheckQuota against what the consumer's accepted ResourceSlices granted,
// counting what really runs: every unfinished pod in all of the consumer's
// namespaces (with a ShadowPod or not) and the admissions whose pod is not
// in the cache yet. Every resource name is bounded: one the grant does not
// name is refused unless the provider leaves it unmetered
// (--tenant-unmetered-resources). Admissions are serialized per consumer,
// so that one consumer's burst never holds up another's. A refused
// ShadowPod gets status phase Failed with reason Forbidden or QuotaExceeded,
// a message naming the field and the rule, and a Warning Event; no pod is
// created, and none ever will be for it; nothing else (a ServiceAccount) is
// created for it either.
//
// The pod has a controller ownerReference to its ShadowPod and no finalizer
// is used: deleting the ShadowPod lets the garbage collector delete the pod,
// with the pod's own terminationGracePeriodSeconds (the grace period of a
// custom resource's deletion is not visible to controllers). A pod left
// running without a controller (its ShadowPod deleted with
// propagationPolicy Orphan) is deleted, with a Warning Event: a consumer's
// pod runs only while its ShadowPod exists. A pod deleted while its
// ShadowPod exists is created again, unless the ShadowPod's status already
// says Succeeded or Failed: finished pods never run again. A terminal phase
// that a pod reaches because it is being deleted (a drain, a manual
// deletion) is not recorded, so such a pod is re-created once it is gone.
// The status is written only when it differs, so a pod that starts and runs
// normally costs no ShadowPod status write at all (issue #20: the consumer
// watches the pods, protobuf-encoded, instead). Label and annotation
// changes in the ShadowPod's spec are added to the pod (keys are never
// removed: others, such as network plugins, annotate pods too), at most
// --tenant-sync-rate pod patches a second per consumer (fairqueue.Limiter;
// changes beyond it wait and are then written together); other spec
// changes are not propagated, as a pod's spec is immutable.
package shadowpod

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/fairqueue"
	"github.com/annexhq/annex/internal/controller/predicates"
	"github.com/annexhq/annex/internal/controller/replicator"
	"github.com/annexhq/annex/internal/podstatus"
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
	// DefaultPendingRequeue is how soon a ShadowPod is looked at again while
	// a previous pod of the same name is still going away.
	DefaultPendingRequeue = 2 * time.Second
)

// DefaultMaxConcurrentReconciles is the number of workers of the
// controller. Nearly all of a reconcile's time is API round trips (the
// pod's creation, label syncs), while the serialized quota check takes a few milliseconds
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

// Reconciler runs the consumers' ShadowPods as real pods.
type Reconciler struct {
	client   client.Client
	recorder events.EventRecorder
	opts     Options
	clock    clock.PassiveClock

	// mu guards tenants, admitted and the fields of each tenant it says.
	mu sync.Mutex
	// tenants holds each consumer's admission state.
	tenants map[string]*tenant
	// admitted holds the ShadowPods whose pod is being created, or was
	// created but may not be in the cache yet, so that the quota counts
	// them meanwhile.
	admitted map[types.NamespacedName]admission
}

// tenant is one consumer's admission state. Each consumer's admissions are
// serialized by its own admitMu: one consumer's burst never waits for
// another's.
type tenant struct {
	// admitMu serializes the quota checks of the consumer's admissions and
	// the reservation of the room each takes (reserve). Nothing else (pod
	// creations, status writes, ServiceAccounts) is done under it.
	admitMu sync.Mutex
	// podRequests memoizes PodRequests of the consumer's pods by UID and
	// generation (guarded by admitMu): an exact count adds up those of
	// every pod of the consumer. Each count keeps only the pods it saw.
	podRequests map[types.UID]memoRequests

	// Guarded by Reconciler.mu:
	// inFlight counts the consumer's pod creations under way (reserve to
	// settle).
	inFlight int
	// bound is the consumer's usage bound (see usageBound), valid when
	// bound.used is not nil.
	bound usageBound
}

// admission is a pod admitted for a ShadowPod and counted by the quota until
// the cache shows the pod.
type admission struct {
	// uid is the ShadowPod's.
	uid      types.UID
	consumer string
	// requests are PodRequests of the pod: as desired until it is created,
	// then as the API server stored it.
	requests corev1.ResourceList
}

// memoRequests are the PodRequests of one version of a pod's spec.
type memoRequests struct {
	generation int64
	requests   corev1.ResourceList
}

// New returns the reconciler. c reads ShadowPods, pods, namespaces and
// ResourceSlices (from the cache), creates, patches and deletes pods,
// creates ServiceAccounts and patches ShadowPod status; recorder receives a
// Warning Event for every refusal and every orphaned pod deleted.
func New(c client.Client, recorder events.EventRecorder, opts Options) *Reconciler {
	if opts.PendingRequeue <= 0 {
		opts.PendingRequeue = DefaultPendingRequeue
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	return &Reconciler{client: c, recorder: recorder, opts: opts, clock: clock.RealClock{},
		tenants: map[string]*tenant{}, admitted: map[types.NamespacedName]admission{}}
}

// CacheByObject restricts the manager's cache to the pods this controller
// creates (labelled annex.dev/shadowpod). Passing it to the manager's cache
// options is optional (the controller filters events by that label itself)
// and affects every reader of the manager's cache: do not set it if another
// component reads other pods from it. With it, the quota counts only the
// labelled pods of a consumer's namespaces (the consumer cannot create
// others: it has no right on pods).
func CacheByObject() map[client.Object]cache.ByObject {
	req, _ := labels.NewRequirement(offloadingv1alpha1.LabelShadowPod, selection.Exists, nil)
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.NewSelector().Add(*req)},
	}
}

// Reconcile runs one ShadowPod. The request's key is also the key of its
// pod (same namespace and name).
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	sp := &offloadingv1alpha1.ShadowPod{}
	if err := r.client.Get(ctx, req.NamespacedName, sp); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		r.forget(req.NamespacedName)
		return ctrl.Result{}, r.deleteOrphan(ctx, req.NamespacedName)
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

	pod := &corev1.Pod{}
	err := r.client.Get(ctx, req.NamespacedName, pod)
	switch {
	case apierrors.IsNotFound(err):
		if podstatus.Finished(sp.Status.Phase) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return r.create(ctx, sp, consumer)
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get pod: %w", err)
	}
	if !metav1.IsControlledBy(pod, sp) {
		switch {
		case orphaned(pod):
			// Left by a previous ShadowPod of this name that was deleted
			// with propagationPolicy Orphan: it goes, then sp's pod is
			// created.
			if err := r.deleteOrphanPod(ctx, pod); err != nil {
				return ctrl.Result{}, err
			}
			return ctrl.Result{RequeueAfter: r.opts.PendingRequeue}, nil
		case podstatus.Finished(sp.Status.Phase):
			return ctrl.Result{}, nil
		case !pod.DeletionTimestamp.IsZero() || isShadowPodRef(metav1.GetControllerOf(pod)):
			// The pod of a previous ShadowPod with this name: the garbage
			// collector is deleting it.
			return ctrl.Result{RequeueAfter: r.opts.PendingRequeue}, nil
		}
		return ctrl.Result{}, r.refuse(ctx, sp, offloadingv1alpha1.ReasonCreationFailed,
			fmt.Sprintf("pod %s already exists on this provider and does not belong to this ShadowPod", pod.Name))
	}
	// The pod is in the cache: the quota sees it without our help.
	r.forget(req.NamespacedName)
	wait, err := r.syncMetadata(ctx, sp, pod, consumer)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: wait}, r.recordStatus(ctx, sp, pod)
}

// orphaned reports whether pod was created by this controller (labelled
// annex.dev/shadowpod) but has no controller any more: its ShadowPod was
// deleted with propagationPolicy Orphan, and the garbage collector removed
// the pod's ownerReference instead of deleting it.
func orphaned(pod *corev1.Pod) bool {
	_, labelled := pod.Labels[offloadingv1alpha1.LabelShadowPod]
	return labelled && metav1.GetControllerOf(pod) == nil
}

// deleteOrphan deletes the pod with key when its ShadowPod is gone and it is
// orphaned in a namespace of a consumer. A pod that still names its deleted
// ShadowPod as controller is left to the garbage collector.
func (r *Reconciler) deleteOrphan(ctx context.Context, key types.NamespacedName) error {
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, key, pod); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !orphaned(pod) {
		return nil
	}
	ns := &corev1.Namespace{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: key.Namespace}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if consumerOf(ns) == "" {
		return nil
	}
	return r.deleteOrphanPod(ctx, pod)
}

// deleteOrphanPod deletes an orphaned pod (see orphaned), with its own grace
// period: a consumer's pod runs only while its ShadowPod exists, so that
// what runs is what the consumer sees, controls and is counted for.
func (r *Reconciler) deleteOrphanPod(ctx context.Context, pod *corev1.Pod) error {
	if !pod.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := r.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("delete orphaned pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	msg := fmt.Sprintf("pod %s/%s is labelled %s but no ShadowPod controls it (its ShadowPod was deleted with propagationPolicy Orphan): deleted, as a consumer's pod runs only while its ShadowPod exists",
		pod.Namespace, pod.Name, offloadingv1alpha1.LabelShadowPod)
	ctrl.LoggerFrom(ctx).Info("Deleted orphaned pod", "pod", klog.KObj(pod))
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonOrphanDeleted, "Delete", "%s", msg)
	return nil
}

// ReasonOrphanDeleted is the reason of the Event recorded on an orphaned
// pod that the controller deleted.
const ReasonOrphanDeleted = "OrphanDeleted"

// create admits the ShadowPod (Validate, then CheckQuota on its pod with the
// default requests applied) and creates its pod. Only the quota check and
// the reservation of the room it takes are serialized, per consumer
// (reserve); the ServiceAccount, the pod's creation or a refusal are
// written outside of it.
func (r *Reconciler) create(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, consumer string) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if errs := Validate(&sp.Spec, r.opts.AllowPrivileged); len(errs) > 0 {
		return ctrl.Result{}, r.refuse(ctx, sp, offloadingv1alpha1.ReasonForbidden, errs.ToAggregate().Error())
	}
	pod, dropped, err := r.desiredPod(sp)
	if err != nil {
		return ctrl.Result{}, err
	}

	key := client.ObjectKeyFromObject(sp)
	refusal, retry, err := r.reserve(ctx, sp, consumer, PodRequests(&pod.Spec))
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case retry > 0:
		return ctrl.Result{RequeueAfter: retry}, nil
	case refusal != "":
		return ctrl.Result{}, r.refuse(ctx, sp, offloadingv1alpha1.ReasonQuotaExceeded, refusal)
	}
	// Admitted: only now may the consumer have a ServiceAccount made.
	if err := r.ensureServiceAccount(ctx, pod); err != nil {
		r.settle(key, consumer, nil)
		return ctrl.Result{}, err
	}
	err = r.client.Create(ctx, pod)
	if err != nil {
		r.settle(key, consumer, nil)
		switch {
		case apierrors.IsAlreadyExists(err):
			// Our cache is behind, or a pod our cache does not hold is in
			// the way: retry with backoff.
			return ctrl.Result{}, fmt.Errorf("pod exists but is not in the cache: %w", err)
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			return ctrl.Result{}, r.refuse(ctx, sp, offloadingv1alpha1.ReasonCreationFailed, "cannot create the pod: "+err.Error())
		case refusedByPodSecurity(err):
			// The namespace's Pod Security level refuses this spec: it
			// will not change by retrying.
			return ctrl.Result{}, r.refuse(ctx, sp, offloadingv1alpha1.ReasonForbidden, "cannot create the pod: "+err.Error())
		default:
			// Possibly transient (a ServiceAccount not created yet, an
			// unavailable webhook, a provider ResourceQuota): say why and retry.
			if serr := r.setStatus(ctx, sp, offloadingv1alpha1.ShadowPodStatus{
				Phase: corev1.PodPending, Reason: offloadingv1alpha1.ReasonCreationFailed,
				Message: podstatus.Truncate("cannot create the pod yet, retrying: "+err.Error(), podstatus.MaxMessage),
			}); serr != nil {
				log.Error(serr, "Cannot write status")
			}
			return ctrl.Result{}, fmt.Errorf("create pod: %w", err)
		}
	}
	r.settle(key, consumer, pod)
	log.Info("Created pod")
	r.reportDropped(ctx, sp, dropped)
	if apiequality.Semantic.DeepEqual(sp.Status, offloadingv1alpha1.ShadowPodStatus{}) {
		// Nothing to clear: a new pod has no final state to record.
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.recordStatus(ctx, sp, pod)
}

// admissionRetry is how soon a ShadowPod that does not fit is checked again
// while other admissions' pods are still being created: one of them may
// fail and free its room, so it is not refused yet.
const admissionRetry = 200 * time.Millisecond

// tenant returns the admission state of consumer.
func (r *Reconciler) tenant(consumer string) *tenant {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tenants[consumer]
	if !ok {
		t = &tenant{podRequests: map[types.UID]memoRequests{}}
		r.tenants[consumer] = t
	}
	return t
}

// reserve is the serialized part of admission (the consumer's admitMu): it
// checks request, the requests of sp's pod, against the consumer's grant
// and, if they fit, remembers sp as admitted before its pod is created, so
// that no other admission counts on the same room while the creation is in
// flight (settle ends the reservation). The creation itself, an API round
// trip, is not serialized. It returns the quota's refusal message; or, when
// sp does not fit only for now, how soon to check again (retry): while the
// consumer's creations are in flight (a failed one frees its room) or while
// pods being deleted would leave room, so that a ShadowPod is only refused
// for what the consumer's pods really take.
func (r *Reconciler) reserve(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, consumer string, request corev1.ResourceList) (refusal string, retry time.Duration, err error) {
	t := r.tenant(consumer)
	t.admitMu.Lock()
	defer t.admitMu.Unlock()
	grant, err := r.granted(ctx, consumer)
	if err != nil {
		return "", 0, err
	}
	if msg := CheckQuota(consumer, request, nil, grant); msg != "" {
		// Refused whatever the consumer's pods take: no count needed.
		return msg, 0, nil
	}
	key := client.ObjectKeyFromObject(sp)
	r.mu.Lock()
	bound := t.bound
	r.mu.Unlock()
	if bound.used == nil || r.clock.Since(bound.at) >= usageBoundTTL || CheckQuota(consumer, request, bound.used, grant) != "" {
		// No bound, or sp does not fit under it: count exactly.
		u, err := r.usage(ctx, consumer, t, key)
		if err != nil {
			return "", 0, err
		}
		if msg := CheckQuota(consumer, request, u.used, grant); msg != "" {
			r.mu.Lock()
			inFlight := t.inFlight
			t.bound = usageBound{used: u.used, at: r.clock.Now()}
			r.mu.Unlock()
			switch {
			case inFlight > 0:
				retry = admissionRetry
			case len(u.terminating) > 0 && CheckQuota(consumer, request, subtract(u.used, u.terminating), grant) == "":
				retry = r.opts.PendingRequeue
			}
			return msg, retry, nil
		}
		bound = usageBound{used: u.used, at: r.clock.Now()}
	}
	// Admitted: sp counts from now on, in the bound too.
	bound.used = bound.used.DeepCopy()
	add(bound.used, request)
	r.mu.Lock()
	t.bound = bound
	t.inFlight++
	r.admitted[key] = admission{uid: sp.UID, consumer: consumer, requests: request}
	r.mu.Unlock()
	return "", 0, nil
}

// usageBound is an upper bound of what a consumer's pods take (see usage):
// the exact sum at the time at, plus every admission since. A pod is
// created in a consumer's namespace only by this controller, once admitted
// here (the consumer has no right on pods, and the provider's own
// operators do not run pods there), and a pod's requests never change
// (in-place resize aside, which the consumer has no right to ask for; the
// API server's own defaulting and admission are seen when the pod is
// created, and settle drops the bound when they changed its requests). So
// what the consumer's pods take grows only by admissions, pods that finish
// or go make the bound only more cautious, and a ShadowPod that fits under
// the bound fits: only one that does not is checked against the exact sum.
// During a burst of N ShadowPods the quota check costs O(1) instead of a
// scan of the consumer's N pods (O(N²) in all: 46% of the provider agent's
// CPU in a burst of 1000 in the bench).
type usageBound struct {
	used corev1.ResourceList
	at   time.Time
}

// usageBoundTTL bounds how long a usage bound is used before the exact sum
// is computed again, should something this reasoning missed have made a
// consumer's pods take more.
const usageBoundTTL = 30 * time.Second

// settle ends the reservation of the ShadowPod key once its pod's creation
// returned: created (pod, as the API server returned it), it stays
// admitted until its pod is in the cache, counted for what the API server
// stored; otherwise (nil) it no longer counts.
func (r *Reconciler) settle(key types.NamespacedName, consumer string, pod *corev1.Pod) {
	var stored corev1.ResourceList
	if pod != nil {
		stored = PodRequests(&pod.Spec)
	}
	t := r.tenant(consumer)
	r.mu.Lock()
	defer r.mu.Unlock()
	t.inFlight--
	a, ok := r.admitted[key]
	switch {
	case !ok:
	case pod == nil:
		// Not created: it no longer counts, and the usage bound, which
		// added it, is recounted from the pods on the next admission.
		delete(r.admitted, key)
		t.bound = usageBound{}
	case !apiequality.Semantic.DeepEqual(a.requests, stored):
		// The API server's defaulting or admission changed the requests:
		// count what it stored, and recount the consumer's usage.
		a.requests = stored
		r.admitted[key] = a
		t.bound = usageBound{}
	}
}

// ensureServiceAccount creates, in the pod's namespace, the ServiceAccount
// the pod runs as when it is not "default" (which the provider's
// controller-manager creates in every namespace). It grants nothing: it only
// lets the provider mint the pod's token, which authenticates to the
// provider's API server with whatever the provider grants that
// ServiceAccount (nothing, unless its administrator binds a role). It is
// called only for an admitted ShadowPod.
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

// granted returns the consumer's grant: the sum of status.resources of its
// accepted ResourceSlices (replicas in its tenant namespace that name it as
// consumer), and the resources this provider leaves unmetered.
func (r *Reconciler) granted(ctx context.Context, consumer string) (Grant, error) {
	list := &corev1alpha1.ResourceSliceList{}
	tenant := corev1alpha1.TenantNamespaceName(consumer)
	if err := r.client.List(ctx, list, client.InNamespace(tenant)); err != nil {
		return Grant{}, fmt.Errorf("list ResourceSlices in %s: %w", tenant, err)
	}
	g := Grant{Resources: corev1.ResourceList{}, Unmetered: r.opts.UnmeteredResources}
	for i := range list.Items {
		rs := &list.Items[i]
		if !replicator.IsReplica(rs) || rs.Spec.ConsumerClusterID != consumer ||
			rs.Status.Phase != corev1alpha1.ResourceSliceAccepted || !rs.DeletionTimestamp.IsZero() {
			continue
		}
		add(g.Resources, rs.Status.Resources)
		g.Slices++
	}
	return g, nil
}

// usage is what a consumer's pods take.
type usage struct {
	// used sums PodRequests over the consumer's unfinished pods and
	// admissions whose pod the cache does not show yet.
	used corev1.ResourceList
	// terminating is the part of used that pods being deleted take.
	terminating corev1.ResourceList
}

// usage counts what the consumer's pods take: every unfinished pod (phase
// neither Succeeded nor Failed) in every namespace labelled for the
// consumer, whether a ShadowPod still controls it or not (an orphaned pod
// runs, and counts, until it is gone), pods being deleted included (they
// run until they are gone); and the admissions whose pod the cache does not
// show yet, other than self's. It is called under t.admitMu.
func (r *Reconciler) usage(ctx context.Context, consumer string, t *tenant, self types.NamespacedName) (usage, error) {
	// The lists below come from the cache without deep copies (an
	// admission used to copy every ShadowPod and pod of the consumer: a
	// burst of N cost O(N²) copies). They are only read, never modified.
	namespaces := &corev1.NamespaceList{}
	if err := r.client.List(ctx, namespaces, client.MatchingLabels{
		corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex,
	}, client.UnsafeDisableDeepCopy); err != nil {
		return usage{}, fmt.Errorf("list namespaces of consumer %s: %w", consumer, err)
	}
	u := usage{used: corev1.ResourceList{}, terminating: corev1.ResourceList{}}
	seen := make(map[types.UID]memoRequests, len(t.podRequests))
	// cached are the pods the cache shows, by key, with their controller's
	// UID: an admission whose pod is among them is counted by its pod.
	cached := map[types.NamespacedName]types.UID{}
	mine := map[string]bool{}
	for _, ns := range namespaces.Items {
		mine[ns.Name] = true
		pods := &corev1.PodList{}
		if err := r.client.List(ctx, pods, client.InNamespace(ns.Name), client.UnsafeDisableDeepCopy); err != nil {
			return usage{}, fmt.Errorf("list pods in %s: %w", ns.Name, err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			var owner types.UID
			if ref := metav1.GetControllerOf(p); ref != nil {
				owner = ref.UID
			}
			cached[client.ObjectKeyFromObject(p)] = owner
			if podstatus.Finished(p.Status.Phase) {
				continue
			}
			// Memoized by UID; a pod without one (only a fake client
			// stores such) is counted afresh.
			m, ok := t.podRequests[p.UID]
			if !ok || m.generation != p.Generation || p.UID == "" {
				m = memoRequests{generation: p.Generation, requests: PodRequests(&p.Spec)}
			}
			if p.UID != "" {
				seen[p.UID] = m
			}
			add(u.used, m.requests)
			if !p.DeletionTimestamp.IsZero() {
				add(u.terminating, m.requests)
			}
		}
	}
	t.podRequests = seen
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, a := range r.admitted {
		if key == self || a.consumer != consumer || !mine[key.Namespace] {
			continue
		}
		if owner, ok := cached[key]; ok && owner == a.uid {
			continue
		}
		add(u.used, a.requests)
	}
	return u, nil
}

// subtract returns a - b.
func subtract(a, b corev1.ResourceList) corev1.ResourceList {
	out := a.DeepCopy()
	for name, q := range b {
		cur := out[name]
		cur.Sub(q)
		out[name] = cur
	}
	return out
}

// desiredPod is the pod of sp: its spec, with the provider's default
// requests applied; dropped are the labels and annotations it leaves out
// (podMetadata).
func (r *Reconciler) desiredPod(sp *offloadingv1alpha1.ShadowPod) (_ *corev1.Pod, dropped []string, _ error) {
	labels, annotations, dropped := r.podMetadata(sp)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        sp.Name,
			Namespace:   sp.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: *sp.Spec.Pod.DeepCopy(),
	}
	ApplyDefaultRequests(&pod.Spec, r.opts.DefaultRequests)
	if err := controllerutil.SetControllerReference(sp, pod, r.client.Scheme()); err != nil {
		return nil, nil, fmt.Errorf("set owner: %w", err)
	}
	return pod, dropped, nil
}

// syncMetadata adds the ShadowPod's labels and annotations that its pod
// may carry (podMetadata) to pod, when the consumer's turn has come
// (Options.Sync): the consumer changes them at will, and each change would
// cost a pod patch, seen by every watcher of pods. Otherwise it returns how
// long until its turn; the ShadowPod is looked at again then and its pod
// gets the labels and annotations it has at that time, however many
// changes came in between.
func (r *Reconciler) syncMetadata(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, pod *corev1.Pod, consumer string) (time.Duration, error) {
	wantLabels, wantAnnotations, dropped := r.podMetadata(sp)
	if hasAll(pod.Labels, wantLabels) && hasAll(pod.Annotations, wantAnnotations) {
		return 0, nil
	}
	if wait := r.opts.Sync.Wait(consumer, client.ObjectKeyFromObject(sp)); wait > 0 {
		ctrl.LoggerFrom(ctx).V(1).Info("Consumer's label and annotation syncs are over its rate, waiting for its turn", "wait", wait)
		return wait, nil
	}
	r.reportDropped(ctx, sp, dropped)
	orig := pod.DeepCopy()
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	maps.Copy(pod.Labels, wantLabels)
	if len(wantAnnotations) > 0 {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		maps.Copy(pod.Annotations, wantAnnotations)
	}
	if err := r.client.Patch(ctx, pod, client.MergeFrom(orig)); err != nil {
		return 0, fmt.Errorf("update pod labels and annotations: %w", err)
	}
	return 0, nil
}

// recordStatus records in sp's status what the consumer cannot read from pod: its
// final state once it finished (kept when the pod is gone), nothing while it
// runs. The consumer watches the pod itself, so mirroring a running pod would
// only repeat, in a costlier write, what its kubelet wrote. A status written
// before the pod existed (a creation being retried) is cleared.
func (r *Reconciler) recordStatus(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, pod *corev1.Pod) error {
	if !pod.DeletionTimestamp.IsZero() && podstatus.Finished(pod.Status.Phase) {
		// Stopped by its deletion, not finished on its own: it is created
		// again once it is gone.
		return nil
	}
	want := offloadingv1alpha1.ShadowPodStatus{}
	if podstatus.Finished(pod.Status.Phase) {
		want = podstatus.FromPod(pod)
	}
	return r.setStatus(ctx, sp, want)
}

// refuse marks sp Failed with reason and msg and records a Warning Event.
func (r *Reconciler) refuse(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, reason, msg string) error {
	changed := !apiequality.Semantic.DeepEqual(sp.Status, offloadingv1alpha1.ShadowPodStatus{
		Phase: corev1.PodFailed, Reason: reason, Message: podstatus.Truncate(msg, podstatus.MaxMessage)})
	if err := r.setStatus(ctx, sp, offloadingv1alpha1.ShadowPodStatus{
		Phase: corev1.PodFailed, Reason: reason, Message: podstatus.Truncate(msg, podstatus.MaxMessage),
	}); err != nil {
		return err
	}
	if changed {
		ctrl.LoggerFrom(ctx).Info("Refused ShadowPod", "reason", reason, "message", msg)
		r.recorder.Eventf(sp, nil, corev1.EventTypeWarning, reason, "Refuse", "%s", msg)
	}
	return nil
}

// reportDropped records a Warning Event on sp naming the labels and
// annotations of its spec that its pod does not carry, if any.
func (r *Reconciler) reportDropped(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, dropped []string) {
	if len(dropped) == 0 {
		return
	}
	msg := fmt.Sprintf("not put on the pod: %s (this provider lets tenant pods carry keys without a domain and those of the domains %s for labels, %s for annotations: --tenant-pod-label-domains, --tenant-pod-annotation-domains)",
		strings.Join(dropped, ", "), domainList(r.opts.PodLabelDomains), domainList(r.opts.PodAnnotationDomains))
	ctrl.LoggerFrom(ctx).V(1).Info("Left out labels and annotations", "dropped", dropped)
	r.recorder.Eventf(sp, nil, corev1.EventTypeWarning, ReasonMetadataDropped, "Create", "%s", podstatus.Truncate(msg, podstatus.MaxMessage))
}

func domainList(domains []string) string {
	if len(domains) == 0 {
		return "(none)"
	}
	return strings.Join(domains, ",")
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

// forget drops the admission of the ShadowPod key: it is gone or its pod is
// in the cache.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.admitted, key)
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
// triggered by ShadowPod creation, spec changes and deletion (not by its own
// status writes) and by the changes of a pod labelled annex.dev/shadowpod
// that Reconcile acts on (podChangeMatters), which wake the ShadowPod of the
// same name (a final state recorded, re-creation after a deletion, and the
// deletion of a pod left orphaned). Its queue serves the consumers in turn
// (fairqueue.NewQueue): keys one consumer queues by the thousand do not hold
// up another's ShadowPods.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	podEvents := predicate.And(predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetLabels()[offloadingv1alpha1.LabelShadowPod]
		return ok
	}), predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*corev1.Pod)
		pod, okNew := e.ObjectNew.(*corev1.Pod)
		return !okOld || !okNew || podChangeMatters(old, pod)
	}})
	// A pod has its ShadowPod's name: its key is the ShadowPod's, whether
	// the ShadowPod still controls it or it was orphaned.
	byKey := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
	})
	newQueue, err := fairqueue.ForTenants(mgr)
	if err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("shadowpod").
		For(&offloadingv1alpha1.ShadowPod{}, builder.WithPredicates(predicates.SpecChanged())).
		Watches(&corev1.Pod{}, byKey, builder.WithPredicates(podEvents))
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles,
		NewQueue: newQueue}).Complete(r)
}

// podChangeMatters reports whether an update from old to pod can change
// what Reconcile does: its identity, labels, annotations, owner, deletion,
// or a finished phase (whose status is recorded). The status changes of a
// starting or running pod (about three per pod: scheduled, running, ready)
// are not: each made a reconcile that wrote nothing.
func podChangeMatters(old, pod *corev1.Pod) bool {
	return old.UID != pod.UID ||
		!maps.Equal(old.Labels, pod.Labels) ||
		!maps.Equal(old.Annotations, pod.Annotations) ||
		!apiequality.Semantic.DeepEqual(old.OwnerReferences, pod.OwnerReferences) ||
		!old.DeletionTimestamp.Equal(pod.DeletionTimestamp) ||
		podstatus.Finished(pod.Status.Phase)
}

// refusedByPodSecurity reports whether err is Pod Security Admission
// refusing a pod (HTTP 403, "violates PodSecurity"): final, unlike other
// 403s at creation (a ResourceQuota exceeded for now, a RuntimeClass not
// created yet).
func refusedByPodSecurity(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "violates PodSecurity")
}
