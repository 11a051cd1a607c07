package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RemoteNamespaceSpec is a consumer's request for a namespace on a provider.
type RemoteNamespaceSpec struct {
	// sourceNamespace is the consumer's namespace being offloaded.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="sourceNamespace is immutable"
	SourceNamespace string `json:"sourceNamespace"`

	// remoteNamespace is the namespace the consumer asks for on the provider
	// (see NamespaceMappingStrategy). The provider refuses a name that exists
	// and does not already belong to this consumer.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="remoteNamespace is immutable"
	RemoteNamespace string `json:"remoteNamespace"`

	// fenceAfterSeconds, when set, asks the provider to stop the consumer's
	// pods in the namespace once the consumer's heartbeat Lease has not
	// been renewed for that long (NamespaceOffloading spec.failover). The
	// provider acknowledges it in status.fenceAfterSeconds.
	// +optional
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	FenceAfterSeconds *int32 `json:"fenceAfterSeconds,omitempty"`
}

// RemoteNamespaceStatus is the provider's answer.
type RemoteNamespaceStatus struct {
	// phase is Pending until the provider created the namespace (Ready) or
	// refused it (Failed).
	// +optional
	Phase RemoteNamespacePhase `json:"phase,omitempty"`

	// message explains a Failed phase.
	// +optional
	Message string `json:"message,omitempty"`

	// conditions carry observedGeneration so the consumer can tell a fresh
	// answer from a stale one.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// fenceAfterSeconds is the fence the provider's agent has armed for the
	// namespace (a copy of spec.fenceAfterSeconds once it fences by it;
	// unset when it does not). The consumer releases pods from an
	// unreachable provider only while this equals what it asked for: a
	// provider that never armed the fence may still run them.
	// +optional
	FenceAfterSeconds *int32 `json:"fenceAfterSeconds,omitempty"`
}

// RemoteNamespace asks a provider for one namespace. The consumer's agent
// creates it, named after the source namespace, in its peer namespace for
// the provider (annex-peer-<provider>) from a NamespaceOffloading; the
// replicator copies it into the provider's tenant namespace for the
// consumer (annex-tenant-<consumer>), where the provider's agent creates the
// namespace and grants the consumer (and only it) access to it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rns,categories=annex
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.sourceNamespace`
// +kubebuilder:printcolumn:name="Remote",type=string,JSONPath=`.spec.remoteNamespace`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Fence",type=integer,JSONPath=`.status.fenceAfterSeconds`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RemoteNamespace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the request.
	Spec RemoteNamespaceSpec `json:"spec"`
	// status is the provider's answer.
	// +optional
	Status RemoteNamespaceStatus `json:"status,omitempty"`
}

// RemoteNamespaceList is a list of RemoteNamespaces.
// +kubebuilder:object:root=true
type RemoteNamespaceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the RemoteNamespaces.
	Items []RemoteNamespace `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RemoteNamespace{}, &RemoteNamespaceList{})
}
