package podreflector

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/metrics"
)

// statusConflictRetries bounds the immediate retries of a status write that
// lost a race; after them the key is requeued with backoff.
const statusConflictRetries = 4

// syncStatus writes the local pod's status (and the remote-unavailable
// label) for key. The desired pod is computed from the reachability at the
// time of the write and written with the resourceVersion it was computed
// from, so a write can never undo a newer one (in particular the NotReady
// marking of an unreachable provider).
func (r *Reflector) syncStatus(ctx context.Context, key string) error {
	ns, name := splitKey(key)
	pod, err := r.cfg.Pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	pod = r.freshest(key, pod)
	for attempt := 0; ; attempt++ {
		desired := r.desiredPod(key, pod)
		if desired == nil {
			return nil
		}
		got, err := r.cfg.Local.CoreV1().Pods(ns).UpdateStatus(ctx, desired, metav1.UpdateOptions{FieldManager: FieldManager})
		switch {
		case err == nil:
			r.recordWritten(key, pod.ResourceVersion, got)
			r.reportAvailability(pod, desired)
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsInvalid(err):
			// The status computed from the provider's is one the API
			// server refuses: retrying cannot help until either changes
			// (their events queue the pod again).
			r.cfg.Log.Info("The local API server refused the pod status computed from the provider's", "pod", key, "error", err.Error())
			r.reportProblems(key, pod, []StatusProblem{{Field: "local pod status",
				Why: "computed from it is refused by this cluster's API server: " + clip(err.Error(), 512)}})
			return nil
		case !apierrors.IsConflict(err) || attempt >= statusConflictRetries:
			return err
		}
		// Lost a race with another writer: read the pod and compute again.
		pod, err = r.cfg.Local.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// reportAvailability records an Event (and, when marked, the time since the
// provider was found unreachable) when a write marked or unmarked a pod.
func (r *Reflector) reportAvailability(before, after *corev1.Pod) {
	was, is := hasLabel(before), hasLabel(after)
	switch {
	case is && !was:
		r.mu.Lock()
		since := r.unreachableSince
		r.mu.Unlock()
		if !since.IsZero() {
			metrics.PodNotReadySeconds.WithLabelValues(r.cfg.ProviderID).Observe(r.cfg.Clock.Since(since).Seconds())
		}
		r.event(after, corev1.EventTypeWarning, ReasonProviderUnreachable, "MarkNotReady",
			"provider %s is unreachable: pod marked NotReady so that Services stop routing to it", r.cfg.ProviderID)
	case was && !is:
		r.event(after, corev1.EventTypeNormal, "ProviderReachable", "Resync",
			"provider %s is reachable again: pod status follows the remote pod", r.cfg.ProviderID)
	}
}

// desiredPod returns pod with the status and labels it should have, nil
// when nothing needs writing.
func (r *Reflector) desiredPod(key string, pod *corev1.Pod) *corev1.Pod {
	st := r.Reachability()
	if st == Reachable && r.nothingYet(key, pod) {
		return nil
	}
	out := pod.DeepCopy()
	sc := r.statusContext()
	switch st {
	case Unknown:
		// Keep what the previous agent left until the first verdict: no
		// flapping of endpoints when the agent restarts.
		return nil
	case Unreachable, PermanentlyUnreachable:
		if !MarkUnavailable(out, r.cfg.ProviderID, st == PermanentlyUnreachable, sc.Now) {
			return nil
		}
	case Reachable:
		if !r.desiredReachable(key, pod, out, sc) {
			return nil
		}
	}
	if equality.Semantic.DeepEqual(pod.Status, out.Status) && maps.Equal(pod.Labels, out.Labels) {
		return nil
	}
	return out
}

// nothingYet reports, without copying pod, that the provider's side has
// nothing for a pod the reflector never wrote (untouched) while the
// provider is reachable: the pod's namespace is offloaded and either its
// ShadowPod has no status yet, or it has no ShadowPod and none is pending
// for a reason worth writing (its creation is under way), or the provider's
// view is not synced yet. Most events of a burst are such: the pod bound,
// its ShadowPod created, the provider's pod created, scheduled and being
// started (podstatus.Starting). A pod stays Pending as it is until the write
// that says how it runs: writing Offloaded=True alone first would cost every
// offloaded pod one more write, queued before the writes that make pods
// Ready.
func (r *Reflector) nothingYet(key string, pod *corev1.Pod) bool {
	if !untouched(pod) {
		return false
	}
	if _, mapped := r.remoteNamespace(pod.Namespace); !mapped {
		return false
	}
	sp, known := r.lookup(pod.Namespace, pod.Name)
	switch {
	case !known:
		return true
	case sp != nil && OriginUID(sp) == string(pod.UID):
		return r.remoteSaysNothing(pod.Namespace, sp)
	case isFinished(pod):
		return true
	default:
		_, pending := r.pendingFor(key, pod.UID)
		return !pending
	}
}

// lostNamespace says whether pod ran on the provider (or was already
// marked as having lost its remote namespace).
func lostNamespace(pod *corev1.Pod) bool {
	if wasOffloaded(pod) {
		return true
	}
	c := getPodCondition(&pod.Status, corev1.PodReady)
	return c != nil && c.Reason == ReasonRemoteNamespaceNotReady
}

// desiredReachable sets out's status from the provider's truth; false when
// that truth is not known yet.
func (r *Reflector) desiredReachable(key string, pod, out *corev1.Pod, sc StatusContext) bool {
	if _, mapped := r.remoteNamespace(pod.Namespace); !mapped {
		if isFinished(pod) || !r.namespacesKnown() {
			// Right after the virtual node (re)started, its offloaded
			// namespaces are not set yet: a pod that runs on the provider
			// would be marked as having lost its namespace.
			return false
		}
		msg := fmt.Sprintf("namespace %s has no Ready remote namespace on provider %s yet (NamespaceOffloading %s/offloading)",
			pod.Namespace, r.cfg.ProviderID, pod.Namespace)
		if lostNamespace(pod) {
			// It ran there, but its remote namespace is gone (unoffloaded,
			// or the provider deselected): nothing serves it any more.
			msg = fmt.Sprintf("namespace %s is no longer offloaded to provider %s: the pod does not run anywhere (delete it to have it re-created)",
				pod.Namespace, r.cfg.ProviderID)
			for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
				setPodCondition(&out.Status, &pod.Status, corev1.PodCondition{
					Type: t, Status: corev1.ConditionFalse, Reason: ReasonRemoteNamespaceNotReady, Message: msg}, sc.Now)
			}
			for i := range out.Status.ContainerStatuses {
				out.Status.ContainerStatuses[i].Ready = false
			}
		}
		setPodCondition(&out.Status, &pod.Status, corev1.PodCondition{
			Type:    ConditionOffloaded,
			Status:  corev1.ConditionFalse,
			Reason:  ReasonRemoteNamespaceNotReady,
			Message: msg,
		}, sc.Now)
		return true
	}
	sp, known := r.lookup(pod.Namespace, pod.Name)
	if !known {
		return false // wait for the remote truth before touching anything
	}
	ClearUnavailable(out)
	if isFinished(pod) {
		return true // a terminal status never changes again; only the label goes
	}
	if sp != nil && OriginUID(sp) == string(pod.UID) {
		var problems []StatusProblem
		out.Status, problems = TranslateStatus(pod, sp, r.remoteStatus(pod.Namespace, sp), sc)
		r.reportProblems(key, pod, problems)
		return true
	}
	// No ShadowPod (yet) for this pod.
	if pod.DeletionTimestamp != nil {
		// Its ShadowPod is gone (or was never made): syncTerminating
		// deletes the pod for good next, and a terminating pod is out of
		// its Services' ready endpoints already. A status written now
		// would be the last write to a pod about to go (one per deleted
		// pod, measured), racing that deletion.
		return false
	}
	p, ok := r.pendingFor(key, pod.UID)
	switch {
	case ok:
	case untouched(pod):
		// Its ShadowPod is being created, or was a moment ago and the
		// informer has not caught up: the next write says where it runs.
		// Writing "being created" first would cost every offloaded pod
		// one more status write.
		return false
	case wasOffloaded(pod):
		// It ran on the provider and its ShadowPod is gone: syncActive
		// confirms that with a live read and deletes the pod. Until then
		// it is not ready, and Offloaded stays True: after a restart of
		// the agent that condition is the only record that the pod had a
		// ShadowPod, and with Offloaded=False written here first
		// syncActive would create the ShadowPod again.
		notReadyWithout(out, pod, r.cfg.ProviderID, sc.Now)
		return true
	default:
		p = pendingCreate{reason: ReasonShadowPodPending, message: fmt.Sprintf("creating the ShadowPod on provider %s", r.cfg.ProviderID)}
	}
	if p.failed {
		out.Status.Phase = corev1.PodFailed
		out.Status.Reason = p.reason
		out.Status.Message = p.message
	}
	setPodCondition(&out.Status, &pod.Status, corev1.PodCondition{
		Type: ConditionOffloaded, Status: corev1.ConditionFalse, Reason: p.reason, Message: p.message,
	}, sc.Now)
	notReadyWithout(out, pod, r.cfg.ProviderID, sc.Now)
	return true
}

// notReadyWithout sets out's Ready and ContainersReady conditions that are
// True to False: pod has no ShadowPod on provider.
func notReadyWithout(out, pod *corev1.Pod, provider string, now metav1.Time) {
	for _, t := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		if c := getPodCondition(&out.Status, t); c != nil && c.Status == corev1.ConditionTrue {
			setPodCondition(&out.Status, &pod.Status, corev1.PodCondition{
				Type: t, Status: corev1.ConditionFalse, Reason: ReasonShadowPodNotFound,
				Message: fmt.Sprintf("the pod has no ShadowPod on provider %s", provider),
			}, now)
		}
	}
}

// untouched reports whether the reflector never wrote pod's status: it has
// no Offloaded condition, no remote-unavailable label and is not Ready.
func untouched(pod *corev1.Pod) bool {
	if getPodCondition(&pod.Status, ConditionOffloaded) != nil || hasLabel(pod) {
		return false
	}
	c := getPodCondition(&pod.Status, corev1.PodReady)
	return c == nil || c.Status != corev1.ConditionTrue
}

// hasLabel reports whether pod carries the remote-unavailable label.
func hasLabel(pod *corev1.Pod) bool {
	_, ok := pod.Labels[corev1alpha1.LabelRemoteUnavailable]
	return ok
}
