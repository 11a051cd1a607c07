package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelShadowPod is set by the provider on every pod it runs for a
// ShadowPod; its value is the ShadowPod's name. The consumer watches the
// pods carrying it to learn how its pods run.
const LabelShadowPod = "annex.dev/shadowpod"

// ShadowPodSpec is the pod a consumer wants the provider to run.
type ShadowPodSpec struct {
	// pod is the spec of the real pod, already translated by the consumer
	// into the provider's terms. Fields that would escape the tenant are
	// refused: nodeName (the provider's scheduler places the pod),
	// hostNetwork, hostPID and hostIPC.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(self.nodeName) || self.nodeName == ''",message="pod.nodeName must not be set: the provider schedules the pod"
	// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork",message="pod.hostNetwork is not allowed"
	// +kubebuilder:validation:XValidation:rule="!has(self.hostPID) || !self.hostPID",message="pod.hostPID is not allowed"
	// +kubebuilder:validation:XValidation:rule="!has(self.hostIPC) || !self.hostIPC",message="pod.hostIPC is not allowed"
	Pod corev1.PodSpec `json:"pod"`

	// podLabels are the labels of the real pod.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	PodLabels map[string]string `json:"podLabels,omitempty"`

	// podAnnotations are the annotations of the real pod.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`
}

// ShadowPodStatus says what the consumer cannot learn from the real pod:
// why the provider could not create it, or, once it finished, its final
// state (kept when the pod itself is gone). While the pod exists and runs,
// the status is empty: the consumer reads the real pod (labelled
// annex.dev/shadowpod) instead, so no write of the provider's repeats what
// its kubelet already wrote.
type ShadowPodStatus struct {
	// phase is the real pod's phase. It is Failed, with reason Forbidden,
	// QuotaExceeded or CreationFailed, when the provider could not create
	// the pod.
	// +optional
	Phase corev1.PodPhase `json:"phase,omitempty"`

	// reason is a machine-readable reason for the phase: the real pod's
	// status.reason, or one of this package's Reason* constants when the
	// pod could not be created.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`

	// message is a human-readable explanation of the phase.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`

	// podIP is the real pod's IP in the provider's network (the consumer
	// translates it into its own view).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	PodIP string `json:"podIP,omitempty"`

	// podIPs are the real pod's IPs in the provider's network.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2
	PodIPs []corev1.PodIP `json:"podIPs,omitempty"`

	// startTime is when the provider's kubelet acknowledged the real pod.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// conditions are the real pod's conditions (PodScheduled, Initialized,
	// ContainersReady, Ready, ...).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []corev1.PodCondition `json:"conditions,omitempty"`

	// initContainerStatuses are the real pod's init container statuses.
	// +optional
	// +listType=atomic
	InitContainerStatuses []corev1.ContainerStatus `json:"initContainerStatuses,omitempty"`

	// containerStatuses are the real pod's container statuses (readiness,
	// restarts, state).
	// +optional
	// +listType=atomic
	ContainerStatuses []corev1.ContainerStatus `json:"containerStatuses,omitempty"`
}

// ShadowPod is a pod a consumer runs on a provider. It lives in the remote
// namespace on the provider; the provider's controller creates the real pod
// with the same name and namespace, owns it, labels it annex.dev/shadowpod,
// re-creates it while the ShadowPod exists (unless it reached Succeeded or
// Failed) and records here only a refusal or the pod's final state.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=spod,categories=annex
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ShadowPod struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the pod to run.
	// +required
	Spec ShadowPodSpec `json:"spec"`

	// status is a refusal or the real pod's final state (see
	// ShadowPodStatus).
	// +optional
	Status ShadowPodStatus `json:"status,omitempty"`
}

// ShadowPodList is a list of ShadowPods.
// +kubebuilder:object:root=true
type ShadowPodList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the ShadowPods.
	Items []ShadowPod `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ShadowPod{}, &ShadowPodList{})
}
