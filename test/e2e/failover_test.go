package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/partition"
)

// The failover test's fence F and release T (seconds): the smallest the API
// allows, with heartbeats every 2 s.
const (
	testFence   = 10
	testRelease = 25
)

// TestFailover: a namespace offloaded with failover, a two-member
// StatefulSet on beta, alpha reaching beta and gamma through proxies the
// test can cut. Each case of docs/failover.md in turn, with every provider
// sampled every 100 ms for two running copies of one member:
//   - a flapping link (cuts shorter than F) moves nothing;
//   - beta partitioned: beta fences at F, alpha releases at T, the members
//     run on gamma; beta back runs nothing released and takes pods again;
//   - gamma dead (API server killed): alpha releases at T, the members run
//     on beta; gamma back fences at once and runs nothing released;
//   - alpha cut off from both: both fence, alpha releases, and once healed
//     the members run again.
func TestFailover(t *testing.T) {
	alpha, beta, gamma := env.clusters[0], env.clusters[1], env.clusters[2]
	ctx := context.Background()
	fast := []string{"--consumer-heartbeat-interval=2s"}
	installAndRunAgent(t, alpha, "alpha", fast...)
	installAndRunAgent(t, beta, "beta", fast...)
	installAndRunAgent(t, gamma, "gamma", fast...)
	peer(t, alpha, beta)
	peer(t, alpha, gamma)
	ns := "failover"
	remoteNS := ns + "-alpha"
	ca, cb, cg := crClient(t, alpha), crClient(t, beta), crClient(t, gamma)
	t.Cleanup(func() {
		_ = gamma.ResumeAPIServer(context.Background())
		_, _ = annexctl(t, "unoffload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath())
		_ = ca.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		for _, p := range []*localcluster.Cluster{beta, gamma} {
			if out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", p.KubeconfigPath()); err != nil {
				t.Errorf("clean-up unpeer %s: %v\n%s", p.Name(), err, out)
			}
		}
	})
	toBeta, toGamma := throughProxy(t, ca, beta), throughProxy(t, ca, gamma)

	if err := ca.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// Bad input first: a release that does not leave the fencing margin.
	if out, err := annexctl(t, "offload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath(), "--failover-release-after", "20s", "--failover-fence-after", "10s"); err == nil || !strings.Contains(out, "at least --failover-fence-after") {
		t.Fatalf("want a refusal of a release within the margin, got %v:\n%s", err, out)
	}
	out, err := annexctl(t, "offload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath(), "--pod-strategy", "Remote",
		"--failover-release-after", fmt.Sprintf("%ds", testRelease), "--failover-fence-after", fmt.Sprintf("%ds", testFence))
	if err != nil {
		t.Fatalf("offload: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, "failover armed by beta and gamma", func() error {
		nso := &offloadingv1alpha1.NamespaceOffloading{}
		if err := ca.Get(ctx, client.ObjectKey{Namespace: ns, Name: offloadingv1alpha1.NamespaceOffloadingName}, nso); err != nil {
			return err
		}
		c := meta.FindStatusCondition(nso.Status.Conditions, offloadingv1alpha1.ConditionFailover)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition Failover: %+v", c)
		}
		return nil
	})
	// Both members on beta first: gamma's virtual node cordoned meanwhile.
	cordon(t, ca, "annex-gamma", true)
	if err := ca.Create(ctx, statefulSet(ns, "db", 2)); err != nil {
		t.Fatal(err)
	}
	members := func(node string) func() error {
		return func() error {
			return podsReady(ctx, ca, ns, "app=db", 2, func(p *corev1.Pod) error {
				if p.Spec.NodeName != node {
					return fmt.Errorf("pod %s on %q, want %s", p.Name, p.Spec.NodeName, node)
				}
				return nil
			})
		}
	}
	eventually(t, 60*time.Second, "both members Ready on beta", members("annex-beta"))
	cordon(t, ca, "annex-gamma", false)

	s := startSampler(ctx, remoteNS, map[string]client.Client{"beta": cb, "gamma": cg})
	t.Cleanup(s.stop)

	t.Run("flapping link: nothing moves", func(t *testing.T) {
		before := podUIDs(ctx, t, ca, ns, "db")
		for range 4 {
			toBeta.Cut()
			time.Sleep(3 * time.Second)
			toBeta.Heal()
			time.Sleep(3 * time.Second)
		}
		eventually(t, 30*time.Second, "both members Ready on beta", members("annex-beta"))
		if after := podUIDs(ctx, t, ca, ns, "db"); !equalUIDs(before, after) {
			t.Errorf("members replaced by a flapping link: %v, then %v", before, after)
		}
		if err := fencedEvent(ctx, cb); err == nil {
			t.Error("beta fenced alpha's pods over a link that never stayed cut for the fence's 10 s")
		}
	})

	t.Run("beta partitioned: fenced there, released here, running on gamma", func(t *testing.T) {
		logHeartbeatAge(ctx, t, cb, "beta")
		start := time.Now()
		toBeta.Cut()
		eventually(t, 60*time.Second, "beta stopped the members itself", func() error { return noPodsIn(ctx, cb, remoteNS) })
		fenced := time.Since(start)
		eventually(t, 10*time.Second, "beta's Fenced Event", func() error { return fencedEvent(ctx, cb) })
		eventually(t, 90*time.Second, "both members Ready on gamma", members("annex-gamma"))
		t.Logf("beta partitioned: fenced there after %s, both members Ready on gamma %s after the cut (F %ds, T %ds)",
			fenced.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond), testFence, testRelease)
		if fenced > time.Duration(testRelease)*time.Second {
			t.Errorf("beta fenced after %s, later than the release (%ds)", fenced, testRelease)
		}
		toBeta.Heal()
		eventually(t, 30*time.Second, "virtual node annex-beta Ready again", func() error { return nodeReady(ctx, ca, "annex-beta") })
		consistently(t, 5*time.Second, "nothing released runs on beta", func() error { return noPodsIn(ctx, cb, remoteNS) })
	})

	t.Run("gamma dead: released here, running on beta, fenced when back", func(t *testing.T) {
		start := time.Now()
		s.ignore("gamma", true)
		if err := gamma.KillAPIServer(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 90*time.Second, "both members Ready on beta", members("annex-beta"))
		t.Logf("gamma dead: both members Ready on beta %s after the kill (T %ds)", time.Since(start).Round(100*time.Millisecond), testRelease)
		back := time.Now()
		if err := gamma.ResumeAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "gamma's API server answers", func() error { return cg.List(ctx, &corev1.NamespaceList{}, client.Limit(1)) })
		t.Logf("gamma's API server answers %s after it was started again", time.Since(back).Round(100*time.Millisecond))
		// Gamma's agent fences them once it leads again (alpha's reflector
		// may delete the orphaned ShadowPods first): every one stopping with
		// the fence's grace period.
		eventually(t, 30*time.Second, "gamma stopping the released members within the fence's bound", func() error { return allStopping(ctx, cg, remoteNS) })
		t.Logf("gamma back: the released members stopping there %s after its API server was started again", time.Since(back).Round(100*time.Millisecond))
		// kwok, whose watch of the restarted API server resumes with its own
		// backoff, takes a while to finish their deletion.
		eventually(t, 90*time.Second, "the released members gone from gamma", func() error { return noPodsIn(ctx, cg, remoteNS) })
		t.Logf("gamma back: the released members gone %s after its API server was started again", time.Since(back).Round(100*time.Millisecond))
		s.ignore("gamma", false)
		eventually(t, 30*time.Second, "virtual node annex-gamma Ready again", func() error { return nodeReady(ctx, ca, "annex-gamma") })
		consistently(t, 5*time.Second, "nothing released runs on gamma", func() error { return noPodsIn(ctx, cg, remoteNS) })
	})

	t.Run("alpha cut off from both: both fence, alpha releases, runs again once healed", func(t *testing.T) {
		start := time.Now()
		toBeta.Cut()
		toGamma.Cut()
		eventually(t, 60*time.Second, "beta stopped the members itself", func() error { return noPodsIn(ctx, cb, remoteNS) })
		eventually(t, 60*time.Second, "members released on alpha (replacements Pending, no provider answers)", func() error {
			pods := &corev1.PodList{}
			if err := ca.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app": "db"}); err != nil {
				return err
			}
			for _, p := range pods.Items {
				if p.Spec.NodeName != "" {
					return fmt.Errorf("pod %s still bound to %s", p.Name, p.Spec.NodeName)
				}
			}
			return nil
		})
		t.Logf("alpha cut off: released after %s", time.Since(start).Round(100*time.Millisecond))
		toBeta.Heal()
		toGamma.Heal()
		eventually(t, 90*time.Second, "both members Ready again", func() error {
			return podsReady(ctx, ca, ns, "app=db", 2, func(*corev1.Pod) error { return nil })
		})
	})

	s.stop()
	if n := s.overlaps.Load(); n > 0 {
		t.Errorf("two copies of one member ran at once in %d of %d samples: %s", n, s.samples.Load(), s.first())
	} else {
		t.Logf("no two copies of one member in %d samples (beta and gamma listed every 100 ms, or as fast as they answer)", s.samples.Load())
	}
}

// cordon marks node (un)schedulable.
func cordon(t *testing.T, c client.Client, node string, v bool) {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Spec.Unschedulable = v
	if err := c.Patch(context.Background(), n, patch); err != nil {
		t.Fatal(err)
	}
}

// statefulSet is a StatefulSet of replicas members.
func statefulSet(ns, name string, replicas int32) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			ServiceName:         name,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "db", Image: "postgres",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}},
				},
			},
		},
	}
}

// logHeartbeatAge logs how old alpha's heartbeat on a provider is.
func logHeartbeatAge(ctx context.Context, t *testing.T, c client.Client, provider string) {
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.TenantNamespaceName("alpha"), Name: corev1alpha1.HeartbeatLeaseName}, l); err != nil || l.Spec.RenewTime == nil {
		t.Logf("alpha's heartbeat on %s: %v", provider, err)
		return
	}
	t.Logf("alpha's heartbeat on %s renewed %s ago", provider, time.Since(l.Spec.RenewTime.Time).Round(10*time.Millisecond))
}

// fencedEvent finds the Event of a fence of alpha's pods on a provider.
func fencedEvent(ctx context.Context, c client.Client) error {
	evs := &eventsv1.EventList{}
	if err := c.List(ctx, evs, client.InNamespace(corev1alpha1.TenantNamespaceName("alpha"))); err != nil {
		return err
	}
	for _, e := range evs.Items {
		if e.Reason == "Fenced" {
			return nil
		}
	}
	return fmt.Errorf("no Fenced Event among %d in %s", len(evs.Items), corev1alpha1.TenantNamespaceName("alpha"))
}

// allStopping checks that every pod in ns is being deleted with a grace
// period of at most the fence's.
func allStopping(ctx context.Context, c client.Client, ns string) error {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds > offloadingv1alpha1.FenceGracePeriodSeconds {
			return fmt.Errorf("pod %s: deletion %v, grace %v", p.Name, p.DeletionTimestamp, ptr.Deref(p.DeletionGracePeriodSeconds, -1))
		}
	}
	return nil
}

func noPodsIn(ctx context.Context, c client.Client, ns string) error {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return err
	}
	if len(pods.Items) > 0 {
		return fmt.Errorf("%d pod(s) in %s, first %s (%s)", len(pods.Items), ns, pods.Items[0].Name, pods.Items[0].Status.Phase)
	}
	return nil
}

func equalUIDs(a, b map[string]types.UID) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// consistently fails t if cond fails at any check within d.
func consistently(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if err := cond(); err != nil {
			t.Fatalf("%s: not true within %s: %v", what, d, err)
		}
	}
}

// sampler counts the moments at which one pod name runs (phase Running,
// also while being deleted) on two providers at once.
type sampler struct {
	samples, overlaps atomic.Int64
	mu                sync.Mutex
	firstOverlap      string
	// ignored are providers whose pods are not counted: a dead provider's
	// API server, once started again, shows the pods it had as Running
	// until its agent reads them and fences (measured separately).
	ignored map[string]bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func startSampler(ctx context.Context, ns string, providers map[string]client.Client) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{cancel: cancel, done: make(chan struct{}), ignored: map[string]bool{}}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			where := map[string][]string{}
			for name, c := range providers {
				if s.isIgnored(name) {
					continue
				}
				callCtx, cancelCall := context.WithTimeout(ctx, 2*time.Second)
				pods := &corev1.PodList{}
				err := c.List(callCtx, pods, client.InNamespace(ns))
				cancelCall()
				if err != nil {
					continue // a dead provider runs nothing it can show
				}
				for _, p := range pods.Items {
					if p.Status.Phase == corev1.PodRunning {
						where[p.Name] = append(where[p.Name], name)
					}
				}
			}
			s.samples.Add(1)
			for pod, on := range where {
				if len(on) > 1 {
					s.overlaps.Add(1)
					s.mu.Lock()
					if s.firstOverlap == "" {
						s.firstOverlap = fmt.Sprintf("%s on %v at %s", pod, on, time.Now().Format(time.RFC3339Nano))
					}
					s.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() { s.cancel(); <-s.done }

func (s *sampler) ignore(provider string, v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ignored[provider] = v
}

func (s *sampler) isIgnored(provider string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ignored[provider]
}

func (s *sampler) first() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstOverlap
}

// throughProxy makes consumer's agent reach provider through a new proxy
// (ForeignCluster spec.apiServerURL) and waits until it is reachable that
// way.
func throughProxy(t *testing.T, consumer client.Client, provider *localcluster.Cluster) *partition.Proxy {
	t.Helper()
	p, err := partition.New(provider.APIServerURL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fc := &corev1alpha1.ForeignCluster{}
	if err := consumer.Get(ctx, client.ObjectKey{Name: provider.Name()}, fc); err != nil {
		t.Fatal(err)
	}
	direct := fc.Spec.APIServerURL
	patch := client.MergeFrom(fc.DeepCopy())
	fc.Spec.APIServerURL = p.URL()
	if err := consumer.Patch(ctx, fc, patch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Heal()
		fc := &corev1alpha1.ForeignCluster{}
		if consumer.Get(context.Background(), client.ObjectKey{Name: provider.Name()}, fc) == nil {
			patch := client.MergeFrom(fc.DeepCopy())
			fc.Spec.APIServerURL = direct
			_ = consumer.Patch(context.Background(), fc, patch)
		}
		_ = p.Close()
	})
	eventually(t, 30*time.Second, provider.Name()+" reachable through the proxy", func() error {
		fc := &corev1alpha1.ForeignCluster{}
		if err := consumer.Get(ctx, client.ObjectKey{Name: provider.Name()}, fc); err != nil {
			return err
		}
		if c := reachable(fc); c == nil || c.Status != metav1.ConditionTrue || p.Conns() == 0 {
			return fmt.Errorf("reachable: %+v, connections through the proxy: %d", c, p.Conns())
		}
		return nil
	})
	return p
}
