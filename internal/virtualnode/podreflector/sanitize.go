package podreflector

import (
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// AnnotationOriginUID, on a ShadowPod, is the UID of the local pod it
// reflects. A ShadowPod whose origin UID is not the UID of the local pod of
// the same name is stale (left over by an earlier pod of that name) and is
// replaced.
const AnnotationOriginUID = "annex.dev/origin-uid"

// Bounds of what a ShadowPod carries of the local pod's metadata. The counts
// are the CRD's MaxProperties; keys are kept in sorted order so the result is
// deterministic.
const (
	maxPodLabels          = 64
	maxPodAnnotations     = 64
	maxAnnotationValueLen = 16 << 10
)

// virtualNodeTypeLabel and virtualNodeTypeValue are the label every virtual
// node carries (type=virtual-node).
const (
	virtualNodeTypeLabel = "type"
	virtualNodeTypeValue = "virtual-node"
)

// NodeIdentity is what identifies the virtual node in a pod spec: its name
// and the labels VirtualNode.spec.labels put on it (cluster selectors and the
// node affinity derived from them select on those).
type NodeIdentity struct {
	Name   string
	Labels map[string]string
}

// BuildShadowPod returns the ShadowPod that runs pod on the provider, in
// remoteNamespace, owned by the consumer localClusterID.
func BuildShadowPod(pod *corev1.Pod, remoteNamespace, localClusterID string, node NodeIdentity) *offloadingv1alpha1.ShadowPod {
	return &offloadingv1alpha1.ShadowPod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      pod.Name,
			Namespace: remoteNamespace,
			Labels: map[string]string{
				corev1alpha1.LabelRemoteClusterID: localClusterID,
				corev1alpha1.LabelManagedBy:       corev1alpha1.ManagedByAnnex,
			},
			Annotations: map[string]string{AnnotationOriginUID: string(pod.UID)},
		},
		Spec: offloadingv1alpha1.ShadowPodSpec{
			Pod:            SanitizePodSpec(&pod.Spec, node),
			PodLabels:      FilterPodLabels(pod.Labels),
			PodAnnotations: FilterPodAnnotations(pod.Annotations),
		},
	}
}

// OriginUID returns the origin UID annotation of a ShadowPod.
func OriginUID(sp *offloadingv1alpha1.ShadowPod) string {
	return sp.Annotations[AnnotationOriginUID]
}

// SanitizePodSpec returns the pod spec a provider gets: the local spec
// without what only makes sense on the consumer.
//
//   - nodeName: the provider's scheduler places the pod;
//   - the toleration of the virtual-node taint;
//   - node selector entries and node affinity requirements that point at the
//     virtual node (annex.dev/remote-cluster-id, type=virtual-node, its
//     hostname or name, and the keys of VirtualNode.spec.labels, which
//     cluster selectors use); a required term left empty is dropped, equal
//     terms are merged, an affinity left empty is removed;
//   - schedulerName, priority, priorityClassName, preemptionPolicy and
//     overhead: the provider's own scheduler and admission decide them (a
//     consumer's PriorityClass does not exist there);
//   - readinessGates: the gates' conditions are set on the local pod, so
//     they are evaluated locally (see TranslateStatus);
//   - ephemeralContainers: they cannot be set on creation.
//
// The ServiceAccount token volume is left as is: the provider mints its own.
func SanitizePodSpec(in *corev1.PodSpec, node NodeIdentity) corev1.PodSpec {
	spec := *in.DeepCopy()
	spec.NodeName = ""
	spec.SchedulerName = ""
	spec.Priority = nil
	spec.PriorityClassName = ""
	spec.PreemptionPolicy = nil
	spec.Overhead = nil
	spec.ReadinessGates = nil
	spec.EphemeralContainers = nil

	spec.Tolerations = slices.DeleteFunc(spec.Tolerations, func(t corev1.Toleration) bool {
		return t.Key == corev1alpha1.TaintKeyVirtualNode
	})
	if len(spec.Tolerations) == 0 {
		spec.Tolerations = nil
	}

	for k, v := range spec.NodeSelector {
		if pointsAtNode(k, []string{v}, node) {
			delete(spec.NodeSelector, k)
		}
	}
	if len(spec.NodeSelector) == 0 {
		spec.NodeSelector = nil
	}

	if a := spec.Affinity; a != nil && a.NodeAffinity != nil {
		a.NodeAffinity = sanitizeNodeAffinity(a.NodeAffinity, node)
		if a.NodeAffinity == nil && a.PodAffinity == nil && a.PodAntiAffinity == nil {
			spec.Affinity = nil
		}
	}
	return spec
}

// pointsAtNode reports whether a selector on key with values selects the
// virtual node specifically.
func pointsAtNode(key string, values []string, node NodeIdentity) bool {
	switch key {
	case corev1alpha1.LabelRemoteClusterID:
		return true
	case virtualNodeTypeLabel:
		return slices.Contains(values, virtualNodeTypeValue)
	case corev1.LabelHostname:
		return node.Name != "" && slices.Contains(values, node.Name)
	}
	_, ok := node.Labels[key]
	return ok
}

func sanitizeNodeAffinity(na *corev1.NodeAffinity, node NodeIdentity) *corev1.NodeAffinity {
	out := na.DeepCopy()
	if req := out.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
		var terms []corev1.NodeSelectorTerm
		for _, t := range req.NodeSelectorTerms {
			st, stripped := sanitizeTerm(t, node)
			if stripped && len(st.MatchExpressions) == 0 && len(st.MatchFields) == 0 {
				continue // the term only selected the virtual node
			}
			if !slices.ContainsFunc(terms, func(u corev1.NodeSelectorTerm) bool { return equality.Semantic.DeepEqual(u, st) }) {
				terms = append(terms, st)
			}
		}
		if len(terms) == 0 {
			out.RequiredDuringSchedulingIgnoredDuringExecution = nil
		} else {
			req.NodeSelectorTerms = terms
		}
	}
	var prefs []corev1.PreferredSchedulingTerm
	for _, p := range out.PreferredDuringSchedulingIgnoredDuringExecution {
		st, stripped := sanitizeTerm(p.Preference, node)
		if stripped && len(st.MatchExpressions) == 0 && len(st.MatchFields) == 0 {
			continue
		}
		p.Preference = st
		prefs = append(prefs, p)
	}
	out.PreferredDuringSchedulingIgnoredDuringExecution = prefs
	if out.RequiredDuringSchedulingIgnoredDuringExecution == nil && len(prefs) == 0 {
		return nil
	}
	return out
}

// sanitizeTerm drops the requirements of t that point at the virtual node
// and reports whether it dropped any.
func sanitizeTerm(t corev1.NodeSelectorTerm, node NodeIdentity) (corev1.NodeSelectorTerm, bool) {
	stripped := false
	var exprs []corev1.NodeSelectorRequirement
	for _, r := range t.MatchExpressions {
		if pointsAtNode(r.Key, r.Values, node) {
			stripped = true
			continue
		}
		exprs = append(exprs, r)
	}
	var fields []corev1.NodeSelectorRequirement
	for _, r := range t.MatchFields {
		if r.Key == metav1.ObjectNameField && node.Name != "" && slices.Contains(r.Values, node.Name) {
			stripped = true
			continue
		}
		fields = append(fields, r)
	}
	return corev1.NodeSelectorTerm{MatchExpressions: exprs, MatchFields: fields}, stripped
}

// FilterPodLabels returns the labels of the provider's pod: the local pod's
// labels without annex.dev/remote-unavailable (the local marking of a
// provider failure), at most maxPodLabels of them.
func FilterPodLabels(labels map[string]string) map[string]string {
	return bounded(labels, maxPodLabels, func(k, _ string) bool {
		return k != corev1alpha1.LabelRemoteUnavailable
	})
}

// FilterPodAnnotations returns the annotations of the provider's pod: the
// local pod's annotations without Kubernetes' internal ones (keys in the
// kubernetes.io and k8s.io domains and their subdomains, such as
// kubectl.kubernetes.io/last-applied-configuration), without Annex's own
// (annex.dev), without values over 16 KiB, at most maxPodAnnotations of them.
func FilterPodAnnotations(annotations map[string]string) map[string]string {
	return bounded(annotations, maxPodAnnotations, func(k, v string) bool {
		return !internalAnnotation(k) && len(v) <= maxAnnotationValueLen
	})
}

func internalAnnotation(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, d := range []string{"kubernetes.io", "k8s.io", "annex.dev"} {
		if prefix == d || strings.HasSuffix(prefix, "."+d) {
			return true
		}
	}
	return false
}

// bounded returns the entries of m that keep accepts, the first max of them
// in key order; nil when none.
func bounded(m map[string]string, limit int, keep func(k, v string) bool) map[string]string {
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	var out map[string]string
	for _, k := range keys {
		if len(out) == limit {
			break
		}
		if !keep(k, m[k]) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = m[k]
	}
	return out
}
