package tenantquota

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Recount deletes quotas: the agent's ClusterRole must grant it.
// +kubebuilder:rbac:groups="",resources=resourcequotas,verbs=delete

// RecountAfter is the age from which a ResourceQuota the quota controller
// counted in part is created again (see Recount).
const RecountAfter = 5 * time.Second

// Counted reports whether the ResourceQuota q is counted: the quota
// controller has copied its limits to its status and recorded the usage of
// each (until then the API server refuses every object it counts).
func Counted(q *corev1.ResourceQuota) bool {
	for name, hard := range q.Spec.Hard {
		got, ok := q.Status.Hard[name]
		if _, used := q.Status.Used[name]; !ok || !used || got.Cmp(hard) != 0 {
			return false
		}
	}
	return true
}

// Recount deletes the ResourceQuota q (for its owner to create again) when
// the quota controller counted it in part, and returns how soon to look at
// it again when it may have to.
//
// The quota controller counts a kind only once it has discovered it (every
// 30 s): a quota written before, just after Annex's CRDs were installed, is
// left without the usage of ShadowPods or RemoteNamespaces until the
// controller's next full resync (5 minutes), and meanwhile the API server
// refuses every object of those kinds ("status unknown for quota"). A new
// quota is counted at once. So that a quota that cannot be counted yet is
// not written again and again, only one at least RecountAfter old is
// deleted; the namespace goes without it for that moment. (`annexctl
// install` waits for the quota controller to know Annex's kinds, so this
// is for clusters installed otherwise.)
func Recount(ctx context.Context, c client.Client, q *corev1.ResourceQuota, clk clock.PassiveClock) (time.Duration, error) {
	if Counted(q) || !apiequality.Semantic.DeepEqual(q.Spec.Hard, q.Status.Hard) {
		return 0, nil // counted, or not yet (just created or changed)
	}
	if wait := RecountAfter - clk.Since(q.CreationTimestamp.Time); wait > 0 {
		return wait, nil
	}
	var opts []client.DeleteOption
	if uid := q.UID; uid != "" {
		opts = append(opts, client.Preconditions{UID: &uid})
	}
	if err := c.Delete(ctx, q, opts...); err != nil && !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("delete ResourceQuota %s/%s counted in part: %w", q.Namespace, q.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Recreating a ResourceQuota the quota controller counted in part (it did not know every kind yet)",
		"namespace", q.Namespace, "name", q.Name, "uncounted", uncounted(q))
	return RecountAfter, nil
}

// uncounted lists the resources of q's spec whose usage q's status lacks.
func uncounted(q *corev1.ResourceQuota) []corev1.ResourceName {
	var out []corev1.ResourceName
	for name := range q.Spec.Hard {
		if _, ok := q.Status.Used[name]; !ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
