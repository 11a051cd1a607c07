package podreflector

// Provider failure (DESIGN §3 "Provider failure", reference 000).
//
// When the provider becomes unreachable (remote.Manager's OnTransition, fed
// to SetReachability by the virtual node) the reflector:
//
//  1. ends its session with the provider: the ShadowPod informers stop and
//     every remote call in flight is cancelled, so no stale view of the
//     provider feeds a status write afterwards;
//  2. queues every pod of the node on the status queue (before the remote
//     queue), whose workers only talk to the local API server. Each pod gets
//     Ready=False and ContainersReady=False with reason ProviderUnreachable
//     and a message naming the provider, its containers ready=false, and the
//     label annex.dev/remote-unavailable=true, so the EndpointSlice
//     controller withdraws its endpoints. Finished pods are left alone.
//
// Nothing the virtual node writes afterwards flips a pod back while the
// provider is unreachable: every status write computes the pod from the
// reachability at write time (desiredPod) and is written with the
// resourceVersion it was computed from, so a write computed before the
// transition loses with a conflict to the marking, is recomputed, and marks.
// Nothing else of the agent writes pod status.
//
// While unreachable, remote operations are skipped, not queued: syncActive
// and syncTerminating return without error, so nothing retries against a
// dead provider. Deletions are recorded by the pods themselves: a
// terminating pod with a running container stays terminating (its
// deletionTimestamp is the record, which survives a restart of the agent)
// until its ShadowPod is deleted on recovery. A terminating pod with no
// running container (never started, finished, or waiting) is deleted at
// once, as virtual-kubelet's pod controller did before the reflector took
// the pods over alone; its ShadowPod, if any, is collected as an orphan on
// recovery.
//
// When the provider is permanently unreachable (ForeignCluster
// spec.unreachable, or the ForeignCluster is gone) the marking is the same,
// and local deletions complete at once without any remote call.
//
// When the provider is reachable again a new session lists the ShadowPods of
// every remote namespace (the remote truth) and queues every pod and every
// listed ShadowPod: pods get their status from their ShadowPod and lose the
// label, terminating pods get their ShadowPod deleted (and are deleted once
// it is gone), orphans are deleted, and pods not offloaded yet are created.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// SetReachability tells the reflector what is known about its provider. A
// change starts or stops the provider session and queues every pod; it does
// not block.
func (r *Reflector) SetReachability(st Reachability) {
	r.mu.Lock()
	old := r.reach
	if old == st {
		r.mu.Unlock()
		return
	}
	r.reach = st
	if (st == Unreachable || st == PermanentlyUnreachable) && (old == Reachable || old == Unknown) {
		r.unreachableSince = r.cfg.Clock.Now()
	}
	if st == Reachable {
		r.startSessionLocked()
	} else {
		r.stopSessionLocked()
	}
	r.mu.Unlock()
	r.cfg.Log.Info("Provider reachability changed", "from", old.String(), "to", st.String())
	r.enqueueAllPods()
}

// MarkUnavailable marks pod (in place) as running on an unreachable
// provider: Ready and ContainersReady False with reason ProviderUnreachable,
// every container not ready, label annex.dev/remote-unavailable=true. It
// leaves finished pods alone and reports whether pod needs the marking
// written (false for finished pods).
func MarkUnavailable(pod *corev1.Pod, providerID string, permanent bool, now metav1.Time) bool {
	if isFinished(pod) {
		return false
	}
	prev := pod.Status.DeepCopy()
	msg := fmt.Sprintf("provider %s is unreachable: the pod's state on it is unknown", providerID)
	if permanent {
		msg = fmt.Sprintf("provider %s is permanently unreachable (its ForeignCluster is marked unreachable or gone)", providerID)
	}
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		setPodCondition(&pod.Status, prev, corev1.PodCondition{
			Type: t, Status: corev1.ConditionFalse, Reason: ReasonProviderUnreachable, Message: msg,
		}, now)
	}
	for i := range pod.Status.InitContainerStatuses {
		pod.Status.InitContainerStatuses[i].Ready = false
	}
	for i := range pod.Status.ContainerStatuses {
		pod.Status.ContainerStatuses[i].Ready = false
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[corev1alpha1.LabelRemoteUnavailable] = "true"
	return true
}

// ClearUnavailable removes the remote-unavailable label from pod (in place).
// The conditions are rewritten from the provider's truth by the caller.
func ClearUnavailable(pod *corev1.Pod) {
	if hasLabel(pod) {
		delete(pod.Labels, corev1alpha1.LabelRemoteUnavailable)
	}
}
