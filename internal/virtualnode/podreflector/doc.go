// Package podreflector owns the pods of one virtual node, alone (what a
// kubelet does for its pods; virtual-kubelet's pod controller is not used):
// it turns each local pod bound to the node into a ShadowPod on the
// provider, reflects the status of the pod the provider runs for it back
// into the local pod, carries out deletions, and handles the provider's
// failures.
//
// # How work flows
//
// A Reflector is level-based. Every trigger — an event of the node's pod
// informer, an event of a ShadowPod or pod informer on the provider, a
// reachability transition, a remote namespace becoming Ready — only queues
// the pod's key ("<namespace>/<name>") on two work queues:
//
//   - the remote queue (sync.go) makes the provider match the local pod:
//     create the ShadowPod, push label and annotation changes, delete it when
//     the local pod is deleted, replace a stale one (another origin UID),
//     delete orphans, finish the local deletion once the ShadowPod is gone,
//     and delete the local pod when its ShadowPod disappeared on the
//     provider;
//   - the status queue (status.go) writes the local pod's status (and the
//     annex.dev/remote-unavailable label) from the provider's pod (or, when
//     there is none, the ShadowPod's status: a refusal, or the final state
//     of a pod that is gone) and the provider's reachability, with
//     optimistic concurrency.
//
// The two queues are separate so that status writes, which only talk to the
// local API server, are never stuck behind a call to a hung provider. An
// event queues a pod only on the queues whose work it can change: a status
// change of a ShadowPod, of a provider's pod or of a local pod does not
// queue remote work, and
// the echo of the reflector's own status write queues nothing. The queues
// are named (StatusQueueName, RemoteQueueName), so client-go's work queue
// metrics show their adds, depth and latency on the agent's metrics
// endpoint.
//
// The Reflector computes every status from the reachability at write time
// and writes it with the resourceVersion it was computed from, so a status
// computed while the provider was reachable can never overwrite the
// NotReady marking written after it became unreachable. When the informer
// has not caught up with its own last write of a pod yet, it computes from
// the pod that write returned instead, so that its writes do not conflict
// with each other.
//
// # Writes per pod
//
// An offloaded pod costs one write here when all goes well: its status
// once the provider's pod runs (phase, IPs, Ready). Nothing is written
// while its ShadowPod is being created or while the provider's pod is only
// being scheduled and started (podstatus.Starting); the Offloaded condition
// comes with that first status. The provider writes nothing back either: the
// pod's status is read from the pod its kubelet wrote, not copied into the
// ShadowPod (issue #20). Only what needs saying earlier
// (the remote namespace is not ready, dependencies are missing, the
// provider refused the pod, its status is an error) is written earlier.
// One consequence: after a restart of the agent, a pod that never got a
// status is not known to have had a ShadowPod; if that ShadowPod was deleted
// on the provider meanwhile, its ShadowPod is created again instead of the
// local pod being deleted. A pod that did get one knows it by its
// Offloaded=True condition, which no status write takes back while the pod
// has no ShadowPod (only a pending creation or a lost remote namespace
// does). A remote namespace counts as lost only once the virtual node has
// set its offloaded namespaces (SetNamespaces): a virtual node starts its
// reflector first, and until then no namespace is known either way.
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
// annex.dev/remote-cluster-id=<this cluster>, and the provider's pods with
// another, label-selected on annex.dev/shadowpod and encoded in protobuf.
// Both caches are trimmed to what the reflector reads. A pod counts only
// while the ShadowPod of its name is its controller (same UID). The informers live in a
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
