package reflection

import (
	"context"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/directconn"
)

// EndpointTranslator decides how an endpoint of a consumer EndpointSlice
// appears in the ShadowEndpointSlice sent to one provider.
//
// ep has already been stripped of what only makes sense on the consumer
// (nodeName, hostname, targetRef, deprecatedTopology, hints); its addresses
// and conditions are the consumer's. origin says where the endpoint came
// from. Translate returns the endpoint to send, or keep=false to leave it
// out. It must keep the conditions: they are what withdraws endpoints of a
// failed provider. Implementations must be safe for concurrent use.
type EndpointTranslator interface {
	Translate(ctx context.Context, providerID string, ep discoveryv1.Endpoint, origin EndpointOrigin) (out discoveryv1.Endpoint, keep bool)
}

// DirectConnector is implemented by EndpointTranslators that can describe
// an endpoint whose pod runs on another provider, for the direct
// connections of Services annotated annex.dev/use-direct-connections: in is
// the sanitized consumer endpoint, out what Translate made of it for
// providerID. It returns false for endpoints that are not on another
// provider.
type DirectConnector interface {
	DirectConnection(ctx context.Context, providerID string, in discoveryv1.Endpoint, origin EndpointOrigin, out discoveryv1.Endpoint) (directconn.Entry, bool)
}

// EndpointOrigin is what the consumer's EndpointSlice said about an
// endpoint before it was sanitized.
type EndpointOrigin struct {
	// Node is the consumer node the endpoint's pod runs on ("" when unknown).
	Node string
	// Pod is the endpoint's pod (nil when its targetRef is not a Pod).
	Pod *types.NamespacedName
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
func (t DefaultEndpointTranslator) Translate(_ context.Context, providerID string, ep discoveryv1.Endpoint, origin EndpointOrigin) (discoveryv1.Endpoint, bool) {
	name := corev1alpha1.VirtualNodeName
	if t.VirtualNodeName != nil {
		name = t.VirtualNodeName
	}
	if origin.Node != "" && origin.Node == name(providerID) {
		return ep, false
	}
	return ep, true
}

// sanitizeEndpoint returns a copy of ep without the fields that name
// consumer nodes and pods, and where it came from.
func sanitizeEndpoint(ep discoveryv1.Endpoint) (discoveryv1.Endpoint, EndpointOrigin) {
	out := *ep.DeepCopy()
	var origin EndpointOrigin
	if out.NodeName != nil {
		origin.Node = *out.NodeName
	}
	if ref := out.TargetRef; ref != nil && ref.Kind == "Pod" && (ref.APIVersion == "" || ref.APIVersion == "v1") {
		origin.Pod = &types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	}
	out.NodeName = nil
	out.Hostname = nil
	out.TargetRef = nil
	out.DeprecatedTopology = nil
	out.Hints = nil
	return out, origin
}
