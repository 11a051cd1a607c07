package install

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// TestInstallDeployment installs into a real cluster with the agent
// Deployment (the agent's image is not pulled: kwok runs the pod): the API
// server accepts the Deployment with and without the gateway, the real
// scheduler places the gateway's pod on the gateway node on the host
// network, and installing again without the gateway takes it away.
func TestInstallDeployment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lc := clustertest.Start(ctx, t, localcluster.Options{Name: "inst", PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", Nodes: 2})
	c := clustertest.Connect(ctx, t, lc)
	install := func(endpoint, node string) {
		t.Helper()
		o := DefaultOptions()
		o.ClusterID, o.Image, o.GatewayEndpoint, o.GatewayNode = "inst", "example.invalid/annex-agent:test", endpoint, node
		var out bytes.Buffer
		if err := Run(ctx, cli.IOStreams{Out: &out, ErrOut: &out}, c, o); err != nil {
			t.Fatalf("install with gateway %q on %q: %v\n%s", endpoint, node, err, out.String())
		}
	}
	gwNode := "inst-worker-1"
	install("192.0.2.10", gwNode)

	// The cluster is new, and so are Annex's CRDs: once install returns,
	// the quota controller counts Annex's kinds in a quota written now, and
	// the probe is gone.
	probed := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "after-install"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{}}}
	for _, name := range countedKinds() {
		probed.Spec.Hard[name] = resource.MustParse("10")
	}
	if err := c.Client.Create(ctx, probed); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		err := c.Client.Get(ctx, client.ObjectKeyFromObject(probed), probed)
		return err == nil && counted(probed), err
	})
	if err != nil {
		t.Errorf("a quota of Annex's kinds written after install is not counted within 5 s (%v): %+v", err, probed.Status)
	}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: quotaProbeName}, &corev1.ResourceQuota{}); !apierrors.IsNotFound(err) {
		t.Errorf("probe %s left after install: %v", quotaProbeName, err)
	}

	var pod corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := c.Client.List(ctx, pods, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && len(p.Spec.Containers) == 2 {
				pod = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no scheduled agent pod with a gateway: %v", err)
	}
	if pod.Spec.NodeName != gwNode || !pod.Spec.HostNetwork {
		t.Errorf("agent pod on %q, hostNetwork %v; want %s on the host network", pod.Spec.NodeName, pod.Spec.HostNetwork, gwNode)
	}
	agent, gateway := pod.Spec.Containers[0], pod.Spec.Containers[1]
	for _, want := range []string{"--gateway-endpoint=192.0.2.10", "--gateway-config=/run/annex-gateway/config.json",
		"--virtual-node-ip=$(POD_IP)", "--kubelet-port=10260"} {
		if !slices.Contains(agent.Args, want) {
			t.Errorf("agent args %v lack %s", agent.Args, want)
		}
	}
	if gateway.Command[0] != "/annex-gateway" || !slices.Contains(gateway.SecurityContext.Capabilities.Add, "NET_ADMIN") {
		t.Errorf("gateway container %v with %+v", gateway.Command, gateway.SecurityContext.Capabilities)
	}

	// Again without the gateway: one container, off the host network.
	install("", "")
	d := &appsv1.Deployment{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: "annex-agent"}, d); err != nil {
		t.Fatal(err)
	}
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 || spec.HostNetwork || len(spec.Volumes) != 0 || spec.NodeSelector != nil {
		t.Errorf("after installing without a gateway: %d containers, hostNetwork %v, volumes %v, nodeSelector %v",
			len(spec.Containers), spec.HostNetwork, spec.Volumes, spec.NodeSelector)
	}
	if args := spec.Containers[0].Args; !slices.Contains(args, "--kubelet-port=10250") || slices.ContainsFunc(args, func(a string) bool { return len(a) > 10 && a[:10] == "--gateway-" }) {
		t.Errorf("agent args without a gateway: %v", args)
	}
}
