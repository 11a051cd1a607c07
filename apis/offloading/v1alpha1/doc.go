// Package v1alpha1 owns the offloading.annex.dev API group: which namespaces
// are offloaded and how (NamespaceOffloading, on the consumer), and the
// objects a consumer sends to a provider to run there (ShadowPod and
// ShadowEndpointSlice, in the remote namespace on the provider).
//
// +kubebuilder:object:generate=true
// +groupName=offloading.annex.dev
package v1alpha1
