package v1alpha1

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EndpointSliceTemplate is the content of the real EndpointSlice.
type EndpointSliceTemplate struct {
	// labels are the labels of the real EndpointSlice; they must include
	// kubernetes.io/service-name so the slice belongs to the reflected
	// Service.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Labels map[string]string `json:"labels,omitempty"`

	// addressType is the type of the endpoint addresses: IPv4, IPv6 or
	// FQDN. It cannot be changed, as on an EndpointSlice.
	// +required
	// +kubebuilder:validation:Enum=IPv4;IPv6;FQDN
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="addressType is immutable"
	AddressType discoveryv1.AddressType `json:"addressType"`

	// endpoints are the endpoints, with addresses as the consumer sees them
	// through the provider's mapping; the provider remaps them into its own
	// view. At most 1000, as on an EndpointSlice.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	Endpoints []discoveryv1.Endpoint `json:"endpoints,omitempty"`

	// ports are the ports of the endpoints. At most 100, as on an
	// EndpointSlice.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Ports []discoveryv1.EndpointPort `json:"ports,omitempty"`
}

// ShadowEndpointSliceSpec is the EndpointSlice a consumer wants on a provider.
type ShadowEndpointSliceSpec struct {
	// template is the content of the real EndpointSlice.
	// +required
	Template EndpointSliceTemplate `json:"template"`
}

// ShadowEndpointSlice condition types and reasons.
const (
	// ConditionAddressesAllowed is True when every endpoint address of the
	// template belongs to the consumer in the provider's view (its pod CIDR
	// or external CIDR as mapped there, outside the provider's own ranges),
	// False when endpoints were left out of the real EndpointSlice because
	// of their addresses (status.refusedEndpoints says how many).
	ConditionAddressesAllowed = "AddressesAllowed"
	// ReasonInConsumerRanges: every address is the consumer's.
	ReasonInConsumerRanges = "InConsumerRanges"
	// ReasonOutsideConsumerRanges: some addresses are not the consumer's;
	// the message names the first ones and why.
	ReasonOutsideConsumerRanges = "OutsideConsumerRanges"
	// ReasonNoNetworkLink: the provider has no usable network link with the
	// consumer (no NetworkConfiguration, or its mapping is not decided),
	// so it knows no range of the consumer's and publishes no endpoint.
	ReasonNoNetworkLink = "NoNetworkLink"
)

// ShadowEndpointSliceStatus is the observed state of the real EndpointSlice.
type ShadowEndpointSliceStatus struct {
	// conditions holds Ready: True when the real EndpointSlice matches the
	// template (less the endpoints left out), False with reason Forbidden,
	// CreationFailed or NoNetworkLink; and AddressesAllowed: False with
	// reason OutsideConsumerRanges or NoNetworkLink when endpoints were left
	// out because of their addresses.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// refusedEndpoints is how many endpoints of the template were left out
	// of the real EndpointSlice because an address is not the consumer's
	// (see condition AddressesAllowed).
	// +optional
	// +kubebuilder:validation:Minimum=0
	RefusedEndpoints int32 `json:"refusedEndpoints,omitempty"`
}

// ShadowEndpointSlice carries endpoints of a consumer Service to a provider.
// It lives in the remote namespace on the provider, whose controller creates
// and owns a real EndpointSlice with the same name and the addresses
// remapped into the provider's own network view. It may carry the
// annex.dev/direct-connections-data annotation.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=seps,categories=annex
// +kubebuilder:printcolumn:name="AddressType",type=string,JSONPath=`.spec.template.addressType`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Refused",type=integer,JSONPath=`.status.refusedEndpoints`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ShadowEndpointSlice struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the EndpointSlice to create.
	// +required
	Spec ShadowEndpointSliceSpec `json:"spec"`

	// status is the observed state of the real EndpointSlice.
	// +optional
	Status ShadowEndpointSliceStatus `json:"status,omitempty"`
}

// ShadowEndpointSliceList is a list of ShadowEndpointSlices.
// +kubebuilder:object:root=true
type ShadowEndpointSliceList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the ShadowEndpointSlices.
	Items []ShadowEndpointSlice `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ShadowEndpointSlice{}, &ShadowEndpointSliceList{})
}
