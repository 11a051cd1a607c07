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
	// MaxConcurrentReconciles is the number of workers (default 1).
	// Admission (quota check and pod creation) is serialized anyway.
	MaxConcurrentReconciles int
}

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

	// admitMu serializes admission: the quota check and the pod creation
	// that depends on it.
	admitMu sync.Mutex
	// mu guards admitted.
	mu sync.Mutex
	// admitted holds the ShadowPods whose pod was created but may not be in
	// the cache yet, so that the quota counts them meanwhile.
	admitted map[types.NamespacedName]types.UID
}

// New returns the reconciler. c reads ShadowPods, pods, namespaces and
// ResourceSlices (from the cache), creates and patches pods and patches
// ShadowPod status; recorder receives a Warning Event for every refusal.
func New(c client.Client, recorder events.EventRecorder, opts Options) *Reconciler {
	if opts.PendingRequeue <= 0 {
		opts.PendingRequeue = DefaultPendingRequeue
	}
	return &Reconciler{client: c, recorder: recorder, opts: opts, admitted: map[types.NamespacedName]types.UID{}}
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
func (r *Reconciler) create(ctx context.Context, sp *offloadingv1alpha1.ShadowPod, consumer string) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if errs := Validate(&sp.Spec, r.opts.AllowPrivileged); len(errs) > 0 {
		return ctrl.Result{}, r.refuse(ctx, sp, offloadingv1alpha1.ReasonForbidden, errs.ToAggregate().Error())
	}

	r.admitMu.Lock()
	defer r.admitMu.Unlock()
	granted, accepted, err := r.granted(ctx, consumer)
	if err != nil {
		return ctrl.Result{}, err
	}
	used, err := r.used(ctx, consumer, sp)
	if err != nil {
		return ctrl.Result{}, err
	}
	if msg := CheckQuota(consumer, PodRequests(&sp.Spec.Pod), used, granted, accepted); msg != "" {
		return ctrl.Result{}, r.refuse(ctx, sp, offloadingv1alpha1.ReasonQuotaExceeded, msg)
	}

	pod, err := r.desiredPod(sp)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.ensureServiceAccount(ctx, pod); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.client.Create(ctx, pod); err != nil {
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
	r.remember(client.ObjectKeyFromObject(sp), sp.UID)
	log.Info("Created pod")
	return ctrl.Result{}, r.mirror(ctx, sp, pod)
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
	namespaces := &corev1.NamespaceList{}
	if err := r.client.List(ctx, namespaces, client.MatchingLabels{
		corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex,
	}); err != nil {
		return nil, fmt.Errorf("list namespaces of consumer %s: %w", consumer, err)
	}
	sum := corev1.ResourceList{}
	for _, ns := range namespaces.Items {
		sps := &offloadingv1alpha1.ShadowPodList{}
		if err := r.client.List(ctx, sps, client.InNamespace(ns.Name)); err != nil {
			return nil, fmt.Errorf("list ShadowPods in %s: %w", ns.Name, err)
		}
		if len(sps.Items) == 0 {
			continue
		}
		pods := &corev1.PodList{}
		if err := r.client.List(ctx, pods, client.InNamespace(ns.Name), client.HasLabels{LabelShadowPod}); err != nil {
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
				add(sum, PodRequests(&o.Spec.Pod))
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

func (r *Reconciler) remember(key types.NamespacedName, uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.admitted[key] = uid
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.admitted, key)
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
	if r.opts.MaxConcurrentReconciles > 0 {
		b = b.WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles})
	}
	return b.Complete(r)
}
