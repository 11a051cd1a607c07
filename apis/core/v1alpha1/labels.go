package v1alpha1

// Labels, annotations, taints and well-known names shared by every Annex
// component. They are part of the API: tests and other clusters rely on them.
const (
	// LabelRemoteClusterID marks an object as belonging to, or coming from,
	// the remote cluster whose ID is the value. On a provider it names the
	// consumer that owns a reflected object; on a consumer it names the
	// provider an object was reflected to.
	LabelRemoteClusterID = "annex.dev/remote-cluster-id"

	// LabelManagedBy marks objects that an Annex component created and owns.
	// Its value is ManagedByAnnex.
	LabelManagedBy = "annex.dev/managed-by"

	// ManagedByAnnex is the value of LabelManagedBy.
	ManagedByAnnex = "annex"

	// LabelRemoteUnavailable is set (value "true") on local offloaded pods
	// while the provider that runs them is unreachable, and removed when it
	// comes back.
	LabelRemoteUnavailable = "annex.dev/remote-unavailable"

	// AnnotationUseDirectConnections, set to "true" on a consumer Service,
	// asks Annex to let providers reach endpoints on other providers
	// directly instead of through the consumer.
	AnnotationUseDirectConnections = "annex.dev/use-direct-connections"

	// AnnotationDirectConnectionsData is set by the consumer on a
	// ShadowEndpointSlice: for every endpoint that lives on another provider,
	// that provider's cluster ID, the address as written in the slice and the
	// pod's address in that provider's own network. Providers treat it as
	// untrusted input.
	AnnotationDirectConnectionsData = "annex.dev/direct-connections-data"

	// AnnotationTransitAddress is set by the consumer's agent on each of its
	// pods that runs on a virtual node: the address of the consumer's
	// external CIDR through which other providers reach that pod (traffic
	// to it flows through the consumer). Released when the pod goes.
	AnnotationTransitAddress = "annex.dev/transit-address"

	// AnnotationSkipReflection, set to "true" on a Service, ConfigMap or
	// Secret, keeps Annex from reflecting it to providers.
	AnnotationSkipReflection = "annex.dev/skip-reflection"

	// TaintKeyVirtualNode is the key of the taint every virtual node carries
	// so that only pods of offloaded namespaces (which get a matching
	// toleration) are scheduled on it.
	TaintKeyVirtualNode = "annex.dev/virtual-node"
)

// Cluster identity: every cluster running Annex has one ConfigMap that says
// who it is and which address ranges it owns.
const (
	// AgentNamespace is the namespace the Annex agent runs in.
	AgentNamespace = "annex-system"

	// ClusterIdentityConfigMapName is the name of the identity ConfigMap in
	// AgentNamespace.
	ClusterIdentityConfigMapName = "annex-cluster-identity"

	// ClusterIdentityKeyClusterID is the identity key holding the cluster ID.
	ClusterIdentityKeyClusterID = "clusterID"
	// ClusterIdentityKeyPodCIDR is the identity key holding the pod CIDR.
	ClusterIdentityKeyPodCIDR = "podCIDR"
	// ClusterIdentityKeyServiceCIDR is the identity key holding the service CIDR.
	ClusterIdentityKeyServiceCIDR = "serviceCIDR"
	// ClusterIdentityKeyExternalCIDR is the identity key holding the external
	// CIDR (the range transit addresses are allocated from).
	ClusterIdentityKeyExternalCIDR = "externalCIDR"
)

// Name prefixes of objects derived from a cluster ID.
const (
	// TenantNamespacePrefix prefixes the tenant namespace a provider keeps for
	// each of its consumers.
	TenantNamespacePrefix = "annex-tenant-"

	// PeerNamespacePrefix prefixes the namespace a consumer keeps for each of
	// its providers.
	PeerNamespacePrefix = "annex-peer-"

	// VirtualNodeNamePrefix prefixes the default Node name of a virtual node.
	VirtualNodeNamePrefix = "annex-"
)

// TenantNamespaceName returns the name of the tenant namespace that a
// provider keeps for the consumer with the given cluster ID
// ("annex-tenant-<clusterID>"). It holds only what that consumer writes with
// its credential (replicas of its ResourceSlices and RemoteNamespaces, its
// heartbeat Lease) and the consumer's ServiceAccount with its Role: nothing
// the provider keeps for its own use lives there.
func TenantNamespaceName(clusterID string) string {
	return TenantNamespacePrefix + clusterID
}

// PeerNamespaceName returns the name of the namespace that a consumer keeps
// for the provider with the given cluster ID ("annex-peer-<clusterID>"): its
// own objects for that provider (the credentials Secret, the VirtualNode, the
// ResourceSlices and RemoteNamespaces to replicate there). No peer has any
// right in it, and the replicator replicates to a provider only objects of
// that provider's peer namespace.
func PeerNamespaceName(clusterID string) string {
	return PeerNamespacePrefix + clusterID
}

// VirtualNodeName returns the default Node name of the virtual node that
// represents the provider with the given cluster ID ("annex-<clusterID>").
func VirtualNodeName(clusterID string) string {
	return VirtualNodeNamePrefix + clusterID
}

// Peering credentials: what `annexctl peer` writes and the consumer's agent renews.
const (
	// ConsumerServiceAccountName is the ServiceAccount, in a provider's tenant
	// namespace for a consumer, that the consumer authenticates as; its Role
	// and RoleBinding have the same name.
	ConsumerServiceAccountName = "annex-consumer"
	// CredentialsSecretName is the Secret, in a consumer's peer namespace for
	// a provider, holding the kubeconfig the consumer uses to reach it.
	CredentialsSecretName = "annex-credentials" //nolint:gosec // G101: a Secret's name, not a credential
	// CredentialsKubeconfigKey is the key of that Secret holding the kubeconfig.
	CredentialsKubeconfigKey = "kubeconfig"
	// AnnotationTokenExpiry on the credentials Secret is when its token expires (RFC 3339).
	AnnotationTokenExpiry = "annex.dev/token-expiry" //nolint:gosec // G101: an annotation key, not a credential
	// AnnotationServiceAccount on the credentials Secret is <namespace>/<name>
	// of the ServiceAccount on the provider whose token it holds.
	AnnotationServiceAccount = "annex.dev/service-account"
	// LabelTenant ("true") marks tenant namespaces (a provider's, for a
	// consumer); they also carry LabelRemoteClusterID=<consumer>.
	LabelTenant = "annex.dev/tenant"
	// LabelPeer marks peer namespaces (a consumer's, for a provider); its
	// value is the provider's cluster ID. Peer namespaces carry neither
	// LabelTenant nor LabelRemoteClusterID, so nothing that selects tenant or
	// remote namespaces ever matches them.
	LabelPeer = "annex.dev/peer"
)

// Namespace offloading: what the namespaceoffloading controller writes on an
// offloaded namespace, read by the admission policy and the reflectors.
const (
	// LabelOffloading is "true" on namespaces with a NamespaceOffloading.
	LabelOffloading = "annex.dev/offloading"
	// LabelOffloadingStrategy is the namespace's pod offloading strategy.
	LabelOffloadingStrategy = "annex.dev/offloading-strategy"
	// AnnotationOffloadingClusters lists, comma-separated, the providers whose
	// remote namespace is ready.
	AnnotationOffloadingClusters = "annex.dev/offloading-clusters"
	// LabelSourceNamespace on a RemoteNamespace (and annotation on the remote
	// namespace) names the consumer namespace it offloads.
	LabelSourceNamespace = "annex.dev/source-namespace"
)

// HeartbeatLeaseName is the Lease a consumer renews in its tenant namespace on
// each provider (the only Lease it may write there); a provider removes a
// tenant whose consumer stopped renewing it.
const HeartbeatLeaseName = "annex-consumer-heartbeat"

// HeartbeatReleasedUnix is the renewTime (seconds since the Unix epoch: the
// epoch itself) of a released heartbeat: a consumer that unpeers through
// its provider sets it, and the provider removes the tenant at once instead
// of after its grace period.
const HeartbeatReleasedUnix = 0

// AnnotationHeartbeatLapseFrom and AnnotationHeartbeatLapseTo (RFC 3339
// times on the heartbeat Lease) record the last lapse of a consumer's
// heartbeat longer than two of its intervals, written by the consumer with
// the renewal that ended it: from the renewTime it found to the new one. A
// provider whose agent could not act during the lapse (its API server or
// itself was down) fences from it afterwards what it would have fenced.
const (
	AnnotationHeartbeatLapseFrom = "annex.dev/heartbeat-lapse-from"
	AnnotationHeartbeatLapseTo   = "annex.dev/heartbeat-lapse-to"
)
