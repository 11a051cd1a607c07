package shadowendpointslice

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// ManagedBy is the value of the endpointslice.kubernetes.io/managed-by label
// on the EndpointSlices this controller creates; Kubernetes' own
// EndpointSlice controller leaves them alone.
const ManagedBy = "annex.dev"

// ValidateTemplate returns "" when t can become an EndpointSlice on this
// provider, otherwise a message naming the field and the rule.
func ValidateTemplate(t *offloadingv1alpha1.EndpointSliceTemplate) string {
	if t.Labels[discoveryv1.LabelServiceName] == "" {
		return fmt.Sprintf("spec.template.labels must carry %s: the EndpointSlice must belong to a Service", discoveryv1.LabelServiceName)
	}
	if n := len(t.Endpoints); n > MaxEndpoints {
		return fmt.Sprintf("spec.template.endpoints has %d items: at most %d", n, MaxEndpoints)
	}
	if n := len(t.Ports); n > MaxPorts {
		return fmt.Sprintf("spec.template.ports has %d items: at most %d", n, MaxPorts)
	}
	return ""
}

// LocalIPs returns the IPs of the pods that run on this cluster: the pod IPs
// of pods that have not finished (a finished pod's IP may be reused).
func LocalIPs(pods []corev1.Pod) map[string]bool {
	ips := map[string]bool{}
	for i := range pods {
		addPodIPs(ips, &pods[i])
	}
	return ips
}

// addPodIPs adds the IPs of p to ips unless p has finished.
func addPodIPs(ips map[string]bool, p *corev1.Pod) {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return
	}
	if p.Status.PodIP != "" {
		ips[p.Status.PodIP] = true
	}
	for _, ip := range p.Status.PodIPs {
		ips[ip.IP] = true
	}
}

// Endpoints returns the endpoints of the real EndpointSlice for template
// endpoints eps, and how many were dropped. An endpoint is dropped when one
// of its addresses is in local (the pod IPs of this cluster's pods in the
// slice's namespace): those pods are this cluster's own and Kubernetes'
// EndpointSlice controller already publishes them here. The fields that name
// the consumer's nodes and pods (nodeName, targetRef, hints,
// deprecatedTopology) are cleared: they mean nothing, or something else, on
// this cluster.
func Endpoints(eps []discoveryv1.Endpoint, local map[string]bool) ([]discoveryv1.Endpoint, int) {
	out := make([]discoveryv1.Endpoint, 0, len(eps))
	dropped := 0
	for i := range eps {
		if isLocal(&eps[i], local) {
			dropped++
			continue
		}
		ep := *eps[i].DeepCopy()
		ep.NodeName = nil
		ep.TargetRef = nil
		ep.Hints = nil
		ep.DeprecatedTopology = nil
		out = append(out, ep)
	}
	return out, dropped
}

func isLocal(ep *discoveryv1.Endpoint, local map[string]bool) bool {
	for _, a := range ep.Addresses {
		if local[a] {
			return true
		}
	}
	return false
}

// Labels returns the labels of the real EndpointSlice: the template's, with
// endpointslice.kubernetes.io/managed-by=annex.dev.
func Labels(t *offloadingv1alpha1.EndpointSliceTemplate) map[string]string {
	l := make(map[string]string, len(t.Labels)+1)
	maps.Copy(l, t.Labels)
	l[discoveryv1.LabelManagedBy] = ManagedBy
	return l
}
