package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// The benchmark observes what it measures through watches (informers), so
// that each change is stamped when it reaches the benchmark, without
// polling large lists.

// broadcast wakes every waiter: waiters take the current channel, which is
// closed (and replaced) on every change.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *broadcast) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *broadcast) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// waitFor blocks until cond (checked after every change) holds, ctx ends or
// timeout passes; state describes what was last seen.
func waitFor(ctx context.Context, s *broadcast, timeout time.Duration, what string, cond func() (ok bool, state string)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ch := s.wait()
		ok, state := cond()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%s: not reached after %s (%s)", what, timeout, state)
		}
	}
}

// runInformer runs an informer over resource in ns (with a label selector)
// until ctx ends, and returns once it has synced.
func runInformer(ctx context.Context, getter cache.Getter, resource, ns, selector string, obj runtime.Object, h cache.ResourceEventHandlerFuncs) error {
	lw := cache.NewFilteredListWatchFromClient(getter, resource, ns, func(o *metav1.ListOptions) { o.LabelSelector = selector })
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: obj, Handler: h})
	go ctrl.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		return fmt.Errorf("watch %s in %s: %w", resource, ns, ctx.Err())
	}
	return nil
}

// podWatch records when each pod of a selection was first seen Ready.
type podWatch struct {
	broadcast
	mu    sync.Mutex
	ready map[types.UID]time.Time
	seen  map[types.UID]bool
	// node, when set, is the only node whose pods count as Ready;
	// elsewhere are the pods bound to another one, by node.
	node      string
	elsewhere map[types.UID]string
}

// watchPods starts a podWatch over the pods of ns matching selector; it
// stops with ctx.
func watchPods(ctx context.Context, k *kube, ns, selector string) (*podWatch, error) {
	return watchPodsOn(ctx, k, ns, selector, "")
}

// watchPodsOn is watchPods counting only the pods on node as Ready (any
// node when empty).
func watchPodsOn(ctx context.Context, k *kube, ns, selector, node string) (*podWatch, error) {
	w := &podWatch{ready: map[types.UID]time.Time{}, seen: map[types.UID]bool{}, node: node, elsewhere: map[types.UID]string{}}
	observe := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		w.seen[p.UID] = true
		if w.node != "" && p.Spec.NodeName != "" && p.Spec.NodeName != w.node {
			w.elsewhere[p.UID] = p.Spec.NodeName
		} else if _, done := w.ready[p.UID]; !done && p.DeletionTimestamp == nil && podReady(p) {
			w.ready[p.UID] = now
		}
		w.mu.Unlock()
		w.fire()
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, obj any) { observe(obj) }}
	if err := runInformer(ctx, k.cs.CoreV1().RESTClient(), "pods", ns, selector, &corev1.Pod{}, h); err != nil {
		return nil, err
	}
	return w, nil
}

// waitReady waits until n pods were seen Ready and returns when the first
// and the n-th were.
func (w *podWatch) waitReady(ctx context.Context, n int, timeout time.Duration) (first, last time.Time, err error) {
	err = waitFor(ctx, &w.broadcast, timeout, fmt.Sprintf("%d pods Ready", n), func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.ready) < n {
			state := fmt.Sprintf("%d pods seen, %d Ready", len(w.seen), len(w.ready))
			if len(w.elsewhere) > 0 {
				state += fmt.Sprintf(", %d bound to a node other than %s", len(w.elsewhere), w.node)
			}
			return false, state
		}
		for _, t := range w.ready {
			if first.IsZero() || t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
		return true, ""
	})
	return first, last, err
}

// nthReady is when the n-th pod (counting from 1) was seen Ready; zero
// when fewer were.
func (w *podWatch) nthReady(n int) time.Time {
	w.mu.Lock()
	times := make([]time.Time, 0, len(w.ready))
	for _, t := range w.ready {
		times = append(times, t)
	}
	w.mu.Unlock()
	if n < 1 || n > len(times) {
		return time.Time{}
	}
	slices.SortFunc(times, time.Time.Compare)
	return times[n-1]
}

// endpointWatch follows how many endpoints of a Service's EndpointSlices
// are ready, with the time of every change.
type endpointWatch struct {
	broadcast
	mu      sync.Mutex
	slices  map[string]int // ready endpoints per slice
	history []endpointCount
}

type endpointCount struct {
	at    time.Time
	ready int
}

// watchEndpoints starts an endpointWatch over Service svc in ns.
func watchEndpoints(ctx context.Context, k *kube, ns, svc string) (*endpointWatch, error) {
	w := &endpointWatch{slices: map[string]int{}}
	update := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		now := time.Now()
		n := 0
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				n++
			}
		}
		w.mu.Lock()
		if deleted {
			delete(w.slices, s.Name)
		} else {
			w.slices[s.Name] = n
		}
		total := 0
		for _, c := range w.slices {
			total += c
		}
		if len(w.history) == 0 || w.history[len(w.history)-1].ready != total {
			w.history = append(w.history, endpointCount{at: now, ready: total})
		}
		w.mu.Unlock()
		w.fire()
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { update(obj, false) },
		UpdateFunc: func(_, obj any) { update(obj, false) },
		DeleteFunc: func(obj any) { update(obj, true) },
	}
	if err := runInformer(ctx, k.cs.DiscoveryV1().RESTClient(), "endpointslices", ns, discoveryv1.LabelServiceName+"="+svc, &discoveryv1.EndpointSlice{}, h); err != nil {
		return nil, err
	}
	return w, nil
}

// waitCount waits until the ready count is want and returns when it first
// was, at or after since.
func (w *endpointWatch) waitCount(ctx context.Context, since time.Time, want int, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := waitFor(ctx, &w.broadcast, timeout, fmt.Sprintf("%d ready endpoints", want), func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.history) == 0 || w.history[len(w.history)-1].ready != want {
			cur := 0
			if len(w.history) > 0 {
				cur = w.history[len(w.history)-1].ready
			}
			return false, fmt.Sprintf("%d ready", cur)
		}
		// History only records changes: the last entry is when the count
		// became want.
		at = w.history[len(w.history)-1].at
		if at.Before(since) {
			at = since
		}
		return true, ""
	})
	return at, err
}
