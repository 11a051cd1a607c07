package remote

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// statusSnapshot is what the status writer should make true about one
// ForeignCluster.
type statusSnapshot struct {
	conditions       []metav1.Condition
	lastProbe        time.Time // zero: nothing to report
	latency          time.Duration
	hasLatency       bool
	writtenProbeTime time.Time
}

// desiredConditionsLocked are the conditions the Manager owns for p, in a
// stable order. Empty while there is no verdict.
func (m *Manager) desiredConditionsLocked(p *peer) []metav1.Condition {
	var out []metav1.Condition
	if p.reach.Type != "" {
		out = append(out, p.reach)
	}
	if p.auth != nil && !p.permanent {
		out = append(out, *p.auth)
	}
	return out
}

// statusStaleLocked reports whether p's ForeignCluster status needs a write:
// a condition differs from what was last written, or lastProbeTime is older
// than Options.StatusRefresh (only once there is a verdict, and only when
// refreshes are on).
func (m *Manager) statusStaleLocked(p *peer) bool {
	if !slices.EqualFunc(m.desiredConditionsLocked(p), p.written, sameCondition) {
		return true
	}
	return m.opts.StatusRefresh > 0 && p.tracker.state != unknown && !p.permanent && !p.lastProbe.IsZero() &&
		p.lastProbe.Sub(p.writtenProbeTime) >= m.opts.StatusRefresh
}

func sameCondition(a, b metav1.Condition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

// enqueueStatusLocked queues a status write for p. Before Start it does
// nothing: Start queues every peer whose status is stale.
func (m *Manager) enqueueStatusLocked(p *peer) {
	if m.statusQueue != nil && !p.queued {
		p.queued = true
		m.statusQueue.Add(p.id)
	}
}

// processStatus writes the status of one queued peer; false once the queue
// is shut down.
func (m *Manager) processStatus(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string]) bool {
	id, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(id)
	if err := m.writeStatus(ctx, id); err != nil {
		if ctx.Err() == nil {
			m.log.Error(err, "Cannot write ForeignCluster status; will retry", "clusterID", id)
			queue.AddRateLimited(id)
		}
		return true
	}
	queue.Forget(id)
	return true
}

// writeStatus makes the ForeignCluster of clusterID show the peer's
// conditions, and refreshes lastProbeTime and probeLatency when a condition
// changed or (when refreshes are on) StatusRefresh has passed. It does not write at all when the
// object already says so, for example after an agent restart.
func (m *Manager) writeStatus(ctx context.Context, clusterID string) error {
	m.mu.Lock()
	p := m.peers[clusterID]
	m.mu.Unlock()
	if p == nil {
		return nil // removed
	}
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	m.mu.Lock()
	if m.peers[clusterID] != p {
		m.mu.Unlock()
		return nil // removed meanwhile
	}
	p.queued = false
	snap := statusSnapshot{
		conditions:       m.desiredConditionsLocked(p),
		lastProbe:        p.lastProbe,
		latency:          p.latency,
		hasLatency:       p.hasLatency,
		writtenProbeTime: p.writtenProbeTime,
	}
	if p.permanent {
		snap.lastProbe = time.Time{}
	}
	m.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, m.opts.CallTimeout)
	defer cancel()
	fc := &corev1alpha1.ForeignCluster{}
	if err := m.local.Get(ctx, client.ObjectKey{Name: clusterID}, fc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // the ForeignCluster is gone; Remove follows
		}
		return fmt.Errorf("get ForeignCluster: %w", err)
	}
	orig := fc.DeepCopy()

	now := metav1.NewTime(m.clock.Now())
	changed := false
	for _, c := range snap.conditions {
		c.LastTransitionTime = now // kept by SetStatusCondition unless the status changes
		if meta.SetStatusCondition(&fc.Status.Conditions, c) {
			changed = true
		}
	}

	probeTime := snap.writtenProbeTime
	if probeTime.IsZero() && fc.Status.LastProbeTime != nil {
		probeTime = fc.Status.LastProbeTime.Time // written before a restart
	}
	refresh := m.opts.StatusRefresh > 0 && !snap.lastProbe.IsZero() && snap.lastProbe.Sub(probeTime) >= m.opts.StatusRefresh
	if changed || refresh {
		if !snap.lastProbe.IsZero() {
			fc.Status.LastProbeTime = &metav1.Time{Time: snap.lastProbe}
			probeTime = snap.lastProbe
		}
		if snap.hasLatency {
			fc.Status.ProbeLatency = &metav1.Duration{Duration: snap.latency}
		}
		// The optimistic lock keeps conditions written by other controllers
		// (a merge patch replaces the whole list) and catches a stale cache.
		patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
		if err := m.local.Status().Patch(ctx, fc, patch); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("patch ForeignCluster status: %w", err)
		}
		m.log.V(1).Info("ForeignCluster status written", "clusterID", clusterID, "conditionsChanged", changed)
	}

	m.mu.Lock()
	if m.peers[clusterID] == p {
		p.written = snap.conditions
		p.writtenProbeTime = probeTime
		// The state may have moved on while writing.
		if m.statusStaleLocked(p) {
			m.enqueueStatusLocked(p)
		}
	}
	m.mu.Unlock()
	return nil
}
