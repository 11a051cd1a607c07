// Package v1alpha1 owns the core.annex.dev API group: the peering objects
// that describe a remote cluster (ForeignCluster), the resources one cluster
// requests from and is granted by another (ResourceSlice), and the virtual
// nodes that represent a provider inside a consumer (VirtualNode). It also
// holds the label, annotation and well-known object names that every Annex
// component shares.
//
// +kubebuilder:object:generate=true
// +groupName=core.annex.dev
package v1alpha1
