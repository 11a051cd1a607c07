package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/cli/sandbox"
	"github.com/annexhq/annex/internal/localcluster"
)

func clientset(t *testing.T, c *localcluster.Cluster) kubernetes.Interface {
	t.Helper()
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestPodRunsOnKwokNode: the cluster schedules a pod onto a kwok node, and it
// goes Running with an IP from the cluster's pod CIDR.
func TestPodRunsOnKwokNode(t *testing.T) {
	c := env.clusters[0]
	cs := clientset(t, c)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-pod"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns.Name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}
	// The namespace's default ServiceAccount appears asynchronously; pods are refused until then.
	eventually(t, 30*time.Second, "pod created", func() error {
		_, err := cs.CoreV1().Pods(ns.Name).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	cidr := netip.MustParsePrefix(c.PodCIDR())
	eventually(t, 60*time.Second, "pod Running with an IP in "+cidr.String(), func() error {
		p, err := cs.CoreV1().Pods(ns.Name).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return errors.New("phase " + string(p.Status.Phase) + ", IP " + p.Status.PodIP)
		}
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || !cidr.Contains(ip) {
			return errors.New("pod IP " + p.Status.PodIP + " outside " + cidr.String())
		}
		return nil
	})
}

// TestInstallAndAgent: install applies everything, is idempotent, refuses bad
// input with one clear message, and an agent running with the ServiceAccount's
// token (not admin) becomes Ready.
func TestInstallAndAgent(t *testing.T) {
	c := env.clusters[0]
	kc := c.KubeconfigPath()
	args := []string{"install", "--kubeconfig", kc, "--cluster-id", "alpha", "--pod-cidr", c.PodCIDR(), "--service-cidr", c.ServiceCIDR(), "--local-agent"}
	if out, err := annexctl(t, args...); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if out, err := annexctl(t, args...); err != nil {
		t.Fatalf("second install: %v\n%s", err, out)
	}
	cs := clientset(t, c)
	ctx := context.Background()
	cm, err := cs.CoreV1().ConfigMaps(corev1alpha1.AgentNamespace).Get(ctx, corev1alpha1.ClusterIdentityConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data[corev1alpha1.ClusterIdentityKeyClusterID]; got != "alpha" {
		t.Errorf("identity clusterID = %q, want alpha", got)
	}

	for _, bad := range []struct {
		name string
		args []string
		want string
	}{
		{"different cluster ID", []string{"install", "--kubeconfig", kc, "--cluster-id", "other", "--local-agent"}, "already installed as \"alpha\""},
		{"bad CIDR", []string{"install", "--kubeconfig", kc, "--pod-cidr", "10.0.0.0/33", "--local-agent"}, "--pod-cidr"},
		{"overlapping CIDRs", []string{"install", "--kubeconfig", kc, "--pod-cidr", "10.96.0.0/16", "--service-cidr", "10.96.0.0/12", "--local-agent"}, "overlaps"},
		{"missing kubeconfig", []string{"install", "--kubeconfig", filepath.Join(env.dir, "nope"), "--local-agent"}, "kubeconfig"},
		{"unreachable cluster", []string{"install", "--kubeconfig", unreachableKubeconfig(t), "--local-agent"}, "cannot reach the cluster"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			out, err := annexctl(t, bad.args...)
			if err == nil {
				t.Fatalf("install succeeded, want an error containing %q", bad.want)
			}
			if !strings.Contains(out, bad.want) || strings.Contains(out, "goroutine ") || strings.Count(strings.TrimSpace(out), "\n") > 1 {
				t.Errorf("want one clear line containing %q, got:\n%s", bad.want, out)
			}
		})
	}

	t.Run("different version installed", func(t *testing.T) {
		ns, err := cs.CoreV1().Namespaces().Get(ctx, corev1alpha1.AgentNamespace, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		was := ns.Labels["annex.dev/version"]
		ns.Labels["annex.dev/version"] = "v9.9.9"
		if _, err := cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			ns, _ := cs.CoreV1().Namespaces().Get(ctx, corev1alpha1.AgentNamespace, metav1.GetOptions{})
			ns.Labels["annex.dev/version"] = was
			_, _ = cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
		}()
		out, err := annexctl(t, args...)
		if err == nil || !strings.Contains(out, "v9.9.9 is already installed") {
			t.Fatalf("want a version conflict, got err=%v:\n%s", err, out)
		}
	})

	t.Run("agent ready as ServiceAccount", func(t *testing.T) {
		a, err := sandbox.StartAgent(ctx, c, sandbox.AgentOptions{Binary: filepath.Join(env.bin, "annex-agent"), TokenTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Stop() })
		if !a.Ready(ctx) {
			t.Fatal("agent not ready")
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", a.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.CertData) > 0 || cfg.CertFile != "" || cfg.BearerToken == "" || cfg.Insecure {
			t.Fatalf("agent kubeconfig must hold a bearer token and verify TLS, got cert=%v token=%v insecure=%v", len(cfg.CertData) > 0, cfg.BearerToken != "", cfg.Insecure)
		}
		acs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		review, err := acs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := "system:serviceaccount:annex-system:annex-agent"; review.Status.UserInfo.Username != want {
			t.Errorf("agent authenticates as %q, want %q", review.Status.UserInfo.Username, want)
		}
		// Least privilege: the agent may not grant itself more, nor touch workloads it does not own.
		if _, err := acs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "escalate"}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "annex-agent", Namespace: "annex-system"}}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("agent creating a ClusterRoleBinding: got %v, want Forbidden", err)
		}
		if err := acs.AppsV1().Deployments("kube-system").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("agent deleting Deployments in kube-system: got %v, want Forbidden", err)
		}
		if err := a.Stop(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 15*time.Second, "agent process gone", func() error {
			if a.Running() {
				return errors.New("still running")
			}
			return nil
		})
	})
}

// TestFaultInjection: a paused API server makes requests time out, a resumed
// one answers; a killed one refuses connections, and resume restarts it.
func TestFaultInjection(t *testing.T) {
	c := env.clusters[1]
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 2 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ping := func() error {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	}
	if err := ping(); err != nil {
		t.Fatalf("before: %v", err)
	}

	if err := c.PauseAPIServer(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = ping()
	if err == nil {
		t.Fatal("paused API server answered")
	}
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Errorf("paused API server failed after %s (%v); a hung server should time out, not refuse", d, err)
	}
	if err := c.ResumeAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "resumed API server answers", ping)

	if err := c.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "killed API server refuses connections", func() error {
		err := ping()
		if err == nil {
			return errors.New("still answers")
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !strings.Contains(err.Error(), "connection refused") {
			return err
		}
		return nil
	})
	if err := c.ResumeAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "restarted API server answers", ping)
}

// TestSandbox drives `annexctl sandbox` end to end in its own directory.
func TestSandbox(t *testing.T) {
	dir := filepath.Join(env.dir, "sandbox")
	flags := []string{"--dir", dir}
	t.Cleanup(func() {
		_, _ = annexctl(t, append([]string{"sandbox", "down"}, flags...)...)
		if left := processesUnder(dir); len(left) > 0 {
			t.Errorf("processes left after sandbox down: %v", left)
		}
	})
	if out, err := annexctl(t, append([]string{"sandbox", "up", "--agent-binary", filepath.Join(env.bin, "annex-agent")}, flags...)...); err != nil {
		t.Fatalf("sandbox up: %v\n%s", err, out)
	}
	out, err := annexctl(t, append([]string{"sandbox", "up"}, flags...)...)
	if err != nil || !strings.Contains(out, "already up") {
		t.Fatalf("second sandbox up should say it is already up: %v\n%s", err, out)
	}
	status := func() map[string]sandbox.ClusterStatus {
		out, err := annexctl(t, append([]string{"sandbox", "status", "-o", "json"}, flags...)...)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		var s struct{ Clusters []sandbox.ClusterStatus }
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, out)
		}
		m := map[string]sandbox.ClusterStatus{}
		for _, c := range s.Clusters {
			m[c.Name] = c
		}
		return m
	}
	sts := status()
	for _, name := range []string{"alpha", "beta", "gamma"} {
		st, ok := sts[name]
		if !ok {
			t.Fatalf("status lacks %s", name)
		}
		if !st.Healthy() {
			t.Errorf("%s not healthy: %+v", name, st)
		}
		if _, err := os.Stat(st.Kubeconfig); err != nil || st.Kubeconfig != filepath.Join(dir, name, "kubeconfig") {
			t.Errorf("%s kubeconfig %q: %v", name, st.Kubeconfig, err)
		}
	}
	if out, err := annexctl(t, append([]string{"sandbox", "pause", "beta"}, flags...)...); err != nil {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	if st := status()["beta"]; st.Healthy() {
		t.Errorf("beta healthy while paused: %+v", st)
	}
	if out, err := annexctl(t, append([]string{"sandbox", "resume", "beta"}, flags...)...); err != nil {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	if out, err := annexctl(t, append([]string{"sandbox", "kill", "nosuch"}, flags...)...); err == nil || !strings.Contains(out, "unknown sandbox cluster") {
		t.Errorf("kill of an unknown cluster: %v\n%s", err, out)
	}
	if out, err := annexctl(t, append([]string{"sandbox", "down"}, flags...)...); err != nil {
		t.Fatalf("down: %v\n%s", err, out)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox dir still exists after down: %v", err)
	}
}

// unreachableKubeconfig points at a loopback port nothing listens on.
func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	data := "apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster:\n    server: https://" + addr + "\n    insecure-skip-tls-verify: true\ncontexts:\n- name: x\n  context: {cluster: x, user: x}\ncurrent-context: x\nusers:\n- name: x\n  user: {token: x}\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
