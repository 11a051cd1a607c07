package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FabricNode condition type and reasons.
const (
	// ConditionProgrammed is True when the node's routes towards the
	// gateway node and its masquerade exemptions match the cluster's
	// Ready NetworkConfigurations (or the node is the gateway node, whose
	// gateway does it).
	ConditionProgrammed = "Programmed"

	// ReasonRoutesProgrammed: the node routes every peer range to the
	// gateway node.
	ReasonRoutesProgrammed = "RoutesProgrammed"
	// ReasonGatewayNode: the node runs the gateway, which programs it.
	ReasonGatewayNode = "GatewayNode"
	// ReasonNoGateway: no gateway runs; the peer ranges are unreachable
	// from the node (refused, never sent out of its default route).
	ReasonNoGateway = "NoGateway"
	// ReasonGatewayNotOnLink: the gateway node's address is not on a
	// network the node is attached to, so the node cannot route to it.
	ReasonGatewayNotOnLink = "GatewayNotOnLink"
	// ReasonProgrammingFailed: the kernel refused a route or rule; the
	// message says which.
	ReasonProgrammingFailed = "ProgrammingFailed"
	// ReasonNoLinks: the cluster has no Ready NetworkConfiguration, so
	// the node needs nothing.
	ReasonNoLinks = "NoLinks"
)

// FabricNodeStatus is what the fabric agent on a node has programmed.
type FabricNodeStatus struct {
	// GatewayNode is the node the gateway runs on, as the agent saw it.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	GatewayNode string `json:"gatewayNode,omitempty"`
	// GatewayAddress is the gateway node's address the routes point at.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	GatewayAddress string `json:"gatewayAddress,omitempty"`
	// Destinations are the ranges the node routes to the gateway node:
	// the peers' CIDRs in this cluster's view and this cluster's external
	// CIDR.
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=64
	// +optional
	Destinations []string `json:"destinations,omitempty"`
	// Conditions: Programmed.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FabricNode reports the fabric on one node (its name is the node's): the
// annex-fabric agent of the DaemonSet on that node writes it, and only it
// may (an admission policy checks the node name bound to its token).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=fabric,categories=annex
// +kubebuilder:printcolumn:name="Gateway",type=string,JSONPath=`.status.gatewayNode`
// +kubebuilder:printcolumn:name="Programmed",type=string,JSONPath=`.status.conditions[?(@.type=="Programmed")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Programmed")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FabricNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status FabricNodeStatus `json:"status,omitempty"`
}

// FabricNodeList is a list of FabricNodes.
//
// +kubebuilder:object:root=true
type FabricNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FabricNode `json:"items"`
}

func init() {
	SchemeBuilder.Register(&FabricNode{}, &FabricNodeList{})
}
