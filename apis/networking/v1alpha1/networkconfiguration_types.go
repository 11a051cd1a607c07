package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NetworkConfiguration condition types.
const (
	// ConditionRemapped is True when this side has decided how it maps the
	// remote cluster's CIDRs (status.remappedRemote), False when it could
	// not (reason NoFreeCIDR).
	ConditionRemapped = "Remapped"
	// ConditionReady is True when both remappings are known
	// (status.remappedRemote and status.remappedLocal), so the gateway can
	// program the link.
	ConditionReady = "Ready"
	// ConditionTunnelConnected is True while the gateway's tunnel to the
	// remote cluster's gateway is up.
	ConditionTunnelConnected = "TunnelConnected"
)

// NetworkConfiguration condition reasons.
const (
	// ReasonNoOverlap: the remote CIDRs do not overlap any local or mapped
	// CIDR, so they are used as they are.
	ReasonNoOverlap = "NoOverlap"
	// ReasonCIDRRemapped: a remote CIDR overlapped and was remapped.
	ReasonCIDRRemapped = "CIDRRemapped"
	// ReasonNoFreeCIDR: a remote CIDR overlapped and no free range of the
	// same size is left to remap it to.
	ReasonNoFreeCIDR = "NoFreeCIDR"
	// ReasonWaitingForRemote: the remote side has not published how it maps
	// this cluster's CIDRs yet.
	ReasonWaitingForRemote = "WaitingForRemote"
	// ReasonConnected: the link is fully configured.
	ReasonConnected = "Connected"
	// ReasonTunnelDown: the gateway runs but has had no handshake with the
	// remote gateway recently.
	ReasonTunnelDown = "TunnelDown"
	// ReasonTunnelUp: a handshake with the remote gateway completed recently.
	ReasonTunnelUp = "TunnelUp"
	// ReasonGatewayDown: this cluster's gateway has not reported recently
	// (not running, or hung).
	ReasonGatewayDown = "GatewayDown"
	// ReasonNoTunnel: the link has no spec.tunnel (one of the clusters runs
	// no gateway).
	ReasonNoTunnel = "NoTunnel"
	// ReasonCIDRRefused: the agent does not program the link because a CIDR
	// the peer claims (spec.remote) is not a private range or covers this
	// cluster's service CIDR or a node's address, or a range this cluster
	// remapped it to (status.remappedRemote) covers them; the message names
	// the rule (see internal/network.CheckPeerCIDR).
	ReasonCIDRRefused = "CIDRRefused"
	// ReasonInvalidLink: the agent cannot turn the link into gateway
	// configuration (a malformed key, endpoint or mapping); the message
	// says what.
	ReasonInvalidLink = "InvalidLink"
	// ReasonNoPeering: the agent does not program the link because this
	// cluster no longer peers with the remote cluster (it has no
	// ForeignCluster for it) and the link is not recorded as one for
	// direct connections (LabelLinkPurpose); a link made for a peering is
	// then deleted by the agent.
	ReasonNoPeering = "NoPeering"
)

// LabelLinkPurpose, on a NetworkConfiguration, records what the link was
// made for: LinkPurposePeering (by `annexctl peer`, or `network connect`
// between clusters that peer) or LinkPurposeDirect (`network connect`
// between clusters that do not, for direct connections). A link made for a
// peering lives only as long as that peering: without a ForeignCluster for
// the remote cluster it is never programmed, and the agent deletes it. A
// link without the label (made before it existed) and without a
// ForeignCluster is not programmed either, but kept, since it may be a
// direct connection: `network connect` run again records its purpose.
const LabelLinkPurpose = "annex.dev/link-purpose"

// The values of LabelLinkPurpose.
const (
	LinkPurposePeering = "peering"
	LinkPurposeDirect  = "direct"
)

// ClusterCIDRs are the address ranges a cluster owns, in its own view.
type ClusterCIDRs struct {
	// podCIDR is the cluster's pod CIDR, e.g. "10.244.0.0/16".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && string(cidr(self).masked()) == self",message="podCIDR must be a CIDR in canonical form (no host bits set)"
	PodCIDR string `json:"podCIDR"`

	// externalCIDR is the cluster's external CIDR, the range that transit
	// addresses for pods of other clusters are allocated from.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && string(cidr(self).masked()) == self",message="externalCIDR must be a CIDR in canonical form (no host bits set)"
	ExternalCIDR string `json:"externalCIDR"`
}

// RemappedCIDRs say how one cluster sees the other's CIDRs. An empty field
// means "no remap": the original CIDR is used as it is. A remapped CIDR has
// the same prefix length as the original; an address is translated by
// keeping its host bits and swapping the prefix.
type RemappedCIDRs struct {
	// podCIDR is the range the pod CIDR is mapped to; empty when not remapped.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self == '' || (isCIDR(self) && string(cidr(self).masked()) == self)",message="podCIDR must be empty or a CIDR in canonical form (no host bits set)"
	PodCIDR string `json:"podCIDR,omitempty"`

	// externalCIDR is the range the external CIDR is mapped to; empty when
	// not remapped.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self == '' || (isCIDR(self) && string(cidr(self).masked()) == self)",message="externalCIDR must be empty or a CIDR in canonical form (no host bits set)"
	ExternalCIDR string `json:"externalCIDR,omitempty"`
}

// NetworkConfigurationSpec describes one network link, from this side.
type NetworkConfigurationSpec struct {
	// remoteClusterID is the ID of the cluster at the other end of the link.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=50
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="remoteClusterID is immutable"
	RemoteClusterID string `json:"remoteClusterID"`

	// local are this cluster's own CIDRs (from its identity ConfigMap).
	// +required
	Local ClusterCIDRs `json:"local"`

	// remote are the remote cluster's CIDRs in the remote cluster's own view.
	// +required
	Remote ClusterCIDRs `json:"remote"`

	// tunnel is how this cluster's gateway reaches the remote cluster's
	// gateway for this link. Set by `annexctl network connect` when both
	// clusters run a gateway; without it the link is bookkeeping only and
	// no packets flow.
	// +optional
	Tunnel *TunnelSpec `json:"tunnel,omitempty"`
}

// TunnelSpec is one side of a link's WireGuard tunnel.
type TunnelSpec struct {
	// listenPort is the UDP port this cluster's gateway listens on for this
	// link (one WireGuard device, and port, per link).
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ListenPort int32 `json:"listenPort"`

	// remotePublicKey is the WireGuard public key of the remote cluster's
	// gateway (base64). Its private key never leaves the remote cluster.
	// +required
	// +kubebuilder:validation:MinLength=44
	// +kubebuilder:validation:MaxLength=44
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{43}=$`
	RemotePublicKey string `json:"remotePublicKey"`

	// remoteEndpoint is where the remote cluster's gateway listens for this
	// link, "ip:port".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	RemoteEndpoint string `json:"remoteEndpoint"`
}

// TunnelStatus is what the gateway last reported about the link's tunnel.
type TunnelStatus struct {
	// lastHandshake is when the tunnel's last WireGuard handshake completed.
	// +optional
	LastHandshake *metav1.Time `json:"lastHandshake,omitempty"`
	// rxBytes and txBytes count the bytes received and sent through the
	// tunnel since the gateway started (refreshed at most every
	// 30 seconds).
	// +optional
	RxBytes int64 `json:"rxBytes,omitempty"`
	// +optional
	TxBytes int64 `json:"txBytes,omitempty"`
}

// NetworkConfigurationStatus holds the remappings of both sides.
type NetworkConfigurationStatus struct {
	// remappedRemote says how this cluster maps the remote cluster's CIDRs:
	// every address that crosses from the remote cluster into this one is
	// translated into these ranges. Allocated by this side when the remote
	// CIDRs overlap a local CIDR or another peer's (mapped) CIDR.
	// +optional
	RemappedRemote *RemappedCIDRs `json:"remappedRemote,omitempty"`

	// remappedLocal says how the remote cluster maps this cluster's CIDRs
	// (its remappedRemote, copied from its NetworkConfiguration for us).
	// This cluster uses it to express its own addresses in the remote
	// cluster's view.
	// +optional
	RemappedLocal *RemappedCIDRs `json:"remappedLocal,omitempty"`

	// tunnel is the gateway's view of the link's tunnel; absent while no
	// gateway reports on it.
	// +optional
	Tunnel *TunnelStatus `json:"tunnel,omitempty"`

	// conditions are Remapped, Ready and TunnelConnected.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NetworkConfiguration is one side of a network link with a remote cluster.
// Each linked pair of clusters has one on each side, in annex-system; its
// name is the remote cluster ID by convention.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=netcfg,categories=annex
// +kubebuilder:printcolumn:name="Remote",type=string,JSONPath=`.spec.remoteClusterID`
// +kubebuilder:printcolumn:name="RemotePodCIDR",type=string,JSONPath=`.spec.remote.podCIDR`
// +kubebuilder:printcolumn:name="RemappedPodCIDR",type=string,JSONPath=`.status.remappedRemote.podCIDR`
// +kubebuilder:printcolumn:name="RemappedExternalCIDR",type=string,JSONPath=`.status.remappedRemote.externalCIDR`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NetworkConfiguration struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the link.
	// +required
	Spec NetworkConfigurationSpec `json:"spec"`

	// status holds the remappings.
	// +optional
	Status NetworkConfigurationStatus `json:"status,omitempty"`
}

// NetworkConfigurationList is a list of NetworkConfigurations.
// +kubebuilder:object:root=true
type NetworkConfigurationList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the NetworkConfigurations.
	Items []NetworkConfiguration `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NetworkConfiguration{}, &NetworkConfigurationList{})
}
