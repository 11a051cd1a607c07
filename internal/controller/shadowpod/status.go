package shadowpod

import (
	corev1 "k8s.io/api/core/v1"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// Bounds of ShadowPodStatus fields (see the CRD).
const (
	maxReason     = 256
	maxMessage    = 32768
	maxConditions = 32
	maxPodIPs     = 2
)

// StatusFromPod returns the ShadowPod status that mirrors pod's status.
func StatusFromPod(pod *corev1.Pod) offloadingv1alpha1.ShadowPodStatus {
	s := pod.Status.DeepCopy()
	out := offloadingv1alpha1.ShadowPodStatus{
		Phase:                 s.Phase,
		Reason:                truncate(s.Reason, maxReason),
		Message:               truncate(s.Message, maxMessage),
		PodIP:                 s.PodIP,
		PodIPs:                s.PodIPs,
		StartTime:             s.StartTime,
		Conditions:            s.Conditions,
		InitContainerStatuses: s.InitContainerStatuses,
		ContainerStatuses:     s.ContainerStatuses,
	}
	if len(out.PodIPs) > maxPodIPs {
		out.PodIPs = out.PodIPs[:maxPodIPs]
	}
	if len(out.Conditions) > maxConditions {
		out.Conditions = out.Conditions[:maxConditions]
	}
	return out
}

// Finished reports whether phase is terminal: a ShadowPod that reached it is
// never run again.
func Finished(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
