package reflection

import (
	"context"

	discoveryv1 "k8s.io/api/discovery/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// EndpointTranslator decides how an endpoint of a consumer EndpointSlice
// appears in the ShadowEndpointSlice sent to one provider.
//
// ep has already been stripped of what only makes sense on the consumer
// (nodeName, hostname, targetRef, deprecatedTopology, hints); its addresses
// and conditions are the consumer's. onNode is the name of the consumer node
// the endpoint's pod runs on ("" when unknown). Translate returns the
// endpoint to send, or keep=false to leave it out. It must keep the
// conditions: they are what withdraws endpoints of a failed provider.
// Implementations must be safe for concurrent use.
type EndpointTranslator interface {
	Translate(ctx context.Context, providerID string, ep discoveryv1.Endpoint, onNode string) (out discoveryv1.Endpoint, keep bool)
}

// DefaultEndpointTranslator drops the endpoints whose pod runs on the
// provider's own virtual node (the provider has those pods itself) and keeps
// every other endpoint with its addresses unchanged.
type DefaultEndpointTranslator struct {
	// VirtualNodeName returns the name of the Node that stands for the
	// provider (default corev1alpha1.VirtualNodeName, "annex-<providerID>").
	VirtualNodeName func(providerID string) string
}

// Translate implements EndpointTranslator.
func (t DefaultEndpointTranslator) Translate(_ context.Context, providerID string, ep discoveryv1.Endpoint, onNode string) (discoveryv1.Endpoint, bool) {
	name := corev1alpha1.VirtualNodeName
	if t.VirtualNodeName != nil {
		name = t.VirtualNodeName
	}
	if onNode != "" && onNode == name(providerID) {
		return ep, false
	}
	return ep, true
}

// sanitizeEndpoint returns a copy of ep without the fields that name
// consumer nodes and pods, and the node it was on.
func sanitizeEndpoint(ep discoveryv1.Endpoint) (discoveryv1.Endpoint, string) {
	out := *ep.DeepCopy()
	onNode := ""
	if out.NodeName != nil {
		onNode = *out.NodeName
	}
	out.NodeName = nil
	out.Hostname = nil
	out.TargetRef = nil
	out.DeprecatedTopology = nil
	out.Hints = nil
	return out, onNode
}
