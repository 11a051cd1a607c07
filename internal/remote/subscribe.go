package remote

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/event"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// subscriberBuffer is the capacity of a Subscribe channel.
const subscriberBuffer = 64

// subscriber receives the IDs of peers whose reachability changed. Pending
// IDs are coalesced (one per peer) and delivered by a goroutine of its own,
// so a slow subscriber never blocks a prober and never misses the latest
// change of a peer: it may only miss intermediate ones, which level-based
// consumers do not need.
type subscriber struct {
	// Exactly one of ch and fn is set.
	ch chan event.TypedGenericEvent[*corev1alpha1.ForeignCluster]
	fn func(clusterID string, reachable bool)

	wake    chan struct{} // capacity 1
	pending []string      // guarded by Manager.mu
	queued  map[string]bool
}

// Subscribe returns a channel that receives an event whose object is named
// after a peer's cluster ID each time the peer's reachability changes: it
// becomes reachable, unreachable, is marked permanently unreachable, or is
// removed while reachable. Use it with source.Channel. Events are delivered
// from Start on and are coalesced per peer if the receiver falls behind.
func (m *Manager) Subscribe() <-chan event.TypedGenericEvent[*corev1alpha1.ForeignCluster] {
	s := &subscriber{ch: make(chan event.TypedGenericEvent[*corev1alpha1.ForeignCluster], subscriberBuffer)}
	m.addSubscriber(s)
	return s.ch
}

// OnTransition registers fn to be called, from a goroutine of the Manager,
// whenever a peer's reachability changes (see Subscribe) with the state at
// the time of the call. Calls are sequential; a slow fn delays only later
// calls of fn.
func (m *Manager) OnTransition(fn func(clusterID string, reachable bool)) {
	m.addSubscriber(&subscriber{fn: fn})
}

func (m *Manager) addSubscriber(s *subscriber) {
	s.wake = make(chan struct{}, 1)
	s.queued = map[string]bool{}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.subs = append(m.subs, s)
	m.startSubscriberLocked(s)
}

func (m *Manager) startSubscriberLocked(s *subscriber) {
	if m.ctx == nil || m.stopped {
		return
	}
	ctx := m.ctx
	m.wg.Go(func() { m.runSubscriber(ctx, s) })
}

// notify queues clusterID for every subscriber without blocking.
func (m *Manager) notify(clusterID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.subs {
		if !s.queued[clusterID] {
			s.queued[clusterID] = true
			s.pending = append(s.pending, clusterID)
		}
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (m *Manager) runSubscriber(ctx context.Context, s *subscriber) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		for {
			m.mu.Lock()
			if len(s.pending) == 0 {
				m.mu.Unlock()
				break
			}
			id := s.pending[0]
			s.pending = s.pending[1:]
			delete(s.queued, id)
			m.mu.Unlock()

			if s.fn != nil {
				s.fn(id, m.Reachable(id))
				continue
			}
			select {
			case s.ch <- eventFor(id):
			case <-ctx.Done():
				return
			}
		}
	}
}
