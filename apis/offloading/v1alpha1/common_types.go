package v1alpha1

// Condition types used by the kinds of this group.
const (
	// ConditionReady is the summary condition of NamespaceOffloading (every
	// selected remote namespace is Ready), ShadowPod (the real pod exists and
	// mirrors the spec) and ShadowEndpointSlice (the real EndpointSlice is up
	// to date).
	ConditionReady = "Ready"
	// ConditionFailover says whether a NamespaceOffloading's failover is in
	// force: True once every selected provider armed the fence it asks for.
	ConditionFailover = "Failover"
)

// Condition reasons used by the kinds of this group.
const (
	// ReasonReconciled: the object is in the state its spec asks for.
	ReasonReconciled = "Reconciled"
	// ReasonPending: work is in progress.
	ReasonPending = "Pending"
	// ReasonRemoteNamespaceFailed: at least one remote namespace could not
	// be created; status.remoteNamespaces has the details.
	ReasonRemoteNamespaceFailed = "RemoteNamespaceFailed"
	// ReasonNoClusterSelected: the cluster selector matches no provider.
	ReasonNoClusterSelected = "NoClusterSelected"
	// ReasonForbidden: the provider refused the object because it uses a
	// field or value the provider does not allow.
	ReasonForbidden = "Forbidden"
	// ReasonQuotaExceeded: the provider refused the object because the
	// consumer's quota would be exceeded.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonCreationFailed: the provider could not create the real object;
	// the message carries the API error.
	ReasonCreationFailed = "CreationFailed"
	// ReasonProviderUnschedulable: the provider's scheduler cannot place
	// the pod; the message carries the scheduler's message.
	ReasonProviderUnschedulable = "ProviderUnschedulable"
	// ReasonInvalidDirectConnections: entries of the direct-connections
	// annotation were rejected (details in the message and in Events).
	ReasonInvalidDirectConnections = "InvalidDirectConnections"
	// ReasonFenceArmed: every selected provider fences the namespace's pods.
	ReasonFenceArmed = "FenceArmed"
	// ReasonFenceNotArmed: a provider has not armed the fence (yet): its
	// pods are never released.
	ReasonFenceNotArmed = "FenceNotArmed"
	// ReasonFenceTooShort: the fence is shorter than three of this
	// cluster's heartbeat intervals; failover is off.
	ReasonFenceTooShort = "FenceTooShort"
)
