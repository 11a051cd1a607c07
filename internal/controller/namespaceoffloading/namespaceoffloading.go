// Package namespaceoffloading owns the consumer side of offloading a
// namespace: from a NamespaceOffloading it selects the providers, asks each
// one for a remote namespace through a RemoteNamespace (replicated to the
// provider), labels the namespace for the admission policy, and reports each
// provider's remote namespace in the status. See docs/offloading.md.
package namespaceoffloading

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/replicator"
)

// Finalizer holds a NamespaceOffloading until its remote namespaces are gone.
const Finalizer = "annex.dev/namespace-offloading"

// Reconciler reconciles NamespaceOffloadings.
type Reconciler struct {
	Client         client.Client
	LocalClusterID string
	// HeartbeatInterval is how often this cluster renews its heartbeats:
	// a failover's fence must be at least MinHeartbeatsPerFence of them.
	HeartbeatInterval time.Duration
}

// MinHeartbeatsPerFence is how many heartbeat intervals a fence lasts at
// least, so that a late renewal or two never fences a healthy consumer.
const MinHeartbeatsPerFence = 3

// FenceFor is the fence (seconds) the providers are asked to arm for nso,
// nil when failover is off; msg says why it is off although asked for.
func (r *Reconciler) FenceFor(nso *offloadingv1alpha1.NamespaceOffloading) (fence *int32, msg string) {
	f := nso.Spec.Failover
	if f == nil {
		return nil, ""
	}
	if least := MinHeartbeatsPerFence * r.HeartbeatInterval; time.Duration(f.FenceAfterSeconds)*time.Second < least {
		return nil, fmt.Sprintf("fenceAfterSeconds %d is less than %d heartbeats of this cluster (--consumer-heartbeat-interval %s): failover is off", f.FenceAfterSeconds, MinHeartbeatsPerFence, r.HeartbeatInterval)
	}
	return ptr.To(f.FenceAfterSeconds), ""
}

// +kubebuilder:rbac:groups=offloading.annex.dev,resources=namespaceoffloadings,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=namespaceoffloadings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=namespaceoffloadings/finalizers,verbs=update
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=remotenamespaces,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=remotenamespaces/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=remotenamespaces/finalizers,verbs=update
// +kubebuilder:rbac:groups=core.annex.dev,resources=virtualnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;patch

// Reconcile brings one namespace's remote namespaces in line with its NamespaceOffloading.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	nso := &offloadingv1alpha1.NamespaceOffloading{}
	if err := r.Client.Get(ctx, req.NamespacedName, nso); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ns := nso.Namespace
	existing, err := r.remoteNamespaces(ctx, ns)
	if err != nil {
		return ctrl.Result{}, err
	}

	if !nso.DeletionTimestamp.IsZero() {
		if err := r.labelNamespace(ctx, ns, nil, ""); err != nil {
			return ctrl.Result{}, err
		}
		for i := range existing {
			if err := client.IgnoreNotFound(r.Client.Delete(ctx, &existing[i])); err != nil {
				return ctrl.Result{}, err
			}
		}
		if len(existing) > 0 {
			log.Info("waiting for remote namespaces to be removed", "count", len(existing))
			return ctrl.Result{}, nil // their deletion events requeue us
		}
		if controllerutil.RemoveFinalizer(nso, Finalizer) {
			return ctrl.Result{}, r.Client.Update(ctx, nso)
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(nso, Finalizer) {
		if err := r.Client.Update(ctx, nso); err != nil {
			return ctrl.Result{}, err
		}
	}

	selected, err := r.selectProviders(ctx, nso)
	if err != nil {
		return ctrl.Result{}, err
	}
	strategy := nso.Spec.PodOffloadingStrategy
	if strategy == "" {
		strategy = offloadingv1alpha1.PodOffloadingLocalAndRemote
	}
	if strategy == offloadingv1alpha1.PodOffloadingLocal {
		selected = nil // pods stay local: no remote namespace is needed
	}
	mapping := nso.Spec.NamespaceMappingStrategy
	if mapping == "" {
		mapping = offloadingv1alpha1.NamespaceMappingDefaultName
	}
	remoteName := offloadingv1alpha1.RemoteNamespaceName(mapping, ns, r.LocalClusterID)

	// Ask the selected providers; withdraw from the others.
	fence, _ := r.FenceFor(nso)
	for _, p := range selected {
		rn := &offloadingv1alpha1.RemoteNamespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Namespace: corev1alpha1.PeerNamespaceName(p)}}
		_, err := controllerutil.CreateOrPatch(ctx, r.Client, rn, func() error {
			if rn.Labels == nil {
				rn.Labels = map[string]string{}
			}
			rn.Labels[corev1alpha1.LabelRemoteClusterID] = p
			rn.Labels[corev1alpha1.LabelManagedBy] = corev1alpha1.ManagedByAnnex
			rn.Labels[corev1alpha1.LabelSourceNamespace] = ns
			if rn.CreationTimestamp.IsZero() {
				rn.Spec = offloadingv1alpha1.RemoteNamespaceSpec{SourceNamespace: ns, RemoteNamespace: remoteName}
			}
			rn.Spec.FenceAfterSeconds = fence
			return nil
		})
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("request remote namespace on %s: %w", p, err)
		}
	}
	for i := range existing {
		if !slices.Contains(selected, providerOf(&existing[i])) {
			log.Info("provider no longer selected, removing its remote namespace", "provider", providerOf(&existing[i]))
			if err := client.IgnoreNotFound(r.Client.Delete(ctx, &existing[i])); err != nil {
				return ctrl.Result{}, err
			}
		}
	}

	// Report.
	existing, err = r.remoteNamespaces(ctx, ns)
	if err != nil {
		return ctrl.Result{}, err
	}
	var entries []offloadingv1alpha1.ProviderNamespaceStatus
	var unarmed []string
	for _, rn := range existing {
		p := providerOf(&rn)
		if !slices.Contains(selected, p) || !rn.DeletionTimestamp.IsZero() {
			continue
		}
		e := offloadingv1alpha1.ProviderNamespaceStatus{ClusterID: p, RemoteNamespace: rn.Spec.RemoteNamespace, Phase: offloadingv1alpha1.RemoteNamespacePending, Message: "waiting for the provider"}
		if c := meta.FindStatusCondition(rn.Status.Conditions, offloadingv1alpha1.ConditionReady); c != nil && c.ObservedGeneration == rn.Generation && rn.Status.Phase != "" {
			e.Phase, e.Message = rn.Status.Phase, rn.Status.Message
		}
		entries = append(entries, e)
		if fence != nil && !Armed(&rn, *fence) {
			unarmed = append(unarmed, p)
		}
	}
	if err := r.labelNamespace(ctx, ns, &strategy, strings.Join(Targets(entries), ",")); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.patchStatus(ctx, nso, entries, selected, strategy, r.failoverCondition(nso, unarmed))
}

// Armed reports whether the provider of rn has armed the fence (seconds)
// this cluster asks for: only then may its pods be released.
func Armed(rn *offloadingv1alpha1.RemoteNamespace, fence int32) bool {
	return ptr.Equal(rn.Spec.FenceAfterSeconds, &fence) && ptr.Equal(rn.Status.FenceAfterSeconds, &fence)
}

// failoverCondition is nso's Failover condition, nil when failover is not
// asked for; unarmed are the providers that have not armed the fence yet.
func (r *Reconciler) failoverCondition(nso *offloadingv1alpha1.NamespaceOffloading, unarmed []string) *metav1.Condition {
	if nso.Spec.Failover == nil {
		return nil
	}
	cond := &metav1.Condition{Type: offloadingv1alpha1.ConditionFailover, ObservedGeneration: nso.Generation}
	fence, msg := r.FenceFor(nso)
	switch {
	case fence == nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, offloadingv1alpha1.ReasonFenceTooShort, msg
	case len(unarmed) > 0:
		sort.Strings(unarmed)
		cond.Status, cond.Reason = metav1.ConditionFalse, offloadingv1alpha1.ReasonFenceNotArmed
		cond.Message = fmt.Sprintf("provider(s) %s have not armed the fence yet: their pods are never released", strings.Join(unarmed, ", "))
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, offloadingv1alpha1.ReasonFenceArmed
		cond.Message = fmt.Sprintf("pods are fenced on a provider whose heartbeat is %d s old and released here after %d s", *fence, nso.Spec.Failover.ReleaseAfterSeconds)
	}
	return cond
}

// Targets are the providers the namespace's new pods may be scheduled to
// (its annotation annex.dev/offloading-clusters, sorted): those whose
// remote namespace is Ready or, while none is, those whose remote namespace
// is still pending. A pod created right after the namespace was offloaded
// is then bound to a pending provider's virtual node, which offloads it as
// soon as the remote namespace is Ready, rather than staying Pending for
// good with an affinity to no provider (its controller would not replace
// it). Providers that refused the namespace (Failed) are never targets.
func Targets(entries []offloadingv1alpha1.ProviderNamespaceStatus) []string {
	var ready, pending []string
	for _, e := range entries {
		switch e.Phase {
		case offloadingv1alpha1.RemoteNamespaceReady:
			ready = append(ready, e.ClusterID)
		case offloadingv1alpha1.RemoteNamespacePending:
			pending = append(pending, e.ClusterID)
		}
	}
	if len(ready) == 0 {
		ready = pending
	}
	sort.Strings(ready)
	return ready
}

func (r *Reconciler) patchStatus(ctx context.Context, nso *offloadingv1alpha1.NamespaceOffloading, entries []offloadingv1alpha1.ProviderNamespaceStatus, selected []string, strategy offloadingv1alpha1.PodOffloadingStrategy, failover *metav1.Condition) error {
	orig := nso.DeepCopy()
	nso.Status.RemoteNamespaces = entries
	cond := metav1.Condition{Type: offloadingv1alpha1.ConditionReady, ObservedGeneration: nso.Generation}
	notReady := 0
	for _, e := range entries {
		if e.Phase != offloadingv1alpha1.RemoteNamespaceReady {
			notReady++
		}
	}
	switch {
	case strategy == offloadingv1alpha1.PodOffloadingLocal:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, offloadingv1alpha1.ReasonReconciled, "strategy Local: pods stay in this cluster"
	case len(selected) == 0:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, offloadingv1alpha1.ReasonNoClusterSelected, "no peered provider matches the cluster selector"
	case notReady > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, offloadingv1alpha1.ReasonPending
		cond.Message = fmt.Sprintf("%d of %d remote namespaces not ready", notReady, len(entries))
		for _, e := range entries {
			if e.Phase == offloadingv1alpha1.RemoteNamespaceFailed {
				cond.Reason = offloadingv1alpha1.ReasonRemoteNamespaceFailed
				cond.Message = fmt.Sprintf("provider %s refused remote namespace %s: %s", e.ClusterID, e.RemoteNamespace, e.Message)
			}
		}
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, offloadingv1alpha1.ReasonReconciled, fmt.Sprintf("offloaded to %d provider(s)", len(entries))
	}
	meta.SetStatusCondition(&nso.Status.Conditions, cond)
	if failover != nil {
		meta.SetStatusCondition(&nso.Status.Conditions, *failover)
	} else {
		meta.RemoveStatusCondition(&nso.Status.Conditions, offloadingv1alpha1.ConditionFailover)
	}
	if equalStatus(orig.Status, nso.Status) {
		return nil
	}
	return r.Client.Status().Patch(ctx, nso, client.MergeFrom(orig))
}

func equalStatus(a, b offloadingv1alpha1.NamespaceOffloadingStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// labelNamespace sets (strategy != nil) or removes the offloading labels and
// annotation on the namespace, writing only when they differ.
func (r *Reconciler) labelNamespace(ctx context.Context, name string, strategy *offloadingv1alpha1.PodOffloadingStrategy, ready string) error {
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	want := map[string]any{}
	lbl, ann := map[string]any{}, map[string]any{}
	if strategy != nil {
		if ns.Labels[corev1alpha1.LabelOffloading] == "true" && ns.Labels[corev1alpha1.LabelOffloadingStrategy] == string(*strategy) && ns.Annotations[corev1alpha1.AnnotationOffloadingClusters] == ready {
			return nil
		}
		lbl[corev1alpha1.LabelOffloading] = "true"
		lbl[corev1alpha1.LabelOffloadingStrategy] = string(*strategy)
		ann[corev1alpha1.AnnotationOffloadingClusters] = ready
	} else {
		_, a := ns.Labels[corev1alpha1.LabelOffloading]
		_, b := ns.Labels[corev1alpha1.LabelOffloadingStrategy]
		_, c := ns.Annotations[corev1alpha1.AnnotationOffloadingClusters]
		if !a && !b && !c {
			return nil
		}
		lbl[corev1alpha1.LabelOffloading] = nil
		lbl[corev1alpha1.LabelOffloadingStrategy] = nil
		ann[corev1alpha1.AnnotationOffloadingClusters] = nil
	}
	want["metadata"] = map[string]any{"labels": lbl, "annotations": ann}
	patch, _ := json.Marshal(want)
	return r.Client.Patch(ctx, ns, client.RawPatch(types.MergePatchType, patch))
}

// remoteNamespaces lists the RemoteNamespaces this cluster made for ns.
func (r *Reconciler) remoteNamespaces(ctx context.Context, ns string) ([]offloadingv1alpha1.RemoteNamespace, error) {
	list := &offloadingv1alpha1.RemoteNamespaceList{}
	if err := r.Client.List(ctx, list, client.MatchingLabels{corev1alpha1.LabelSourceNamespace: ns, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}); err != nil {
		return nil, err
	}
	var out []offloadingv1alpha1.RemoteNamespace
	for _, rn := range list.Items {
		// Only this cluster's requests (in its peer namespaces for providers),
		// not what a consumer of this cluster wrote into its tenant namespace.
		if !replicator.IsReplica(&rn) && rn.Namespace == corev1alpha1.PeerNamespaceName(providerOf(&rn)) {
			out = append(out, rn)
		}
	}
	return out, nil
}

func providerOf(rn *offloadingv1alpha1.RemoteNamespace) string {
	return rn.Labels[corev1alpha1.LabelRemoteClusterID]
}

// selectProviders returns the cluster IDs of the virtual nodes whose Node
// labels match the selector (all when it is unset), sorted.
func (r *Reconciler) selectProviders(ctx context.Context, nso *offloadingv1alpha1.NamespaceOffloading) ([]string, error) {
	vns := &corev1alpha1.VirtualNodeList{}
	if err := r.Client.List(ctx, vns); err != nil {
		return nil, err
	}
	var out []string
	for _, vn := range vns.Items {
		if !vn.DeletionTimestamp.IsZero() {
			continue
		}
		ok, err := Matches(nso.Spec.ClusterSelector, NodeLabels(&vn))
		if err != nil {
			return nil, fmt.Errorf("clusterSelector: %w", err)
		}
		if ok && !slices.Contains(out, vn.Spec.ClusterID) {
			out = append(out, vn.Spec.ClusterID)
		}
	}
	sort.Strings(out)
	return out, nil
}

// NodeLabels are the labels the virtual node of vn carries.
func NodeLabels(vn *corev1alpha1.VirtualNode) labels.Set {
	set := labels.Set{}
	for k, v := range vn.Spec.Labels {
		set[k] = v
	}
	set["type"] = "virtual-node"
	set[corev1alpha1.LabelRemoteClusterID] = vn.Spec.ClusterID
	set[corev1.LabelHostname] = vn.NodeName()
	return set
}

// Matches reports whether a node with labels set matches the selector: its
// terms are ORed, each term's expressions ANDed; nil matches everything.
func Matches(sel *corev1.NodeSelector, set labels.Set) (bool, error) {
	if sel == nil || len(sel.NodeSelectorTerms) == 0 {
		return true, nil
	}
	ops := map[corev1.NodeSelectorOperator]selection.Operator{
		corev1.NodeSelectorOpIn: selection.In, corev1.NodeSelectorOpNotIn: selection.NotIn,
		corev1.NodeSelectorOpExists: selection.Exists, corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
		corev1.NodeSelectorOpGt: selection.GreaterThan, corev1.NodeSelectorOpLt: selection.LessThan,
	}
	for _, term := range sel.NodeSelectorTerms {
		s := labels.NewSelector()
		for _, e := range term.MatchExpressions {
			op, ok := ops[e.Operator]
			if !ok {
				return false, fmt.Errorf("unknown operator %q", e.Operator)
			}
			req, err := labels.NewRequirement(e.Key, op, e.Values)
			if err != nil {
				return false, err
			}
			s = s.Add(*req)
		}
		if len(term.MatchExpressions) > 0 && s.Matches(set) {
			return true, nil
		}
	}
	return false, nil
}

// SetupWithManager watches NamespaceOffloadings, their RemoteNamespaces and
// the virtual nodes they may select.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := func(ctx context.Context, _ client.Object) []reconcile.Request {
		list := &offloadingv1alpha1.NamespaceOffloadingList{}
		if err := r.Client.List(ctx, list); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, n := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&n)})
		}
		return reqs
	}
	source := func(_ context.Context, o client.Object) []reconcile.Request {
		ns := o.GetLabels()[corev1alpha1.LabelSourceNamespace]
		if ns == "" || replicator.IsReplica(o) {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: offloadingv1alpha1.NamespaceOffloadingName}}}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("namespaceoffloading").
		For(&offloadingv1alpha1.NamespaceOffloading{}).
		Watches(&offloadingv1alpha1.RemoteNamespace{}, handler.EnqueueRequestsFromMapFunc(source)).
		Watches(&corev1alpha1.VirtualNode{}, handler.EnqueueRequestsFromMapFunc(all)).
		Complete(r)
}
