package shadowpod

import (
	"slices"
	"strings"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// DefaultPodLabelDomains are the domains of the prefixed label keys a
// consumer's pods carry on this provider by default: the recommended
// application labels and those Kubernetes' own workload controllers set.
// Keys without a domain ("app", "tier") always pass.
var DefaultPodLabelDomains = []string{"app.kubernetes.io", "helm.sh", "statefulset.kubernetes.io", "apps.kubernetes.io"}

// allowedKey reports whether a tenant's label or annotation key may be put
// on a real pod of this provider: a key without a domain prefix always
// may; a prefixed one when its domain is one of domains or a subdomain of
// one. Keys in Annex's own domain (annex.dev) never may: they are this
// agent's to set. Everything else (network plugins' and meshes' annotations,
// labels other controllers of the provider select on) is the provider's.
func allowedKey(key string, domains []string) bool {
	domain, _, prefixed := strings.Cut(key, "/")
	if !prefixed {
		return true
	}
	if inDomain(domain, "annex.dev") {
		return false
	}
	return slices.ContainsFunc(domains, func(d string) bool { return inDomain(domain, d) })
}

// inDomain reports whether domain is d or a subdomain of it.
func inDomain(domain, d string) bool {
	return domain == d || strings.HasSuffix(domain, "."+d)
}

// allowedMetadata returns the entries of m whose key allowedKey passes, and
// the sorted keys it left out.
func allowedMetadata(m map[string]string, domains []string) (map[string]string, []string) {
	var out map[string]string
	var dropped []string
	for k, v := range m {
		if !allowedKey(k, domains) {
			dropped = append(dropped, k)
			continue
		}
		if out == nil {
			out = make(map[string]string, len(m))
		}
		out[k] = v
	}
	slices.Sort(dropped)
	return out, dropped
}

// podMetadata returns the labels and annotations sp's pod carries: those
// of spec.podLabels and spec.podAnnotations that allowedKey passes
// (--tenant-pod-label-domains, --tenant-pod-annotation-domains), and its
// own annex.dev/shadowpod label; and the keys it leaves out ("label K",
// "annotation K").
func (r *Reconciler) podMetadata(sp *offloadingv1alpha1.ShadowPod) (labels, annotations map[string]string, dropped []string) {
	labels, droppedLabels := allowedMetadata(sp.Spec.PodLabels, r.opts.PodLabelDomains)
	annotations, droppedAnnotations := allowedMetadata(sp.Spec.PodAnnotations, r.opts.PodAnnotationDomains)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[offloadingv1alpha1.LabelShadowPod] = sp.Name
	for _, k := range droppedLabels {
		dropped = append(dropped, "label "+k)
	}
	for _, k := range droppedAnnotations {
		dropped = append(dropped, "annotation "+k)
	}
	return labels, annotations, dropped
}

// ReasonMetadataDropped is the reason of the Warning Event recorded on a
// ShadowPod whose pod was created without some of its labels or
// annotations (see allowedKey).
const ReasonMetadataDropped = "MetadataDropped"
