package virtualnode_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/agent"
	"github.com/annexhq/annex/internal/controller/replicator"
	"github.com/annexhq/annex/internal/controller/shadowpod"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
	"github.com/annexhq/annex/internal/remote"
	"github.com/annexhq/annex/internal/virtualnode"
	"github.com/annexhq/annex/internal/virtualnode/podreflector"
)

const (
	consumerID = "alpha"
	providerID = "beta"
	localNS    = "demo"
	remoteNS   = "demo-alpha"
	nodeName   = "annex-beta"
	// providerPodCIDR is the provider's pod range: offloaded pods get IPs
	// from it (the IP translator is the identity here).
	providerPodCIDR = "10.246.0.0/16"
)

// TestVirtualNodeIntegration runs the virtual node of a consumer against a
// real provider: registration, offloading, status reflection, deletion,
// provider failure and recovery, restart safety.
func TestVirtualNodeIntegration(t *testing.T) {
	ctx, te := integration(t, 6*time.Minute)
	provider, cc, pc, ccfg, pcfg, scheme, vn := te.provider, te.cc, te.pc, te.ccfg, te.pcfg, te.scheme, te.vn

	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone, transitions := runAgent(agentCtx, t, ccfg, pcfg, scheme)

	// The Node.
	start := time.Now()
	clustertest.Eventually(t, 30*time.Second, "Node Ready", func() error {
		n := &corev1.Node{}
		if err := cc.Get(ctx, client.ObjectKey{Name: nodeName}, n); err != nil {
			return err
		}
		return nodeReady(n, corev1.ConditionTrue)
	})
	t.Logf("timing: Node %s Ready %s after the agent started", nodeName, time.Since(start).Round(time.Millisecond))
	node := &corev1.Node{}
	clustertest.Must(t, cc.Get(ctx, client.ObjectKey{Name: nodeName}, node))
	checkNode(t, node)
	clustertest.Eventually(t, 20*time.Second, "taints", func() error {
		clustertest.Must(t, cc.Get(ctx, client.ObjectKey{Name: nodeName}, node))
		return checkTaints(node)
	})
	clustertest.Eventually(t, 10*time.Second, "lease", func() error {
		return cc.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: nodeName}, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}})
	})
	clustertest.Eventually(t, 10*time.Second, "VirtualNode Ready", func() error {
		got := &corev1alpha1.VirtualNode{}
		clustertest.Must(t, cc.Get(ctx, client.ObjectKeyFromObject(vn), got))
		if !controllerutil.ContainsFinalizer(got, virtualnode.Finalizer) {
			return errors.New("no finalizer")
		}
		if !meta.IsStatusConditionTrue(got.Status.Conditions, offloadingv1alpha1.ConditionReady) || got.Status.NodeName != nodeName {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})

	// Capacity follows the VirtualNode.
	patchVN := vn.DeepCopy()
	patchVN.Spec.Resources[corev1.ResourceCPU] = resource.MustParse("12")
	clustertest.Must(t, cc.Patch(ctx, patchVN, client.MergeFrom(vn)))
	clustertest.Eventually(t, 10*time.Second, "capacity update", func() error {
		clustertest.Must(t, cc.Get(ctx, client.ObjectKey{Name: nodeName}, node))
		if q := node.Status.Capacity[corev1.ResourceCPU]; q.Cmp(resource.MustParse("12")) != 0 {
			return fmt.Errorf("cpu capacity %s", q.String())
		}
		return nil
	})

	// A pod bound to the node becomes a ShadowPod and runs.
	start = time.Now()
	web := createPod(ctx, t, cc, "web")
	sp := waitShadowPod(ctx, t, pc, "web")
	t.Logf("timing: ShadowPod created %s after the pod", time.Since(start).Round(time.Millisecond))
	checkShadowPod(t, sp, web)
	waitPodReady(ctx, t, cc, "web", corev1.ConditionTrue, 30*time.Second)
	t.Logf("timing: pod Running and Ready %s after creation", time.Since(start).Round(time.Millisecond))
	web = getPod(ctx, t, cc, "web")
	if web.Status.Phase != corev1.PodRunning || !inCIDR(web.Status.PodIP, providerPodCIDR) || web.Status.HostIP != "127.0.0.1" {
		t.Fatalf("pod status: phase %s podIP %q hostIP %q", web.Status.Phase, web.Status.PodIP, web.Status.HostIP)
	}

	// Label changes reach the ShadowPod.
	lp := web.DeepCopy()
	lp.Labels["tier"] = "front"
	clustertest.Must(t, cc.Patch(ctx, lp, client.MergeFrom(web)))
	clustertest.Eventually(t, 10*time.Second, "label pushed", func() error {
		got := &offloadingv1alpha1.ShadowPod{}
		clustertest.Must(t, pc.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: "web"}, got))
		if got.Spec.PodLabels["tier"] != "front" {
			return fmt.Errorf("podLabels %v", got.Spec.PodLabels)
		}
		return nil
	})

	// A second pod, deleted while the provider is hung.
	createPod(ctx, t, cc, "web-2")
	waitPodReady(ctx, t, cc, "web-2", corev1.ConditionTrue, 30*time.Second)

	// Provider failure: a hung API server.
	t.Log("pausing the provider's API server")
	clustertest.Must(t, provider.PauseAPIServer())
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = provider.ResumeAPIServer(context.Background())
		}
	}()
	for _, name := range []string{"web", "web-2"} {
		clustertest.Eventually(t, 15*time.Second, name+" NotReady", func() error {
			p := getPod(ctx, t, cc, name)
			if err := podReady(p, corev1.ConditionFalse); err != nil {
				return err
			}
			if c := podCondition(p, corev1.ContainersReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != podreflector.ReasonProviderUnreachable {
				return fmt.Errorf("ContainersReady %+v", c)
			}
			if p.Labels[corev1alpha1.LabelRemoteUnavailable] != "true" {
				return errors.New("no remote-unavailable label")
			}
			return nil
		})
	}
	ropts := remote.DefaultOptions()
	t.Logf("timing: pods NotReady and labelled %s after the provider hung (detection bound %s), %s after the transition",
		time.Since(paused).Round(time.Millisecond), ropts.DetectionBound(), time.Since(transitions.last(false)).Round(time.Millisecond))
	clustertest.Eventually(t, 10*time.Second, "Node NotReady", func() error {
		clustertest.Must(t, cc.Get(ctx, client.ObjectKey{Name: nodeName}, node))
		if err := nodeReady(node, corev1.ConditionFalse); err != nil {
			return err
		}
		if c := nodeCondition(node, corev1.NodeReady); c.Reason != corev1alpha1.ReasonProviderUnreachable {
			return fmt.Errorf("reason %s", c.Reason)
		}
		return nil
	})
	// Deleting a pod while the provider is unreachable: it stays terminating.
	clustertest.Must(t, cc.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: localNS, Name: "web-2"}}, client.GracePeriodSeconds(1)))
	// Nothing flips the pods back while the provider is hung.
	for range 10 {
		time.Sleep(300 * time.Millisecond)
		p := getPod(ctx, t, cc, "web")
		if err := podReady(p, corev1.ConditionFalse); err != nil || p.Labels[corev1alpha1.LabelRemoteUnavailable] != "true" {
			t.Fatalf("pod web flipped back while the provider is unreachable: %v, labels %v", err, p.Labels)
		}
		p2 := getPod(ctx, t, cc, "web-2")
		if p2.DeletionTimestamp == nil {
			t.Fatal("web-2 is not terminating")
		}
	}

	t.Log("resuming the provider's API server")
	clustertest.Must(t, provider.ResumeAPIServer(ctx))
	resumed = true
	back := time.Now()
	waitPodReady(ctx, t, cc, "web", corev1.ConditionTrue, 20*time.Second)
	clustertest.Eventually(t, 10*time.Second, "label removed", func() error {
		if _, ok := getPod(ctx, t, cc, "web").Labels[corev1alpha1.LabelRemoteUnavailable]; ok {
			return errors.New("label still set")
		}
		return nil
	})
	t.Logf("timing: pod Ready again and unlabelled %s after the provider resumed, %s after the transition",
		time.Since(back).Round(time.Millisecond), time.Since(transitions.last(true)).Round(time.Millisecond))
	clustertest.Eventually(t, 20*time.Second, "postponed deletion carried out", func() error {
		if err := cc.Get(ctx, client.ObjectKey{Namespace: localNS, Name: "web-2"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("local pod web-2: %v", err)
		}
		if err := pc.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: "web-2"}, &offloadingv1alpha1.ShadowPod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ShadowPod web-2: %v", err)
		}
		return nil
	})
	t.Logf("timing: postponed deletion done %s after the provider resumed", time.Since(back).Round(time.Millisecond))
	clustertest.Eventually(t, 10*time.Second, "Node Ready again", func() error {
		clustertest.Must(t, cc.Get(ctx, client.ObjectKey{Name: nodeName}, node))
		return nodeReady(node, corev1.ConditionTrue)
	})

	// Deleting the local pod deletes the ShadowPod, then the pod.
	start = time.Now()
	clustertest.Must(t, cc.Delete(ctx, getPod(ctx, t, cc, "web")))
	clustertest.Eventually(t, 20*time.Second, "pod web deleted", func() error {
		if err := pc.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: "web"}, &offloadingv1alpha1.ShadowPod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ShadowPod web: %v", err)
		}
		if err := cc.Get(ctx, client.ObjectKey{Namespace: localNS, Name: "web"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("local pod web: %v", err)
		}
		return nil
	})
	t.Logf("timing: pod and ShadowPod gone %s after the deletion", time.Since(start).Round(time.Millisecond))

	// A ShadowPod deleted on the provider deletes the local pod.
	createPod(ctx, t, cc, "web-4")
	waitPodReady(ctx, t, cc, "web-4", corev1.ConditionTrue, 30*time.Second)
	clustertest.Must(t, pc.Delete(ctx, &offloadingv1alpha1.ShadowPod{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: "web-4"}}))
	clustertest.Eventually(t, 20*time.Second, "remote deletion reflected", func() error {
		if err := cc.Get(ctx, client.ObjectKey{Namespace: localNS, Name: "web-4"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("local pod web-4: %v", err)
		}
		return nil
	})

	// Restart safety: a new agent adopts the ShadowPod of a running pod.
	createPod(ctx, t, cc, "web-3")
	waitPodReady(ctx, t, cc, "web-3", corev1.ConditionTrue, 30*time.Second)
	before := waitShadowPod(ctx, t, pc, "web-3")
	stopAgent()
	<-agentDone
	agentCtx, stopAgent = context.WithCancel(ctx)
	defer stopAgent()
	agentDone, _ = runAgent(agentCtx, t, ccfg, pcfg, scheme)
	restarted := time.Now()
	for time.Since(restarted) < 5*time.Second {
		p := getPod(ctx, t, cc, "web-3")
		if err := podReady(p, corev1.ConditionTrue); err != nil {
			t.Fatalf("pod web-3 after the agent restart: %v", err)
		}
		if _, ok := p.Labels[corev1alpha1.LabelRemoteUnavailable]; ok {
			t.Fatal("pod web-3 labelled unavailable after the agent restart")
		}
		time.Sleep(250 * time.Millisecond)
	}
	after := waitShadowPod(ctx, t, pc, "web-3")
	if after.UID != before.UID {
		t.Fatalf("ShadowPod web-3 was re-created across the restart: UID %s -> %s", before.UID, after.UID)
	}
	var sps offloadingv1alpha1.ShadowPodList
	clustertest.Must(t, pc.List(ctx, &sps, client.InNamespace(remoteNS)))
	if len(sps.Items) != 1 {
		t.Fatalf("ShadowPods after the restart: %d, want 1", len(sps.Items))
	}

	// Forced unpeer: the provider is marked permanently unreachable, the
	// pods are marked, and deleting the VirtualNode removes the Node and the
	// pods at once and releases the finalizer.
	fc := &corev1alpha1.ForeignCluster{}
	clustertest.Must(t, cc.Get(ctx, client.ObjectKey{Name: providerID}, fc))
	fcPatch := fc.DeepCopy()
	fcPatch.Spec.Unreachable = true
	clustertest.Must(t, cc.Patch(ctx, fcPatch, client.MergeFrom(fc)))
	marked := time.Now()
	clustertest.Eventually(t, 10*time.Second, "web-3 marked after spec.unreachable", func() error {
		p := getPod(ctx, t, cc, "web-3")
		if err := podReady(p, corev1.ConditionFalse); err != nil {
			return err
		}
		if p.Labels[corev1alpha1.LabelRemoteUnavailable] != "true" {
			return errors.New("no label")
		}
		return nil
	})
	t.Logf("timing: pods marked %s after spec.unreachable was set", time.Since(marked).Round(time.Millisecond))
	unpeer := time.Now()
	clustertest.Must(t, cc.Delete(ctx, vn))
	clustertest.Eventually(t, 20*time.Second, "VirtualNode, Node and pods gone", func() error {
		if err := cc.Get(ctx, client.ObjectKeyFromObject(vn), &corev1alpha1.VirtualNode{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("VirtualNode: %v", err)
		}
		if err := cc.Get(ctx, client.ObjectKey{Name: nodeName}, &corev1.Node{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Node: %v", err)
		}
		if err := cc.Get(ctx, client.ObjectKey{Namespace: localNS, Name: "web-3"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod web-3: %v", err)
		}
		return nil
	})
	t.Logf("timing: VirtualNode, Node and pods gone %s after the VirtualNode was deleted (provider marked unreachable)", time.Since(unpeer).Round(time.Millisecond))
	stopAgent()
	<-agentDone
}

// testEnv is a consumer and a provider set up for offloading namespace
// localNS through the virtual node of VirtualNode vn, with the provider's
// ShadowPod controller running; the consumer's agent is not started.
type testEnv struct {
	provider   *localcluster.Cluster
	cc, pc     client.Client
	ccfg, pcfg *rest.Config
	scheme     *runtime.Scheme
	vn         *corev1alpha1.VirtualNode
}

// integration skips t unless integration tests can run here, and otherwise
// logs at the tests' verbosity and sets up the clusters with a context that
// ends after timeout (or with the test).
func integration(t *testing.T, timeout time.Duration) (context.Context, *testEnv) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	if err := localcluster.CheckBinaries(localcluster.DefaultBinDir()); err != nil {
		t.Skipf("integration test needs the real Kubernetes binaries: %v", err)
	}
	logf.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(testVerbosity()))))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx, setup(ctx, t)
}

func setup(ctx context.Context, t *testing.T) *testEnv {
	t.Helper()
	consumer, provider := startClusters(ctx, t)
	scheme, err := agent.Scheme()
	clustertest.Must(t, err)
	cc, ccfg := clustertest.Client(t, consumer, scheme)
	pc, pcfg := clustertest.Client(t, provider, scheme)
	// The agents' scheme has no apiextensions types: the CRDs go in with
	// clients of their own.
	for _, lc := range []*localcluster.Cluster{consumer, provider} {
		crdClient, _ := clustertest.Client(t, lc, clustertest.Scheme(t))
		clustertest.InstallCRDs(ctx, t, crdClient)
	}

	// Provider: the remote namespace, the consumer's quota, and the
	// ShadowPod controller.
	runProviderAgent(ctx, t, pc, pcfg, scheme)

	// Consumer: the ForeignCluster, the offloaded namespace, the VirtualNode.
	peerNS := corev1alpha1.PeerNamespaceName(providerID)
	createNamespace(ctx, t, cc, localNS)
	createNamespace(ctx, t, cc, peerNS)
	clustertest.Must(t, cc.Create(ctx, &corev1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: providerID},
		Spec:       corev1alpha1.ForeignClusterSpec{ClusterID: providerID, APIServerURL: provider.APIServerURL()},
	}))
	nso := &offloadingv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Namespace: localNS, Name: offloadingv1alpha1.NamespaceOffloadingName}}
	clustertest.Must(t, cc.Create(ctx, nso))
	nso.Status.RemoteNamespaces = []offloadingv1alpha1.ProviderNamespaceStatus{{ClusterID: providerID, RemoteNamespace: remoteNS, Phase: offloadingv1alpha1.RemoteNamespaceReady}}
	clustertest.Must(t, cc.Status().Update(ctx, nso))
	vn := &corev1alpha1.VirtualNode{
		ObjectMeta: metav1.ObjectMeta{Namespace: peerNS, Name: providerID},
		Spec: corev1alpha1.VirtualNodeSpec{
			ClusterID: providerID,
			Resources: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("10"),
				corev1.ResourceMemory: resource.MustParse("20Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			},
			Labels:               map[string]string{"region": "eu"},
			Taints:               []corev1.Taint{{Key: "example.com/extra", Value: "x", Effect: corev1.TaintEffectNoSchedule}},
			CredentialsSecretRef: corev1alpha1.SecretReference{Namespace: peerNS, Name: corev1alpha1.CredentialsSecretName},
		},
	}
	clustertest.Must(t, cc.Create(ctx, vn))
	waitDefaultServiceAccount(ctx, t, cc, localNS)
	waitDefaultServiceAccount(ctx, t, pc, remoteNS)
	return &testEnv{provider: provider, cc: cc, pc: pc, ccfg: ccfg, pcfg: pcfg, scheme: scheme, vn: vn}

}

func testVerbosity() int {
	if v, err := strconv.Atoi(os.Getenv("ANNEX_TEST_V")); err == nil {
		return v
	}
	return 0
}

// startClusters starts the consumer and the provider in parallel; both stop
// with the test.
func startClusters(ctx context.Context, t *testing.T) (consumer, provider *localcluster.Cluster) {
	t.Helper()
	dir := t.TempDir()
	opts := []localcluster.Options{
		{Name: consumerID, Dir: filepath.Join(dir, consumerID), PodCIDR: "10.244.0.0/16"},
		{Name: providerID, Dir: filepath.Join(dir, providerID), PodCIDR: providerPodCIDR},
	}
	clusters := make([]*localcluster.Cluster, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Go(func() { clusters[i], errs[i] = localcluster.Start(ctx, o) })
	}
	wg.Wait()
	for _, c := range clusters {
		if c != nil {
			t.Cleanup(func() {
				if err := c.Stop(context.Background()); err != nil {
					t.Errorf("stop cluster %s: %v", c.Name(), err)
				}
			})
		}
	}
	for _, err := range errs {
		clustertest.Must(t, err)
	}
	return clusters[0], clusters[1]
}

func createNamespace(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func waitDefaultServiceAccount(ctx context.Context, t *testing.T, c client.Client, ns string) {
	t.Helper()
	clustertest.Eventually(t, 30*time.Second, "ServiceAccount "+ns+"/default", func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
	})
}

// transitionLog records when remote.Manager reported reachability
// transitions.
type transitionLog struct {
	mu sync.Mutex
	at map[bool]time.Time
}

func (l *transitionLog) record(_ string, reachable bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at[reachable] = time.Now()
}

// last returns when the provider last became reachable (or unreachable).
func (l *transitionLog) last(reachable bool) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at[reachable]
}

// runAgent runs what the agent runs for virtual nodes: a manager with
// remote.Manager (pointing at the provider with admin credentials) and the
// virtual node reconciler. Its cache trims pods as the agent's does.
// The returned channel closes when it stopped.
func runAgent(ctx context.Context, t *testing.T, ccfg, pcfg *rest.Config, scheme *runtime.Scheme) (<-chan struct{}, *transitionLog) {
	t.Helper()
	mgr, err := ctrl.NewManager(ccfg, ctrl.Options{
		Cache:                  cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Transform: agent.TrimPod}}},
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	clustertest.Must(t, err)
	log := mgr.GetLogger()
	remotes := remote.NewManager(mgr.GetClient(), scheme, remote.DefaultOptions(), clock.RealClock{}, log.WithName("remote"))
	clustertest.Must(t, remotes.Set(providerID, pcfg))
	clustertest.Must(t, mgr.Add(remotes))
	transitions := &transitionLog{at: map[bool]time.Time{}}
	remotes.OnTransition(transitions.record)
	r := virtualnode.NewReconciler(mgr, remotes, consumerID, virtualnode.Options{NodeIP: "127.0.0.1"})
	clustertest.Must(t, r.SetupWithManager(mgr))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("agent manager: %v", err)
		}
	}()
	return done, transitions
}

// runProviderAgent runs the provider's ShadowPod controller
// (internal/controller/shadowpod), which creates the real pod of each
// ShadowPod and mirrors its status, on the provider. The remote namespace
// is labelled for the consumer and the consumer's accepted ResourceSlice is
// in its tenant namespace, as the provider side of peering and offloading
// leave them.
func runProviderAgent(ctx context.Context, t *testing.T, c client.Client, cfg *rest.Config, scheme *runtime.Scheme) {
	t.Helper()
	for _, name := range []string{remoteNS, corev1alpha1.TenantNamespaceName(consumerID)} {
		clustertest.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1alpha1.LabelRemoteClusterID: consumerID, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex,
		}}}))
	}
	granted := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("10"), corev1.ResourceMemory: resource.MustParse("20Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	rs := &corev1alpha1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.TenantNamespaceName(consumerID), Name: providerID,
			Annotations: map[string]string{replicator.AnnotationOriginNamespace: corev1alpha1.PeerNamespaceName(providerID)}},
		Spec: corev1alpha1.ResourceSliceSpec{ConsumerClusterID: consumerID, ProviderClusterID: providerID, Resources: granted},
	}
	clustertest.Must(t, c.Create(ctx, rs))
	rs.Status = corev1alpha1.ResourceSliceStatus{Phase: corev1alpha1.ResourceSliceAccepted, Resources: granted}
	clustertest.Must(t, c.Status().Update(ctx, rs))

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	clustertest.Must(t, err)
	clustertest.Must(t, shadowpod.New(mgr.GetClient(), mgr.GetEventRecorder("annex-shadowpod"), shadowpod.Options{}).SetupWithManager(mgr))
	go func() {
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("provider manager: %v", err)
		}
	}()
}

// createPod creates newPod(name).
func createPod(ctx context.Context, t *testing.T, c client.Client, name string) *corev1.Pod {
	t.Helper()
	pod := newPod(name)
	clustertest.Must(t, c.Create(ctx, pod))
	return pod
}

// newPod is a pod bound to the virtual node, with what the offloading
// admission policy adds (toleration, node affinity).
func newPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: localNS, Name: name, Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"}},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/web:1"}},
			Tolerations: []corev1.Toleration{{Key: corev1alpha1.TaintKeyVirtualNode, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				{Key: "example.com/extra", Operator: corev1.TolerationOpExists}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: corev1alpha1.LabelRemoteClusterID, Operator: corev1.NodeSelectorOpIn, Values: []string{providerID}}}}},
			}}},
		},
	}
}

func getPod(ctx context.Context, t *testing.T, c client.Client, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	clustertest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: localNS, Name: name}, p))
	return p
}

func waitShadowPod(ctx context.Context, t *testing.T, c client.Client, name string) *offloadingv1alpha1.ShadowPod {
	t.Helper()
	sp := &offloadingv1alpha1.ShadowPod{}
	clustertest.Eventually(t, 20*time.Second, "ShadowPod "+name, func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: name}, sp)
	})
	return sp
}

func waitPodReady(ctx context.Context, t *testing.T, c client.Client, name string, want corev1.ConditionStatus, timeout time.Duration) {
	t.Helper()
	clustertest.Eventually(t, timeout, "pod "+name+" Ready="+string(want), func() error {
		p := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: localNS, Name: name}, p); err != nil {
			return err
		}
		return podReady(p, want)
	})
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func podReady(p *corev1.Pod, want corev1.ConditionStatus) error {
	c := podCondition(p, corev1.PodReady)
	if c == nil || c.Status != want {
		return fmt.Errorf("pod %s: Ready %+v (phase %s, conditions %+v)", p.Name, c, p.Status.Phase, p.Status.Conditions)
	}
	return nil
}

func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return corev1.NodeCondition{}
}

func nodeReady(n *corev1.Node, want corev1.ConditionStatus) error {
	if c := nodeCondition(n, corev1.NodeReady); c.Status != want {
		return fmt.Errorf("Node Ready %+v", c)
	}
	return nil
}

func checkNode(t *testing.T, n *corev1.Node) {
	t.Helper()
	for k, v := range map[string]string{
		"type": "virtual-node", corev1alpha1.LabelRemoteClusterID: providerID,
		corev1.LabelHostname: nodeName, corev1.LabelOSStable: "linux", "region": "eu",
	} {
		if n.Labels[k] != v {
			t.Errorf("Node label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.Cmp(resource.MustParse("10")) != 0 {
		t.Errorf("Node cpu capacity %s", q.String())
	}
	if q := n.Status.Allocatable[corev1.ResourceMemory]; q.Cmp(resource.MustParse("20Gi")) != 0 {
		t.Errorf("Node memory allocatable %s", q.String())
	}
	ip := ""
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
		}
	}
	if ip != "127.0.0.1" {
		t.Errorf("Node InternalIP %q", ip)
	}
}

func checkTaints(n *corev1.Node) error {
	want := map[string]string{corev1alpha1.TaintKeyVirtualNode: providerID, "example.com/extra": "x"}
	for k, v := range want {
		found := false
		for _, tn := range n.Spec.Taints {
			if tn.Key == k && tn.Value == v && tn.Effect == corev1.TaintEffectNoSchedule {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("taint %s=%s missing: %v", k, v, n.Spec.Taints)
		}
	}
	return nil
}

func checkShadowPod(t *testing.T, sp *offloadingv1alpha1.ShadowPod, pod *corev1.Pod) {
	t.Helper()
	if sp.Labels[corev1alpha1.LabelRemoteClusterID] != consumerID || sp.Labels[corev1alpha1.LabelManagedBy] != corev1alpha1.ManagedByAnnex {
		t.Errorf("ShadowPod labels %v", sp.Labels)
	}
	if podreflector.OriginUID(sp) != string(pod.UID) {
		t.Errorf("ShadowPod origin UID %q, pod UID %q", podreflector.OriginUID(sp), pod.UID)
	}
	if sp.Spec.Pod.NodeName != "" || sp.Spec.Pod.Affinity != nil {
		t.Errorf("ShadowPod spec keeps nodeName %q or affinity %+v", sp.Spec.Pod.NodeName, sp.Spec.Pod.Affinity)
	}
	for _, tol := range sp.Spec.Pod.Tolerations {
		if tol.Key == corev1alpha1.TaintKeyVirtualNode {
			t.Errorf("ShadowPod keeps the virtual-node toleration")
		}
	}
	if sp.Spec.PodLabels["app"] != "web" || sp.Spec.PodAnnotations["team"] != "a" || len(sp.Spec.PodAnnotations) != 1 {
		t.Errorf("ShadowPod podLabels %v podAnnotations %v", sp.Spec.PodLabels, sp.Spec.PodAnnotations)
	}
}

func inCIDR(ip, cidr string) bool {
	_, n, err := net.ParseCIDR(cidr)
	return err == nil && n.Contains(net.ParseIP(ip))
}
