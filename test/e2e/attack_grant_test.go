package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/shadowpod"
	"github.com/annexhq/annex/internal/podstatus"
)

// The grant attacks run while the consumer's own agent is stopped: a
// hostile consumer runs no agent that deletes the ShadowPods it does not
// know, so only the provider may keep the tenant inside its grant.

// grantOf sums status.resources of consumer's accepted ResourceSlices in its
// tenant namespace on the provider (admin's view).
func grantOf(ctx context.Context, admin client.Client, consumer string) (corev1.ResourceList, error) {
	list := &corev1alpha1.ResourceSliceList{}
	if err := admin.List(ctx, list, client.InNamespace(corev1alpha1.TenantNamespaceName(consumer))); err != nil {
		return nil, err
	}
	sum := corev1.ResourceList{}
	for _, rs := range list.Items {
		if rs.Status.Phase != corev1alpha1.ResourceSliceAccepted || rs.Spec.ConsumerClusterID != consumer {
			continue
		}
		for name, q := range rs.Status.Resources {
			cur := sum[name]
			cur.Add(q)
			sum[name] = cur
		}
	}
	return sum, nil
}

// usedBy sums the requests (as the provider's agent counts them) of every
// unfinished pod in consumer's remote namespaces on the provider.
func usedBy(ctx context.Context, admin client.Client, consumer string) (corev1.ResourceList, error) {
	nss := &corev1.NamespaceList{}
	if err := admin.List(ctx, nss, client.MatchingLabels{corev1alpha1.LabelRemoteClusterID: consumer,
		corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}); err != nil {
		return nil, err
	}
	sum := corev1.ResourceList{}
	for _, ns := range nss.Items {
		pods := &corev1.PodList{}
		if err := admin.List(ctx, pods, client.InNamespace(ns.Name)); err != nil {
			return nil, err
		}
		for i := range pods.Items {
			if podstatus.Finished(pods.Items[i].Status.Phase) {
				continue
			}
			for name, q := range shadowpod.PodRequests(&pods.Items[i].Spec) {
				cur := sum[name]
				cur.Add(q)
				sum[name] = cur
			}
		}
	}
	return sum, nil
}

// withinGrant returns an error when what consumer's pods take on the
// provider exceeds, in cpu, memory or pods, what its accepted ResourceSlices
// grant.
func withinGrant(ctx context.Context, admin client.Client, consumer string) error {
	grant, err := grantOf(ctx, admin, consumer)
	if err != nil {
		return err
	}
	used, err := usedBy(ctx, admin, consumer)
	if err != nil {
		return err
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
		if u, g := used[name], grant[name]; u.Cmp(g) > 0 {
			return fmt.Errorf("consumer %s's pods take %s %s, its grant is %s", consumer, name, u.String(), g.String())
		}
	}
	return nil
}

// burstOverGrant creates, at once and with the tenant's credential alone,
// n ShadowPods that each fit what is left of the consumer's CPU grant but
// no two of which fit together, waits until the provider decided on each
// (its pod exists, or it is Failed), checks the grant held, and deletes them.
func burstOverGrant(ctx context.Context, tenant, admin client.Client, ns, prefix string, n int) error {
	grant, err := grantOf(ctx, admin, "alpha")
	if err != nil {
		return err
	}
	used, err := usedBy(ctx, admin, "alpha")
	if err != nil {
		return err
	}
	free := grant.Cpu().DeepCopy()
	free.Sub(*used.Cpu())
	if free.Sign() <= 0 {
		return fmt.Errorf("no CPU left in the grant (%s granted, %s used): nothing to attack with", grant.Cpu(), used.Cpu())
	}
	// Each one takes just over half of what is free: any one alone fits,
	// any two together do not, and all n need n/2 times the room.
	each := resource.NewMilliQuantity(free.MilliValue()/2+1, resource.DecimalSI)
	sps := make([]*offloadingv1alpha1.ShadowPod, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range sps {
		sps[i] = shadowPod(ns, fmt.Sprintf("%s-%d", prefix, i), func(p *corev1.PodSpec) {
			p.Containers[0].Resources.Requests[corev1.ResourceCPU] = *each
		})
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = tenant.Create(ctx, sps[i])
		}(i)
	}
	wg.Wait()
	defer func() {
		for _, sp := range sps {
			_ = admin.Delete(context.Background(), sp)
		}
		// Gone before the next attack counts what is left.
		deadline := time.Now().Add(60 * time.Second)
		for _, sp := range sps {
			for time.Now().Before(deadline) {
				if err := admin.Get(context.Background(), client.ObjectKeyFromObject(sp), &corev1.Pod{}); apierrors.IsNotFound(err) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("creating ShadowPods that each fit: %w", err)
	}
	ran := 0
	// A provider's agent started again takes over its leader lease first
	// (up to its 30 s duration after a kill).
	deadline := time.Now().Add(90 * time.Second)
	for _, sp := range sps {
		for {
			if err := admin.Get(ctx, client.ObjectKeyFromObject(sp), &corev1.Pod{}); err == nil {
				ran++
				break
			}
			got := &offloadingv1alpha1.ShadowPod{}
			if err := admin.Get(ctx, client.ObjectKeyFromObject(sp), got); err == nil && got.Status.Phase == corev1.PodFailed {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("ShadowPod %s neither run nor refused after 90s", sp.Name)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if err := withinGrant(ctx, admin, "alpha"); err != nil {
		return fmt.Errorf("%d of %d ShadowPods of %s CPU each run: %w", ran, n, each, err)
	}
	if ran == 0 {
		return fmt.Errorf("none of %d ShadowPods of %s CPU each, each fitting the %s CPU left, run", n, each, free.String())
	}
	return nil
}

// negativeSliceRefused: a ResourceSlice with a negative quantity is
// refused at the door, so it can neither lower the sum that a second
// slice is measured against nor, deleted, raise the grant past the offer.
func negativeSliceRefused(ctx context.Context, tenant client.Client, ns, name, quantity string) error {
	rs := &corev1alpha1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels:      map[string]string{corev1alpha1.LabelRemoteClusterID: "alpha"},
		Annotations: map[string]string{"annex.dev/origin-namespace": "annex-tenant-beta"}},
		Spec: corev1alpha1.ResourceSliceSpec{ConsumerClusterID: "alpha", ProviderClusterID: "beta",
			Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(quantity)}}}
	return refused(tenant.Create(ctx, rs), "at least 0 and at most 1P")
}
