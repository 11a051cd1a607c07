package install

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
)

// quotaProbeName is the ResourceQuota in the agent's namespace with which
// install finds out whether the cluster's quota controller counts Annex's
// kinds yet. Its limits are far above anything stored there, and it is
// deleted again.
const quotaProbeName = "annex-quota-probe"

// countedKinds are the quota resources of the kinds a tenant writes that
// the agent's ResourceQuotas count (remotenamespace.DefaultObjectQuota and
// DefaultTenantObjectQuota).
func countedKinds() []corev1.ResourceName {
	off, core := offloadingv1alpha1.GroupVersion.Group, corev1alpha1.GroupVersion.Group
	return []corev1.ResourceName{
		corev1.ResourceName("count/shadowpods." + off),
		corev1.ResourceName("count/shadowendpointslices." + off),
		corev1.ResourceName("count/remotenamespaces." + off),
		corev1.ResourceName("count/resourceslices." + core),
	}
}

// Timing of waitQuotaCounts: how long one probe may take to be counted
// before it is written again, and how long install waits in all.
const (
	quotaProbeCountTimeout = 3 * time.Second
	quotaProbeTimeout      = 90 * time.Second
)

// waitQuotaCounts waits until the cluster's quota controller counts
// Annex's custom kinds, and returns how long that took. The controller
// learns of new kinds only every 30 s, and a quota written before it has
// is refused every object of those kinds until the controller's full
// resync (5 minutes by default): the agent's first remote namespace after
// an install would wait that long for its quota. A quota written after is
// counted at once, so install writes a probe until one is counted.
func waitQuotaCounts(ctx context.Context, c client.Client) (time.Duration, error) {
	start := time.Now()
	hard := corev1.ResourceList{}
	for _, name := range countedKinds() {
		hard[name] = resource.MustParse("1000000")
	}
	key := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: quotaProbeName}
	remove := func() error {
		err := c.Delete(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete ResourceQuota %s: %w", key, err)
		}
		return nil
	}
	defer func() { _ = remove() }()
	for {
		if err := remove(); err != nil {
			return 0, err
		}
		probe := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}},
			Spec: corev1.ResourceQuotaSpec{Hard: hard}}
		if err := c.Create(ctx, probe); err != nil {
			return 0, fmt.Errorf("create ResourceQuota %s: %w", key, err)
		}
		err := cli.Poll(ctx, 200*time.Millisecond, quotaProbeCountTimeout, "the quota controller to count "+key.String(), func(ctx context.Context) (bool, error) {
			q := &corev1.ResourceQuota{}
			if err := c.Get(ctx, key, q); err != nil {
				return false, err
			}
			return counted(q), nil
		})
		switch {
		case err == nil:
			return time.Since(start), nil
		case ctx.Err() != nil:
			return 0, ctx.Err()
		case time.Since(start) > quotaProbeTimeout:
			return 0, fmt.Errorf("the cluster's quota controller did not count Annex's kinds (%v) within %s: is kube-controller-manager running with its resourcequota controller? (%w)",
				countedKinds(), quotaProbeTimeout, err)
		}
	}
}

// counted reports whether the quota controller has counted every resource
// of q.
func counted(q *corev1.ResourceQuota) bool {
	for name := range q.Spec.Hard {
		if _, ok := q.Status.Used[name]; !ok {
			return false
		}
	}
	return true
}
