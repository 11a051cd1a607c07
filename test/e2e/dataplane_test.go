package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/gateway"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/network"
	"github.com/annexhq/annex/internal/sandboxnet"
)

// gatewayProc is an annex-gateway running in a cluster's router namespace.
type gatewayProc struct {
	cluster              string
	config, status, logf string
	cmd                  *exec.Cmd
}

func (g *gatewayProc) start(t *testing.T) {
	t.Helper()
	logFile, err := os.OpenFile(g.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logFile.Close() }() // the child has its own descriptor
	g.cmd = exec.Command(filepath.Join(env.bin, "annex-gateway"), "--config", g.config, "--status", g.status, "--interval", "500ms")
	g.cmd.Stdout, g.cmd.Stderr = logFile, logFile
	if err := sandboxnet.StartInNetns(sandboxnet.RouterNetns(g.cluster), g.cmd); err != nil {
		t.Fatalf("start the gateway of %s: %v", g.cluster, err)
	}
}

// stop signals the gateway and waits for it (SIGKILL after 10 s).
func (g *gatewayProc) stop(sig syscall.Signal) {
	if g.cmd == nil || g.cmd.ProcessState != nil {
		return
	}
	_ = g.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-done
	}
}

// TestDataPlane sends real packets between pods of the three clusters through
// their gateways: each cluster gets a router network namespace with an
// annex-gateway, its labelled pods a namespace of their own holding the IP
// kwok gave them and an echo server (internal/sandboxnet, as `annexctl
// sandbox up --network` does). It needs root.
func TestDataPlane(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, WireGuard TUN devices, nftables)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun (userspace WireGuard)")
	}
	if sandboxnet.NetnsExists(sandboxnet.UnderlayNetns()) {
		t.Fatalf("network namespace %s exists: a sandbox with --network is up on this machine; take it down (annexctl sandbox down) before the e2e tests", sandboxnet.UnderlayNetns())
	}
	ctx := context.Background()
	alpha, beta, gamma := env.clusters[0], env.clusters[1], env.clusters[2]

	var nets []sandboxnet.Cluster
	for i, c := range env.clusters {
		nets = append(nets, sandboxnet.Cluster{Name: c.Name(), Kubeconfig: c.KubeconfigPath(), Index: i})
	}
	if err := sandboxnet.Setup(ctx, nets); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sandboxnet.Teardown(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	gws := map[string]*gatewayProc{}
	for i, c := range env.clusters {
		dir := filepath.Join(env.dir, "gateway-"+c.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		g := &gatewayProc{cluster: c.Name(), config: filepath.Join(dir, "config.json"), status: filepath.Join(dir, "status.json"),
			logf: filepath.Join(dir, "gateway.log")}
		if err := os.WriteFile(g.config, []byte(`{"links":[]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		g.start(t)
		t.Cleanup(func() { g.stop(syscall.SIGTERM) })
		gws[c.Name()] = g
		installAndRunAgent(t, c, c.Name(), "--gateway-config", g.config, "--gateway-status", g.status,
			"--gateway-endpoint", sandboxnet.UnderlayAddr(i).String())
	}
	ca, cb, cg := crClient(t, alpha), crClient(t, beta), crClient(t, gamma)
	for name, c := range map[string]client.Client{"alpha": ca, "beta": cb, "gamma": cg} {
		eventually(t, 30*time.Second, name+" publishes its gateway", func() error {
			return c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: networkingv1alpha1.GatewayConfigMapName}, &corev1.ConfigMap{})
		})
	}
	for _, p := range []*localcluster.Cluster{beta, gamma} {
		peer(t, alpha, p)
		t.Cleanup(func() {
			if out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", p.KubeconfigPath()); err != nil {
				t.Errorf("unpeer %s: %v\n%s", p.Name(), err, out)
			}
		})
	}
	if out, err := annexctl(t, "network", "connect", "--kubeconfig", beta.KubeconfigPath(), "--remote-kubeconfig", gamma.KubeconfigPath()); err != nil {
		t.Fatalf("network connect beta gamma: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := annexctl(t, "network", "disconnect", "--kubeconfig", beta.KubeconfigPath(), "--remote-kubeconfig", gamma.KubeconfigPath()); err != nil {
			t.Errorf("network disconnect beta gamma: %v\n%s", err, out)
		}
	})
	podsCtx, cancel := context.WithCancel(ctx)
	podsDone := make(chan struct{})
	go func() {
		defer close(podsDone)
		if err := sandboxnet.RunPods(podsCtx, logr.Discard(), nets); err != nil {
			t.Errorf("pod namespaces: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-podsDone })

	// Namespace "wire" offloaded to both; pods: one local to alpha, one on
	// beta, one on gamma, all with a network namespace, behind Service "wire".
	const ns = "wire"
	remoteNS := ns + "-alpha"
	if err := ca.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if out, err := annexctl(t, "offload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath(), "--pod-strategy", "Remote"); err != nil {
		t.Fatalf("offload: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := annexctl(t, "unoffload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath()); err != nil {
			t.Errorf("unoffload: %v\n%s", err, out)
		}
	})
	local, onBeta, onGamma, svc := podsOnEachCluster(t, ca, ns, "wire", map[string]string{"app": "wire", sandboxnet.LabelSandboxNetns: "true"})
	realPod := func(c client.Client, name string) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: name}, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gammaPod, betaPod := realPod(cg, onGamma.Name), realPod(cb, onBeta.Name)
	fromAlpha := sandboxnet.PodNetns("alpha", local.UID)
	fromBeta := sandboxnet.PodNetns("beta", betaPod.UID)
	fromGamma := sandboxnet.PodNetns("gamma", gammaPod.UID)

	// get asks addr's echo server from a pod namespace, within 2 s.
	get := func(from, addr string) (sandboxnet.Echo, error) {
		var e sandboxnet.Echo
		body, err := sandboxnet.Get(ctx, from, "http://"+addr+":8080/", 2*time.Second)
		if err == nil {
			err = json.Unmarshal(body, &e)
		}
		return e, err
	}
	// reach waits until from reaches addr and the pod that answers is want.
	reach := func(what, from, addr, wantCluster, wantPod string) sandboxnet.Echo {
		t.Helper()
		var e sandboxnet.Echo
		start := time.Now()
		eventually(t, 60*time.Second, what, func() (err error) {
			if e, err = get(from, addr); err == nil && (e.Cluster != wantCluster || e.Pod != wantPod) {
				err = fmt.Errorf("answered by %s/%s, want %s/%s", e.Cluster, e.Pod, wantCluster, wantPod)
			}
			return err
		})
		t.Logf("%s: GET %s answered by %s %s/%s (it saw the caller as %s) after %s", what, addr, e.Cluster, e.Namespace, e.Pod, e.From, time.Since(start).Round(time.Millisecond))
		return e
	}
	inSlice := func(c client.Client, name, addr string) {
		t.Helper()
		eventually(t, 30*time.Second, name+"'s EndpointSlice holds "+addr, func() error {
			got, err := sliceAddresses(ctx, c, remoteNS, "wire")
			if err == nil && !slices.Contains(got, addr) {
				err = fmt.Errorf("%s has %v", name, got)
			}
			return err
		})
	}
	var alphaGamma, gammaAlpha, betaAlpha, betaGamma *networkingv1alpha1.NetworkConfiguration
	eventually(t, 30*time.Second, "network links ready", func() (err error) {
		if alphaGamma, err = link(ctx, ca, "gamma"); err != nil {
			return err
		}
		if gammaAlpha, err = link(ctx, cg, "alpha"); err != nil {
			return err
		}
		if betaGamma, err = link(ctx, cb, "gamma"); err != nil {
			return err
		}
		betaAlpha, err = link(ctx, cb, "alpha")
		return err
	})

	// 1. alpha → its pod on gamma, at the IP alpha shows (alpha's view).
	e := reach("alpha's pod reaches its pod on gamma", fromAlpha, onGamma.Status.PodIP, "gamma", onGamma.Name)
	if want := mustTranslate(t, local.Status.PodIP, gammaAlpha.Spec.Remote.PodCIDR, gammaAlpha.Status.RemappedRemote.PodCIDR); !strings.HasPrefix(e.From, want+":") {
		t.Errorf("gamma saw the caller as %s, want %s (its view of alpha's pod %s)", e.From, want, local.Status.PodIP)
	}
	// 2. gamma → alpha's local pod, at the address gamma's EndpointSlice gives.
	localOnGamma := mustTranslate(t, local.Status.PodIP, gammaAlpha.Spec.Remote.PodCIDR, gammaAlpha.Status.RemappedRemote.PodCIDR)
	inSlice(cg, "gamma", localOnGamma)
	reach("gamma's pod reaches alpha's local pod", fromGamma, localOnGamma, "alpha", local.Name)
	// 2b. Another tenant's pod on gamma (zeta's) does not: gamma's gateway
	// lets into the link to alpha only alpha's tenant pods and gamma's own
	// (the outbound chain).
	intruder := tenantPodOn(t, cg, "intruder-zeta", "zeta")
	fromIntruder := sandboxnet.PodNetns("gamma", intruder.UID)
	// Its network works: it reaches gamma's pod of alpha inside gamma (no
	// NetworkPolicy enforcer in this sandbox).
	reach("another tenant's pod on gamma reaches a pod inside gamma", fromIntruder, gammaPod.Status.PodIP, "gamma", onGamma.Name)
	for i := range 3 {
		if e, err := get(fromIntruder, localOnGamma); err == nil {
			t.Errorf("attempt %d: another tenant's pod on gamma reached alpha's local pod through gamma's link to alpha (answered by %s/%s)", i, e.Cluster, e.Pod)
		}
	}
	reach("gamma's pod of alpha still reaches alpha's local pod", fromGamma, localOnGamma, "alpha", local.Name)
	// 3. beta → gamma's pod through alpha's transit address.
	transit := mustTranslate(t, onGamma.Annotations[corev1alpha1.AnnotationTransitAddress], betaAlpha.Spec.Remote.ExternalCIDR, betaAlpha.Status.RemappedRemote.ExternalCIDR)
	inSlice(cb, "beta", transit)
	e = reach("beta's pod reaches gamma's pod through alpha (transit)", fromBeta, transit, "gamma", onGamma.Name)
	ext, _ := network.ParseCIDR(gammaAlpha.Spec.Remote.ExternalCIDR)
	if want := mustTranslate(t, network.GatewayAddr(ext).String(), gammaAlpha.Spec.Remote.ExternalCIDR, gammaAlpha.Status.RemappedRemote.ExternalCIDR); !strings.HasPrefix(e.From, want+":") {
		t.Errorf("gamma saw relayed traffic from %s, want alpha's gateway address %s", e.From, want)
	}
	// 4. Direct connections: beta → gamma's pod at beta's own view of it,
	// not through alpha.
	patch := client.MergeFrom(svc.DeepCopy())
	svc.Annotations = map[string]string{corev1alpha1.AnnotationUseDirectConnections: "true"}
	if err := ca.Patch(ctx, svc, patch); err != nil {
		t.Fatal(err)
	}
	direct := mustTranslate(t, gammaPod.Status.PodIP, betaGamma.Spec.Remote.PodCIDR, betaGamma.Status.RemappedRemote.PodCIDR)
	inSlice(cb, "beta", direct)
	reach("beta's pod reaches gamma's pod directly", fromBeta, direct, "gamma", onGamma.Name)

	// 5. Alpha's gateway dies: traffic through it fails, beta↔gamma does not;
	// restarted, it carries traffic again.
	gws["alpha"].stop(syscall.SIGKILL)
	if e, err := get(fromAlpha, onGamma.Status.PodIP); err == nil {
		t.Errorf("alpha reached gamma with its gateway dead (answered by %s/%s)", e.Cluster, e.Pod)
	}
	// At once, not eventually: the link does not go through alpha.
	if e, err := get(fromBeta, direct); err != nil || e.Cluster != "gamma" || e.Pod != onGamma.Name {
		t.Errorf("beta → gamma directly with alpha's gateway dead: answered by %s/%s, %v; want gamma/%s", e.Cluster, e.Pod, err, onGamma.Name)
	}
	eventually(t, 30*time.Second, "alpha's link to gamma reported GatewayDown", func() error {
		nc := &networkingv1alpha1.NetworkConfiguration{}
		if err := ca.Get(ctx, client.ObjectKeyFromObject(alphaGamma), nc); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(nc.Status.Conditions, networkingv1alpha1.ConditionTunnelConnected); c == nil || c.Reason != networkingv1alpha1.ReasonGatewayDown {
			return fmt.Errorf("TunnelConnected %+v", c)
		}
		return nil
	})
	gws["alpha"].start(t)
	reach("alpha's pod reaches gamma again after its gateway restarted", fromAlpha, onGamma.Status.PodIP, "gamma", onGamma.Name)

	// annexctl status shows the tunnels.
	eventually(t, 30*time.Second, "alpha's tunnels connected in annexctl status", func() error {
		out, err := annexctl(t, "status", "--kubeconfig", alpha.KubeconfigPath(), "-o", "json")
		if err != nil {
			return err
		}
		var r struct {
			Links []struct {
				Remote, Tunnel, LastHandshake string
				RxBytes                       int64
			} `json:"networkLinks"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			return err
		}
		if len(r.Links) != 2 {
			return fmt.Errorf("links %+v", r.Links)
		}
		for _, l := range r.Links {
			if l.Tunnel != "True" || l.LastHandshake == "" || l.RxBytes == 0 {
				return fmt.Errorf("link %+v", l)
			}
		}
		return nil
	})
	out, _ := annexctl(t, "status", "--kubeconfig", alpha.KubeconfigPath())
	if !strings.Contains(out, "Network links") {
		t.Errorf("no Network links table:\n%s", out)
	}

	// Disconnecting beta and gamma removes their link's device on both
	// routers, and the direct path with it.
	if out, err := annexctl(t, "network", "disconnect", "--kubeconfig", beta.KubeconfigPath(), "--remote-kubeconfig", gamma.KubeconfigPath()); err != nil {
		t.Fatalf("network disconnect beta gamma: %v\n%s", err, out)
	}
	for router, dev := range map[string]string{"beta": gateway.DeviceName("gamma"), "gamma": gateway.DeviceName("beta")} {
		eventually(t, 30*time.Second, router+"'s router without "+dev, func() error {
			return sandboxnet.Do(sandboxnet.RouterNetns(router), func() error {
				if _, err := netlink.LinkByName(dev); err == nil {
					return fmt.Errorf("%s still there", dev)
				}
				return nil
			})
		})
	}
	if e, err := get(fromBeta, direct); err == nil {
		t.Errorf("beta reached %s after the disconnect (answered by %s/%s)", direct, e.Cluster, e.Pod)
	}
}

// tenantPodOn starts, on a provider of the network sandbox, a pod with a
// network namespace in namespace ns, labelled as a remote namespace of
// consumer (a tenant the test makes up), and returns it Running with its IP.
func tenantPodOn(t *testing.T, c client.Client, ns, consumer string) *corev1.Pod {
	t.Helper()
	return runningPod(t, c, map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: consumer},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "intruder", Labels: map[string]string{sandboxnet.LabelSandboxNetns: "true"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, 60*time.Second)
}
