// Package replicator owns the consumer side of object replication. For one
// configured kind per controller (ResourceSlice, RemoteNamespace), it mirrors
// every local object labelled annex.dev/remote-cluster-id=<P> in this
// cluster's peer namespace for P ("annex-peer-<P>") into this cluster's
// tenant namespace on provider P ("annex-tenant-<localClusterID>"), under the
// same name: the object's content (every top-level field except metadata and
// status) and its labels and annotations go out, the provider's status comes
// back into the local object's status subresource. A finalizer keeps the local
// object until its remote copy is gone.
//
// The replicator acts with this cluster's credentials for P, so it
// replicates only what this cluster itself keeps for P. Its rule (named
// "annex-replicator" in refusals) is: an object is replicated to P only from
// annex-peer-<P>, where no peer has any right. Objects in tenant namespaces
// ("annex-tenant-<X>") were written by peer X and are replicas, never
// replicated further, whatever their labels and annotations say; an object
// elsewhere, or in the peer namespace of another cluster, that is labelled for
// P is refused with a Warning Event (ReplicationRefused) and its remote copy,
// if it had one, is deleted.
//
// The reconciler is generic: it works on unstructured objects, so replicating
// another kind only means starting one more controller with its
// GroupVersionKind. It talks to peers only through Remotes and never waits on
// an unreachable peer: while a peer is temporarily unreachable it does
// nothing and is woken by the peer's reachability transitions; when a peer is
// marked permanently unreachable (ForeignCluster spec.unreachable, set by a
// forced unpeer) or its ForeignCluster is gone, every remote operation is
// skipped and finalizers are dropped locally.
package replicator

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// Rule names the replicator's rule in refusals.
const Rule = "annex-replicator"

// The replicator's local RBAC (today it replicates ResourceSlices only; add
// markers here when another kind is replicated).
// +kubebuilder:rbac:groups=core.annex.dev,resources=resourceslices,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=core.annex.dev,resources=resourceslices/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=core.annex.dev,resources=resourceslices/finalizers,verbs=update
// +kubebuilder:rbac:groups=core.annex.dev,resources=foreignclusters,verbs=get;list;watch

const (
	// Finalizer is added to every replicated local object; it is removed once
	// the remote copy is gone (or the peer is gone or marked unreachable).
	Finalizer = "annex.dev/replication"

	// AnnotationReplicatedTo records, on the local object, the peer the
	// object was replicated to. It lets the replicator delete the remote copy
	// when the annex.dev/remote-cluster-id label is removed or changed.
	AnnotationReplicatedTo = "annex.dev/replicated-to"

	// AnnotationOriginNamespace records, on the remote copy, the namespace of
	// the local object. Two local objects with the same name in different
	// namespaces cannot both be replicated to one peer; the second one is
	// refused instead of overwriting the first one's copy.
	AnnotationOriginNamespace = "annex.dev/origin-namespace"

	// DefaultPendingRequeue is how soon a replicated object is looked at again
	// while its remote copy has no up-to-date status yet or is being deleted.
	DefaultPendingRequeue = 2 * time.Second

	// firstLook is how soon a remote copy just created or changed is read
	// again for the peer's answer (a provider answers a new RemoteNamespace
	// within a fraction of a second); the wait grows towards PendingRequeue
	// as the copy gets older (pendingWait).
	firstLook = 200 * time.Millisecond

	// DefaultResyncPeriod is how often the remote status of a replicated
	// object is read again at steady state.
	DefaultResyncPeriod = 30 * time.Second
)

// Remotes gives access to peer clusters. *remote.Manager implements it.
type Remotes interface {
	// Client returns a client for the peer whose every call has a timeout,
	// or an error when the peer is unknown or unreachable.
	Client(clusterID string) (client.Client, error)
	// Subscribe returns a channel of reachability transitions (the
	// ForeignCluster object).
	Subscribe() <-chan event.TypedGenericEvent[*corev1alpha1.ForeignCluster]
}

// Options tune the replicator. The zero value means the defaults.
type Options struct {
	// PendingRequeue is how soon to look again while the remote status is not
	// up to date or the remote copy is being deleted (DefaultPendingRequeue).
	PendingRequeue time.Duration
	// ResyncPeriod is how often to re-read the remote status at steady state
	// (DefaultResyncPeriod).
	ResyncPeriod time.Duration
	// Recorder receives the refusals (Warning ReplicationRefused on the
	// refused object). Nil: refusals are only logged.
	Recorder events.EventRecorder
}

// Reconciler replicates the local objects of one kind to peers.
type Reconciler struct {
	local          client.Client
	reader         client.Reader
	remotes        Remotes
	localClusterID string
	gvk            schema.GroupVersionKind
	opts           Options
}

// New returns a replicator for objects of kind gvk. local writes local
// objects (and reads them until SetupWithManager switches reads to the
// manager's cache); remotes gives clients for peers; localClusterID is this
// cluster's ID, which names the tenant namespace on every peer.
func New(local client.Client, remotes Remotes, localClusterID string, gvk schema.GroupVersionKind, opts Options) *Reconciler {
	if opts.PendingRequeue <= 0 {
		opts.PendingRequeue = DefaultPendingRequeue
	}
	if opts.ResyncPeriod <= 0 {
		opts.ResyncPeriod = DefaultResyncPeriod
	}
	return &Reconciler{
		local:          local,
		reader:         local,
		remotes:        remotes,
		localClusterID: localClusterID,
		gvk:            gvk,
		opts:           opts,
	}
}

func (r *Reconciler) newObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.gvk)
	return u
}

// Reconcile replicates one local object.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	obj := r.newObject()
	if err := r.reader.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if IsReplica(obj) || InTenantNamespace(obj) {
		return ctrl.Result{}, nil // a peer wrote it: never replicated, never tracked
	}
	target := obj.GetLabels()[corev1alpha1.LabelRemoteClusterID]
	recorded := obj.GetAnnotations()[AnnotationReplicatedTo]
	log := ctrl.LoggerFrom(ctx).WithValues("peer", target)
	ctx = ctrl.LoggerInto(ctx, log)

	if !obj.GetDeletionTimestamp().IsZero() {
		if !controllerutil.ContainsFinalizer(obj, Finalizer) {
			return ctrl.Result{}, nil
		}
		peer := recorded
		if peer == "" {
			peer = target
		}
		if peer != "" {
			done, res, err := r.deleteRemote(ctx, peer, obj)
			if !done || err != nil {
				return res, err
			}
		}
		log.Info("Removing finalizer")
		return ctrl.Result{}, r.track(ctx, obj, "")
	}

	// Rule annex-replicator: only objects of the target's peer namespace go
	// to it.
	allowed := target != "" && obj.GetNamespace() == corev1alpha1.PeerNamespaceName(target)

	// The label was removed, now names another peer, or the object may not
	// be replicated (any more): delete the copy on the peer the object was
	// replicated to first.
	if recorded != "" && (recorded != target || !allowed) {
		log.Info("Replication target changed, deleting the previous remote copy", "previousPeer", recorded)
		done, res, err := r.deleteRemote(ctx, recorded, obj)
		if !done || err != nil {
			return res, err
		}
		if err := r.track(ctx, obj, ""); err != nil {
			return ctrl.Result{}, err
		}
	}
	if target == "" {
		return ctrl.Result{}, r.track(ctx, obj, "")
	}
	if !allowed {
		want := corev1alpha1.PeerNamespaceName(target)
		msg := fmt.Sprintf("%s: %s %s/%s is labelled %s=%s but only objects in namespace %s are replicated to %s; not replicated",
			Rule, r.gvk.Kind, obj.GetNamespace(), obj.GetName(), corev1alpha1.LabelRemoteClusterID, target, want, target)
		log.Info("Replication refused", "rule", Rule, "wantNamespace", want)
		if r.opts.Recorder != nil {
			r.opts.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, "ReplicationRefused", "Replicate", "%s", msg)
		}
		return ctrl.Result{}, r.track(ctx, obj, "")
	}

	skip, why, err := r.peerGone(ctx, target)
	if err != nil {
		return ctrl.Result{}, err
	}
	if skip {
		// A ForeignCluster event (creation, spec change) brings us back.
		log.V(1).Info("Not replicating", "reason", why)
		return ctrl.Result{}, nil
	}
	// Track before creating anything remotely, so no copy is ever leaked.
	if err := r.track(ctx, obj, target); err != nil {
		return ctrl.Result{}, err
	}
	rc, err := r.remotes.Client(target)
	if err != nil {
		log.V(1).Info("Peer not reachable now, waiting for it to come back", "reason", err.Error())
		return ctrl.Result{}, nil
	}
	return r.replicate(ctx, rc, obj)
}

// replicate creates or updates the remote copy of obj and copies its status back.
func (r *Reconciler) replicate(ctx context.Context, rc client.Client, obj *unstructured.Unstructured) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	desired := r.desiredRemote(obj)
	remote := r.newObject()
	err := rc.Get(ctx, client.ObjectKeyFromObject(desired), remote)
	switch {
	case apierrors.IsNotFound(err):
		if err := rc.Create(ctx, desired); err != nil {
			return ctrl.Result{}, fmt.Errorf("create remote copy %s: %w", client.ObjectKeyFromObject(desired), err)
		}
		log.Info("Created remote copy", "remoteNamespace", desired.GetNamespace())
		return ctrl.Result{RequeueAfter: min(firstLook, r.opts.PendingRequeue)}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get remote copy %s: %w", client.ObjectKeyFromObject(desired), err)
	}
	if !r.owns(remote, obj) {
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf(
			"remote object %s exists and was not replicated from this object (labels %v, annotations %v): refusing to overwrite it",
			client.ObjectKeyFromObject(remote), remote.GetLabels(), remote.GetAnnotations()))
	}
	if !remote.GetDeletionTimestamp().IsZero() {
		// An older copy is still being deleted; create the new one once it is gone.
		return ctrl.Result{RequeueAfter: r.opts.PendingRequeue}, nil
	}

	updated := false
	if !sameContent(desired, remote) {
		status, hasStatus := remote.Object["status"]
		meta := remote.Object["metadata"]
		remote.Object = desired.DeepCopy().Object
		remote.Object["metadata"] = meta
		if hasStatus {
			remote.Object["status"] = status
		}
		remote.SetLabels(desired.GetLabels())
		remote.SetAnnotations(desired.GetAnnotations())
		if err := rc.Update(ctx, remote); err != nil {
			return ctrl.Result{}, fmt.Errorf("update remote copy %s: %w", client.ObjectKeyFromObject(remote), err)
		}
		log.Info("Updated remote copy", "remoteNamespace", remote.GetNamespace())
		updated = true
	}

	status, current := remoteStatus(remote)
	if current {
		// Say which local generation this status answers, so readers of the
		// local object can tell a fresh decision from a stale one.
		localizeGenerations(status, obj.GetGeneration())
	}
	if status != nil && current && !apiequality.Semantic.DeepEqual(status, obj.Object["status"]) {
		patch := client.MergeFrom(obj.DeepCopy())
		obj.Object["status"] = runtime.DeepCopyJSONValue(status)
		if err := r.local.Status().Patch(ctx, obj, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("copy remote status: %w", err)
		}
		log.V(1).Info("Copied remote status")
	}
	if updated {
		return ctrl.Result{RequeueAfter: min(firstLook, r.opts.PendingRequeue)}, nil
	}
	if !current {
		return ctrl.Result{RequeueAfter: pendingWait(time.Since(remote.GetCreationTimestamp().Time), r.opts.PendingRequeue)}, nil
	}
	return ctrl.Result{RequeueAfter: r.opts.ResyncPeriod}, nil
}

// pendingWait is how soon to read a remote copy of the given age again
// while the peer has not answered its current spec: a quarter of its age,
// between firstLook and most. A peer answers a new copy quickly, so the
// first reads come fast; one that takes long is not asked more often than
// every most.
func pendingWait(age, most time.Duration) time.Duration {
	return min(most, max(firstLook, age/4))
}

// deleteRemote deletes the copy of obj on peer. done is true once the copy
// is gone, or when the peer is gone or marked unreachable; otherwise res says
// when to look again (zero: wait for a reachability transition).
func (r *Reconciler) deleteRemote(ctx context.Context, peer string, obj *unstructured.Unstructured) (done bool, res ctrl.Result, err error) {
	log := ctrl.LoggerFrom(ctx).WithValues("peer", peer)
	skip, why, err := r.peerGone(ctx, peer)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if skip {
		log.Info("Skipping remote deletion", "reason", why)
		return true, ctrl.Result{}, nil
	}
	rc, err := r.remotes.Client(peer)
	if err != nil {
		log.Info("Peer not reachable now, remote deletion waits for it to come back", "reason", err.Error())
		return false, ctrl.Result{}, nil
	}
	key := client.ObjectKey{Namespace: corev1alpha1.TenantNamespaceName(r.localClusterID), Name: obj.GetName()}
	for attempt := 0; ; attempt++ {
		remote := r.newObject()
		err := rc.Get(ctx, key, remote)
		switch {
		case apierrors.IsNotFound(err):
			return true, ctrl.Result{}, nil
		case err != nil:
			return false, ctrl.Result{}, fmt.Errorf("get remote copy %s: %w", key, err)
		case !r.owns(remote, obj):
			log.Info("Remote object was not replicated from this object, leaving it", "remote", key)
			return true, ctrl.Result{}, nil
		case !remote.GetDeletionTimestamp().IsZero() || attempt > 0:
			// Deletion in progress (remote finalizers): look again soon.
			return false, ctrl.Result{RequeueAfter: r.opts.PendingRequeue}, nil
		}
		uid := remote.GetUID()
		err = rc.Delete(ctx, remote, client.Preconditions{UID: &uid}, client.PropagationPolicy("Background"))
		if err != nil && !apierrors.IsNotFound(err) {
			return false, ctrl.Result{}, fmt.Errorf("delete remote copy %s: %w", key, err)
		}
		log.Info("Deleted remote copy", "remote", key)
		// Look once more: without remote finalizers the copy is already gone.
	}
}

// peerGone reports whether every remote operation towards peer must be
// skipped: its ForeignCluster does not exist (the peering was removed) or is
// marked permanently unreachable.
func (r *Reconciler) peerGone(ctx context.Context, peer string) (bool, string, error) {
	fc := &corev1alpha1.ForeignCluster{}
	if err := r.reader.Get(ctx, client.ObjectKey{Name: peer}, fc); err != nil {
		if apierrors.IsNotFound(err) {
			return true, "ForeignCluster " + peer + " does not exist", nil
		}
		return false, "", fmt.Errorf("get ForeignCluster %s: %w", peer, err)
	}
	if fc.Spec.Unreachable {
		return true, "ForeignCluster " + peer + " is marked unreachable", nil
	}
	return false, "", nil
}

// track adds the finalizer and the replicated-to annotation for peer to obj,
// or removes both when peer is empty. It writes only when something changes.
func (r *Reconciler) track(ctx context.Context, obj *unstructured.Unstructured, peer string) error {
	orig := obj.DeepCopy()
	ann := obj.GetAnnotations()
	changed := false
	if peer == "" {
		changed = controllerutil.RemoveFinalizer(obj, Finalizer)
		if _, ok := ann[AnnotationReplicatedTo]; ok {
			delete(ann, AnnotationReplicatedTo)
			obj.SetAnnotations(ann)
			changed = true
		}
	} else {
		changed = controllerutil.AddFinalizer(obj, Finalizer)
		if ann[AnnotationReplicatedTo] != peer {
			if ann == nil {
				ann = map[string]string{}
			}
			ann[AnnotationReplicatedTo] = peer
			obj.SetAnnotations(ann)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	err := r.local.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) && peer == "" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update finalizer: %w", err)
	}
	return nil
}

// desiredRemote returns the remote copy of obj: same name in this cluster's
// tenant namespace, every top-level field but metadata and status, and the
// labels and annotations of obj with Annex's origin labels.
func (r *Reconciler) desiredRemote(obj *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range obj.Object {
		switch k {
		case "metadata", "status":
		default:
			out.Object[k] = runtime.DeepCopyJSONValue(v)
		}
	}
	out.SetGroupVersionKind(r.gvk)
	out.SetNamespace(corev1alpha1.TenantNamespaceName(r.localClusterID))
	out.SetName(obj.GetName())

	labels := map[string]string{}
	for k, v := range obj.GetLabels() {
		labels[k] = v
	}
	labels[corev1alpha1.LabelRemoteClusterID] = r.localClusterID
	labels[corev1alpha1.LabelManagedBy] = corev1alpha1.ManagedByAnnex
	out.SetLabels(labels)

	ann := map[string]string{}
	for k, v := range obj.GetAnnotations() {
		if k == AnnotationReplicatedTo || strings.HasPrefix(k, "kubectl.kubernetes.io/") {
			continue
		}
		ann[k] = v
	}
	ann[AnnotationOriginNamespace] = obj.GetNamespace()
	out.SetAnnotations(ann)
	return out
}

// owns reports whether remote is the copy of local made by this cluster.
func (r *Reconciler) owns(remote, local *unstructured.Unstructured) bool {
	l := remote.GetLabels()
	return l[corev1alpha1.LabelManagedBy] == corev1alpha1.ManagedByAnnex &&
		l[corev1alpha1.LabelRemoteClusterID] == r.localClusterID &&
		remote.GetAnnotations()[AnnotationOriginNamespace] == local.GetNamespace()
}

// sameContent reports whether remote already has the labels, annotations and
// content of desired.
func sameContent(desired, remote *unstructured.Unstructured) bool {
	if !maps.Equal(desired.GetLabels(), remote.GetLabels()) || !maps.Equal(desired.GetAnnotations(), remote.GetAnnotations()) {
		return false
	}
	keys := map[string]bool{}
	for k := range desired.Object {
		keys[k] = true
	}
	for k := range remote.Object {
		keys[k] = true
	}
	for k := range keys {
		switch k {
		case "metadata", "status", "apiVersion", "kind":
			continue
		}
		if !apiequality.Semantic.DeepEqual(desired.Object[k], remote.Object[k]) {
			return false
		}
	}
	return true
}

// remoteStatus returns the status of remote (nil when it has none yet) and
// whether it is up to date with the remote object's generation: a status
// that carries observedGeneration, or conditions that do, older than the
// object's generation is a stale answer to a previous spec.
func remoteStatus(remote *unstructured.Unstructured) (map[string]any, bool) {
	status, _, _ := unstructured.NestedMap(remote.Object, "status")
	if len(status) == 0 {
		return nil, false
	}
	gen := remote.GetGeneration()
	if og, ok, _ := unstructured.NestedInt64(status, "observedGeneration"); ok && og < gen {
		return status, false
	}
	conds, _, _ := unstructured.NestedSlice(status, "conditions")
	for _, c := range conds {
		cm, ok := c.(map[string]any)
		if !ok {
			continue
		}
		if og, ok, _ := unstructured.NestedInt64(cm, "observedGeneration"); ok && og < gen {
			return status, false
		}
	}
	return status, true
}

// localizeGenerations rewrites the observedGeneration fields of a remote
// status that is up to date to the local object's generation.
func localizeGenerations(status map[string]any, gen int64) {
	if _, ok := status["observedGeneration"]; ok {
		status["observedGeneration"] = gen
	}
	conds, _, _ := unstructured.NestedSlice(status, "conditions")
	for i, c := range conds {
		if cm, ok := c.(map[string]any); ok {
			if _, ok := cm["observedGeneration"]; ok {
				cm["observedGeneration"] = gen
				conds[i] = cm
			}
		}
	}
	if conds != nil {
		_ = unstructured.SetNestedSlice(status, conds, "conditions")
	}
}
