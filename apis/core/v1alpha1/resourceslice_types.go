package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ResourceSlicePhase is the provider's answer to a ResourceSlice.
// +kubebuilder:validation:Enum=Pending;Accepted;Denied
type ResourceSlicePhase string

const (
	// ResourceSlicePending: the provider has not answered yet.
	ResourceSlicePending ResourceSlicePhase = "Pending"
	// ResourceSliceAccepted: the provider granted status.resources.
	ResourceSliceAccepted ResourceSlicePhase = "Accepted"
	// ResourceSliceDenied: the provider refused the request; the Accepted
	// condition says why.
	ResourceSliceDenied ResourceSlicePhase = "Denied"
)

// ResourceSlice condition types.
const (
	// ConditionAccepted is True when the provider granted the request and
	// False when it denied it; its reason is one of the ReasonResources*
	// reasons below.
	ConditionAccepted = "Accepted"
)

// ResourceSlice condition reasons.
const (
	// ReasonResourcesGranted: the provider granted the resources (possibly
	// fewer than requested; compare spec.resources with status.resources).
	ReasonResourcesGranted = "ResourcesGranted"
	// ReasonInsufficientResources: the provider has not enough free capacity.
	ReasonInsufficientResources = "InsufficientResources"
	// ReasonUnknownConsumer: the provider has no peering with the consumer.
	ReasonUnknownConsumer = "UnknownConsumer"
	// ReasonPolicyDenied: the provider's policy refuses this consumer.
	ReasonPolicyDenied = "PolicyDenied"
)

// ResourceSliceSpec is the set of resources a consumer asks a provider for.
// +kubebuilder:validation:XValidation:rule="self.consumerClusterID != self.providerClusterID",message="consumerClusterID and providerClusterID must differ"
type ResourceSliceSpec struct {
	// consumerClusterID is the ID of the cluster asking for resources.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=50
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="consumerClusterID is immutable"
	ConsumerClusterID string `json:"consumerClusterID"`

	// providerClusterID is the ID of the cluster asked for resources.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=50
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="providerClusterID is immutable"
	ProviderClusterID string `json:"providerClusterID"`

	// resources are the requested amounts (for example cpu, memory, pods):
	// on a provider, each a quantity of at least 0 and at most 1P (10^15 of
	// its unit; admission policy annex-tenant-namespace, and the provider's
	// agent before it counts them).
	// +required
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=32
	Resources corev1.ResourceList `json:"resources"`
}

// ResourceSliceStatus is the provider's answer.
type ResourceSliceStatus struct {
	// phase summarises the answer: Pending, Accepted or Denied.
	// +optional
	Phase ResourceSlicePhase `json:"phase,omitempty"`

	// resources are the amounts the provider granted; empty unless Accepted.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Resources corev1.ResourceList `json:"resources,omitempty"`

	// conditions holds Accepted, with a reason saying why a request was
	// denied.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ResourceSlice is a request for resources from a consumer to a provider. The
// consumer creates it in its tenant namespace for the provider and it is
// replicated to the consumer's tenant namespace on the provider, which
// accepts or denies it and writes the granted resources into the status.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=rslice,categories=annex
// +kubebuilder:printcolumn:name="Consumer",type=string,JSONPath=`.spec.consumerClusterID`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.providerClusterID`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="CPU",type=string,JSONPath=`.status.resources.cpu`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.resources.memory`
// +kubebuilder:printcolumn:name="Pods",type=string,JSONPath=`.status.resources.pods`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ResourceSlice struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the consumer asks for.
	// +required
	Spec ResourceSliceSpec `json:"spec"`

	// status is the provider's answer.
	// +optional
	Status ResourceSliceStatus `json:"status,omitempty"`
}

// ResourceSliceList is a list of ResourceSlices.
// +kubebuilder:object:root=true
type ResourceSliceList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the ResourceSlices.
	Items []ResourceSlice `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ResourceSlice{}, &ResourceSliceList{})
}
