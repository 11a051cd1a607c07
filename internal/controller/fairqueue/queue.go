// Package fairqueue keeps one tenant's work from stalling another's in the
// provider's controllers (issue #37, "Bounded work"). A consumer is an
// untrusted tenant of its provider: whatever it writes (ShadowPods,
// ShadowEndpointSlices, ResourceSlices, RemoteNamespaces, its heartbeat
// Lease) queues work in the provider's agent, and it may write as fast as the
// API server lets it. Two mechanisms bound that work per tenant:
//
//   - a fair work queue (NewQueue): a controller's queue keeps one FIFO per
//     tenant and its workers take from the tenants in turn (round robin), so
//     a key of tenant B waits behind at most one key of every other tenant
//     with work, never behind the thousands a flooding tenant A queued. It is
//     client-go's work queue (deduplication, a key never processed twice at
//     once, delayed and rate-limited adds, the workqueue_* metrics) with its
//     ordering (workqueue.Queue) replaced: with one tenant it is a FIFO, as
//     before, and it never leaves a worker idle while any tenant has work.
//     The tenant of a key is its namespace's (TenantOf; ForTenants builds
//     the queue of a provider controller);
//   - a per-tenant token bucket (Limiter) for the writes the agent makes
//     for a tenant to follow changes the tenant can repeat at will without
//     spending its quota: a pod's labels and annotations following its
//     ShadowPod's, an EndpointSlice following its ShadowEndpointSlice. A
//     tenant beyond its rate has its later writes wait for their turn (its
//     keys are requeued, not its workers held) and each then writes the
//     latest state at once: a thousand changes of one object make one
//     write when its turn comes.
//
// What the tenant creates is bounded elsewhere (ResourceQuota, the grant,
// admission policies on sizes); docs/security.md, "Bounded work", lists
// every loop a tenant can drive and what bounds it. Neither mechanism
// bounds the API server's own work for the tenant's writes (docs/bench.md,
// "Two tenants").
package fairqueue

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// FlowFunc names the flow a request belongs to: its tenant, or "" for
// everything that belongs to no tenant (the provider's own objects). It is
// called under the queue's lock, once for every item pushed: it must be
// quick and must not use the queue.
type FlowFunc func(reconcile.Request) string

// NewQueue returns a controller.Options.NewQueue that makes the
// controller's queue fair between the flows flowOf names: client-go's rate
// limiting work queue, named after the controller (so its workqueue_*
// metrics are the ones a default queue has), over a Queue that serves the
// flows in turn.
func NewQueue(flowOf FlowFunc) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		inner := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[reconcile.Request]{Name: name, Queue: New(flowOf)})
		delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[reconcile.Request]{Name: name, Queue: inner})
		return workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Name: name, DelayingQueue: delaying})
	}
}

// ForTenants returns the NewQueue of a provider controller whose keys
// belong to tenants: NewQueue over TenantOf the manager's cache. It adds a
// Namespace informer to that cache (if it has none) before the manager
// starts, so that the informer has synced before the controller takes its
// first key, and TenantOf, called under the queue's lock, never waits for
// one.
func ForTenants(mgr manager.Manager) (func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request], error) {
	if _, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Namespace{}); err != nil {
		return nil, fmt.Errorf("watch namespaces for the tenants of keys: %w", err)
	}
	return NewQueue(TenantOf(mgr.GetCache())), nil
}

// Queue is the order of a work queue's items (client-go's workqueue.Queue):
// one FIFO per flow, the flows served in turn. Pop takes the oldest item of
// the flow whose turn it is, and that flow, if it still has items, goes to
// the back of the line; a flow that gets its first item joins the back.
// With a single flow it is a FIFO. client-go calls it under its own lock
// only, with each item at most once in it (it deduplicates).
type Queue struct {
	flowOf FlowFunc
	flows  map[string]*fifo
	// turns are the flows with items, the one whose turn it is first.
	turns []string
	n     int
}

// New returns an empty Queue whose flows flowOf names.
func New(flowOf FlowFunc) *Queue {
	return &Queue{flowOf: flowOf, flows: map[string]*fifo{}}
}

// Touch does nothing: an item added again keeps its place.
func (q *Queue) Touch(reconcile.Request) {}

// Push adds item at the back of its flow.
func (q *Queue) Push(item reconcile.Request) {
	name := q.flowOf(item)
	f, ok := q.flows[name]
	if !ok {
		f = &fifo{}
		q.flows[name] = f
		q.turns = append(q.turns, name)
	}
	f.items = append(f.items, item)
	q.n++
}

// Len is the number of items.
func (q *Queue) Len() int { return q.n }

// Pop takes the next item: the oldest of the flow whose turn it is. It must
// not be called on an empty Queue (client-go never does).
func (q *Queue) Pop() reconcile.Request {
	name := q.turns[0]
	q.turns[0] = ""
	q.turns = q.turns[1:]
	f := q.flows[name]
	item := f.items[0]
	f.items[0] = reconcile.Request{}
	f.items = f.items[1:]
	if len(f.items) > 0 {
		q.turns = append(q.turns, name)
	} else {
		delete(q.flows, name)
	}
	q.n--
	return item
}

// fifo is one flow's items, oldest first.
type fifo struct {
	items []reconcile.Request
}

// TenantOf returns the FlowFunc of the provider's controllers: a request's
// flow is the consumer its namespace belongs to. That is C for the tenant
// namespace annex-tenant-<C> (ResourceSlices, RemoteNamespaces, the
// heartbeat Lease) and for a namespace Annex manages for C (labelled
// annex.dev/managed-by=annex and annex.dev/remote-cluster-id=<C>: its remote
// namespaces, with the ShadowPods, ShadowEndpointSlices and pods in them),
// read from r, which should be the manager's cache with a synced Namespace
// informer (a map lookup; see ForTenants). Everything else is flow "": the
// provider's own work, and cluster-scoped keys.
func TenantOf(r client.Reader) FlowFunc {
	return func(req reconcile.Request) string {
		if req.Namespace == "" {
			return ""
		}
		if c, ok := strings.CutPrefix(req.Namespace, corev1alpha1.TenantNamespacePrefix); ok {
			return c
		}
		ns := &corev1.Namespace{}
		if err := r.Get(context.Background(), client.ObjectKey{Name: req.Namespace}, ns); err != nil {
			return ""
		}
		return consumerOf(ns)
	}
}

// consumerOf is the consumer that ns belongs to, "" when Annex does not
// manage it for one.
func consumerOf(ns *corev1.Namespace) string {
	if ns.Labels[corev1alpha1.LabelManagedBy] != corev1alpha1.ManagedByAnnex {
		return ""
	}
	return ns.Labels[corev1alpha1.LabelRemoteClusterID]
}
