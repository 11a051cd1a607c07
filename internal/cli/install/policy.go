package install

// ProviderPolicyName is the ConfigMap, in annex-system, holding what this
// cluster, as a provider, allows its tenants' pods to ask for. It is the
// parameter of the admission policy annex-tenant-pods
// (charts/annex/templates/admission/tenant-pods.yaml), whose binding
// refuses every tenant pod while the ConfigMap is missing. Each key is a
// comma-separated list; an empty or missing list allows nothing. The chart
// renders it (templates/provider-policy.yaml) with the defaults of its
// values.yaml (providerPolicy).
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
