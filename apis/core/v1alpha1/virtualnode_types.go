package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VirtualNode condition reasons (condition type ConditionReady).
const (
	// ReasonNodeRegistered: the Node is registered and the provider answers.
	ReasonNodeRegistered = "NodeRegistered"
	// ReasonNodeNotRegistered: the agent has not (yet) registered the Node.
	ReasonNodeNotRegistered = "NodeNotRegistered"
	// ReasonProviderUnreachable: the provider's API server is unreachable, so
	// the Node is NotReady (see the ForeignCluster's APIServerReachable).
	ReasonProviderUnreachable = "ProviderUnreachable"
)

// VirtualNodeSpec describes the Node that represents a provider.
// +kubebuilder:validation:XValidation:rule="has(self.nodeName) == has(oldSelf.nodeName)",message="nodeName cannot be added or removed"
type VirtualNodeSpec struct {
	// clusterID is the ID of the provider this virtual node stands for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=50
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterID is immutable"
	ClusterID string `json:"clusterID"`

	// nodeName is the name of the Node; when empty it is
	// "annex-<clusterID>" (see VirtualNode.NodeName). It cannot be changed.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	NodeName string `json:"nodeName,omitempty"`

	// resources are the resources granted by the provider; they become the
	// Node's capacity and allocatable.
	// +required
	// +kubebuilder:validation:MaxProperties=32
	Resources corev1.ResourceList `json:"resources"`

	// labels are added to the Node's labels (on top of the ones the agent
	// sets itself); NamespaceOffloading cluster selectors match them.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Labels map[string]string `json:"labels,omitempty"`

	// taints are added to the Node (on top of the annex.dev/virtual-node
	// taint the agent always sets).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Taints []corev1.Taint `json:"taints,omitempty"`

	// credentialsSecretRef points at the Secret holding the kubeconfig the
	// virtual node uses to talk to the provider.
	// +required
	CredentialsSecretRef SecretReference `json:"credentialsSecretRef"`
}

// VirtualNodeStatus is the observed state of the virtual node.
type VirtualNodeStatus struct {
	// nodeName is the name of the Node the agent registered.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`

	// conditions holds Ready: True while the Node is registered and the
	// provider is reachable.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VirtualNode asks the local agent to host a Node that stands for a
// provider. It lives in the consumer's tenant namespace for that provider.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=vn,categories=annex
// +kubebuilder:printcolumn:name="ClusterID",type=string,JSONPath=`.spec.clusterID`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtualNode struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the Node to host.
	// +required
	Spec VirtualNodeSpec `json:"spec"`

	// status is the observed state of the Node.
	// +optional
	Status VirtualNodeStatus `json:"status,omitempty"`
}

// NodeName returns the name of the Node for vn: spec.nodeName, or
// "annex-<clusterID>" when it is empty.
func (vn *VirtualNode) NodeName() string {
	if vn.Spec.NodeName != "" {
		return vn.Spec.NodeName
	}
	return VirtualNodeName(vn.Spec.ClusterID)
}

// VirtualNodeList is a list of VirtualNodes.
// +kubebuilder:object:root=true
type VirtualNodeList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the VirtualNodes.
	Items []VirtualNode `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VirtualNode{}, &VirtualNodeList{})
}
