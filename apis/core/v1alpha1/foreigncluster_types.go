package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PeeringRole says what a remote cluster is to the local one.
// +kubebuilder:validation:Enum=Consumer;Provider;Both
type PeeringRole string

const (
	// RoleConsumer: the remote cluster offloads workloads to this cluster.
	RoleConsumer PeeringRole = "Consumer"
	// RoleProvider: this cluster offloads workloads to the remote cluster.
	RoleProvider PeeringRole = "Provider"
	// RoleBoth: the two clusters offload to each other.
	RoleBoth PeeringRole = "Both"
)

// ForeignCluster condition types.
const (
	// ConditionAPIServerReachable is True while the remote API server answers
	// health probes within the configured failure threshold, False when it is
	// dead or hung, or when spec.unreachable is set.
	ConditionAPIServerReachable = "APIServerReachable"
	// ConditionAuthenticated is True while the remote API server accepts the
	// credentials in spec.credentialsSecretRef.
	ConditionAuthenticated = "Authenticated"
	// ConditionNetworkConnected is True when the NetworkConfiguration with the
	// remote cluster is complete (remappings agreed on both sides).
	ConditionNetworkConnected = "NetworkConnected"
	// ConditionOffloadingReady is True when workloads can be offloaded to the
	// remote cluster: resources granted and the virtual node Ready.
	ConditionOffloadingReady = "OffloadingReady"
)

// ForeignCluster condition reasons. Each one tells a person what to look at.
const (
	// ReasonProbeSucceeded: the last health probe answered in time.
	ReasonProbeSucceeded = "ProbeSucceeded"
	// ReasonProbeFailed: consecutive probes failed with a connection error
	// (the API server is down or unreachable on the network).
	ReasonProbeFailed = "ProbeFailed"
	// ReasonProbeTimeout: consecutive probes timed out (the API server is
	// hung or overloaded).
	ReasonProbeTimeout = "ProbeTimeout"
	// ReasonMarkedUnreachable: spec.unreachable is set (forced unpeer);
	// no remote call is attempted.
	ReasonMarkedUnreachable = "MarkedUnreachable"
	// ReasonNoAPIServerURL: spec.apiServerURL is empty; this side never talks
	// to the remote cluster (for example a provider's view of its consumer).
	ReasonNoAPIServerURL = "NoAPIServerURL"

	// ReasonCredentialsValid: the remote API server accepted the credentials.
	ReasonCredentialsValid = "CredentialsValid"
	// ReasonCredentialsMissing: the credentials Secret does not exist or
	// lacks a kubeconfig.
	ReasonCredentialsMissing = "CredentialsMissing"
	// ReasonCredentialsRejected: the remote API server answered 401
	// (token expired or revoked; re-peer or check token renewal).
	ReasonCredentialsRejected = "CredentialsRejected"
	// ReasonPermissionDenied: the remote API server answered 403 (the tenant
	// RBAC on the remote cluster is missing or incomplete).
	ReasonPermissionDenied = "PermissionDenied"

	// ReasonNetworkReady: the NetworkConfiguration is complete.
	ReasonNetworkReady = "NetworkReady"
	// ReasonNetworkNotConfigured: no NetworkConfiguration exists for the
	// remote cluster (run `annexctl network connect`).
	ReasonNetworkNotConfigured = "NetworkNotConfigured"
	// ReasonNetworkPending: the NetworkConfiguration exists but is not
	// complete yet (waiting for the remote side or for a free CIDR).
	ReasonNetworkPending = "NetworkPending"

	// ReasonOffloadingReady: resources are granted and the virtual node is Ready.
	ReasonOffloadingReady = "OffloadingReady"
	// ReasonResourcesPending: the ResourceSlice has not been answered yet.
	ReasonResourcesPending = "ResourcesPending"
	// ReasonResourcesDenied: the provider denied the ResourceSlice.
	ReasonResourcesDenied = "ResourcesDenied"
	// ReasonVirtualNodeNotReady: the virtual node is missing or NotReady.
	ReasonVirtualNodeNotReady = "VirtualNodeNotReady"
	// ReasonNotAProvider: the remote cluster does not provide resources to
	// this cluster, so nothing can be offloaded to it.
	ReasonNotAProvider = "NotAProvider"
)

// ForeignClusterSpec describes how to reach a remote cluster.
type ForeignClusterSpec struct {
	// clusterID is the ID of the remote cluster (the clusterID of its
	// identity ConfigMap). It is a DNS-1123 label of at most 50 characters so
	// that derived names such as "annex-tenant-<clusterID>" and
	// "annex-peer-<clusterID>" stay valid, and it cannot be changed.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=50
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterID is immutable"
	ClusterID string `json:"clusterID"`

	// apiServerURL is the https URL of the remote cluster's API server. It
	// is empty when this cluster never calls the remote one (for example a
	// provider's ForeignCluster for a consumer).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() == 'https'",message="apiServerURL must be an https URL"
	APIServerURL string `json:"apiServerURL,omitempty"`

	// credentialsSecretRef points at the Secret holding a kubeconfig (key
	// "kubeconfig") that authenticates this cluster to the remote API server.
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`

	// unreachable marks the remote cluster as permanently unreachable: every
	// component skips every remote operation (no remote deletes, evictions or
	// probes) and cleans up locally only. Set by a forced unpeer.
	// +optional
	Unreachable bool `json:"unreachable,omitempty"`
}

// ForeignClusterStatus is the observed state of the peering.
type ForeignClusterStatus struct {
	// role says whether the remote cluster consumes resources of this
	// cluster, provides resources to it, or both.
	// +optional
	Role PeeringRole `json:"role,omitempty"`

	// tenantNamespace is set while the remote cluster consumes resources of
	// this one: the local namespace ("annex-tenant-<clusterID>") where the
	// remote cluster writes with its credential (replicas of its
	// ResourceSlices and RemoteNamespaces, its heartbeat Lease).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	TenantNamespace string `json:"tenantNamespace,omitempty"`

	// peerNamespace is set while this cluster consumes resources of the
	// remote one: the local namespace ("annex-peer-<clusterID>") holding this
	// cluster's own objects for it (credentials, ResourceSlices,
	// RemoteNamespaces, the VirtualNode), where the remote cluster has no
	// right at all.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	PeerNamespace string `json:"peerNamespace,omitempty"`

	// lastProbeTime is when the remote API server was last probed.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`

	// probeLatency is the round-trip time of the last successful probe, as a
	// Go duration string (for example "3.2ms").
	// +optional
	ProbeLatency *metav1.Duration `json:"probeLatency,omitempty"`

	// conditions are APIServerReachable, Authenticated, NetworkConnected and
	// OffloadingReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ForeignCluster is a remote cluster this cluster is peered with. There is
// one per remote cluster on each side of a peering, and its name is the
// remote cluster ID.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=fc,categories=annex
// +kubebuilder:printcolumn:name="ClusterID",type=string,JSONPath=`.spec.clusterID`
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.status.role`
// +kubebuilder:printcolumn:name="Reachable",type=string,JSONPath=`.status.conditions[?(@.type=="APIServerReachable")].status`
// +kubebuilder:printcolumn:name="Latency",type=string,JSONPath=`.status.probeLatency`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.clusterID",message="metadata.name must equal spec.clusterID"
type ForeignCluster struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says how to reach the remote cluster.
	// +required
	Spec ForeignClusterSpec `json:"spec"`

	// status is the observed state of the peering.
	// +optional
	Status ForeignClusterStatus `json:"status,omitempty"`
}

// IsReachable reports whether remote operations towards the cluster should be
// attempted: it is not marked unreachable and its APIServerReachable
// condition is True.
func (fc *ForeignCluster) IsReachable() bool {
	return !fc.Spec.Unreachable &&
		meta.IsStatusConditionTrue(fc.Status.Conditions, ConditionAPIServerReachable)
}

// ForeignClusterList is a list of ForeignClusters.
// +kubebuilder:object:root=true
type ForeignClusterList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the ForeignClusters.
	Items []ForeignCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ForeignCluster{}, &ForeignClusterList{})
}
