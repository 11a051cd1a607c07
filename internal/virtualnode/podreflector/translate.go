package podreflector

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// ConditionOffloaded is the pod condition the virtual node keeps on every
// local pod it hosts: True once the pod's ShadowPod exists on the provider,
// False (with one of the Reason* below and a message) while it does not.
// A pod that was Offloaded and whose ShadowPod then disappears on the
// provider is deleted: the provider deleted it.
const ConditionOffloaded corev1.PodConditionType = "annex.dev/Offloaded"

// Reasons of the conditions and statuses the virtual node writes.
const (
	// ReasonShadowPodCreated: the ShadowPod exists (ConditionOffloaded True).
	ReasonShadowPodCreated = "ShadowPodCreated"
	// ReasonShadowPodPending: the ShadowPod is being created.
	ReasonShadowPodPending = "ShadowPodPending"
	// ReasonShadowPodCreationFailed: creating the ShadowPod failed with an
	// error that may go away; it is retried.
	ReasonShadowPodCreationFailed = "ShadowPodCreationFailed"
	// ReasonShadowPodNotFound: the pod has no ShadowPod on the provider.
	ReasonShadowPodNotFound = "ShadowPodNotFound"
	// ReasonRemoteNamespaceNotReady: the pod's namespace has no Ready remote
	// namespace on the provider (NamespaceOffloading status) yet.
	ReasonRemoteNamespaceNotReady = "RemoteNamespaceNotReady"
	// ReasonWaitingForDependencies: ConfigMaps or Secrets the pod needs are
	// not on the provider yet.
	ReasonWaitingForDependencies = "WaitingForDependencies"
	// ReasonProviderUnreachable: the provider is unreachable, so the pod's
	// state on it is unknown (Ready and ContainersReady False).
	ReasonProviderUnreachable = "ProviderUnreachable"
	// ReasonForbidden: the provider refused the ShadowPod (pod phase Failed).
	ReasonForbidden = offloadingv1alpha1.ReasonForbidden
	// ReasonReadinessGatesNotReady: the provider's pod is ready but a local
	// readiness gate is not.
	ReasonReadinessGatesNotReady = "ReadinessGatesNotReady"
)

// PodIPTranslator maps pod IP ip, which provider providerID reports in
// its own network, into this cluster's view of it. It returns an error,
// saying why, for an address that must not be published here (outside the
// provider's pod CIDR, ...). ip is always a valid, canonical unicast
// address. internal/netview's View.PodIP is the agent's;
// IdentityIPTranslator is the default.
type PodIPTranslator func(providerID, ip string) (string, error)

// IdentityIPTranslator returns ip unchanged.
func IdentityIPTranslator(_, ip string) (string, error) { return ip, nil }

// kubeletConditions are the pod conditions a kubelet owns, the only ones
// the local pod takes from the provider's pod; it drops them when the
// provider's pod has none. PodScheduled is not among them: locally the pod
// was scheduled by the local scheduler.
var kubeletConditions = []corev1.PodConditionType{
	corev1.PodInitialized,
	corev1.ContainersReady,
	corev1.PodReady,
	corev1.PodReadyToStartContainers,
}

// StatusContext is what status translation needs besides the two objects.
type StatusContext struct {
	// ProviderID is the provider's cluster ID.
	ProviderID string
	// NodeIP is the virtual node's InternalIP; it becomes the pod's hostIP.
	NodeIP string
	// IPs translates pod IPs; nil means IdentityIPTranslator.
	IPs PodIPTranslator
	// Now stamps condition transitions (second precision); times the
	// provider reports more than maxClockSkew after it are refused. Zero
	// skips that check.
	Now metav1.Time
}

// TranslateStatus returns the status of local given its ShadowPod sp on the
// provider and what the provider says of sp's pod (remote: see
// remoteStatus), and what it refused of the provider's status (see
// statuscheck.go for the rules): phase, reason, message, container statuses
// (restart counts, states), start time and the kubelet's conditions come
// from the provider's pod, checked and bounded; pod IPs are translated and
// only published inside the provider's pod CIDR; hostIP is the virtual
// node's address. The conditions nobody on the provider owns (PodScheduled,
// DisruptionTarget, readiness gates, ...) and the QoS class are kept from
// local, whatever the provider says about them. Ready is False while a
// readiness gate of local is not True.
func TranslateStatus(local *corev1.Pod, sp *offloadingv1alpha1.ShadowPod, remote offloadingv1alpha1.ShadowPodStatus, sc StatusContext) (corev1.PodStatus, []StatusProblem) {
	ips := sc.IPs
	if ips == nil {
		ips = IdentityIPTranslator
	}
	check := &statusCheck{now: sc.Now.Time}
	out := *local.Status.DeepCopy()

	out.Phase = check.phase(remote.Phase, local.Status.Phase)
	out.Reason = check.reason("status.reason", remote.Reason)
	out.Message = check.message("status.message", remote.Message)
	if sc.NodeIP != "" {
		out.HostIP = sc.NodeIP
		out.HostIPs = []corev1.HostIP{{IP: sc.NodeIP}}
	}
	out.PodIP = ""
	out.PodIPs = check.podIPs(sc.ProviderID, remote.PodIP, remote.PodIPs, ips)
	if len(out.PodIPs) > 0 {
		out.PodIP = out.PodIPs[0].IP
	}
	if remote.StartTime != nil {
		if t, ok := check.time("status.startTime", *remote.StartTime); ok {
			out.StartTime = &t
		} else if out.StartTime == nil {
			out.StartTime = &metav1.Time{Time: sc.Now.Time}
		}
	}
	out.InitContainerStatuses = check.containerStatuses("status.initContainerStatuses", remote.InitContainerStatuses,
		local.Spec.InitContainers, local.Status.InitContainerStatuses, local.Spec.RestartPolicy, true)
	out.ContainerStatuses = check.containerStatuses("status.containerStatuses", remote.ContainerStatuses,
		local.Spec.Containers, local.Status.ContainerStatuses, local.Spec.RestartPolicy, false)

	// Conditions: the provider's kubelet conditions, then the local ones
	// but the kubelet's.
	conds := check.conditions(remote.Conditions)
	for _, c := range local.Status.Conditions {
		if isKubeletCondition(c.Type) || c.Type == ConditionOffloaded {
			continue
		}
		conds = append(conds, *c.DeepCopy())
	}
	out.Conditions = conds
	setPodCondition(&out, &local.Status, corev1.PodCondition{
		Type:    ConditionOffloaded,
		Status:  corev1.ConditionTrue,
		Reason:  ReasonShadowPodCreated,
		Message: fmt.Sprintf("running on provider %s as ShadowPod %s/%s", sc.ProviderID, sp.Namespace, sp.Name),
	}, sc.Now)

	if gate := unreadyGate(local, &out); gate != "" {
		setPodCondition(&out, &local.Status, corev1.PodCondition{
			Type:    corev1.PodReady,
			Status:  corev1.ConditionFalse,
			Reason:  ReasonReadinessGatesNotReady,
			Message: fmt.Sprintf("the pod runs on provider %s but its readiness gate %q is not True", sc.ProviderID, gate),
		}, sc.Now)
	}
	return out, check.result()
}

// unreadyGate returns the first readiness gate of pod whose condition is not
// True in status, when status says the pod is otherwise Ready.
func unreadyGate(pod *corev1.Pod, status *corev1.PodStatus) corev1.PodConditionType {
	ready := getPodCondition(status, corev1.PodReady)
	if ready == nil || ready.Status != corev1.ConditionTrue {
		return ""
	}
	for _, g := range pod.Spec.ReadinessGates {
		if c := getPodCondition(status, g.ConditionType); c == nil || c.Status != corev1.ConditionTrue {
			return g.ConditionType
		}
	}
	return ""
}

func isKubeletCondition(t corev1.PodConditionType) bool {
	for _, k := range kubeletConditions {
		if k == t {
			return true
		}
	}
	return false
}

func getPodCondition(s *corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

// setPodCondition sets c in s. Its LastTransitionTime is kept from the
// condition of the same type in prev (the status before this change) when
// the status did not change, and is now otherwise; c's own
// LastTransitionTime is ignored. LastProbeTime is kept from prev.
func setPodCondition(s *corev1.PodStatus, prev *corev1.PodStatus, c corev1.PodCondition, now metav1.Time) {
	c.LastTransitionTime = now
	c.LastProbeTime = metav1.Time{}
	if old := getPodCondition(prev, c.Type); old != nil {
		c.LastProbeTime = old.LastProbeTime
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	if cur := getPodCondition(s, c.Type); cur != nil {
		*cur = c
		return
	}
	s.Conditions = append(s.Conditions, c)
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// isFinished reports whether pod reached Succeeded or Failed: it is never
// (re-)created on the provider again.
func isFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// wasOffloaded reports whether the virtual node saw pod's ShadowPod on the
// provider (ConditionOffloaded True).
func wasOffloaded(pod *corev1.Pod) bool {
	c := getPodCondition(&pod.Status, ConditionOffloaded)
	return c != nil && c.Status == corev1.ConditionTrue
}
