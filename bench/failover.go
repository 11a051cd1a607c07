package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/partition"
)

// The failover phase (issue #21, docs/failover.md): a StatefulSet in a
// namespace offloaded with failover runs on the provider; the provider is
// killed or partitioned, and the phase measures the time until every member
// runs Ready elsewhere, while both places are sampled for two copies of one
// member running at once.
//
// Where the members go: the benchmark has one provider, and a third cluster
// only for this phase would add a whole control plane (and its CPU) to the
// machine. The consumer's own kwok node is the other place instead: the
// namespace is offloaded with pod strategy LocalAndRemote, the consumer's
// local node is cordoned while the members are first created (so that they
// all go to the provider) and uncordoned before the fault, and the
// replacements the StatefulSet controller creates after the release run
// there. For failover this is the same as a second provider: the consumer
// releases a pod by deleting it, whatever node its replacement then gets,
// and the sampler sees the replacement through the consumer's API server
// instead of a second provider's (a pod bound to the local node, Running).

// Names and settings of the failover phase.
const (
	failoverNS      = "bench-failover"
	failoverApp     = "db"
	failoverMembers = 3
	// failoverFence and failoverRelease are F and T (seconds): the
	// smallest the API allows, as TestFailover uses them.
	failoverFence   = 10
	failoverRelease = 25
	// failoverSample is how often both places are listed.
	failoverSample = 100 * time.Millisecond
	// failoverWait bounds the wait for the members elsewhere after the
	// fault: T with a wide margin.
	failoverWait = 2 * time.Minute
	// failoverQuiet is how long the trial leaves the healthy clusters alone
	// before the fault (probes with a streak of successes, a heartbeat
	// renewed at the short interval).
	failoverQuiet = 3 * time.Second
)

// Faults of the failover trials.
const (
	faultKilled      = "killed"      // the provider's API server SIGKILLed, restarted after the measurement
	faultPartitioned = "partitioned" // the consumer's only way to the provider, a proxy, cut, healed after the measurement
)

// failoverConsumerArgs are the consumer agent's flags for the phase: the
// fence F must be at least three heartbeat intervals (10 s by default).
var failoverConsumerArgs = []string{"--consumer-heartbeat-interval=2s"}

// FailoverTrial is one fault of the provider with failover on.
type FailoverTrial struct {
	Fault   string `json:"fault"`
	Trial   int    `json:"trial"`
	Members int    `json:"members"`
	// FenceAfterSeconds and ReleaseAfterSeconds are the namespace's F and T.
	FenceAfterSeconds   int `json:"fenceAfterSeconds"`
	ReleaseAfterSeconds int `json:"releaseAfterSeconds"`
	// FailoverSeconds is from the fault to every member seen Ready on the
	// consumer's local node (a watch of the consumer's pods).
	FailoverSeconds float64 `json:"failoverSeconds"`
	// ReleasedSeconds is from the fault to the first replacement pod seen
	// on the consumer (the consumer released the members).
	ReleasedSeconds float64 `json:"releasedSeconds"`
	// HeartbeatAgeSeconds is how old the consumer's heartbeat on the
	// provider was at the fault: the release falls T after it.
	HeartbeatAgeSeconds float64 `json:"heartbeatAgeSeconds"`
	// FencedSeconds (partitioned) is from the cut to the last sample in
	// which the provider listed a member Running and not being deleted (its
	// agent had fenced them all after it); StoppedSeconds to the last in
	// which it listed one Running at all.
	FencedSeconds  float64 `json:"fencedSeconds,omitempty"`
	StoppedSeconds float64 `json:"stoppedSeconds,omitempty"`
	// APIServerBackSeconds (killed) is from the restart of the provider's
	// API server, after the members ran elsewhere, to its first answer.
	// From that answer, StaleFencedSeconds is to the last sample in which it
	// listed one of its stale members Running and not being deleted (by its
	// agent's fence, or by its garbage collector once the consumer's agent
	// deleted the orphaned ShadowPods: see ProviderFenced),
	// StaleRunningSeconds to the last in which it listed one Running at all;
	// StaleSamples counts the samples in which it did. Those copies are not
	// counted as overlaps: the provider's API server was dead while the
	// replacements started.
	APIServerBackSeconds float64 `json:"apiServerBackSeconds,omitempty"`
	StaleFencedSeconds   float64 `json:"staleFencedSeconds,omitempty"`
	StaleRunningSeconds  float64 `json:"staleRunningSeconds,omitempty"`
	StaleSamples         int     `json:"staleSamples,omitempty"`
	// ProviderFenced says whether the provider's agent recorded a Fenced
	// Event during the trial (it stopped members itself).
	ProviderFenced bool `json:"providerFenced"`
	// Samples is how many times both places were listed during the trial
	// (every failoverSample, from the StatefulSet's creation to its
	// deletion); Overlaps in how many of them one member ran in both.
	Samples      int    `json:"samples"`
	Overlaps     int    `json:"overlaps"`
	FirstOverlap string `json:"firstOverlap,omitempty"`
	Error        string `json:"error,omitempty"`
}

// runFailovers restarts the consumer's agent with a short heartbeat,
// offloads failoverNS with failover and runs the trials, killed and
// partitioned alternating (which goes first alternating too); at the end it
// removes the namespace and restarts the agent with its usual flags.
func runFailovers(ctx context.Context, e *env, cfg Config) (out []FailoverTrial, err error) {
	if err := e.restartAgent(ctx, e.consumer, failoverConsumerArgs...); err != nil {
		return nil, err
	}
	defer func() {
		if ctx.Err() == nil {
			err = errors.Join(err, e.restartAgent(ctx, e.consumer))
		}
	}()
	e.log.printf("failover: %s's agent restarted with %s", consumerName, strings.Join(failoverConsumerArgs, " "))
	if err := failoverSetup(ctx, e); err != nil {
		return nil, err
	}
	defer func() {
		if ctx.Err() == nil {
			err = errors.Join(err, failoverTeardown(ctx, e))
		}
	}()
	for i := range cfg.FailoverTrials {
		faults := []string{faultKilled, faultPartitioned}
		if i%2 == 1 {
			faults = []string{faultPartitioned, faultKilled}
		}
		for _, f := range faults {
			t := FailoverTrial{Fault: f, Trial: i + 1, Members: failoverMembers, FenceAfterSeconds: failoverFence, ReleaseAfterSeconds: failoverRelease}
			trialErr, restoreErr := failoverOnce(ctx, e, &t)
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			if trialErr != nil {
				t.Error = trialErr.Error()
			}
			logFailover(e, t, cfg.FailoverTrials)
			out = append(out, t)
			if restoreErr != nil {
				return out, fmt.Errorf("restoring the clusters after the %s trial: %w", f, restoreErr)
			}
		}
	}
	return out, nil
}

func logFailover(e *env, t FailoverTrial, trials int) {
	label := fmt.Sprintf("failover %s trial %d/%d", t.Fault, t.Trial, trials)
	if t.Error != "" {
		e.log.printf("%s: FAILED: %s", label, t.Error)
	}
	if t.FailoverSeconds > 0 {
		line := fmt.Sprintf("%s: %d members Ready on %s's node %.2fs after the fault (released after %.2fs; heartbeat %.1fs old at the fault)",
			label, t.Members, consumerName, t.FailoverSeconds, t.ReleasedSeconds, t.HeartbeatAgeSeconds)
		switch t.Fault {
		case faultPartitioned:
			line += fmt.Sprintf("; %s stopped them after %.2fs (%s), none Running there after %.2fs", providerName, t.FencedSeconds, fencedBy(t), t.StoppedSeconds)
		case faultKilled:
			line += fmt.Sprintf("; %s's API server answered %.2fs after its restart, its stale members listed Running %.2fs more until being deleted (%s; %.2fs until none was listed Running, %d samples)",
				providerName, t.APIServerBackSeconds, t.StaleFencedSeconds, fencedBy(t), t.StaleRunningSeconds, t.StaleSamples)
		}
		e.log.printf("%s", line)
	}
	overlaps := fmt.Sprintf("%s: two copies of one member in %d of %d samples", label, t.Overlaps, t.Samples)
	if t.FirstOverlap != "" {
		overlaps += " (first: " + t.FirstOverlap + ")"
	}
	e.log.printf("%s", overlaps)
}

// fencedBy says who stopped the provider's copies.
func fencedBy(t FailoverTrial) string {
	if t.ProviderFenced {
		return "its agent fenced them: Fenced Event"
	}
	return "no Fenced Event: deleted with their orphaned ShadowPods"
}

// failoverSetup creates failoverNS on the consumer, offloads it with
// failover (strategy LocalAndRemote: see the comment at the top) and waits
// until the provider armed the fence.
func failoverSetup(ctx context.Context, e *env) error {
	if err := createNamespace(ctx, e.consumer, failoverNS); err != nil {
		return err
	}
	if _, err := e.annexctl(ctx, "offload", "namespace", failoverNS, "--kubeconfig", e.consumer.KubeconfigPath(), "--pod-strategy", "LocalAndRemote",
		"--failover-release-after", fmt.Sprintf("%ds", failoverRelease), "--failover-fence-after", fmt.Sprintf("%ds", failoverFence)); err != nil {
		return err
	}
	if err := poll(ctx, 200*time.Millisecond, time.Minute, "failover of "+failoverNS+" armed", func(ctx context.Context) error {
		nso := &offloadingv1alpha1.NamespaceOffloading{}
		if err := e.consumer.cr.Get(ctx, client.ObjectKey{Namespace: failoverNS, Name: offloadingv1alpha1.NamespaceOffloadingName}, nso); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(nso.Status.Conditions, offloadingv1alpha1.ConditionFailover); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition Failover: %+v", c)
		}
		return nil
	}); err != nil {
		return err
	}
	e.log.printf("failover: namespace %s offloaded (LocalAndRemote) with failover F=%ds T=%ds, armed by %s", failoverNS, failoverFence, failoverRelease, providerName)
	return nil
}

// failoverTeardown unoffloads and deletes failoverNS, waiting until it is
// gone on the consumer and its remote namespace on the provider.
func failoverTeardown(ctx context.Context, e *env) error {
	nso := &offloadingv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Name: offloadingv1alpha1.NamespaceOffloadingName, Namespace: failoverNS}}
	if err := client.IgnoreNotFound(e.consumer.cr.Delete(ctx, nso)); err != nil {
		return err
	}
	if err := poll(ctx, 200*time.Millisecond, 2*time.Minute, "NamespaceOffloading of "+failoverNS+" gone", func(ctx context.Context) error {
		if err := e.consumer.cr.Get(ctx, client.ObjectKeyFromObject(nso), nso); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := e.consumer.cs.CoreV1().Namespaces().Delete(ctx, failoverNS, metav1.DeleteOptions{}); client.IgnoreNotFound(err) != nil {
		return err
	}
	for _, g := range []struct {
		k    *kube
		name string
	}{{e.consumer, failoverNS}, {e.provider, remoteNS(failoverNS)}} {
		if err := poll(ctx, 200*time.Millisecond, 2*time.Minute, "namespace "+g.name+" of "+g.k.Name()+" gone", func(ctx context.Context) error {
			if _, err := g.k.cs.CoreV1().Namespaces().Get(ctx, g.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// failoverOnce runs one trial: the members on the provider, the fault, the
// wait for the members elsewhere, the provider brought back and the
// members deleted. trialErr is what went wrong with the measurement;
// restoreErr what could not be put back (the phase stops then).
func failoverOnce(ctx context.Context, e *env, t *FailoverTrial) (trialErr, restoreErr error) {
	var link *partition.Proxy
	if t.Fault == faultPartitioned {
		p, undo, err := throughProxy(ctx, e)
		defer func() { restoreErr = errors.Join(restoreErr, undo()) }()
		if err != nil {
			return err, nil
		}
		link = p
	}
	s := startOverlapSampler(ctx, e)
	defer func() {
		s.stop()
		s.report(t)
	}()
	// The members go last (deferred first): while the provider is back,
	// and the link healed but still through the proxy.
	defer func() { restoreErr = errors.Join(restoreErr, deleteMembers(ctx, e)) }()
	if err := createMembers(ctx, e); err != nil {
		return err, nil
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := watchMembers(wctx, e)
	if err != nil {
		return err, nil
	}
	sleep(ctx, failoverQuiet)
	t.HeartbeatAgeSeconds = heartbeatAge(ctx, e)

	t0 := time.Now()
	switch t.Fault {
	case faultKilled:
		if err := e.provider.KillAPIServer(); err != nil {
			return err, nil
		}
		killed := true
		defer func() {
			if killed { // the measurement failed before the restart
				restoreErr = errors.Join(restoreErr, e.provider.ResumeAPIServer(ctx))
			}
		}()
		last, first, err := w.waitReplaced(ctx, failoverWait)
		if err != nil {
			return fmt.Errorf("members elsewhere after the kill: %w", err), nil
		}
		t.FailoverSeconds, t.ReleasedSeconds = last.Sub(t0).Seconds(), first.Sub(t0).Seconds()
		// Back from the dead: its API server shows the members it had as
		// Running until its agent reads the heartbeat and fences them.
		s.ignoreProvider(true)
		restart := time.Now()
		killed = false
		if err := e.provider.ResumeAPIServer(ctx); err != nil {
			return nil, fmt.Errorf("restart %s's API server: %w", providerName, err)
		}
		err = poll(ctx, 100*time.Millisecond, time.Minute, providerName+" running none of the stale members", func(ctx context.Context) error {
			return noneRunning(ctx, e.provider, remoteNS(failoverNS))
		})
		answered, staleFenced, staleRunning, n := s.stale()
		s.ignoreProvider(false)
		if !answered.IsZero() {
			t.APIServerBackSeconds = answered.Sub(restart).Seconds()
			t.StaleFencedSeconds, t.StaleRunningSeconds, t.StaleSamples = since(answered, staleFenced), since(answered, staleRunning), n
		}
		if err != nil {
			return err, nil
		}
		t.ProviderFenced = fencedSince(ctx, e, t0)
		if err := e.waitVirtualNodeReady(ctx, time.Minute); err != nil {
			return nil, err
		}
	case faultPartitioned:
		link.Cut()
		last, first, err := w.waitReplaced(ctx, failoverWait)
		if err == nil {
			t.FailoverSeconds, t.ReleasedSeconds = last.Sub(t0).Seconds(), first.Sub(t0).Seconds()
			unfenced, running := s.providerLast()
			t.FencedSeconds, t.StoppedSeconds = since(t0, unfenced), since(t0, running)
			t.ProviderFenced = fencedSince(ctx, e, t0)
		}
		link.Heal()
		if err != nil {
			return fmt.Errorf("members elsewhere after the cut: %w", err), nil
		}
		if err := e.waitVirtualNodeReady(ctx, time.Minute); err != nil {
			return nil, err
		}
	default:
		return fmt.Errorf("unknown fault %q", t.Fault), nil
	}
	return nil, nil
}

// since is the seconds from a to b, 0 when b is not after a.
func since(a, b time.Time) float64 {
	if !b.After(a) {
		return 0
	}
	return b.Sub(a).Seconds()
}

// throughProxy makes the consumer's agent reach the provider only through a
// new partition proxy: the consumer's ForeignCluster spec.apiServerURL
// patched to it and, once the provider is reachable through it, the agent
// restarted, so that no connection of an earlier session (a watch, a pooled
// connection) goes around it; it checks that the agent has no connection
// left to the provider's API server itself. The provider's agent never calls
// the consumer (a one-way peering), so cutting the proxy cuts both the
// consumer's calls to the provider and the provider's only news of the
// consumer, its heartbeat. undo (never nil) heals the proxy, points the
// ForeignCluster at the provider again, restarts the agent once more and
// closes the proxy.
func throughProxy(ctx context.Context, e *env) (p *partition.Proxy, undo func() error, err error) {
	undo = func() error { return nil }
	direct := e.provider.APIServerURL()
	u, err := url.Parse(direct)
	if err != nil {
		return nil, undo, err
	}
	_, portText, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, undo, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, undo, err
	}
	if p, err = partition.New(direct); err != nil {
		return nil, undo, err
	}
	fc := &corev1alpha1.ForeignCluster{}
	if err := e.consumer.cr.Get(ctx, client.ObjectKey{Name: providerName}, fc); err != nil {
		return nil, undo, errors.Join(err, p.Close())
	}
	before := fc.Spec.APIServerURL
	undo = func() error {
		p.Heal()
		errs := []error{setAPIServerURL(ctx, e, before)}
		if err := e.restartAgent(ctx, e.consumer, failoverConsumerArgs...); err != nil {
			errs = append(errs, err)
		} else {
			errs = append(errs, waitReachable(ctx, e, nil), e.waitVirtualNodeReady(ctx, time.Minute))
		}
		return errors.Join(append(errs, p.Close())...)
	}
	if err := setAPIServerURL(ctx, e, p.URL()); err != nil {
		return nil, undo, err
	}
	if err := waitReachable(ctx, e, p); err != nil {
		return nil, undo, err
	}
	agent := e.agents[consumerName]
	if n, err := directConns(agent.PID, port); err == nil {
		e.log.detail("failover: %s's agent reaches %s through the proxy %s; %d connection(s) of it still go to %s directly (before its restart)", consumerName, providerName, p.Addr(), n, u.Host)
	}
	restarted := time.Now()
	if err := e.restartAgent(ctx, e.consumer, failoverConsumerArgs...); err != nil {
		return nil, undo, err
	}
	if err := waitReachable(ctx, e, p); err != nil {
		return nil, undo, err
	}
	if err := heartbeatSince(ctx, e, restarted); err != nil {
		return nil, undo, err
	}
	if err := e.waitVirtualNodeReady(ctx, time.Minute); err != nil {
		return nil, undo, err
	}
	if n, err := directConns(e.agents[consumerName].PID, port); err != nil || n > 0 {
		return nil, undo, fmt.Errorf("%s's agent, restarted to reach %s through the proxy only, has %d connection(s) to %s itself (%v)", consumerName, providerName, n, u.Host, err)
	}
	e.log.printf("failover: %s reaches %s only through the proxy %s (agent restarted, heartbeat renewed through it)", consumerName, providerName, p.Addr())
	return p, undo, nil
}

// setAPIServerURL patches the consumer's ForeignCluster of the provider.
func setAPIServerURL(ctx context.Context, e *env, u string) error {
	fc := &corev1alpha1.ForeignCluster{}
	if err := e.consumer.cr.Get(ctx, client.ObjectKey{Name: providerName}, fc); err != nil {
		return err
	}
	patch := client.MergeFrom(fc.DeepCopy())
	fc.Spec.APIServerURL = u
	return e.consumer.cr.Patch(ctx, fc, patch)
}

// waitReachable waits until the consumer's ForeignCluster of the provider
// says its API server is reachable and, with p, that the agent has a
// connection through p.
func waitReachable(ctx context.Context, e *env, p *partition.Proxy) error {
	return poll(ctx, 200*time.Millisecond, time.Minute, providerName+" reachable", func(ctx context.Context) error {
		fc := &corev1alpha1.ForeignCluster{}
		if err := e.consumer.cr.Get(ctx, client.ObjectKey{Name: providerName}, fc); err != nil {
			return err
		}
		c := meta.FindStatusCondition(fc.Status.Conditions, corev1alpha1.ConditionAPIServerReachable)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition %s: %+v", corev1alpha1.ConditionAPIServerReachable, c)
		}
		if p != nil && p.Conns() == 0 {
			return errors.New("no connection through the proxy yet")
		}
		return nil
	})
}

// heartbeatSince waits until the consumer's heartbeat Lease on the provider
// was renewed at or after t.
func heartbeatSince(ctx context.Context, e *env, t time.Time) error {
	return poll(ctx, 200*time.Millisecond, time.Minute, "heartbeat renewed", func(ctx context.Context) error {
		l, err := heartbeatLease(ctx, e)
		if err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(t) {
			return fmt.Errorf("last renewed %v", l.Spec.RenewTime)
		}
		return nil
	})
}

func heartbeatLease(ctx context.Context, e *env) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: corev1alpha1.TenantNamespaceName(consumerName), Name: corev1alpha1.HeartbeatLeaseName}
	return l, e.provider.cr.Get(ctx, key, l)
}

// heartbeatAge is how old the consumer's heartbeat on the provider is (0
// when it cannot be read).
func heartbeatAge(ctx context.Context, e *env) float64 {
	l, err := heartbeatLease(ctx, e)
	if err != nil || l.Spec.RenewTime == nil {
		return 0
	}
	return time.Since(l.Spec.RenewTime.Time).Seconds()
}

// fencedSince reports whether the provider's agent recorded a Fenced Event
// (in the consumer's tenant namespace) at or after t; the events API counts
// a repeated one in its series.
func fencedSince(ctx context.Context, e *env, t time.Time) bool {
	evs, err := e.provider.cs.EventsV1().Events(corev1alpha1.TenantNamespaceName(consumerName)).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.log.detail("failover: listing %s's Events: %v", providerName, err)
		return false
	}
	t = t.Truncate(time.Second) // creation times have whole seconds
	for _, ev := range evs.Items {
		if ev.Reason != "Fenced" {
			continue
		}
		last := ev.EventTime.Time
		if last.IsZero() {
			last = ev.CreationTimestamp.Time
		}
		if ev.Series != nil && ev.Series.LastObservedTime.After(last) {
			last = ev.Series.LastObservedTime.Time
		}
		if !last.Before(t) {
			return true
		}
	}
	return false
}

// createMembers creates the StatefulSet with the consumer's local nodes
// cordoned, so that every member goes to the provider, and waits until all
// are Ready there.
func createMembers(ctx context.Context, e *env) (err error) {
	local := e.consumer.NodeNames()
	for _, n := range local {
		if err := cordon(ctx, e.consumer, n, true); err != nil {
			return err
		}
	}
	defer func() {
		for _, n := range local {
			err = errors.Join(err, cordon(ctx, e.consumer, n, false))
		}
	}()
	if _, err := e.consumer.cs.AppsV1().StatefulSets(failoverNS).Create(ctx, statefulSet(failoverNS, failoverApp, failoverMembers), metav1.CreateOptions{}); err != nil {
		return err
	}
	node := corev1alpha1.VirtualNodeNamePrefix + providerName
	return poll(ctx, 200*time.Millisecond, 2*time.Minute, fmt.Sprintf("%d members Ready on %s", failoverMembers, node), func(ctx context.Context) error {
		pods, err := e.consumer.cs.CoreV1().Pods(failoverNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + failoverApp})
		if err != nil {
			return err
		}
		ready := 0
		for i := range pods.Items {
			if p := &pods.Items[i]; p.Spec.NodeName == node && podReady(p) && p.DeletionTimestamp == nil {
				ready++
			}
		}
		if ready < failoverMembers {
			return fmt.Errorf("%d of %d pods Ready there", ready, len(pods.Items))
		}
		return nil
	})
}

// deleteMembers deletes the StatefulSet and waits until no pod of it is
// left, nor a ShadowPod or pod on the provider.
func deleteMembers(ctx context.Context, e *env) error {
	err := e.consumer.cs.AppsV1().StatefulSets(failoverNS).Delete(ctx, failoverApp, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	return waitNoPods(ctx, e, e.consumer, failoverNS, 2*time.Minute)
}

// cordon marks node of k (un)schedulable.
func cordon(ctx context.Context, k *kube, node string, v bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, v)
	_, err := k.cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// statefulSet is the phase's StatefulSet: members started in parallel, the
// pod template of the bursts.
func statefulSet(ns, name string, replicas int) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(int32(replicas)), //nolint:gosec // G115: a few members
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			ServiceName:         name,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}}},
			},
		},
	}
}

// noneRunning fails while namespace ns of k lists a pod Running.
func noneRunning(ctx context.Context, k *kube, ns string) error {
	pods, err := k.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			return fmt.Errorf("pod %s Running", p.Name)
		}
	}
	return nil
}

// memberWatch follows the StatefulSet's pods on the consumer: the pods seen
// when it started are the members on the provider; every later one is a
// replacement, whose Ready on a local node is stamped by member name.
type memberWatch struct {
	broadcast
	mu       sync.Mutex
	local    map[string]bool
	armed    bool
	before   map[types.UID]bool
	firstNew time.Time
	ready    map[string]time.Time
	nodeOf   map[string]string // the newest pod of each member: its node
}

func watchMembers(ctx context.Context, e *env) (*memberWatch, error) {
	w := &memberWatch{local: map[string]bool{}, before: map[types.UID]bool{}, ready: map[string]time.Time{}, nodeOf: map[string]string{}}
	for _, n := range e.consumer.NodeNames() {
		w.local[n] = true
	}
	observe := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		switch {
		case !w.armed:
			w.before[p.UID] = true
		case !w.before[p.UID]:
			if w.firstNew.IsZero() {
				w.firstNew = now
			}
			w.nodeOf[p.Name] = p.Spec.NodeName
			if _, done := w.ready[p.Name]; !done && w.local[p.Spec.NodeName] && p.DeletionTimestamp == nil && podReady(p) {
				w.ready[p.Name] = now
			}
		}
		w.mu.Unlock()
		w.fire()
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, obj any) { observe(obj) }}
	if err := runInformer(ctx, e.consumer.cs.CoreV1().RESTClient(), "pods", failoverNS, "app="+failoverApp, &corev1.Pod{}, h); err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.armed = true
	n := len(w.before)
	w.mu.Unlock()
	if n != failoverMembers {
		return nil, fmt.Errorf("%d pods of %s before the fault, want %d", n, failoverApp, failoverMembers)
	}
	return w, nil
}

// waitReplaced waits until every member was seen Ready on a local node and
// returns when the last one was, and when the first replacement appeared.
func (w *memberWatch) waitReplaced(ctx context.Context, timeout time.Duration) (last, first time.Time, err error) {
	err = waitFor(ctx, &w.broadcast, timeout, fmt.Sprintf("%d members Ready on %s's node", failoverMembers, consumerName), func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.ready) < failoverMembers {
			var where []string
			for name, node := range w.nodeOf {
				where = append(where, fmt.Sprintf("%s on %q", name, node))
			}
			sort.Strings(where)
			return false, fmt.Sprintf("%d of %d Ready there; replacements: %s", len(w.ready), failoverMembers, orDash(strings.Join(where, ", ")))
		}
		for _, t := range w.ready {
			if t.After(last) {
				last = t
			}
		}
		first = w.firstNew
		return true, ""
	})
	return last, first, err
}

// overlapSampler lists, every failoverSample, the provider's pods in the
// remote namespace and the consumer's pods on its local nodes, and counts
// the samples in which one member runs (phase Running, also while being
// deleted) in both. A provider that does not answer runs nothing it can
// show. While the provider is ignored (its API server just restarted after
// the members ran elsewhere), what it lists is counted apart as stale.
type overlapSampler struct {
	local  map[string]bool
	cancel context.CancelFunc
	done   chan struct{}

	mu           sync.Mutex
	samples      int
	overlaps     int
	firstOverlap string
	// lastRunning and lastUnfenced are the last samples in which the
	// provider (not ignored) listed a member Running, and one Running that
	// was not being deleted.
	lastRunning, lastUnfenced time.Time
	ignored                   bool
	// While ignored: answered is the provider's first answer; staleSamples
	// count the samples in which it listed a member Running, lastStale and
	// lastStaleUnfenced the last of them (as above).
	answered                   time.Time
	staleSamples               int
	lastStale, lastStaleUnfenc time.Time
}

func startOverlapSampler(ctx context.Context, e *env) *overlapSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &overlapSampler{local: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	for _, n := range e.consumer.NodeNames() {
		s.local[n] = true
	}
	rns := remoteNS(failoverNS)
	list := func(k *kube, ns, selector string) ([]corev1.Pod, bool) {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		l, err := k.cs.CoreV1().Pods(ns).List(cctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, false
		}
		return l.Items, true
	}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(failoverSample)
		defer tick.Stop()
		for {
			provider, answered := list(e.provider, rns, "")
			consumer, _ := list(e.consumer, failoverNS, "app="+failoverApp)
			if ctx.Err() != nil {
				return
			}
			s.observe(time.Now(), provider, answered, consumer)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// observe records one sample.
func (s *overlapSampler) observe(now time.Time, provider []corev1.Pod, answered bool, consumer []corev1.Pod) {
	remote := map[string]bool{}
	anyRunning, anyUnfenced := false, false
	for _, p := range provider {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		remote[p.Name] = true
		anyRunning = true
		anyUnfenced = anyUnfenced || p.DeletionTimestamp == nil
	}
	var both []string
	for _, p := range consumer {
		if p.Status.Phase == corev1.PodRunning && s.local[p.Spec.NodeName] && remote[p.Name] {
			both = append(both, p.Name)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if s.ignored {
		if answered && s.answered.IsZero() {
			s.answered = now
		}
		if anyRunning {
			s.staleSamples++
			s.lastStale = now
		}
		if anyUnfenced {
			s.lastStaleUnfenc = now
		}
		return
	}
	if anyRunning {
		s.lastRunning = now
	}
	if anyUnfenced {
		s.lastUnfenced = now
	}
	if len(both) > 0 {
		s.overlaps++
		if s.firstOverlap == "" {
			sort.Strings(both)
			s.firstOverlap = fmt.Sprintf("%s Running on %s and on %s's node at %s", strings.Join(both, ", "), providerName, consumerName, now.Format(time.RFC3339Nano))
		}
	}
}

func (s *overlapSampler) stop() {
	s.cancel()
	<-s.done
}

// ignoreProvider starts or ends counting the provider's pods apart.
func (s *overlapSampler) ignoreProvider(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ignored = v
	if v {
		s.answered, s.staleSamples, s.lastStale, s.lastStaleUnfenc = time.Time{}, 0, time.Time{}, time.Time{}
	}
}

// stale is what was counted apart since ignoreProvider(true).
func (s *overlapSampler) stale() (answered, lastUnfenced, lastRunning time.Time, samples int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered, s.lastStaleUnfenc, s.lastStale, s.staleSamples
}

// providerLast is when the provider (not ignored) last listed a member
// Running and not being deleted, and Running at all.
func (s *overlapSampler) providerLast() (unfenced, running time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastUnfenced, s.lastRunning
}

func (s *overlapSampler) report(t *FailoverTrial) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Samples, t.Overlaps, t.FirstOverlap = s.samples, s.overlaps, s.firstOverlap
}

// directConns counts the established TCP connections of process pid to
// 127.0.0.1:port, from /proc/<pid>/fd and /proc/<pid>/net/tcp.
func directConns(pid, port int) (int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	tcp, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return 0, err
	}
	return connsTo(string(tcp), inodes, port), nil
}

// connsTo counts the lines of /proc/net/tcp that are established
// connections to 127.0.0.1:port whose socket inode is among inodes.
func connsTo(tcp string, inodes map[string]bool, port int) int {
	remote := fmt.Sprintf("0100007F:%04X", port) // little-endian address, port in hex
	n := 0
	for _, l := range strings.Split(tcp, "\n") {
		f := strings.Fields(l)
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		if len(f) < 10 || f[2] != remote || f[3] != "01" {
			continue
		}
		if inodes[f[9]] {
			n++
		}
	}
	return n
}

// failoverStats summarizes the trials of one fault.
type failoverStats struct {
	Fault                                             string
	Trials, Failed                                    int
	Release                                           int // T of the trials
	Failover, Released, HeartbeatAge, Fenced, Stopped Summary
	APIServerBack, StaleFenced, StaleRunning          Summary
	Samples, Overlaps, StaleSamples                   int
	// ProviderFenced counts the trials without an error in which the
	// provider's agent recorded a Fenced Event.
	ProviderFenced int
}

func summarizeFailovers(trials []FailoverTrial) []failoverStats {
	var out []failoverStats
	for _, f := range []string{faultKilled, faultPartitioned} {
		s := failoverStats{Fault: f}
		var fo, rel, age, fenced, stopped, back, staleF, staleR []float64
		for _, t := range trials {
			if t.Fault != f {
				continue
			}
			s.Trials++
			s.Release = t.ReleaseAfterSeconds
			s.Samples += t.Samples
			s.Overlaps += t.Overlaps
			s.StaleSamples += t.StaleSamples
			if t.Error != "" {
				s.Failed++
				continue
			}
			fo, rel, age = append(fo, t.FailoverSeconds), append(rel, t.ReleasedSeconds), append(age, t.HeartbeatAgeSeconds)
			if t.ProviderFenced {
				s.ProviderFenced++
			}
			switch f {
			case faultPartitioned:
				fenced, stopped = append(fenced, t.FencedSeconds), append(stopped, t.StoppedSeconds)
			case faultKilled:
				back, staleF, staleR = append(back, t.APIServerBackSeconds), append(staleF, t.StaleFencedSeconds), append(staleR, t.StaleRunningSeconds)
			}
		}
		if s.Trials == 0 {
			continue
		}
		s.Failover, s.Released, s.HeartbeatAge, s.Fenced, s.Stopped = summarize(fo), summarize(rel), summarize(age), summarize(fenced), summarize(stopped)
		s.APIServerBack, s.StaleFenced, s.StaleRunning = summarize(back), summarize(staleF), summarize(staleR)
		out = append(out, s)
	}
	return out
}
