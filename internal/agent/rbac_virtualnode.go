package agent

// RBAC of internal/virtualnode. Its markers live here because controller-gen
// v0.23 silently skips that package (it loads virtual-kubelet).
//
// +kubebuilder:rbac:groups=core.annex.dev,resources=virtualnodes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=core.annex.dev,resources=virtualnodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=core.annex.dev,resources=virtualnodes/finalizers,verbs=update
// +kubebuilder:rbac:groups=core.annex.dev,resources=foreignclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=namespaceoffloadings,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update;delete,namespace=kube-node-lease
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
