package podreflector

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// syncRemote makes the provider match the local pod with key. It is
// level-based: it looks at the local pod (from the node's informer), the
// ShadowPod (from the provider's informers, confirmed with a live read
// before anything drastic) and the provider's reachability.
func (r *Reflector) syncRemote(ctx context.Context, key string) error {
	ns, name := splitKey(key)
	pod, err := r.cfg.Pods.Pods(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		r.clearPending(key)
		r.forgetPod(key)
		return r.syncGone(ns, name)
	case err != nil:
		return err
	case pod.DeletionTimestamp != nil:
		return r.syncTerminating(ctx, key, pod)
	case isFinished(pod):
		// Finished pods are never created again; their ShadowPod (if any)
		// goes with the local pod.
		r.clearPending(key)
		return nil
	default:
		return r.syncActive(key, pod)
	}
}

// remoteClient returns the provider's client and the session context remote
// calls must use; ok is false when the provider cannot be used now.
func (r *Reflector) remoteClient() (client.Client, context.Context, bool) {
	if r.Reachability() != Reachable {
		return nil, nil, false
	}
	sctx := r.sessionContext()
	if sctx == nil {
		return nil, nil, false
	}
	c, err := r.cfg.Remotes.Client(r.cfg.ProviderID)
	if err != nil {
		return nil, nil, false
	}
	return c, sctx, true
}

// liveShadowPod reads the ShadowPod from the provider; nil when it does not
// exist.
func liveShadowPod(ctx context.Context, c client.Client, namespace, name string) (*offloadingv1alpha1.ShadowPod, error) {
	sp := &offloadingv1alpha1.ShadowPod{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, sp)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return sp, nil
}

// deleteShadowPod deletes sp (UID precondition) with grace period grace.
func deleteShadowPod(ctx context.Context, c client.Client, sp *offloadingv1alpha1.ShadowPod, grace *int64) error {
	uid := sp.UID
	opts := []client.DeleteOption{client.Preconditions{UID: &uid}}
	if grace != nil {
		opts = append(opts, client.GracePeriodSeconds(*grace))
	}
	err := c.Delete(ctx, sp, opts...)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// syncGone handles a key whose local pod no longer exists: its ShadowPod is
// an orphan and is deleted. This also collects, when the provider comes
// back, the ShadowPods of pods deleted while it was unreachable, and, after
// a restart, those of pods deleted while the agent was down.
func (r *Reflector) syncGone(ns, name string) error {
	sp, known := r.lookup(ns, name)
	if !known || sp == nil || sp.DeletionTimestamp != nil {
		return nil
	}
	c, ctx, ok := r.remoteClient()
	if !ok {
		return nil
	}
	r.cfg.Log.V(1).Info("Deleting the ShadowPod of a deleted pod", "pod", podKey(ns, name), "shadowPod", sp.Namespace+"/"+sp.Name)
	return deleteShadowPod(ctx, c, sp, sp.Spec.Pod.TerminationGracePeriodSeconds)
}

// syncTerminating carries out the deletion of a local pod: delete its
// ShadowPod with the pod's grace period, and once the ShadowPod is gone
// delete the local pod for good (what a kubelet does once the containers
// stopped). While the provider is unreachable (or not probed yet) a pod
// with a running container stays terminating and is queued again on
// recovery, and one without is deleted at once (see unreachable.go). When
// the provider is permanently unreachable the local pod is deleted at once.
func (r *Reflector) syncTerminating(ctx context.Context, key string, pod *corev1.Pod) error {
	r.clearPending(key)
	if r.deletedFor(key, pod.UID) {
		return nil // deleted for good; the informer has not caught up yet
	}
	switch r.Reachability() {
	case PermanentlyUnreachable:
		r.cfg.Log.V(1).Info("Provider permanently unreachable: deleting the local pod without remote clean-up", "pod", key)
		return r.deleteLocal(ctx, pod, new(int64))
	case Reachable:
	default:
		if !hasRunningContainer(pod) {
			r.cfg.Log.V(1).Info("Provider unreachable: deleting a pod with no running container at once", "pod", key)
			return r.deleteLocal(ctx, pod, new(int64))
		}
		return nil // postponed; see unreachable.go
	}
	remoteNS, mapped := r.remoteNamespace(pod.Namespace)
	if !mapped {
		// The namespace has no remote namespace (not offloaded yet, or
		// no longer: its remote namespace is deleted with everything in
		// it). Nothing on the provider is left to wait for; a ShadowPod
		// left behind is collected as an orphan by the next session.
		r.cfg.Log.V(1).Info("Namespace not offloaded: deleting the local pod", "pod", key)
		return r.deleteLocal(ctx, pod, new(int64))
	}
	sp, known := r.lookup(pod.Namespace, pod.Name)
	if !known {
		return nil // queued again once the namespace's informer synced
	}
	c, sctx, ok := r.remoteClient()
	if !ok {
		return nil
	}
	observed := sp != nil // in the informer, not read live
	if sp == nil {
		if s, ok := r.seenFor(key, pod.UID); ok && s.observed {
			// The informer showed this pod's ShadowPod and no longer does:
			// its deletion went through. No need to ask the provider (a
			// burst of deletions made one such read per pod).
			return r.deleteLocal(ctx, pod, new(int64))
		}
		// Confirm before finishing the local deletion: the informer may lag
		// behind a ShadowPod created a moment ago.
		live, err := liveShadowPod(sctx, c, remoteNS, pod.Name)
		if err != nil {
			return err
		}
		if live == nil {
			return r.deleteLocal(ctx, pod, new(int64))
		}
		sp = live
	}
	if observed && OriginUID(sp) == string(pod.UID) {
		r.markSeen(key, pod.UID, true)
	}
	if sp.DeletionTimestamp != nil {
		return nil // its deletion event queues the pod again
	}
	// Any ShadowPod of this name belongs to this pod or to an older one of
	// the same name: either way it goes.
	grace := pod.DeletionGracePeriodSeconds
	if grace == nil {
		grace = pod.Spec.TerminationGracePeriodSeconds
	}
	return deleteShadowPod(sctx, c, sp, grace)
}

// syncActive makes the ShadowPod of a running (or to-be-running) local pod
// exist and carry its labels and annotations.
func (r *Reflector) syncActive(key string, pod *corev1.Pod) error {
	if r.Reachability() != Reachable {
		return nil // skipped, not queued: recovery queues every pod again
	}
	remoteNS, mapped := r.remoteNamespace(pod.Namespace)
	if !mapped {
		r.setPending(key, pendingCreate{uid: pod.UID, reason: ReasonRemoteNamespaceNotReady,
			message: fmt.Sprintf("namespace %s has no Ready remote namespace on provider %s yet (NamespaceOffloading %s/offloading)",
				pod.Namespace, r.cfg.ProviderID, pod.Namespace)})
		return nil
	}
	sp, known := r.lookup(pod.Namespace, pod.Name)
	if !known {
		return nil // queued again once the namespace's informer synced
	}
	c, ctx, ok := r.remoteClient()
	if !ok {
		return nil
	}
	if sp == nil {
		seen, ok := r.seenFor(key, pod.UID)
		switch {
		case ok && !seen.observed && r.cfg.Clock.Since(seen.at) < informerLag:
			// Created a moment ago; the informer's event queues the pod.
			r.remoteQ.AddAfter(key, informerLag)
			return nil
		case !ok && !wasOffloaded(pod):
			full, err := r.fullPod(ctx, pod)
			if full == nil {
				return err // gone or replaced: its events queue the key again
			}
			pod = full
			missing, err := r.missingDependencies(ctx, c, remoteNS, pod)
			if err != nil {
				return err
			}
			if len(missing) > 0 {
				names := make([]string, len(missing))
				for i, d := range missing {
					names[i] = d.String()
				}
				r.setPending(key, pendingCreate{uid: pod.UID, reason: ReasonWaitingForDependencies,
					message: fmt.Sprintf("waiting for %s to be reflected to namespace %s on provider %s (they must exist in namespace %s here)",
						strings.Join(names, ", "), remoteNS, r.cfg.ProviderID, pod.Namespace)})
				r.remoteQ.AddAfter(key, dependencyRetry)
				return nil
			}
			return r.create(ctx, c, key, pod, remoteNS)
		}
		// The pod had a ShadowPod. Confirm it is gone before concluding the
		// provider deleted it.
		live, err := liveShadowPod(ctx, c, remoteNS, pod.Name)
		if err != nil {
			return err
		}
		if live == nil {
			r.cfg.Log.Info("ShadowPod deleted on the provider: deleting the local pod", "pod", key)
			r.event(pod, corev1.EventTypeWarning, "ShadowPodDeleted", "Delete",
				"the pod's ShadowPod was deleted on provider %s", r.cfg.ProviderID)
			return r.deleteLocal(ctx, pod, nil)
		}
		sp = live
	} else if OriginUID(sp) == string(pod.UID) {
		r.markSeen(key, pod.UID, true)
	}
	if OriginUID(sp) != string(pod.UID) {
		// Left over by an earlier pod of the same name: replace it.
		if sp.DeletionTimestamp == nil {
			r.cfg.Log.V(1).Info("Deleting a stale ShadowPod", "pod", key, "originUID", OriginUID(sp))
			if err := deleteShadowPod(ctx, c, sp, new(int64)); err != nil {
				return err
			}
		}
		r.setPending(key, pendingCreate{uid: pod.UID, reason: ReasonShadowPodPending,
			message: "waiting for a stale ShadowPod of the same name to be deleted"})
		return nil // its deletion event queues the pod again
	}
	r.clearPending(key)
	if sp.DeletionTimestamp != nil {
		return nil // being deleted on the provider; the local pod follows
	}
	return r.pushMetadata(ctx, c, sp, pod)
}

// create creates pod's ShadowPod. It adopts an existing one of the same
// origin UID (a restart, or the informer lagging), so a pod never has two.
func (r *Reflector) create(ctx context.Context, c client.Client, key string, pod *corev1.Pod, remoteNS string) error {
	sp := BuildShadowPod(pod, remoteNS, r.cfg.LocalClusterID, r.nodeIdentity())
	cs, err := r.cfg.Remotes.Clientset(r.cfg.ProviderID)
	if err == nil {
		err = createShadowPod(ctx, cs.CoreV1().RESTClient(), sp)
	}
	switch {
	case err == nil:
		r.cfg.Log.V(1).Info("ShadowPod created", "pod", key, "shadowPod", remoteNS+"/"+sp.Name)
		r.markSeen(key, pod.UID, false)
		r.clearPending(key)
		// No Event: the pod's Offloaded condition says the same (provider,
		// ShadowPod) once the ShadowPod is seen, and an Event per pod was
		// one more write to this cluster for every offloaded pod. Events
		// remain for what goes wrong (OffloadRefused, ShadowPodDeleted,
		// ProviderUnreachable).
		r.statusQ.Add(key)
		return nil
	case apierrors.IsAlreadyExists(err):
		live, gerr := liveShadowPod(ctx, c, remoteNS, pod.Name)
		if gerr != nil || live == nil {
			return fmt.Errorf("ShadowPod %s/%s exists but cannot be read: %v", remoteNS, pod.Name, gerr)
		}
		if OriginUID(live) == string(pod.UID) {
			r.markSeen(key, pod.UID, false)
			r.clearPending(key)
			return r.pushMetadata(ctx, c, live, pod) // adopted
		}
		if live.DeletionTimestamp == nil {
			if err := deleteShadowPod(ctx, c, live, new(int64)); err != nil {
				return err
			}
		}
		return fmt.Errorf("replacing stale ShadowPod %s/%s (origin UID %s)", remoteNS, pod.Name, OriginUID(live))
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		// The provider's API refuses this pod spec (hostNetwork, ...):
		// retrying cannot help. The pod fails, as on a kubelet that
		// rejects a pod.
		msg := fmt.Sprintf("provider %s refused the pod: %v", r.cfg.ProviderID, err)
		r.event(pod, corev1.EventTypeWarning, "OffloadRefused", "Create", "%s", msg)
		r.setPending(key, pendingCreate{uid: pod.UID, reason: ReasonForbidden, message: msg, failed: true})
		return nil
	default:
		r.setPending(key, pendingCreate{uid: pod.UID, reason: ReasonShadowPodCreationFailed,
			message: fmt.Sprintf("creating the ShadowPod on provider %s failed (will retry): %v", r.cfg.ProviderID, err)})
		return err
	}
}

// metadataOnly asks the API server to answer with the object's metadata
// only, and with the whole object where it cannot.
const metadataOnly = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json"

// createShadowPod creates sp with rc, a REST client of the provider (of any
// API group: the path is absolute), and reads nothing of the answer but
// its status. The reflector uses nothing of the ShadowPod the API server
// returns, and decoding it (JSON, a whole pod spec) was about 9 % of the
// consumer agent's CPU in a burst of 5000 pods; asking for its metadata
// only also spares the provider's API server encoding it.
func createShadowPod(ctx context.Context, rc rest.Interface, sp *offloadingv1alpha1.ShadowPod) error {
	obj := *sp
	obj.TypeMeta = metav1.TypeMeta{APIVersion: offloadingv1alpha1.GroupVersion.String(), Kind: "ShadowPod"}
	body, err := json.Marshal(&obj)
	if err != nil {
		return fmt.Errorf("encode ShadowPod %s/%s: %w", sp.Namespace, sp.Name, err)
	}
	gv := offloadingv1alpha1.GroupVersion
	return rc.Post().AbsPath("/apis", gv.Group, gv.Version, "namespaces", sp.Namespace, "shadowpods").
		Param("fieldManager", FieldManager).
		Body(body).
		SetHeader("Content-Type", runtime.ContentTypeJSON).
		SetHeader("Accept", metadataOnly).
		Do(ctx).Error()
}

// pushMetadata brings the ShadowPod's podLabels and podAnnotations in line
// with the local pod's. It is the only change the reflector makes to an
// existing ShadowPod: spec.pod is written once, at creation (the provider
// refuses changes to it), and a ShadowPod of another pod is deleted and
// created again, never updated.
func (r *Reflector) pushMetadata(ctx context.Context, c client.Client, sp *offloadingv1alpha1.ShadowPod, pod *corev1.Pod) error {
	spec := map[string]any{}
	if d := mapDiff(sp.Spec.PodLabels, FilterPodLabels(pod.Labels)); d != nil {
		spec["podLabels"] = d
	}
	if d := mapDiff(sp.Spec.PodAnnotations, FilterPodAnnotations(pod.Annotations)); d != nil {
		spec["podAnnotations"] = d
	}
	if len(spec) == 0 {
		return nil
	}
	data, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	key := podKey(pod.Namespace, pod.Name)
	if r.patchRefused(key, pod.UID, string(data)) {
		return nil // refused already; a change of the pod's metadata makes another patch
	}
	target := &offloadingv1alpha1.ShadowPod{}
	target.Namespace, target.Name = sp.Namespace, sp.Name
	err = c.Patch(ctx, target, client.RawPatch(types.MergePatchType, data), client.FieldOwner(FieldManager))
	switch {
	case err == nil || apierrors.IsNotFound(err):
		r.setPatchRefused(key, pod.UID, "")
		return nil
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		// The provider's admission refuses these labels or annotations
		// (HTTP 422): sending them again cannot help. The ShadowPod keeps
		// its metadata until the local pod's change again.
		r.setPatchRefused(key, pod.UID, string(data))
		r.cfg.Log.Info("The provider refused the pod's labels or annotations", "pod", key, "error", err.Error())
		r.event(pod, corev1.EventTypeWarning, "MetadataRefused", "Update",
			"provider %s refused the pod's new labels or annotations (they are not sent again until they change): %s",
			r.cfg.ProviderID, clip(err.Error(), 768))
		return nil
	default:
		return err
	}
}

// mapDiff returns the JSON merge patch turning from into to (removed keys
// map to nil), nil when they are equal.
func mapDiff(from, to map[string]string) map[string]any {
	var d map[string]any
	set := func(k string, v any) {
		if d == nil {
			d = map[string]any{}
		}
		d[k] = v
	}
	for k := range from {
		if _, ok := to[k]; !ok {
			set(k, nil)
		}
	}
	for k, v := range to {
		if old, ok := from[k]; !ok || old != v {
			set(k, v)
		}
	}
	return d
}

// hasRunningContainer reports whether pod's status shows a container that is
// neither waiting nor terminated.
func hasRunningContainer(pod *corev1.Pod) bool {
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Waiting == nil && c.State.Terminated == nil {
			return true
		}
	}
	return false
}
