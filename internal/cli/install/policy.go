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
	// PolicyKeyVolumeTypes: the volume types (the name of a volume's
	// source field, such as emptyDir) a tenant pod may use. Without the
	// key (a ConfigMap written by an older install), the default list.
	PolicyKeyVolumeTypes = "allowedVolumeTypes"
	// PolicyKeyLabelDomains: the domains whose label keys (DOMAIN/name, and
	// those of its subdomains) a tenant's Services, ConfigMaps and Secrets
	// keep (admission/metadata-keys.yaml removes the others; keys without
	// a domain always pass, annex.dev keys but the two marking the
	// consumer's copies never). Without the key, the default list: the
	// domains tenant pods may carry by default.
	PolicyKeyLabelDomains = "tenantLabelDomains"
	// PolicyKeyAnnotationDomains: the same for annotation keys. Without the
	// key, none.
	PolicyKeyAnnotationDomains = "tenantAnnotationDomains"

	// PolicyKeyMaxMetadataBytes: the most bytes of labels, annotations,
	// finalizers and owner references (keys and values) of an object a
	// tenant writes in its remote namespaces (admission policy
	// annex-tenant-metadata). A decimal count; missing or not a count:
	// DefaultMaxMetadataBytes.
	PolicyKeyMaxMetadataBytes = "tenantMaxMetadataBytes"
	// PolicyKeyMaxDataBytes: the most bytes of a tenant's ConfigMap (data
	// and binaryData) or Secret (data), keys and values, and of the
	// endpoints and ports of its ShadowEndpointSlice (annex-tenant-configmaps,
	// annex-tenant-secrets, annex-tenant-shadowendpointslices). Default
	// DefaultMaxDataBytes.
	PolicyKeyMaxDataBytes = "tenantMaxDataBytes"
	// PolicyKeyMaxEventBytes: the most bytes of an Event a tenant writes: its
	// strings, labels and annotations (annex-tenant-events). Default
	// DefaultMaxEventBytes.
	PolicyKeyMaxEventBytes = "tenantMaxEventBytes"
	// PolicyKeyMaxPodBytes: the most bytes of a tenant's ShadowPod's pod
	// spec, as CEL's format renders it (annex-tenant-podspecs). Default
	// DefaultMaxPodBytes.
	PolicyKeyMaxPodBytes = "tenantMaxPodBytes"
)

// The defaults of the byte bounds, used by the admission policies when the
// provider policy ConfigMap lacks the key (one created by an older install).
const (
	DefaultMaxMetadataBytes = 64 << 10
	DefaultMaxDataBytes     = 256 << 10
	DefaultMaxEventBytes    = 4 << 10
	DefaultMaxPodBytes      = 64 << 10
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
  allowedVolumeTypes      volume types (the source field: emptyDir, csi, ...)
                          default: emptyDir,configMap,secret,projected,downwardAPI
                          (persistentVolumeClaim and ephemeral volumes make
                          this cluster provision storage no grant counts)
The tenantMax*Bytes keys bound what a tenant stores per object in its remote
namespaces (a decimal number of bytes; a missing key means its default):
  tenantMaxMetadataBytes  labels, annotations, finalizers and owner references
                          of every object; default: 65536 (64 KiB)
  tenantMaxDataBytes      data and binaryData of a ConfigMap, data of a Secret,
                          endpoints and ports of a ShadowEndpointSlice;
                          default: 262144 (256 KiB)
  tenantMaxEventBytes     everything an Event holds (strings, labels and
                          annotations); default: 4096 (4 KiB)
  tenantMaxPodBytes       the pod spec of a ShadowPod, as CEL's format
                          renders it (about its size in JSON);
                          default: 65536 (64 KiB)
Which label and annotation keys a tenant's Services, ConfigMaps and Secrets
keep (annex-tenant-metadata-keys removes the others; keys without a domain
always pass; a missing key means its default):
  tenantLabelDomains      domains (and their subdomains) of label keys;
                          default: app.kubernetes.io,helm.sh,
                          statefulset.kubernetes.io,apps.kubernetes.io
  tenantAnnotationDomains domains of annotation keys; default: none
  (tenant pods: the agent's --tenant-pod-label-domains and
  --tenant-pod-annotation-domains)
Whatever the ConfigMap says, tenant pods may not use pod (anti-)affinity
across namespaces, projected sources other than configMap, secret,
downwardAPI and serviceAccountToken, nor probes or lifecycle handlers with a host, tenant
Services are ClusterIP or headless without external exposure, and a
ShadowPod's pod spec is immutable (docs/security.md).`
