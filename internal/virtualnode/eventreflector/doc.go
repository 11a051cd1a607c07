// Package eventreflector owns the Events that come home: it reflects the
// provider-side Events of a virtual node's offloaded pods onto the local
// pods, so that `kubectl describe pod` on the consumer shows why the
// provider refused, could not schedule or keeps restarting a pod. It writes
// nothing else; the pods themselves belong to podreflector.
//
// # What is reflected
//
// An Event in one of the node's remote namespaces on the provider is
// reflected when it is about a Pod (core group) or a ShadowPod
// (offloading.annex.dev: the provider's checks record refusals there), its
// type is Normal or Warning, and the object maps to a local pod: same name
// in the mapped local namespace, bound to this virtual node, and the
// ShadowPod of that name carries the local pod's UID (annotation
// annex.dev/origin-uid, read from podreflector's informers). Everything else
// is dropped, and so is the provider scheduler's Normal Scheduled Event of
// a pod: the local scheduler recorded the pod's own (bound to the virtual
// node), and which provider node took it is the provider's business. Of a
// pod that starts normally, what comes home is what a kubelet records
// (Pulled, Created, Started: the Events a local pod gets too), so Annex
// adds no Event write of its own to an offloaded pod's way. The local Event keeps the provider's type and reason (a
// reason must be a short word, at most 128 characters); its message is
// "<provider>: " then the provider's message, valid UTF-8 without control
// characters, cut to 1 KiB; its source component is
// "annex-<provider>", its source host the virtual node.
//
// # Bounded
//
// Local Events are written through client-go's EventBroadcaster, whose
// EventCorrelator is configured explicitly: its spam filter lets 25 Events
// through per local pod, source and type, then one every 5 minutes
// (SpamBurst, SpamQPS); a repeat of the same Event patches its count
// instead of creating another; its caches hold 4096 entries. Its
// aggregation merges only repeats of one provider Event (aggregateKey), so
// each local Event keeps the annotations of the provider Event it reflects.
// The provider's informers do not receive the Scheduled Events at all (a
// field selector, reason!=Scheduled: the provider keeps them for an hour,
// one per pod), keep the other Events trimmed (no managed fields, labels,
// annotations or related object; message cut to 1 KiB), and of an Event
// that is never reflected (Reflectable) only its name. The state of what
// was reflected is kept per local pod and forgotten when the pod is deleted
// or the provider Event is.
//
// # Never written while nothing changes
//
// A provider Event is reflected when it is new or its count or last time
// advanced (count and lastTimestamp, or the series of an events.k8s.io
// Event). Each local Event carries annotations with the provider Event's
// UID, count and last time (annex.dev/provider-event-uid, -count,
// -last-timestamp); a repeat patched by the correlator updates them too
// (annotatingSink). Before the first session processes anything, the
// reflector lists the local Events with field selector
// source=annex-<provider> (and its node as source host) and takes what was
// reflected from their annotations: a restart of the agent, or a new
// session after the provider was unreachable, re-lists the provider's
// Events and writes none of those already reflected. An Event the spam
// filter dropped is not written again in the same process; after a restart
// it may be, once, within the filter's limits.
//
// One limit: the provider's Events about a pod that was deleted and created
// again under the same name (a StatefulSet's) stay on the provider for its
// Event TTL and map to the new local pod once its ShadowPod exists; they
// are not told apart from the new pod's.
//
// # Sessions
//
// Like podreflector, the provider's Events are watched with one informer
// per remote namespace in a session that exists only while the provider is
// reachable; unreachability ends it and cancels every call. Each list (of
// the provider, and of the local Events) is bounded by a timeout
// (DefaultRemoteTimeout). One named work queue (QueueName) carries the
// Events to reflect; its metrics are client-go's work queue metrics. An
// Event whose pod's ShadowPod is not listed yet is retried with backoff
// (at most every 30 s) until it is, or until the Event or the session is
// gone.
package eventreflector
