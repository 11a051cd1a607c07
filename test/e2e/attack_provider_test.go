package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/grant"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/netview"
	"github.com/annexhq/annex/internal/network"
)

// The lies of a hostile provider about what the peering agreed: more
// resources than the consumer asked for, and ranges other than the ones
// agreed when the network link was made (TestHostileProvider). They run
// with the provider's agent stopped, so nothing of the provider's own
// corrects them.

// providerGrantInflated makes provider's administrator write, on the
// replica of consumer's ResourceSlice, a grant of more cpu than requested,
// a negative memory, and a resource never asked for; the consumer's
// virtual node must advertise at most what it requested, nothing of the
// rest, and say so in a Warning Event naming the fields. The replica's
// status is put back afterwards.
func providerGrantInflated(ctx context.Context, t *testing.T, consumer, provider client.Client, consumerID, providerID string) {
	t.Helper()
	local := &corev1alpha1.ResourceSlice{}
	localKey := client.ObjectKey{Namespace: corev1alpha1.PeerNamespaceName(providerID), Name: "peering"}
	if err := consumer.Get(ctx, localKey, local); err != nil {
		t.Fatalf("the consumer's ResourceSlice: %v", err)
	}
	requested := local.Spec.Resources
	replica := &corev1alpha1.ResourceSlice{}
	replicaKey := client.ObjectKey{Namespace: corev1alpha1.TenantNamespaceName(consumerID), Name: local.Name}
	if err := provider.Get(ctx, replicaKey, replica); err != nil {
		t.Fatalf("the replica on the provider: %v", err)
	}
	honest := replica.DeepCopy()
	t.Cleanup(func() {
		cur := &corev1alpha1.ResourceSlice{}
		if err := provider.Get(context.Background(), replicaKey, cur); err != nil {
			return
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Status.Resources = honest.Status.Resources
		_ = provider.Status().Patch(context.Background(), cur, patch)
	})
	lie := replica.DeepCopy()
	lie.Status.Resources = corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("-1Gi"),
		corev1.ResourcePods:   requested[corev1.ResourcePods],
		"nvidia.com/gpu":      resource.MustParse("8"),
	}
	if err := provider.Status().Patch(ctx, lie, client.MergeFrom(replica)); err != nil {
		t.Fatalf("write the inflated grant: %v", err)
	}
	node := corev1alpha1.VirtualNodeName(providerID)
	// The replicator reads the replica's status again within 30 s.
	eventually(t, 60*time.Second, "the virtual node advertises at most what was requested", func() error {
		if err := consumer.Get(ctx, localKey, local); err != nil {
			return err
		}
		if got := local.Status.Resources[corev1.ResourceCPU]; got.Cmp(resource.MustParse("1000")) != 0 {
			return fmt.Errorf("the lie has not reached the consumer yet (status.resources %v)", local.Status.Resources)
		}
		n := &corev1.Node{}
		if err := consumer.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return err
		}
		return advertisedWithin(n, requested)
	})
	eventually(t, 20*time.Second, "a Warning Event names the refused fields", func() error {
		return grantEvent(ctx, consumer, localKey, "status.resources[cpu]", "status.resources[memory]", "status.resources[nvidia.com/gpu]")
	})
}

// advertisedWithin checks that Node n's capacity and allocatable hold
// exactly cpu and pods, each at most requested, and nothing else (memory
// was granted negative, the GPU never asked for).
func advertisedWithin(n *corev1.Node, requested corev1.ResourceList) error {
	var problems []string
	for what, rl := range map[string]corev1.ResourceList{"capacity": n.Status.Capacity, "allocatable": n.Status.Allocatable} {
		for name, q := range rl {
			want, asked := requested[name]
			switch {
			case name == corev1.ResourceMemory || !asked:
				problems = append(problems, fmt.Sprintf("%s advertises %s=%s", what, name, q.String()))
			case q.Cmp(want) > 0:
				problems = append(problems, fmt.Sprintf("%s advertises %s=%s, more than the %s requested", what, name, q.String(), want.String()))
			}
		}
		if _, ok := rl[corev1.ResourceCPU]; !ok {
			problems = append(problems, what+" has no cpu")
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// grantEvent finds the Warning Event grant.EventReason about the
// ResourceSlice key whose note names every field.
func grantEvent(ctx context.Context, c client.Client, key client.ObjectKey, fields ...string) error {
	evs := &eventsv1.EventList{}
	if err := c.List(ctx, evs, client.InNamespace(key.Namespace)); err != nil {
		return err
	}
	for _, e := range evs.Items {
		if e.Reason != grant.EventReason || e.Type != corev1.EventTypeWarning || e.Regarding.Name != key.Name {
			continue
		}
		missing := false
		for _, f := range fields {
			missing = missing || !strings.Contains(e.Note, f)
		}
		if !missing {
			return nil
		}
	}
	return fmt.Errorf("no Warning %s Event on ResourceSlice %s naming %v among %d Events", grant.EventReason, key, fields, len(evs.Items))
}

// providerRangesMoved makes provider's administrator publish, in its
// identity, a pod CIDR that covers the consumer's own (a private range, but
// not the one agreed when the link was made). Running `annexctl network
// connect` again must refuse it by rule annex-network-agreed-range and leave
// the consumer's NetworkConfiguration as it was. The identity is put back
// afterwards.
func providerRangesMoved(ctx context.Context, t *testing.T, consumerCluster, providerCluster *localcluster.Cluster, consumer, provider client.Client, providerID string) {
	t.Helper()
	idKey := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: corev1alpha1.ClusterIdentityConfigMapName}
	cm := &corev1.ConfigMap{}
	if err := provider.Get(ctx, idKey, cm); err != nil {
		t.Fatalf("the provider's identity: %v", err)
	}
	honest := cm.Data[corev1alpha1.ClusterIdentityKeyPodCIDR]
	restore := func() {
		cur := &corev1.ConfigMap{}
		if err := provider.Get(context.Background(), idKey, cur); err != nil || cur.Data[corev1alpha1.ClusterIdentityKeyPodCIDR] == honest {
			return
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Data[corev1alpha1.ClusterIdentityKeyPodCIDR] = honest
		if err := provider.Patch(context.Background(), cur, patch); err != nil {
			t.Errorf("put the provider's identity back: %v", err)
		}
	}
	t.Cleanup(restore)
	defer restore()

	ncKey := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: providerID}
	before := &networkingv1alpha1.NetworkConfiguration{}
	if err := consumer.Get(ctx, ncKey, before); err != nil {
		t.Fatalf("the consumer's NetworkConfiguration for %s: %v", providerID, err)
	}
	if _, ok := before.Annotations[netview.AnnotationAgreedRemoteCIDRs]; !ok {
		t.Errorf("the link records no agreement (annotation %s)", netview.AnnotationAgreedRemoteCIDRs)
	}
	// 10.192.0.0/11 holds the consumer's pod CIDR 10.200.0.0/16 and the
	// provider's own 10.201.0.0/16: private, and not the provider's.
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Data[corev1alpha1.ClusterIdentityKeyPodCIDR] = "10.192.0.0/11"
	if err := provider.Patch(ctx, cm, patch); err != nil {
		t.Fatalf("publish the moved pod CIDR: %v", err)
	}
	out, err := annexctl(t, "network", "connect", "--kubeconfig", consumerCluster.KubeconfigPath(), "--remote-kubeconfig", providerCluster.KubeconfigPath())
	if err == nil || !strings.Contains(out, network.RuleAgreedRange) || !strings.Contains(out, "10.192.0.0/11") {
		t.Errorf("network connect with the moved claim: %v, want a refusal by %s naming 10.192.0.0/11\n%s", err, network.RuleAgreedRange, out)
	}
	after := &networkingv1alpha1.NetworkConfiguration{}
	if err := consumer.Get(ctx, ncKey, after); err != nil {
		t.Fatal(err)
	}
	if after.Spec.Remote != before.Spec.Remote || after.Annotations[netview.AnnotationAgreedRemoteCIDRs] != before.Annotations[netview.AnnotationAgreedRemoteCIDRs] {
		t.Errorf("the link changed: spec.remote %+v → %+v, agreement %q → %q", before.Spec.Remote, after.Spec.Remote,
			before.Annotations[netview.AnnotationAgreedRemoteCIDRs], after.Annotations[netview.AnnotationAgreedRemoteCIDRs])
	}
}
