package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// heartbeatFromTheFuture: the tenant writes on its heartbeat Lease a
// renewTime a year ahead, a leaseDurationSeconds of ten years, another
// cluster's holderIdentity and annotations asking for no fence and more
// grace. The provider's agent must say that it judges the Lease on its own
// clock (Warning Event HeartbeatRenewTimeAhead about the Lease, in the
// tenant namespace) within 30 s. What follows from it — the tenant removed
// --tenant-grace-period after the provider last heard it, the fence falling
// F after that — takes longer than this test may wait and is covered by
// the unit tests named in docs/security.md. The consumer's agent renews the
// Lease every 10 s and so overwrites the renewTime: each try writes a new
// one, until the Event is there. The Lease is put back as it was.
func heartbeatFromTheFuture(ctx context.Context, tenant, admin client.Client, tenantNS string) error {
	key := client.ObjectKey{Namespace: tenantNS, Name: corev1alpha1.HeartbeatLeaseName}
	orig := &coordinationv1.Lease{}
	if err := tenant.Get(ctx, key, orig); err != nil {
		return fmt.Errorf("the tenant's own heartbeat: %w", err)
	}
	start := time.Now()
	defer func() {
		// Back as it was (renewTime: now, as the consumer would write it).
		back := map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{"annex.dev/fence": nil, "annex.dev/grace-period": nil}},
			"spec": map[string]any{"renewTime": metav1.NewMicroTime(time.Now()), "holderIdentity": orig.Spec.HolderIdentity,
				"leaseDurationSeconds": orig.Spec.LeaseDurationSeconds, "acquireTime": orig.Spec.AcquireTime}}
		raw, _ := json.Marshal(back)
		_ = tenant.Patch(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: key.Name}},
			client.RawPatch("application/merge-patch+json", raw))
	}()
	year := 365 * 24 * time.Hour
	var lastErr error
	for try := 0; time.Since(start) < 30*time.Second; try++ {
		attack := map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{"annex.dev/fence": "off", "annex.dev/grace-period": "87600h"}},
			"spec": map[string]any{
				"renewTime":            metav1.NewMicroTime(time.Now().Add(year + time.Duration(try)*time.Second)),
				"acquireTime":          metav1.NewMicroTime(time.Now().Add(year)),
				"leaseDurationSeconds": int32(10 * 365 * 24 * 3600),
				"holderIdentity":       "someone-else",
			}}
		raw, _ := json.Marshal(attack)
		if err := tenant.Patch(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: key.Name}},
			client.RawPatch("application/merge-patch+json", raw)); err != nil {
			if refused(err, "") == nil {
				return nil // refused at the door
			}
			return fmt.Errorf("the tenant could not write its own heartbeat: %w", err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if lastErr = renewTimeAheadEvent(ctx, admin, tenantNS, start); lastErr == nil {
				return nil
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return fmt.Errorf("the provider did not say it judges the heartbeat on its own clock: %w", lastErr)
}

// renewTimeAheadEvent finds, in the tenant namespace, the provider's
// Warning Event HeartbeatRenewTimeAhead about the heartbeat Lease, made
// since start.
func renewTimeAheadEvent(ctx context.Context, admin client.Client, tenantNS string, since time.Time) error {
	evs := &eventsv1.EventList{}
	if err := admin.List(ctx, evs, client.InNamespace(tenantNS)); err != nil {
		return err
	}
	for _, e := range evs.Items {
		when := e.EventTime.Time
		if e.Series != nil {
			when = e.Series.LastObservedTime.Time
		}
		if e.Reason == "HeartbeatRenewTimeAhead" && e.Type == "Warning" && e.Regarding.Kind == "Lease" &&
			e.Regarding.Name == corev1alpha1.HeartbeatLeaseName && !when.Before(since.Add(-time.Second)) {
			if !strings.Contains(e.Note, "by its own clock") {
				return fmt.Errorf("HeartbeatRenewTimeAhead Event does not say the provider's clock counts: %q", e.Note)
			}
			return nil
		}
	}
	return errors.New("no HeartbeatRenewTimeAhead Event about the heartbeat Lease")
}
