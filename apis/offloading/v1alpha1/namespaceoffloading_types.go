package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespaceOffloadingName is the only allowed name of a NamespaceOffloading:
// there is at most one per namespace.
const NamespaceOffloadingName = "offloading"

// PodOffloadingStrategy says where the pods of an offloaded namespace may run.
// +kubebuilder:validation:Enum=Local;Remote;LocalAndRemote
type PodOffloadingStrategy string

const (
	// PodOffloadingLocal keeps pods on local (non-virtual) nodes; only the
	// remote namespaces are created.
	PodOffloadingLocal PodOffloadingStrategy = "Local"
	// PodOffloadingRemote schedules pods on virtual nodes only.
	PodOffloadingRemote PodOffloadingStrategy = "Remote"
	// PodOffloadingLocalAndRemote lets the scheduler pick local or virtual nodes.
	PodOffloadingLocalAndRemote PodOffloadingStrategy = "LocalAndRemote"
)

// NamespaceMappingStrategy says how a local namespace is named on providers.
// +kubebuilder:validation:Enum=DefaultName;EnforceSameName
type NamespaceMappingStrategy string

const (
	// NamespaceMappingDefaultName names the remote namespace
	// "<namespace>-<consumerClusterID>" (see RemoteNamespaceName).
	NamespaceMappingDefaultName NamespaceMappingStrategy = "DefaultName"
	// NamespaceMappingEnforceSameName gives the remote namespace the same
	// name as the local one (fails if it already exists on the provider and
	// belongs to someone else).
	NamespaceMappingEnforceSameName NamespaceMappingStrategy = "EnforceSameName"
)

// RemoteNamespacePhase is the state of one remote namespace.
// +kubebuilder:validation:Enum=Pending;Ready;Failed
type RemoteNamespacePhase string

const (
	// RemoteNamespacePending: the remote namespace is being created.
	RemoteNamespacePending RemoteNamespacePhase = "Pending"
	// RemoteNamespaceReady: the remote namespace exists and belongs to us.
	RemoteNamespaceReady RemoteNamespacePhase = "Ready"
	// RemoteNamespaceFailed: the remote namespace could not be created; see
	// the message.
	RemoteNamespaceFailed RemoteNamespacePhase = "Failed"
)

// RemoteNamespaceName returns the name the local namespace gets on providers
// under strategy: the same name for EnforceSameName, otherwise
// "<namespace>-<consumerClusterID>". The result may exceed 63 characters for
// long names; callers must report that as a Failed remote namespace.
func RemoteNamespaceName(strategy NamespaceMappingStrategy, namespace, consumerClusterID string) string {
	if strategy == NamespaceMappingEnforceSameName {
		return namespace
	}
	return namespace + "-" + consumerClusterID
}

// NamespaceOffloadingSpec says where and how a namespace is offloaded.
type NamespaceOffloadingSpec struct {
	// clusterSelector selects the providers to offload to by the labels of
	// their virtual nodes (the Node labels, which include
	// VirtualNode.spec.labels). The terms are ORed, the expressions of a term
	// ANDed, as in node affinity; the offloading controller also uses it as a
	// required node affinity for the namespace's pods. When unset, every
	// peered provider is selected.
	// +optional
	ClusterSelector *corev1.NodeSelector `json:"clusterSelector,omitempty"`

	// podOffloadingStrategy says where the namespace's pods may run.
	// +optional
	// +kubebuilder:default=LocalAndRemote
	PodOffloadingStrategy PodOffloadingStrategy `json:"podOffloadingStrategy,omitempty"`

	// namespaceMappingStrategy says how the namespace is named on providers.
	// It cannot be changed.
	// +optional
	// +kubebuilder:default=DefaultName
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="namespaceMappingStrategy is immutable"
	NamespaceMappingStrategy NamespaceMappingStrategy `json:"namespaceMappingStrategy,omitempty"`

	// failover, when set, releases the namespace's pods from a provider
	// that stays unreachable, so that their controllers (StatefulSets
	// included) replace them elsewhere, after the provider has stopped
	// them itself (fencing). Unset (the default): pods on an unreachable
	// provider stay where they are, NotReady, until it answers again or the
	// peering is removed. See docs/failover.md.
	// +optional
	Failover *Failover `json:"failover,omitempty"`
}

// FencingMarginSeconds is the least time between a provider's fence and the
// consumer's release (Failover): it covers the stop of the fenced pods
// (their grace period is capped at FenceGracePeriodSeconds), the fencing
// agent's reaction and the clocks' skew.
const FencingMarginSeconds = 15

// FenceGracePeriodSeconds caps the grace period of a pod stopped by a fence.
const FenceGracePeriodSeconds = 5

// Failover says when a lost provider's pods are fenced there and released
// here. The provider measures the silence from the last renewal of this
// cluster's heartbeat Lease; this cluster measures it from the last renewal
// it sent, so both count from the same instant and the fence always comes
// first.
// +kubebuilder:validation:XValidation:rule="self.releaseAfterSeconds >= self.fenceAfterSeconds + 15",message="releaseAfterSeconds must be at least fenceAfterSeconds + 15 (the fencing margin)"
type Failover struct {
	// fenceAfterSeconds (F): a provider that has not seen this cluster's
	// heartbeat for this long stops the namespace's pods it runs, with a
	// grace period of at most 5 s. It must be at least three of this
	// cluster's heartbeat intervals (--consumer-heartbeat-interval),
	// otherwise failover stays off and the Failover condition says why.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	FenceAfterSeconds int32 `json:"fenceAfterSeconds,omitempty"`

	// releaseAfterSeconds (T): pods on a provider unreachable for this long
	// are deleted here (at once, without grace: the provider has fenced
	// them), so their controllers replace them. At least fenceAfterSeconds
	// + 15.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=25
	// +kubebuilder:validation:Maximum=86415
	ReleaseAfterSeconds int32 `json:"releaseAfterSeconds,omitempty"`
}

// ProviderNamespaceStatus is the state of the namespace on one provider.
type ProviderNamespaceStatus struct {
	// clusterID is the ID of the provider.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=50
	ClusterID string `json:"clusterID"`

	// remoteNamespace is the name of the namespace on the provider.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RemoteNamespace string `json:"remoteNamespace,omitempty"`

	// phase is Pending, Ready or Failed.
	// +required
	Phase RemoteNamespacePhase `json:"phase"`

	// message explains a Failed or Pending phase.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// NamespaceOffloadingStatus is the observed state of the offloading.
type NamespaceOffloadingStatus struct {
	// remoteNamespaces has one entry per selected provider.
	// +optional
	// +listType=map
	// +listMapKey=clusterID
	// +kubebuilder:validation:MaxItems=256
	RemoteNamespaces []ProviderNamespaceStatus `json:"remoteNamespaces,omitempty"`

	// conditions holds Ready: True when every selected remote namespace is
	// Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NamespaceOffloading offloads the namespace it lives in to the selected
// providers. Its name must be "offloading".
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=nso,categories=annex
// +kubebuilder:printcolumn:name="PodStrategy",type=string,JSONPath=`.spec.podOffloadingStrategy`
// +kubebuilder:printcolumn:name="Mapping",type=string,JSONPath=`.spec.namespaceMappingStrategy`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'offloading'",message="the NamespaceOffloading must be named 'offloading'"
type NamespaceOffloading struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says where and how the namespace is offloaded.
	// +optional
	// +kubebuilder:default={}
	Spec NamespaceOffloadingSpec `json:"spec,omitempty"`

	// status is the observed state of the offloading.
	// +optional
	Status NamespaceOffloadingStatus `json:"status,omitempty"`
}

// NamespaceOffloadingList is a list of NamespaceOffloadings.
// +kubebuilder:object:root=true
type NamespaceOffloadingList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the NamespaceOffloadings.
	Items []NamespaceOffloading `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NamespaceOffloading{}, &NamespaceOffloadingList{})
}
