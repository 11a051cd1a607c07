package podreflector

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

var testNode = NodeIdentity{Name: "annex-beta", Labels: map[string]string{"region": "eu"}}

func req(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func required(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
}

func term(exprs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: exprs}
}

func TestSanitizePodSpec(t *testing.T) {
	container := []corev1.Container{{Name: "c", Image: "img"}}
	virtualToleration := corev1.Toleration{Key: corev1alpha1.TaintKeyVirtualNode, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	userToleration := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	rcid := req(corev1alpha1.LabelRemoteClusterID, corev1.NodeSelectorOpIn, "beta")
	notVirtual := req("type", corev1.NodeSelectorOpNotIn, "virtual-node")
	zone := req("topology.kubernetes.io/zone", corev1.NodeSelectorOpIn, "a")

	tests := []struct {
		name string
		in   corev1.PodSpec
		want corev1.PodSpec
	}{{
		name: "nodeName, scheduler, priority, overhead, gates and ephemeral containers go",
		in: corev1.PodSpec{
			NodeName: "annex-beta", SchedulerName: "custom", Priority: ptr.To[int32](1000), PriorityClassName: "high",
			PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority), Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
			ReadinessGates:      []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}},
			Containers:          container, ServiceAccountName: "default",
			Volumes: []corev1.Volume{{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}},
		},
		want: corev1.PodSpec{
			Containers: container, ServiceAccountName: "default",
			Volumes: []corev1.Volume{{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}},
		},
	}, {
		name: "only the virtual-node toleration goes",
		in:   corev1.PodSpec{Containers: container, Tolerations: []corev1.Toleration{virtualToleration, userToleration}},
		want: corev1.PodSpec{Containers: container, Tolerations: []corev1.Toleration{userToleration}},
	}, {
		name: "no toleration left",
		in:   corev1.PodSpec{Containers: container, Tolerations: []corev1.Toleration{virtualToleration}},
		want: corev1.PodSpec{Containers: container},
	}, {
		name: "node selector entries pointing at the virtual node go",
		in: corev1.PodSpec{Containers: container, NodeSelector: map[string]string{
			"type": "virtual-node", corev1alpha1.LabelRemoteClusterID: "beta", corev1.LabelHostname: "annex-beta",
			"region": "eu", corev1.LabelOSStable: "linux", "disk": "ssd",
		}},
		want: corev1.PodSpec{Containers: container, NodeSelector: map[string]string{corev1.LabelOSStable: "linux", "disk": "ssd"}},
	}, {
		name: "node selector left empty",
		in:   corev1.PodSpec{Containers: container, NodeSelector: map[string]string{corev1alpha1.LabelRemoteClusterID: "beta"}},
		want: corev1.PodSpec{Containers: container},
	}, {
		name: "Remote strategy: the required affinity goes entirely",
		in:   corev1.PodSpec{Containers: container, Affinity: required(term(rcid))},
		want: corev1.PodSpec{Containers: container},
	}, {
		name: "LocalAndRemote strategy: both Annex terms go",
		in:   corev1.PodSpec{Containers: container, Affinity: required(term(notVirtual), term(rcid))},
		want: corev1.PodSpec{Containers: container},
	}, {
		name: "user requirements ANDed with Annex's stay, equal terms merge",
		in:   corev1.PodSpec{Containers: container, Affinity: required(term(zone, notVirtual), term(zone, rcid))},
		want: corev1.PodSpec{Containers: container, Affinity: required(term(zone))},
	}, {
		name: "cluster selector keys (VirtualNode labels) go",
		in:   corev1.PodSpec{Containers: container, Affinity: required(term(req("region", corev1.NodeSelectorOpIn, "eu"), zone))},
		want: corev1.PodSpec{Containers: container, Affinity: required(term(zone))},
	}, {
		name: "a user-only term stays, a matchFields on the node name goes",
		in: corev1.PodSpec{Containers: container, Affinity: required(term(zone), corev1.NodeSelectorTerm{
			MatchFields: []corev1.NodeSelectorRequirement{req(metav1.ObjectNameField, corev1.NodeSelectorOpIn, "annex-beta")}})},
		want: corev1.PodSpec{Containers: container, Affinity: required(term(zone))},
	}, {
		name: "preferred terms: Annex expressions go, empty preferences go",
		in: corev1.PodSpec{Containers: container, Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
				{Weight: 10, Preference: term(rcid)},
				{Weight: 5, Preference: term(zone, notVirtual)},
			}}}},
		want: corev1.PodSpec{Containers: container, Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 5, Preference: term(zone)}}}}},
	}, {
		name: "pod affinity stays when the node affinity goes",
		in: corev1.PodSpec{Containers: container, Affinity: &corev1.Affinity{
			NodeAffinity:    required(term(rcid)).NodeAffinity,
			PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: corev1.LabelHostname}}},
		}},
		want: corev1.PodSpec{Containers: container, Affinity: &corev1.Affinity{
			PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: corev1.LabelHostname}}},
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in.DeepCopy()
			got := SanitizePodSpec(in, testNode)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("SanitizePodSpec (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(&tt.in, in); diff != "" {
				t.Errorf("SanitizePodSpec modified its input (-before +after):\n%s", diff)
			}
		})
	}
}

func TestFilterPodMetadata(t *testing.T) {
	big := strings.Repeat("x", maxAnnotationValueLen+1)
	gotAnn := FilterPodAnnotations(map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": "{}",
		"kubernetes.io/config.seen":                        "now",
		"k8s.io/x":                                         "y",
		"annex.dev/origin-uid":                             "u",
		"prometheus.io/scrape":                             "true",
		"team":                                             "a",
		"huge":                                             big,
	})
	if diff := cmp.Diff(map[string]string{"prometheus.io/scrape": "true", "team": "a"}, gotAnn); diff != "" {
		t.Errorf("FilterPodAnnotations (-want +got):\n%s", diff)
	}
	gotLabels := FilterPodLabels(map[string]string{"app": "web", corev1alpha1.LabelRemoteUnavailable: "true"})
	if diff := cmp.Diff(map[string]string{"app": "web"}, gotLabels); diff != "" {
		t.Errorf("FilterPodLabels (-want +got):\n%s", diff)
	}
	if FilterPodLabels(nil) != nil || FilterPodAnnotations(map[string]string{"kubernetes.io/x": "y"}) != nil {
		t.Error("empty results must be nil")
	}
	many := map[string]string{}
	for i := range 100 {
		many[string(rune('a'+i%26))+strings.Repeat("k", i/26)] = "v"
	}
	if n := len(FilterPodLabels(many)); n != maxPodLabels {
		t.Errorf("FilterPodLabels kept %d labels, want %d", n, maxPodLabels)
	}
	// Deterministic: the same input keeps the same keys.
	if diff := cmp.Diff(FilterPodLabels(many), FilterPodLabels(many)); diff != "" {
		t.Error(diff)
	}
}

func TestBuildShadowPod(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web", UID: "uid-1",
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"team": "a", "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
		Spec: corev1.PodSpec{NodeName: "annex-beta", Containers: []corev1.Container{{Name: "c", Image: "img"}}},
	}
	got := BuildShadowPod(pod, "demo-alpha", "alpha", testNode)
	want := &offloadingv1alpha1.ShadowPod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo-alpha", Name: "web",
			Labels:      map[string]string{corev1alpha1.LabelRemoteClusterID: "alpha", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex},
			Annotations: map[string]string{AnnotationOriginUID: "uid-1"}},
		Spec: offloadingv1alpha1.ShadowPodSpec{
			Pod:            corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
			PodLabels:      map[string]string{"app": "web"},
			PodAnnotations: map[string]string{"team": "a"},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("BuildShadowPod (-want +got):\n%s", diff)
	}
}

func TestMapDiff(t *testing.T) {
	tests := []struct {
		from, to map[string]string
		want     map[string]any
	}{
		{nil, nil, nil},
		{map[string]string{"a": "1"}, map[string]string{"a": "1"}, nil},
		{map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "3", "c": "4"}, map[string]any{"a": "3", "b": nil, "c": "4"}},
		{nil, map[string]string{"a": "1"}, map[string]any{"a": "1"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, mapDiff(tt.from, tt.to)); diff != "" {
			t.Errorf("mapDiff(%v, %v) (-want +got):\n%s", tt.from, tt.to, diff)
		}
	}
}
