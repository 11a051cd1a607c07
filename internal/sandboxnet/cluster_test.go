package sandboxnet

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/annexhq/annex/internal/localcluster"
)

// TestRunPodsOnRealCluster runs RunPods against a real local cluster: kwok
// gives a labelled pod an IP, the pod gets a namespace answering at it, and
// loses it when deleted. It needs root and the binaries of `make tools`.
func TestRunPodsOnRealCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	n := testNaming(t)
	if err := localcluster.CheckBinaries(localcluster.DefaultBinDir()); err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Options{Name: "sbxnet", Dir: t.TempDir(), PodCIDR: "10.200.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("stop the cluster: %v", err)
		}
	})
	clusters := []Cluster{{Name: "c", Kubeconfig: c.KubeconfigPath(), Index: 0}}
	if err := n.setup(ctx, clusters); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.runPods(runCtx, testr.New(t), clusters) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("RunPods: %v", err)
		}
	})

	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	pod := func(name string, labelled bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "echo"}}},
		}
		if labelled {
			p.Labels = map[string]string{LabelSandboxNetns: "true"}
		}
		return p
	}
	var ips []netip.Addr
	var made []*corev1.Pod
	for _, p := range []*corev1.Pod{pod("web", true), pod("plain", false)} {
		created, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, p.Name+" to get an IP", func() bool {
			got, err := cs.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
			if err == nil && got.Status.PodIP != "" {
				ips = append(ips, netip.MustParseAddr(got.Status.PodIP))
				return true
			}
			return false
		})
		made = append(made, created)
	}
	web := n.pod("c", made[0].UID)
	eventually(t, "web's namespace", func() bool { return NetnsExists(web) })
	e, err := getEcho(ctx, t, n.router("c"), ips[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := (Echo{Cluster: "c", Namespace: "default", Pod: "web", PodIP: ips[0].String(), From: e.From}); e != want {
		t.Errorf("echo of web: %+v, want %+v", e, want)
	}
	if NetnsExists(n.pod("c", made[1].UID)) {
		t.Error("the unlabelled pod has a namespace")
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "web's namespace to go", func() bool { return !NetnsExists(web) })
}
