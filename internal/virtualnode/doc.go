// Package virtualnode owns the consumer side of offloading: one in-process
// virtual-kubelet node per VirtualNode, hosted by the agent's leader.
//
// The Reconciler starts a virtual node for each VirtualNode (holding the
// finalizer annex.dev/virtual-node so its Node never outlives it), keeps it
// in step with the VirtualNode's spec (capacity, labels, taints), the
// provider's ForeignCluster (spec.unreachable, existence), the providers'
// reachability (internal/remote: OnTransition for the fast path, Subscribe
// for the VirtualNode's status) and the NamespaceOffloadings whose remote
// namespace on the provider is Ready. When the VirtualNode is deleted it
// stops the node, deletes the Node and its Lease, and releases the
// finalizer.
//
// A virtual node is made of:
//
//   - virtual-kubelet's node.NodeController: registers Node
//     "annex-<provider>" (labels type=virtual-node,
//     annex.dev/remote-cluster-id, kubernetes.io/hostname, kubernetes.io/os
//     and spec.labels; taint annex.dev/virtual-node=<provider>:NoSchedule
//     and spec.taints; capacity and allocatable from spec.resources, each
//     capped to what the consumer's ResourceSlices for the provider in the
//     VirtualNode's namespace requested and the provider granted
//     (internal/grant; Warning Event ProviderGrantRefused on a slice whose
//     grant is cut or ignored); the
//     InternalIP of Options.NodeIP, and no Hostname address, which the API
//     server would prefer to reach the kubelet endpoint; the daemon endpoint
//     port Options.KubeletPort), renews its Lease and writes its status.
//     Ready follows the provider's reachability (Ready=False, reason
//     ProviderUnreachable, while it is unreachable). The node controller
//     only writes status and metadata, so the taints are kept in step by the
//     virtual node itself (annotation annex.dev/applied-taints records which
//     taints are its own);
//   - the podreflector package's Reflector, which owns the node's pods alone
//     (ShadowPods, status reflection, deletions, provider failure).
//     virtual-kubelet's node.PodController is not used: it watched the same
//     pods to call the reflector, which queues them from the informer
//     itself, and compared every pod event deeply (go-cmp) to decide — 19%
//     of the consumer agent's CPU during a burst;
//   - a subscription to the agent's pod informer (controller-runtime's
//     cache, which holds every pod of the cluster for the agent's other
//     controllers anyway), filtered on spec.nodeName and read through an
//     index on it (nodepods.go). Per-node informers, field-selected on
//     spec.nodeName, were a second copy of every offloaded pod. The cache
//     keeps podstatus.StatusSpec of a pod's spec; the reflector reads a pod
//     whole when it creates its ShadowPod. virtual-kubelet's nodeutil is
//     not used: it would start cluster-wide ConfigMap, Secret and Service
//     informers per node.
//
// The kubelet HTTP endpoint (kubectl logs and exec) is not served here but
// by the kubeletserver package: one HTTPS server for every virtual node of
// the agent, on Options.NodeIP and Options.KubeletPort, which each Node
// advertises in status.daemonEndpoints (0: no endpoint).
package virtualnode
