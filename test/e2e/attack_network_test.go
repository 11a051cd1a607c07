package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/controller/remotenamespace"
	"github.com/annexhq/annex/internal/localcluster"
)

// tenantNetworkConfined runs, on the real-node provider beta (which runs a
// NetworkPolicy enforcer), the network attempts of a hostile tenant whose
// pod tenantPod runs in its remote namespace tenantNS: with real packets
// (TCP connections opened from inside the containers), the tenant's pod
// reaches neither the provider's own pod, another tenant's pod nor the
// node's kubelet, and neither of those pods reaches it, while the same two
// pods reach each other (the network works, the policy is what stops the
// tenant) and the kubelet still probes the tenant's pod. Each attempt is a
// subtest; it returns how many there were.
func tenantNetworkConfined(t *testing.T, beta *localcluster.Cluster, cb client.Client, image, tenantNS, tenantPod string) int {
	ctx := context.Background()
	policy := &networkingv1.NetworkPolicy{}
	eventually(t, 30*time.Second, "NetworkPolicy "+remotenamespace.NetworkPolicyName+" in "+tenantNS, func() error {
		return cb.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: remotenamespace.NetworkPolicyName}, policy)
	})
	own := networkBystander(t, cb, image, "provider-own-net", nil)
	other := networkBystander(t, cb, image, "someone-else-net", map[string]string{
		corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: "someone-else"})
	tenant := &corev1.Pod{}
	if err := cb.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: tenantPod}, tenant); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	if err := cb.Get(ctx, client.ObjectKey{Name: beta.RealNodeNames()[0]}, node); err != nil {
		t.Fatal(err)
	}
	var nodeIP string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	kc := beta.KubeconfigPath()
	dial := func(from *corev1.Pod, addr string) error {
		out, stderr, err := kubectl(kc, "-n", from.Namespace, "exec", from.Name, "--", "/echo-server", "dial", "-timeout", "2s", addr)
		if err != nil {
			return fmt.Errorf("%v: %s%s", err, out, stderr)
		}
		return nil
	}
	echoAddr := func(p *corev1.Pod) string { return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(echoPort)) }

	// The network carries the bystanders' packets: whatever stops the
	// tenant below is the policy.
	eventually(t, 30*time.Second, "the provider's own pod reaches the other tenant's", func() error {
		return dial(own, echoAddr(other))
	})

	attempts := []struct {
		name     string
		from, to *corev1.Pod
		addr     string
	}{
		{name: "a tenant's pod opens a connection to the provider's own pod", from: tenant, addr: echoAddr(own)},
		{name: "a tenant's pod opens a connection to another tenant's pod", from: tenant, addr: echoAddr(other)},
		{name: "a tenant's pod opens a connection to the node's kubelet", from: tenant, addr: net.JoinHostPort(nodeIP, "10250")},
		{name: "the provider's own pod opens a connection to a tenant's pod", from: own, addr: echoAddr(tenant)},
		{name: "another tenant's pod opens a connection to a tenant's pod", from: other, addr: echoAddr(tenant)},
	}
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			// The enforcer programs a new pod's rules a moment after it
			// starts: wait for the first refusal, then it must hold.
			eventually(t, 30*time.Second, "no connection from "+a.from.Namespace+"/"+a.from.Name+" to "+a.addr, func() error {
				if err := dial(a.from, a.addr); err == nil {
					return fmt.Errorf("connected")
				}
				return nil
			})
			for range 3 {
				if err := dial(a.from, a.addr); err == nil {
					t.Fatalf("%s/%s connected to %s", a.from.Namespace, a.from.Name, a.addr)
				}
			}
		})
	}
	t.Run("the kubelet still probes the tenant's pod", func(t *testing.T) {
		p := &corev1.Pod{}
		if err := cb.Get(ctx, client.ObjectKeyFromObject(tenant), p); err != nil {
			t.Fatal(err)
		}
		if !podReady(p) {
			t.Errorf("tenant's pod %s not Ready under its NetworkPolicy: %+v", p.Name, p.Status.Conditions)
		}
	})
	return len(attempts)
}

// networkBystander starts an echo server pod in namespace ns (created with
// labels) on beta's real node and returns it Running with its IP.
func networkBystander(t *testing.T, cl client.Client, image, ns string, labels map[string]string) *corev1.Pod {
	t.Helper()
	return runningPod(t, cl, labels, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bystander"},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(int64(1)), Containers: []corev1.Container{echoContainer(image)}}}, 60*time.Second)
}
