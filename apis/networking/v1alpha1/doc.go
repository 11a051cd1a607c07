// Package v1alpha1 owns the networking.annex.dev API group: the
// NetworkConfiguration that describes one network link between two clusters
// (their CIDRs and the remapped CIDRs each side uses for the other), which
// is the contract the gateway data plane implements.
//
// +kubebuilder:object:generate=true
// +groupName=networking.annex.dev
package v1alpha1
