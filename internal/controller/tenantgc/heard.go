package tenantgc

import (
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// AheadTolerance is how far ahead of this provider's clock a consumer's
// renewTime may be, when first seen, before it is reported (Warning Event
// HeartbeatRenewTimeAhead). It is never believed either way: a renewal
// counts at most from when this agent saw it. Two minutes is the bound the
// consumer applies to the times its providers report (docs/security.md).
const AheadTolerance = 2 * time.Minute

// keptRenewals is how many renewals of one Lease Heard remembers: a cache
// that lags the API server shows an older one again, which must keep the
// instant it was first seen, not count as heard anew.
const keptRenewals = 4

// Heard is this provider's own record of when it heard each consumer's
// heartbeat Lease, on its own clock; tenantgc and fencing share one and
// judge liveness only through it. Everything on the Lease is written by the
// tenant, so only its renewTime is read (its creation time, which the API
// server sets, when it was never renewed), and a renewal counts at most from
// the instant this agent first saw it: a renewTime in the future is never
// believed, whatever its size. holderIdentity, acquireTime,
// leaseDurationSeconds, leaseTransitions and labels are never read (the
// grace period is --tenant-grace-period, the fence the RemoteNamespace's
// fenceAfterSeconds bounded by the CRD; see fencing).
//
// It lives in memory: after a restart of the agent the first sight of each
// renewal is the restart, which never helps a consumer whose renewTime is
// in the past (the renewTime counts, earlier) and bounds one whose renewTime
// is in the future to the restart.
type Heard struct {
	clock clock.PassiveClock

	mu     sync.Mutex
	leases map[types.NamespacedName]*heardLease
}

// NewHeard returns an empty record read on clk.
func NewHeard(clk clock.PassiveClock) *Heard {
	return &Heard{clock: clk, leases: map[types.NamespacedName]*heardLease{}}
}

type renewal struct {
	claimed time.Time // the renewTime the consumer wrote (creation if none)
	seen    time.Time // when this agent first saw it, on its clock
}

// last is when the renewal says the consumer was heard: what it claims,
// never later than when it was seen.
func (r renewal) last() time.Time {
	if r.seen.Before(r.claimed) {
		return r.seen
	}
	return r.claimed
}

type heardLease struct {
	uid      types.UID
	renewals []renewal // oldest first; the newest is the last seen
	// missingSince is when this agent first found no Lease, while it had
	// never seen one (zero otherwise).
	missingSince time.Time
	// reported: a renewal ahead of this clock by more than AheadTolerance
	// was reported, and none within it has been seen since.
	reported bool
}

// Observation is what Heard makes of one read of a heartbeat Lease.
type Observation struct {
	// Last is when the consumer was last heard, on this provider's clock:
	// the renewTime it wrote, never later than when this agent first saw
	// that renewal.
	Last time.Time
	// Ahead is how far the renewTime was ahead of this clock when first
	// seen (0 when it was not).
	Ahead time.Duration
}

// Observe records lease as seen now, unless its renewal was already seen,
// and says when its consumer was last heard.
func (h *Heard) Observe(lease *coordinationv1.Lease) Observation {
	claimed := lease.CreationTimestamp.Time
	if lease.Spec.RenewTime != nil {
		claimed = lease.Spec.RenewTime.Time
	}
	now := h.clock.Now()
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.leases == nil {
		h.leases = map[types.NamespacedName]*heardLease{}
	}
	hl := h.leases[key]
	if hl == nil || hl.uid != lease.UID {
		hl = &heardLease{uid: lease.UID}
		h.leases[key] = hl
	}
	var r *renewal
	for i := range hl.renewals {
		if hl.renewals[i].claimed.Equal(claimed) {
			r = &hl.renewals[i]
		}
	}
	if r == nil {
		hl.renewals = append(hl.renewals, renewal{claimed: claimed, seen: now})
		if len(hl.renewals) > keptRenewals {
			hl.renewals = append([]renewal(nil), hl.renewals[len(hl.renewals)-keptRenewals:]...)
		}
		r = &hl.renewals[len(hl.renewals)-1]
		if r.claimed.Sub(r.seen) <= AheadTolerance {
			hl.reported = false
		}
	}
	return Observation{Last: r.last(), Ahead: max(r.claimed.Sub(r.seen), 0)}
}

// Missing says since when the consumer of the Lease key, which is not
// there, was last heard: its last renewal this agent saw (the tenant may
// delete its own Lease: that silences it, it does not end the count), or,
// when this agent never saw one, when it first found none.
func (h *Heard) Missing(key types.NamespacedName) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.leases == nil {
		h.leases = map[types.NamespacedName]*heardLease{}
	}
	hl := h.leases[key]
	if hl == nil {
		hl = &heardLease{}
		h.leases[key] = hl
	}
	if n := len(hl.renewals); n > 0 {
		return hl.renewals[n-1].last()
	}
	if hl.missingSince.IsZero() {
		hl.missingSince = h.clock.Now()
	}
	return hl.missingSince
}

// report says whether lease's renewal, ahead of this clock by more than
// AheadTolerance when first seen, is to be reported: once until a renewal
// within the tolerance is seen.
func (h *Heard) report(lease *coordinationv1.Lease) (Observation, bool) {
	o := h.Observe(lease)
	if o.Ahead <= AheadTolerance {
		return o, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	hl := h.leases[types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}]
	if hl == nil || hl.reported {
		return o, false
	}
	hl.reported = true
	return o, true
}

// Forget drops what is known of the heartbeats in namespace ns (its tenant
// was removed).
func (h *Heard) Forget(ns string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.leases {
		if k.Namespace == ns {
			delete(h.leases, k)
		}
	}
}
