package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/agent"
	"github.com/annexhq/annex/internal/cli/sandbox"
	"github.com/annexhq/annex/internal/localcluster"
)

// crClient is an admin controller-runtime client for c that knows Annex's types.
func crClient(t *testing.T, c *localcluster.Cluster) client.Client {
	t.Helper()
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	return clientFor(t, cfg)
}

// clientFor is a controller-runtime client for cfg that knows Annex's types,
// its requests bounded to 10 s.
func clientFor(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	cfg.Timeout = 10 * time.Second
	scheme, err := agent.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// installAndRunAgent installs Annex as clusterID and runs its agent with extra
// flags until the test ends.
func installAndRunAgent(t *testing.T, c *localcluster.Cluster, clusterID string, agentArgs ...string) *testAgent {
	t.Helper()
	ext := ""
	for _, spec := range sandbox.Clusters {
		if spec.Name == c.Name() {
			ext = spec.ExternalCIDR
		}
	}
	return installAndRunAgentWith(t, c, clusterID, ext, agentArgs...)
}

// installAndRunAgentWith is installAndRunAgent with the cluster's external
// CIDR given (for clusters that are not the sandbox's).
func installAndRunAgentWith(t *testing.T, c *localcluster.Cluster, clusterID, ext string, agentArgs ...string) *testAgent {
	t.Helper()
	if out, err := annexctl(t, "install", "--kubeconfig", c.KubeconfigPath(), "--cluster-id", clusterID,
		"--pod-cidr", c.PodCIDR(), "--service-cidr", c.ServiceCIDR(), "--external-cidr", ext, "--local-agent"); err != nil {
		t.Fatalf("install %s: %v\n%s", clusterID, err, out)
	}
	a := &testAgent{cluster: c, args: agentArgs}
	a.start(t)
	t.Cleanup(func() { _ = a.agent.Stop() })
	return a
}

// peer peers consumer with provider (8 CPUs, 16Gi, 50 pods).
func peer(t *testing.T, consumer, provider *localcluster.Cluster) {
	t.Helper()
	if out, err := annexctl(t, "peer", "--kubeconfig", consumer.KubeconfigPath(), "--remote-kubeconfig", provider.KubeconfigPath(),
		"--cpu", "8", "--memory", "16Gi", "--pods", "50"); err != nil {
		t.Fatalf("peer %s with %s: %v\n%s", consumer.Name(), provider.Name(), err, out)
	}
}

// testAgent is an agent process a test can kill and start again.
type testAgent struct {
	cluster *localcluster.Cluster
	args    []string
	agent   *sandbox.Agent
}

func (a *testAgent) start(t *testing.T) {
	t.Helper()
	var err error
	a.agent, err = sandbox.StartAgent(context.Background(), a.cluster, sandbox.AgentOptions{
		Binary: filepath.Join(env.bin, "annex-agent"), TokenTTL: time.Hour, Args: a.args})
	if err != nil {
		t.Fatalf("agent of %s: %v", a.cluster.Name(), err)
	}
}

// kill SIGKILLs the agent: no graceful shutdown, no lease release.
func (a *testAgent) kill(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(a.agent.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for a.agent.Running() {
		time.Sleep(50 * time.Millisecond)
	}
}

func reachable(fc *corev1alpha1.ForeignCluster) *metav1.Condition {
	return meta.FindStatusCondition(fc.Status.Conditions, corev1alpha1.ConditionAPIServerReachable)
}

// TestPeering: peer one (consumer) with two (provider), check both sides, the
// consumer's least privilege, token renewal, failure detection, and that
// unpeer leaves both clusters as they were.
func TestPeering(t *testing.T) {
	one, two := env.clusters[0], env.clusters[1] // alpha consumes beta
	ctx := context.Background()
	peerArgs := []string{"peer", "--kubeconfig", one.KubeconfigPath(), "--remote-kubeconfig", two.KubeconfigPath(), "--token-ttl", "10m", "--cpu", "2", "--memory", "4Gi", "--pods", "20"}

	// Without Annex on beta (uninstalled, should an earlier test have installed it): one clear error.
	if out, err := annexctl(t, "uninstall", "--kubeconfig", two.KubeconfigPath()); err != nil {
		t.Fatalf("uninstall beta: %v\n%s", err, out)
	}
	if _, err := clientset(t, two).CoreV1().Namespaces().Get(context.Background(), "annex-system", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("annex-system still on beta after uninstall: %v", err)
	}
	installAndRunAgent(t, one, "alpha", "--credentials-renew-fraction=0.01")
	out, err := annexctl(t, peerArgs...)
	if err == nil || !strings.Contains(out, "provider") || !strings.Contains(out, "annexctl install") {
		t.Fatalf("peer with a provider without Annex: want a clear error, got %v:\n%s", err, out)
	}
	installAndRunAgent(t, two, "beta", "--max-resources-per-consumer=cpu=4,memory=8Gi,pods=50")

	if out, err := annexctl(t, "peer", "--kubeconfig", one.KubeconfigPath(), "--remote-kubeconfig", one.KubeconfigPath()); err == nil || !strings.Contains(out, "cannot peer with itself") {
		t.Fatalf("self-peering: want a clear error, got %v:\n%s", err, out)
	}
	denied := append(append([]string{}, peerArgs...), "--cpu", "64")
	if out, err := annexctl(t, denied...); err == nil || !strings.Contains(out, "denied") || !strings.Contains(out, "cpu") {
		t.Fatalf("over-limit peering: want a denial naming cpu, got %v:\n%s", err, out)
	}
	if out, err := annexctl(t, peerArgs...); err != nil {
		t.Fatalf("peer: %v\n%s", err, out)
	}
	if out, err := annexctl(t, peerArgs...); err != nil || !strings.Contains(out, "nothing changed") {
		t.Fatalf("second peer should change nothing: %v\n%s", err, out)
	}

	c1, c2 := crClient(t, one), crClient(t, two)
	// Consumer side.
	fc := &corev1alpha1.ForeignCluster{}
	if err := c1.Get(ctx, client.ObjectKey{Name: "beta"}, fc); err != nil {
		t.Fatal(err)
	}
	if fc.Status.Role != corev1alpha1.RoleProvider {
		t.Errorf("alpha's ForeignCluster beta has role %q, want Provider", fc.Status.Role)
	}
	eventually(t, 15*time.Second, "alpha sees beta reachable", func() error {
		if err := c1.Get(ctx, client.ObjectKey{Name: "beta"}, fc); err != nil {
			return err
		}
		if c := reachable(fc); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	vn := &corev1alpha1.VirtualNode{}
	if err := c1.Get(ctx, client.ObjectKey{Namespace: "annex-peer-beta", Name: "beta"}, vn); err != nil {
		t.Fatalf("VirtualNode: %v", err)
	}
	if got := vn.Spec.Resources.Cpu().String(); got != "2" {
		t.Errorf("VirtualNode cpu = %s, want 2", got)
	}
	// Provider side.
	pfc := &corev1alpha1.ForeignCluster{}
	if err := c2.Get(ctx, client.ObjectKey{Name: "alpha"}, pfc); err != nil || pfc.Status.Role != corev1alpha1.RoleConsumer {
		t.Errorf("beta's ForeignCluster alpha: %v, role %q", err, pfc.Status.Role)
	}
	rs := &corev1alpha1.ResourceSlice{}
	if err := c2.Get(ctx, client.ObjectKey{Namespace: "annex-tenant-alpha", Name: "peering"}, rs); err != nil || rs.Status.Phase != corev1alpha1.ResourceSliceAccepted {
		t.Errorf("replicated ResourceSlice on beta: %v, phase %q", err, rs.Status.Phase)
	}

	t.Run("status shows the peer", func(t *testing.T) {
		out, err := annexctl(t, "status", "--kubeconfig", one.KubeconfigPath(), "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			ClusterID string
			Peers     []struct {
				ClusterID, Role, Reachable, ProbeLatency string
				Granted                                  map[string]string
			}
		}
		if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &r); err != nil {
			t.Fatalf("status -o json: %v", err)
		}
		if r.ClusterID != "alpha" || len(r.Peers) != 1 || r.Peers[0].ClusterID != "beta" || r.Peers[0].Role != "Provider" ||
			r.Peers[0].Reachable != "True" || r.Peers[0].Granted["cpu"] != "2" || r.Peers[0].ProbeLatency == "" {
			t.Errorf("unexpected status: %+v", r)
		}
		if out, err := annexctl(t, "status", "--kubeconfig", one.KubeconfigPath()); err != nil || !strings.Contains(out, "beta") {
			t.Errorf("status table: %v\n%s", err, out)
		}
	})
	t.Run("consumer token is least privilege", func(t *testing.T) { checkConsumerRBAC(t, one, two) })
	t.Run("token renewed before expiry", func(t *testing.T) { checkRenewal(t, c1) })
	t.Run("dead and hung provider detected", func(t *testing.T) { checkDetection(t, c1, two) })
	t.Run("two-way peering keeps each side's own objects apart", func(t *testing.T) { checkTwoWay(t, one, two) })

	if out, err := annexctl(t, "unpeer", "--kubeconfig", one.KubeconfigPath(), "--remote-kubeconfig", two.KubeconfigPath()); err != nil {
		t.Fatalf("unpeer: %v\n%s", err, out)
	}
	for name, c := range map[string]client.Client{"alpha": c1, "beta": c2} {
		if left := peeringLeftovers(ctx, t, c); len(left) > 0 {
			t.Errorf("after unpeer, %s still has: %s", name, strings.Join(left, ", "))
		}
	}

	t.Run("unreachable provider fails cleanly", func(t *testing.T) {
		if err := two.PauseAPIServer(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := two.ResumeAPIServer(ctx); err != nil {
				t.Fatal(err)
			}
		}()
		start := time.Now()
		out, err := annexctl(t, peerArgs...)
		if err == nil || !strings.Contains(out, "cannot reach") {
			t.Fatalf("peer with a hung provider: want a clear error, got %v:\n%s", err, out)
		}
		t.Logf("peer with a hung provider failed after %s", time.Since(start).Round(time.Millisecond))
		if left := peeringLeftovers(ctx, t, c1); len(left) > 0 {
			t.Errorf("failed peer left on one: %s", strings.Join(left, ", "))
		}
	})
}

// checkConsumerRBAC uses the consumer's own credentials against the provider.
func checkConsumerRBAC(t *testing.T, one, two *localcluster.Cluster) {
	ctx := context.Background()
	secret, err := clientset(t, one).CoreV1().Secrets("annex-peer-beta").Get(ctx, corev1alpha1.CredentialsSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[corev1alpha1.CredentialsKubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Insecure || len(cfg.CAData) == 0 {
		t.Error("consumer kubeconfig does not verify the provider's certificate")
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	admin := clientset(t, two)
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "annex-tenant-someone-else"}}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, other, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	})
	cm := func(ns string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe-" + fmt.Sprint(time.Now().UnixNano()), Namespace: ns}}
	}
	allowed := map[string]func() error{
		"read its heartbeat Lease": func() error {
			_, err := cs.CoordinationV1().Leases("annex-tenant-alpha").Get(ctx, corev1alpha1.HeartbeatLeaseName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil // authorized; the first renewal may still be due
			}
			return err
		},
		"read the replica of its ResourceSlice": func() error {
			_, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/core.annex.dev/v1alpha1/namespaces/annex-tenant-alpha/resourceslices/peering").DoRaw(ctx)
			return err
		},
	}
	deniedOps := map[string]func() error{
		"create a ConfigMap in its tenant": func() error {
			_, err := cs.CoreV1().ConfigMaps("annex-tenant-alpha").Create(ctx, cm("annex-tenant-alpha"), metav1.CreateOptions{})
			return err
		},
		"list Secrets in its tenant": func() error {
			_, err := cs.CoreV1().Secrets("annex-tenant-alpha").List(ctx, metav1.ListOptions{})
			return err
		},
		"list the replicas in its tenant": func() error {
			_, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/core.annex.dev/v1alpha1/namespaces/annex-tenant-alpha/resourceslices").DoRaw(ctx)
			return err
		},
		"list Secrets in kube-system": func() error {
			_, err := cs.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"create a ConfigMap in kube-system": func() error {
			_, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, cm("kube-system"), metav1.CreateOptions{})
			return err
		},
		"read another tenant's ConfigMaps": func() error {
			_, err := cs.CoreV1().ConfigMaps(other.Name).List(ctx, metav1.ListOptions{})
			return err
		},
		"write into another tenant": func() error {
			_, err := cs.CoreV1().ConfigMaps(other.Name).Create(ctx, cm(other.Name), metav1.CreateOptions{})
			return err
		},
		"list namespaces": func() error {
			_, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			return err
		},
		"list nodes": func() error {
			_, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		},
		"create a ClusterRole": func() error {
			_, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		},
		"grant itself more in its tenant": func() error {
			_, err := cs.RbacV1().Roles("annex-tenant-alpha").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{})
			return err
		},
		"create pods directly": func() error {
			_, err := cs.CoreV1().Pods("annex-tenant-alpha").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}, metav1.CreateOptions{})
			return err
		},
	}
	for name, op := range allowed {
		if err := op(); err != nil {
			t.Errorf("consumer may %s: got %v", name, err)
		}
	}
	for name, op := range deniedOps {
		if err := op(); !apierrors.IsForbidden(err) {
			t.Errorf("consumer may not %s: got %v, want Forbidden", name, err)
		}
	}
}

// checkTwoWay peers beta as a consumer of alpha too: each cluster then has a
// tenant namespace where the other writes and a peer namespace with its own
// objects for the other, which the other's credential cannot reach. Unpeering
// that direction leaves alpha's consumption of beta as it was.
func checkTwoWay(t *testing.T, one, two *localcluster.Cluster) {
	ctx := context.Background()
	c1, c2 := crClient(t, one), crClient(t, two)
	if out, err := annexctl(t, "peer", "--kubeconfig", two.KubeconfigPath(), "--remote-kubeconfig", one.KubeconfigPath(),
		"--cpu", "1", "--memory", "1Gi", "--pods", "5", "--no-network"); err != nil {
		t.Fatalf("peer beta with alpha: %v\n%s", err, out)
	}
	for name, c := range map[string]client.Client{"alpha": c1, "beta": c2} {
		other := map[string]string{"alpha": "beta", "beta": "alpha"}[name]
		fc := &corev1alpha1.ForeignCluster{}
		if err := c.Get(ctx, client.ObjectKey{Name: other}, fc); err != nil {
			t.Fatal(err)
		}
		if fc.Status.Role != corev1alpha1.RoleBoth || fc.Status.TenantNamespace != "annex-tenant-"+other || fc.Status.PeerNamespace != "annex-peer-"+other {
			t.Errorf("%s's ForeignCluster %s: role %q, tenantNamespace %q, peerNamespace %q", name, other, fc.Status.Role, fc.Status.TenantNamespace, fc.Status.PeerNamespace)
		}
		rs := &corev1alpha1.ResourceSlice{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "annex-peer-" + other, Name: "peering"}, rs); err != nil || rs.Status.Phase != corev1alpha1.ResourceSliceAccepted {
			t.Errorf("%s's own ResourceSlice for %s: %v, phase %q", name, other, err, rs.Status.Phase)
		}
	}
	// alpha, with its credential for beta, cannot read beta's credential for alpha.
	secret, err := clientset(t, one).CoreV1().Secrets("annex-peer-beta").Get(ctx, corev1alpha1.CredentialsSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[corev1alpha1.CredentialsKubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	tenant := kubernetes.NewForConfigOrDie(cfg)
	for _, ns := range []string{"annex-peer-alpha", "annex-tenant-alpha"} {
		if _, err := tenant.CoreV1().Secrets(ns).Get(ctx, corev1alpha1.CredentialsSecretName, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("alpha reads beta's Secret %s/%s: got %v, want Forbidden", ns, corev1alpha1.CredentialsSecretName, err)
		}
	}

	if out, err := annexctl(t, "unpeer", "--kubeconfig", two.KubeconfigPath(), "--remote-kubeconfig", one.KubeconfigPath()); err != nil {
		t.Fatalf("unpeer beta from alpha: %v\n%s", err, out)
	}
	for _, check := range []struct {
		c        client.Client
		who, ns  string
		fc, role string
	}{{c1, "alpha", "annex-tenant-beta", "beta", string(corev1alpha1.RoleProvider)}, {c2, "beta", "annex-peer-alpha", "alpha", string(corev1alpha1.RoleConsumer)}} {
		if err := check.c.Get(ctx, client.ObjectKey{Name: check.ns}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s still has namespace %s: %v", check.who, check.ns, err)
		}
		fc := &corev1alpha1.ForeignCluster{}
		if err := check.c.Get(ctx, client.ObjectKey{Name: check.fc}, fc); err != nil || string(fc.Status.Role) != check.role {
			t.Errorf("%s's ForeignCluster %s: %v, role %q, want %s", check.who, check.fc, err, fc.Status.Role, check.role)
		}
	}
	if err := c1.Get(ctx, client.ObjectKey{Namespace: "annex-peer-beta", Name: "beta"}, &corev1alpha1.VirtualNode{}); err != nil {
		t.Errorf("alpha's VirtualNode for beta after beta stopped consuming alpha: %v", err)
	}
	rs := &corev1alpha1.ResourceSlice{}
	if err := c2.Get(ctx, client.ObjectKey{Namespace: "annex-tenant-alpha", Name: "peering"}, rs); err != nil || rs.Status.Phase != corev1alpha1.ResourceSliceAccepted {
		t.Errorf("alpha's replica on beta after beta stopped consuming alpha: %v, phase %q", err, rs.Status.Phase)
	}
}

// checkRenewal: the agent (run with a tiny renew fraction) replaces the token
// and the peering stays reachable throughout.
func checkRenewal(t *testing.T, c1 client.Client) {
	ctx := context.Background()
	key := client.ObjectKey{Namespace: "annex-peer-beta", Name: corev1alpha1.CredentialsSecretName}
	s := &corev1.Secret{}
	if err := c1.Get(ctx, key, s); err != nil {
		t.Fatal(err)
	}
	first := string(s.Data[corev1alpha1.CredentialsKubeconfigKey])
	fc := &corev1alpha1.ForeignCluster{}
	if err := c1.Get(ctx, client.ObjectKey{Name: "beta"}, fc); err != nil {
		t.Fatal(err)
	}
	since := reachable(fc).LastTransitionTime
	renewals := 0
	eventually(t, 60*time.Second, "two renewals of the consumer token", func() error {
		if err := c1.Get(ctx, key, s); err != nil {
			return err
		}
		if cur := string(s.Data[corev1alpha1.CredentialsKubeconfigKey]); cur != first {
			first = cur
			renewals++
		}
		if renewals < 2 {
			return fmt.Errorf("%d renewals", renewals)
		}
		return nil
	})
	if err := c1.Get(ctx, client.ObjectKey{Name: "beta"}, fc); err != nil {
		t.Fatal(err)
	}
	if c := reachable(fc); c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Equal(&since) {
		t.Errorf("peering flipped during renewal: %+v", c)
	}
}

// checkDetection kills, then pauses, the provider's API server and waits for
// the consumer to report it unreachable and, after resume, reachable again.
func checkDetection(t *testing.T, c1 client.Client, two *localcluster.Cluster) {
	ctx := context.Background()
	wait := func(want metav1.ConditionStatus) time.Duration {
		start := time.Now()
		eventually(t, 30*time.Second, "APIServerReachable="+string(want), func() error {
			fc := &corev1alpha1.ForeignCluster{}
			if err := c1.Get(ctx, client.ObjectKey{Name: "beta"}, fc); err != nil {
				return err
			}
			if c := reachable(fc); c == nil || c.Status != want {
				return fmt.Errorf("condition %+v", c)
			} else if want == metav1.ConditionFalse && c.Message == "" {
				return errors.New("no message")
			}
			return nil
		})
		return time.Since(start)
	}
	for _, fault := range []struct {
		name string
		do   func() error
	}{{"killed", two.KillAPIServer}, {"paused", two.PauseAPIServer}} {
		if err := fault.do(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s provider reported unreachable after %s", fault.name, wait(metav1.ConditionFalse).Round(time.Millisecond))
		if err := two.ResumeAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s provider reported reachable again %s after resume", fault.name, wait(metav1.ConditionTrue).Round(time.Millisecond))
	}
}

// peeringLeftovers lists what of a peering remains in a cluster.
func peeringLeftovers(ctx context.Context, t *testing.T, c client.Client) []string {
	t.Helper()
	var left []string
	lists := map[string]client.ObjectList{
		"ForeignCluster":       &corev1alpha1.ForeignClusterList{},
		"ResourceSlice":        &corev1alpha1.ResourceSliceList{},
		"VirtualNode":          &corev1alpha1.VirtualNodeList{},
		"RemoteNamespace":      &offloadingv1alpha1.RemoteNamespaceList{},
		"NetworkConfiguration": &networkingv1alpha1.NetworkConfigurationList{},
	}
	for kind, l := range lists {
		if err := c.List(ctx, l); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(l)
		for _, it := range items {
			o := it.(client.Object)
			left = append(left, kind+" "+o.GetNamespace()+"/"+o.GetName())
		}
	}
	managed := client.MatchingLabels{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}
	nss := &corev1.NamespaceList{}
	if err := c.List(ctx, nss); err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss.Items {
		if (strings.HasPrefix(ns.Name, corev1alpha1.TenantNamespacePrefix) || strings.HasPrefix(ns.Name, corev1alpha1.PeerNamespacePrefix)) &&
			ns.Name != "annex-tenant-someone-else" {
			left = append(left, "Namespace "+ns.Name+" ("+string(ns.Status.Phase)+")")
		}
	}
	for kind, l := range map[string]client.ObjectList{"Secret": &corev1.SecretList{}, "Role": &rbacv1.RoleList{}, "RoleBinding": &rbacv1.RoleBindingList{}, "ServiceAccount": &corev1.ServiceAccountList{}} {
		if err := c.List(ctx, l, managed); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(l)
		for _, it := range items {
			o := it.(client.Object)
			if kind == "Secret" && o.GetNamespace() == corev1alpha1.AgentNamespace && o.GetName() == networkingv1alpha1.GatewaySecretName {
				continue // the cluster's own gateway key (an agent run with --gateway-config), not part of a peering
			}
			left = append(left, kind+" "+o.GetNamespace()+"/"+o.GetName())
		}
	}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if strings.HasPrefix(n.Name, corev1alpha1.VirtualNodeNamePrefix) {
			left = append(left, "Node "+n.Name)
		}
	}
	return left
}
