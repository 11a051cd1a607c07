// Package podstatus owns what the status of a provider's pod means to
// Annex: the part of it the consumer shows in its own pod (FromPod), when a
// pod is only being started and has nothing to report yet (Starting), and
// when it is finished for good (Finished). The provider's ShadowPod
// controller and the consumer's pod reflector both use it, so they agree.
// It also names the part of a pod's spec that reading a status needs
// (StatusSpec), which is all the agent's cache keeps of a spec.
package podstatus

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// Bounds of ShadowPodStatus fields (see the CRD).
const (
	MaxReason     = 256
	MaxMessage    = 32768
	maxConditions = 32
	maxPodIPs     = 2
)

// FromPod returns the part of pod's status that the consumer takes (still
// to be checked and bounded there), in the ShadowPod status's form. An
// unschedulable pod gets reason ProviderUnschedulable and a message that
// says what to do.
func FromPod(pod *corev1.Pod) offloadingv1alpha1.ShadowPodStatus {
	return FromStatus(&pod.Status)
}

// FromStatus is FromPod of a pod with status st.
func FromStatus(st *corev1.PodStatus) offloadingv1alpha1.ShadowPodStatus {
	s := st.DeepCopy()
	out := offloadingv1alpha1.ShadowPodStatus{
		Phase:                 s.Phase,
		Reason:                Truncate(s.Reason, MaxReason),
		Message:               Truncate(s.Message, MaxMessage),
		PodIP:                 s.PodIP,
		PodIPs:                s.PodIPs,
		StartTime:             s.StartTime,
		Conditions:            s.Conditions,
		InitContainerStatuses: s.InitContainerStatuses,
		ContainerStatuses:     s.ContainerStatuses,
	}
	if out.Reason == "" && out.Message == "" && (out.Phase == "" || out.Phase == corev1.PodPending) {
		if c := unscheduled(s.Conditions); c != nil {
			// The consumer shows status.reason in `kubectl get pods`: say
			// there what a local pod's user would learn from the
			// scheduler, and what to do.
			out.Reason = offloadingv1alpha1.ReasonProviderUnschedulable
			out.Message = Truncate("the provider cannot schedule this pod: "+strings.TrimRight(c.Message, ". ")+
				". It stays Pending until the provider has room for it; to run it elsewhere, delete it (its controller makes a new one) or change the namespace's NamespaceOffloading", MaxMessage)
		}
	}
	if len(out.PodIPs) > maxPodIPs {
		out.PodIPs = out.PodIPs[:maxPodIPs]
	}
	if len(out.Conditions) > maxConditions {
		out.Conditions = out.Conditions[:maxConditions]
	}
	return out
}

// unscheduled returns the PodScheduled condition of conditions when it is
// False, nil otherwise.
func unscheduled(conditions []corev1.PodCondition) *corev1.PodCondition {
	for i, c := range conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return &conditions[i]
		}
	}
	return nil
}

// Starting reports whether a pod with status s is only being scheduled and
// started, with nothing to report yet: Pending, not refused by the
// scheduler, no reason or message, and every container (init containers
// included) without a status or waiting with reason ContainerCreating or
// PodInitializing. A pod that cannot be scheduled, whose image cannot be
// pulled, or whose init containers run, is not starting in this sense: that
// is worth telling the consumer.
func Starting(s *corev1.PodStatus) bool {
	if (s.Phase != "" && s.Phase != corev1.PodPending) || s.Reason != "" || s.Message != "" {
		return false
	}
	if unscheduled(s.Conditions) != nil {
		return false
	}
	for _, list := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses} {
		for _, c := range list {
			if c.State.Running != nil || c.State.Terminated != nil || c.LastTerminationState.Terminated != nil {
				return false
			}
			if w := c.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
				return false
			}
		}
	}
	return true
}

// Finished reports whether phase is terminal: a ShadowPod that reached it is
// never run again, and a local pod that reached it never changes again.
func Finished(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

// Truncate returns s cut to at most n bytes.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// StatusSpec returns the part of a pod's spec that the consumer's pod
// reflector reads from its cache of local pods: the node, the restart
// policies, the readiness gates, the termination grace period, and each
// container's name, image and restart policy (the status translation and
// its checks). A cache of pods may keep only this of each pod's spec (the
// agent's does): the reflector reads a pod whole from the API server once,
// when it creates the pod's ShadowPod.
func StatusSpec(s *corev1.PodSpec) corev1.PodSpec {
	return corev1.PodSpec{
		NodeName:                      s.NodeName,
		RestartPolicy:                 s.RestartPolicy,
		TerminationGracePeriodSeconds: s.TerminationGracePeriodSeconds,
		ReadinessGates:                s.ReadinessGates,
		InitContainers:                statusContainers(s.InitContainers),
		Containers:                    statusContainers(s.Containers),
	}
}

func statusContainers(in []corev1.Container) []corev1.Container {
	if in == nil {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i := range in {
		out[i] = corev1.Container{
			Name:               in[i].Name,
			Image:              in[i].Image,
			RestartPolicy:      in[i].RestartPolicy,
			RestartPolicyRules: in[i].RestartPolicyRules,
		}
	}
	return out
}
