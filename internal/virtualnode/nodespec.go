package virtualnode

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/version"
	"github.com/annexhq/annex/internal/virtualnode/podreflector"
)

// Node labels and annotations of a virtual node.
const (
	// LabelNodeType is set to NodeTypeVirtual on every virtual node.
	LabelNodeType = "type"
	// NodeTypeVirtual is the value of LabelNodeType.
	NodeTypeVirtual = "virtual-node"
	// AnnotationAppliedTaints records, as JSON, the taints the agent put on
	// the Node, so that taints removed from VirtualNode.spec.taints are
	// removed from the Node while the taints of others (node lifecycle
	// controller, administrators) are kept.
	AnnotationAppliedTaints = "annex.dev/applied-taints"
)

// Node condition reasons.
const (
	// ReasonProviderReachable: Ready is True.
	ReasonProviderReachable = "ProviderReachable"
	// ReasonProviderReachabilityUnknown: the provider has not been probed
	// yet and the Node had no Ready condition to keep.
	ReasonProviderReachabilityUnknown = "ProviderReachabilityUnknown"
	// reasonManagedByProvider: the pressure conditions of a virtual node.
	reasonManagedByProvider = "ManagedByProvider"
)

// nodeParams is everything a virtual node's Node object is built from.
type nodeParams struct {
	Name      string
	ClusterID string
	NodeIP    string
	// KubeletPort is the port of the kubelet endpoint; 0 when none.
	KubeletPort int
	Spec        *corev1alpha1.VirtualNodeSpec
	// Ready is the Ready condition (with its transition time).
	Ready corev1.NodeCondition
	// Created stamps the transition time of the constant conditions.
	Created metav1.Time
}

// AnnotationResourceMetricsPath is metrics-server's Node annotation that
// names the path of the node's resource metrics on its kubelet endpoint.
const AnnotationResourceMetricsPath = "metrics.k8s.io/resource-metrics-path"

// ResourceMetricsPath is where the agent's kubelet endpoint serves the
// resource metrics of virtual node name's pods.
func ResourceMetricsPath(name string) string { return "/metrics/resource/" + name }

// buildNode returns the Node of a virtual node: labels (spec.labels, then
// the agent's, which win), the virtual-node taint and spec.taints, capacity
// and allocatable from spec.resources, Ready as given, the other kubelet
// conditions False, the InternalIP address and the kubelet endpoint's port.
// There is no Hostname address: the API server prefers it by default to
// reach a kubelet, and the node's name resolves to nothing.
func buildNode(p nodeParams) *corev1.Node {
	labels := maps.Clone(p.Spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, map[string]string{
		LabelNodeType:                     NodeTypeVirtual,
		corev1alpha1.LabelRemoteClusterID: p.ClusterID,
		corev1.LabelHostname:              p.Name,
		corev1.LabelOSStable:              "linux",
		// A virtual node never receives load-balancer traffic itself.
		corev1.LabelNodeExcludeBalancers: "true",
	})
	resources := p.Spec.Resources.DeepCopy()
	if resources == nil {
		resources = corev1.ResourceList{}
	}
	pressure := func(t corev1.NodeConditionType) corev1.NodeCondition {
		return corev1.NodeCondition{
			Type: t, Status: corev1.ConditionFalse, Reason: reasonManagedByProvider,
			Message:            fmt.Sprintf("provider %s manages its own resources", p.ClusterID),
			LastTransitionTime: p.Created,
		}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   p.Name,
			Labels: labels,
			// One kubelet endpoint serves every virtual node of the agent:
			// metrics-server (v0.8 and later) scrapes the path this names.
			Annotations: map[string]string{AnnotationResourceMetricsPath: ResourceMetricsPath(p.Name)},
		},
		Spec: corev1.NodeSpec{
			Taints: desiredTaints(p.ClusterID, p.Spec.Taints),
		},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources.DeepCopy(),
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				p.Ready,
				pressure(corev1.NodeMemoryPressure),
				pressure(corev1.NodeDiskPressure),
				pressure(corev1.NodePIDPressure),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: p.NodeIP},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{
				KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(p.KubeletPort)}, //nolint:gosec // G115: --kubelet-port is validated to 0..65535
			},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem:         "linux",
				KubeletVersion:          version.Version,
				OSImage:                 "Annex virtual node for provider " + p.ClusterID,
				ContainerRuntimeVersion: "annex://" + version.Version,
			},
		},
	}
}

// readyCondition returns the Ready condition for reachability st. carried
// is the Node's Ready condition found when the agent started the node: kept
// while the provider has not been probed yet, so that an agent restart does
// not flap the node. LastTransitionTime is left to the caller.
func readyCondition(clusterID string, st podreflector.Reachability, carried *corev1.NodeCondition) corev1.NodeCondition {
	switch st {
	case podreflector.Reachable:
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: ReasonProviderReachable, Message: fmt.Sprintf("provider %s is reachable", clusterID)}
	case podreflector.Unreachable:
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
			Reason:  corev1alpha1.ReasonProviderUnreachable,
			Message: fmt.Sprintf("provider %s is unreachable: its API server fails its health probes; the pods on this node are marked NotReady", clusterID)}
	case podreflector.PermanentlyUnreachable:
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
			Reason:  corev1alpha1.ReasonProviderUnreachable,
			Message: fmt.Sprintf("provider %s is permanently unreachable: its ForeignCluster is marked unreachable or gone", clusterID)}
	}
	if carried != nil {
		c := *carried.DeepCopy()
		c.Type = corev1.NodeReady
		return c
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
		Reason: ReasonProviderReachabilityUnknown, Message: fmt.Sprintf("waiting for the first health probe of provider %s", clusterID)}
}

// desiredTaints are the taints the agent puts on the Node of provider
// clusterID: the virtual-node taint, then spec's.
func desiredTaints(clusterID string, spec []corev1.Taint) []corev1.Taint {
	out := []corev1.Taint{{Key: corev1alpha1.TaintKeyVirtualNode, Value: clusterID, Effect: corev1.TaintEffectNoSchedule}}
	for _, t := range spec {
		if t.Key == corev1alpha1.TaintKeyVirtualNode && t.Effect == corev1.TaintEffectNoSchedule {
			continue
		}
		t.TimeAdded = nil
		out = append(out, t)
	}
	return out
}

// taintID identifies a taint on a Node: a Node has at most one taint per key
// and effect.
type taintID struct {
	Key    string             `json:"key"`
	Effect corev1.TaintEffect `json:"effect"`
}

func idOf(t corev1.Taint) taintID { return taintID{Key: t.Key, Effect: t.Effect} }

// mergeTaints returns the taints a Node should have: current without the
// ones the agent applied before (previous) that it no longer wants, with
// the wanted ones set (in place when present, appended otherwise). Taints of
// others are kept in their order. changed reports whether the result
// differs from current.
func mergeTaints(current []corev1.Taint, previous []taintID, wanted []corev1.Taint) (out []corev1.Taint, changed bool) {
	want := map[taintID]corev1.Taint{}
	for _, t := range wanted {
		want[idOf(t)] = t
	}
	placed := map[taintID]bool{}
	for _, t := range current {
		id := idOf(t)
		if w, ok := want[id]; ok {
			if placed[id] {
				continue
			}
			placed[id] = true
			if t.Value == w.Value {
				out = append(out, t) // keep its TimeAdded
			} else {
				out = append(out, w)
			}
			continue
		}
		if slices.Contains(previous, id) {
			continue // ours, no longer wanted
		}
		out = append(out, t)
	}
	for _, t := range wanted {
		if !placed[idOf(t)] {
			out = append(out, t)
		}
	}
	return out, !equality.Semantic.DeepEqual(out, current) && !(len(out) == 0 && len(current) == 0)
}

// encodeApplied is the AnnotationAppliedTaints value for taints.
func encodeApplied(taints []corev1.Taint) string {
	ids := make([]taintID, 0, len(taints))
	for _, t := range taints {
		ids = append(ids, idOf(t))
	}
	data, _ := json.Marshal(ids)
	return string(data)
}

// decodeApplied parses an AnnotationAppliedTaints value; garbage reads as
// nothing applied.
func decodeApplied(s string) []taintID {
	var ids []taintID
	if s == "" || json.Unmarshal([]byte(s), &ids) != nil {
		return nil
	}
	return ids
}
