package install

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// ProviderPolicyName is the ConfigMap, in annex-system, holding what this
// cluster, as a provider, allows its tenants' pods to ask for. It is the
// parameter of the admission policy annex-tenant-pods
// (config/admission/tenant-pods.yaml), whose binding refuses every tenant
// pod while the ConfigMap is missing. Each key is a comma-separated list;
// an empty or missing list allows nothing.
const ProviderPolicyName = "annex-provider-policy"

// The keys of the provider policy ConfigMap.
const (
	// PolicyKeyTolerationKeys: the taint keys a tenant pod may tolerate. A
	// toleration with an empty key (operator Exists: every taint) is never
	// allowed.
	PolicyKeyTolerationKeys = "allowedTolerationKeys"
	// PolicyKeyNodeLabelKeys: the node label keys a tenant pod may select
	// on, in its nodeSelector and its node affinity (matchExpressions and
	// matchFields, required and preferred).
	PolicyKeyNodeLabelKeys = "allowedNodeLabelKeys"
	// PolicyKeyPriorityClasses: the PriorityClasses a tenant pod may name.
	PolicyKeyPriorityClasses = "allowedPriorityClasses"
	// PolicyKeyRuntimeClasses: the RuntimeClasses a tenant pod may name.
	PolicyKeyRuntimeClasses = "allowedRuntimeClasses"
	// PolicyKeySchedulerNames: the schedulers a tenant pod may name;
	// default-scheduler (what an unset schedulerName becomes) is always
	// allowed.
	PolicyKeySchedulerNames = "allowedSchedulerNames"
)

// Defaults of the provider policy: what every pod gets from the API server
// (the DefaultTolerationSeconds tolerations) and the well-known node labels
// that say nothing about a node the provider keeps for itself.
var (
	DefaultTolerationKeys = []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable}
	DefaultNodeLabelKeys  = []string{corev1.LabelOSStable, corev1.LabelArchStable, corev1.LabelTopologyZone,
		corev1.LabelTopologyRegion, corev1.LabelInstanceTypeStable}
	DefaultSchedulerNames = []string{corev1.DefaultSchedulerName}
)

// ProviderPolicy is the provider policy ConfigMap with the defaults, which
// allow no PriorityClass but priorityClasses and no RuntimeClass.
func ProviderPolicy(priorityClasses ...string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: ProviderPolicyName, Namespace: corev1alpha1.AgentNamespace},
		Data: map[string]string{
			PolicyKeyTolerationKeys:  strings.Join(DefaultTolerationKeys, ","),
			PolicyKeyNodeLabelKeys:   strings.Join(DefaultNodeLabelKeys, ","),
			PolicyKeyPriorityClasses: strings.Join(priorityClasses, ","),
			PolicyKeyRuntimeClasses:  "",
			PolicyKeySchedulerNames:  strings.Join(DefaultSchedulerNames, ","),
		},
	}
}

// PolicyHelp documents the provider policy ConfigMap for `annexctl install --help`.
const PolicyHelp = `Pods of tenants (consumers that offload to this cluster) are checked by the
admission policy annex-tenant-pods against the ConfigMap
annex-system/annex-provider-policy. install creates it with the defaults below
and never changes it afterwards: edit it (kubectl -n annex-system edit
configmap annex-provider-policy) and the next pod is checked against it. Each
key is a comma-separated list; empty allows nothing; without the ConfigMap
every tenant pod is refused.
  allowedTolerationKeys   taint keys a tenant pod may tolerate (an empty key,
                          which tolerates every taint, never is)
                          default: node.kubernetes.io/not-ready,node.kubernetes.io/unreachable
  allowedNodeLabelKeys    node label keys of nodeSelector and node affinity
                          default: kubernetes.io/os,kubernetes.io/arch,topology.kubernetes.io/zone,
                          topology.kubernetes.io/region,node.kubernetes.io/instance-type
  allowedPriorityClasses  priorityClassName values; default: none, except a
                          PriorityClass that is globalDefault when install
                          creates the ConfigMap (add one made later yourself)
  allowedRuntimeClasses   runtimeClassName values; default: none
  allowedSchedulerNames   schedulerName values (default-scheduler always is)
                          default: default-scheduler
Whatever the ConfigMap says, tenant pods may not use pod (anti-)affinity
across namespaces nor probes or lifecycle handlers with a host, tenant
Services are ClusterIP or headless without external exposure, and a
ShadowPod's pod spec is immutable (docs/security.md).`
