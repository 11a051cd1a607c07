// Package podreflector owns the pods of one virtual node: it is the
// virtual-kubelet provider (node.PodLifecycleHandler) that turns each local
// pod bound to the node into a ShadowPod on the provider, reflects the
// ShadowPod's status back into the local pod, and handles the provider's
// failures.
//
// # How work flows
//
// A Reflector is level-based. Every trigger — virtual-kubelet's
// CreatePod/UpdatePod/DeletePod, an event of the node's pod informer, an
// event of a ShadowPod informer on the provider, a reachability transition,
// a remote namespace becoming Ready — only queues the pod's key
// ("<namespace>/<name>") on two work queues:
//
//   - the remote queue (sync.go) makes the provider match the local pod:
//     create the ShadowPod, push label and annotation changes, delete it when
//     the local pod is deleted, replace a stale one (another origin UID),
//     delete orphans, finish the local deletion once the ShadowPod is gone,
//     and delete the local pod when its ShadowPod disappeared on the
//     provider;
//   - the status queue (status.go) writes the local pod's status (and the
//     annex.dev/remote-unavailable label) from the ShadowPod's status and the
//     provider's reachability, with optimistic concurrency.
//
// The two queues are separate so that status writes, which only talk to the
// local API server, are never stuck behind a call to a hung provider.
//
// The Reflector writes pod status itself instead of handing pods to
// virtual-kubelet's NotifyPods callback: virtual-kubelet writes whatever pod
// it was handed, labels included, long after it was computed, so a status
// computed while the provider was reachable could overwrite the NotReady
// marking written after it became unreachable. The Reflector computes every
// status from the reachability at write time and writes it with the
// resourceVersion it was computed from.
//
// # Distrust of the provider
//
// A provider runs the pod; it decides nothing else here. Its status is
// checked and bounded before it reaches the local pod (statuscheck.go): pod
// IPs only inside its pod CIDR in this cluster's view, only the kubelet's
// conditions, container statuses only of the spec's containers, bounded
// strings and times. What is refused is reported as a Warning Event on the
// pod, once per distinct problem. The only change made to an existing
// ShadowPod is a patch of its podLabels and podAnnotations; one the
// provider refuses as invalid is not sent again.
//
// # The provider's view
//
// ShadowPods are watched with one client-go informer per remote namespace
// (the consumer's credentials are namespaced: it may list and watch only
// inside its tenant and remote namespaces), label-selected on
// annex.dev/remote-cluster-id=<this cluster>. The informers live in a
// session that exists only while the provider is reachable: a reachability
// transition to unreachable ends the session (and cancels every remote call
// in flight), a transition back starts a fresh one whose initial lists are
// the "remote truth" every pod is reconciled against.
//
// # Provider failure
//
// See unreachable.go: while the provider is unreachable every local pod on
// the node is Ready=False, ContainersReady=False and labelled
// annex.dev/remote-unavailable=true; remote operations are skipped and
// deletions postponed; recovery re-lists and reconciles every pod.
package podreflector
