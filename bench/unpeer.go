package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// Agent flags of the forced-unpeer phase: the provider removes a tenant whose
// consumer stopped renewing its heartbeat after 10 s instead of 15 min, so
// that the next trial can peer again soon.
var (
	unpeerConsumerArgs = []string{"--consumer-heartbeat-interval=2s"}
	unpeerProviderArgs = []string{"--consumer-heartbeat-interval=2s", "--tenant-grace-period=10s"}
)

// leftoverGrace is how long after the command returned something of the
// peering may still go away by itself (a finalizer being released) before it
// counts as left behind.
const leftoverGrace = 10 * time.Second

// UnpeerTrial is one `annexctl unpeer --force` with a dead provider.
type UnpeerTrial struct {
	N     int `json:"n"`
	Trial int `json:"trial"`
	// UnreachableSeconds is from the kill to the consumer's ForeignCluster
	// saying the provider is unreachable (the command runs then).
	UnreachableSeconds float64 `json:"unreachableSeconds"`
	// CommandSeconds is how long the command ran.
	CommandSeconds float64 `json:"commandSeconds"`
	// CleanSeconds is from the command's start until nothing of the
	// peering is left on the consumer or, when something stays
	// (LeftBehind), until the last thing that did go went; LeftWhenDone
	// is what was still there when the command returned.
	CleanSeconds float64  `json:"cleanSeconds"`
	LeftWhenDone []string `json:"leftWhenDone,omitempty"`
	// LeftBehind is what was still there leftoverGrace after the command
	// returned.
	LeftBehind []string `json:"leftBehind,omitempty"`
	// Output is what the command printed.
	Output string `json:"output"`
	// ProviderCleanupSeconds is from the provider's restart to it having
	// removed the consumer's tenant by itself (with --tenant-grace-period
	// 10s; the benchmark does not wait out the grace period of the pods
	// left in the namespaces the provider deletes: see hurryNamespace);
	// not measured after the last trial.
	ProviderCleanupSeconds float64 `json:"providerCleanupSeconds,omitempty"`
	Profiled               bool    `json:"profiled,omitempty"`
	Error                  string  `json:"error,omitempty"`
}

// runUnpeers restarts the agents with a short heartbeat and grace period,
// then runs the trials (sizes interleaved).
func runUnpeers(ctx context.Context, e *env, cfg Config) ([]UnpeerTrial, error) {
	restarted := time.Now()
	if err := e.restartAgent(ctx, e.consumer, unpeerConsumerArgs...); err != nil {
		return nil, err
	}
	// The provider may only count on the short grace period once the
	// consumer renews its heartbeat at the short interval: the Lease was
	// last renewed up to 30 s ago.
	if err := poll(ctx, 200*time.Millisecond, time.Minute, "heartbeat renewed", func(ctx context.Context) error {
		l := &coordinationv1.Lease{}
		key := client.ObjectKey{Namespace: corev1alpha1.TenantNamespaceName(consumerName), Name: corev1alpha1.HeartbeatLeaseName}
		if err := e.provider.cr.Get(ctx, key, l); err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(restarted.Truncate(time.Second)) {
			return fmt.Errorf("last renewed %v", l.Spec.RenewTime)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := e.restartAgent(ctx, e.provider, unpeerProviderArgs...); err != nil {
		return nil, err
	}
	e.log.printf("forced unpeer: agents restarted with %s / %s", strings.Join(unpeerConsumerArgs, " "), strings.Join(unpeerProviderArgs, " "))
	var out []UnpeerTrial
	total := cfg.UnpeerTrials * len(cfg.UnpeerSizes)
	for i := range cfg.UnpeerTrials {
		for _, n := range cfg.UnpeerSizes {
			t := UnpeerTrial{N: n, Trial: i + 1}
			err := unpeerOnce(ctx, e, &t)
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			logUnpeer(e, t, cfg.UnpeerTrials, err)
			if err == nil && len(out) < total-1 {
				// Not after the last trial: nothing needs the provider then.
				if err = recoverAfterUnpeer(ctx, e, &t); err == nil {
					e.log.printf("forced unpeer: %s removed the orphaned tenant %.1fs after its restart; peered again", providerName, t.ProviderCleanupSeconds)
				} else if ctx.Err() == nil {
					e.log.printf("forced unpeer: bringing %s back: FAILED: %v", providerName, err)
				}
			}
			out = append(out, t)
			if err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

func logUnpeer(e *env, t UnpeerTrial, trials int, err error) {
	label := fmt.Sprintf("forced unpeer N=%d trial %d/%d", t.N, t.Trial, trials)
	if t.Profiled {
		label = fmt.Sprintf("forced unpeer N=%d (profiled, not counted)", t.N)
	}
	if err != nil {
		e.log.printf("%s: FAILED: %v", label, err)
		return
	}
	clean := fmt.Sprintf("nothing left after %.2fs", t.CleanSeconds)
	if len(t.LeftBehind) > 0 {
		clean = fmt.Sprintf("everything else gone after %.2fs but LEFT BEHIND on %s (still there %s later): %s",
			t.CleanSeconds, consumerName, leftoverGrace, strings.Join(t.LeftBehind, ", "))
	}
	e.log.printf("%s: command returned after %.2fs, %s (provider reported unreachable %.2fs after the kill)",
		label, t.CommandSeconds, clean, t.UnreachableSeconds)
}

// unpeerNS is the namespace a trial offloads.
func unpeerNS(t *UnpeerTrial) string {
	if t.Profiled {
		return fmt.Sprintf("unpeer-%d-profiled", t.N)
	}
	return fmt.Sprintf("unpeer-%d-%d", t.N, t.Trial)
}

// unpeerOnce offloads t.N pods, kills the provider's API server, unpeers
// with --force and measures.
func unpeerOnce(ctx context.Context, e *env, t *UnpeerTrial) (err error) {
	defer func() {
		if err != nil {
			t.Error = err.Error()
		}
	}()
	ns := unpeerNS(t)
	if err := e.offload(ctx, ns); err != nil {
		return err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := watchPods(wctx, e.consumer, ns, "app=work")
	if err != nil {
		return err
	}
	if _, err := e.consumer.cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "work", t.N), metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, _, err := w.waitReady(ctx, t.N, burstTimeout(t.N)); err != nil {
		return err
	}
	stopWatch()

	kill := time.Now()
	if err := e.provider.KillAPIServer(); err != nil {
		return err
	}
	if err := poll(ctx, 100*time.Millisecond, time.Minute, "provider unreachable", func(ctx context.Context) error {
		fc := &corev1alpha1.ForeignCluster{}
		if err := e.consumer.cr.Get(ctx, client.ObjectKey{Name: providerName}, fc); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(fc.Status.Conditions, corev1alpha1.ConditionAPIServerReachable); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	}); err != nil {
		return err
	}
	t.UnreachableSeconds = time.Since(kill).Seconds()

	start := time.Now()
	t.Output, err = e.annexctl(ctx, "unpeer", "--kubeconfig", e.consumer.KubeconfigPath(), providerName, "--force")
	if err != nil {
		return err
	}
	t.CommandSeconds = time.Since(start).Seconds()
	t.LeftWhenDone, err = leftovers(ctx, e)
	if err != nil {
		return err
	}
	// Follow what is left until nothing is, or for leftoverGrace; the
	// time the set last changed is when the consumer settled.
	last, settled := strings.Join(t.LeftWhenDone, ", "), time.Now()
	err = poll(ctx, 100*time.Millisecond, leftoverGrace, "nothing of the peering left on "+consumerName, func(ctx context.Context) error {
		left, err := leftovers(ctx, e)
		if err != nil {
			return err
		}
		if cur := strings.Join(left, ", "); cur != last {
			last, settled = cur, time.Now()
		}
		t.LeftBehind = left
		if len(left) > 0 {
			return fmt.Errorf("left: %s", last)
		}
		return nil
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	t.CleanSeconds = settled.Sub(start).Seconds()
	if err != nil {
		// Not an error of the trial: what stays is the result.
		e.log.detail("forced unpeer N=%d: %v", t.N, err)
	}
	return nil
}

// recoverAfterUnpeer restarts the provider's API server, waits until the
// provider removed the tenant by itself, deletes the trial's namespace and
// peers again.
func recoverAfterUnpeer(ctx context.Context, e *env, t *UnpeerTrial) (err error) {
	defer func() {
		if err != nil {
			t.Error = err.Error()
		}
	}()
	ns := unpeerNS(t)
	restart := time.Now()
	if err := e.provider.ResumeAPIServer(ctx); err != nil {
		return err
	}
	if err := poll(ctx, 500*time.Millisecond, 3*time.Minute, providerName+" removing the tenant of "+consumerName, func(ctx context.Context) error {
		var left []string
		for _, name := range []string{corev1alpha1.TenantNamespaceName(consumerName), remoteNS(ns)} {
			n := &corev1.Namespace{}
			err := e.provider.cr.Get(ctx, client.ObjectKey{Name: name}, n)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err == nil && !n.DeletionTimestamp.IsZero() {
				hurryNamespace(ctx, e.provider, name)
			}
			left = append(left, fmt.Sprintf("namespace %s still there (%v)", name, err))
		}
		if len(left) > 0 {
			return errors.New(strings.Join(left, "; "))
		}
		if err := e.provider.cr.Get(ctx, client.ObjectKey{Name: consumerName}, &corev1alpha1.ForeignCluster{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ForeignCluster %s still there (%v)", consumerName, err)
		}
		return nil
	}); err != nil {
		return err
	}
	t.ProviderCleanupSeconds = time.Since(restart).Seconds()
	if err := e.consumer.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return e.peer(ctx)
}

// hurryNamespace shortens the end of the deletion of namespace name, which
// the provider started (its tenant clean-up): Kubernetes' namespace
// controller deletes the pods in it gracefully and looks again only once
// their grace period (30 s) is over, which made the clean-up between two
// unpeer trials take 45 s. The benchmark deletes the pods left at once
// (kwok runs no containers) and touches the namespace, which makes the
// namespace controller look again now. Errors are left to the next poll.
func hurryNamespace(ctx context.Context, k *kube, name string) {
	zero := int64(0)
	_ = k.cs.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench.annex.dev/hurried":%q}}}`, time.Now().Format(time.RFC3339Nano))
	_, _ = k.cs.CoreV1().Namespaces().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
}

// leftovers lists what of the peering with the provider is on the consumer.
func leftovers(ctx context.Context, e *env) ([]string, error) {
	c := e.consumer.cr
	peerNS := corev1alpha1.PeerNamespaceName(providerName) // the consumer's own objects for the provider
	node := corev1alpha1.VirtualNodeNamePrefix + providerName
	var left []string
	get := func(what string, obj client.Object, key client.ObjectKey) error {
		err := c.Get(ctx, key, obj)
		if err == nil {
			left = append(left, what)
			return nil
		}
		return client.IgnoreNotFound(err)
	}
	errs := []error{
		get("Node "+node, &corev1.Node{}, client.ObjectKey{Name: node}),
		get("namespace "+peerNS, &corev1.Namespace{}, client.ObjectKey{Name: peerNS}),
		get("ForeignCluster "+providerName, &corev1alpha1.ForeignCluster{}, client.ObjectKey{Name: providerName}),
	}
	lists := map[string]client.ObjectList{
		"VirtualNode":     &corev1alpha1.VirtualNodeList{},
		"ResourceSlice":   &corev1alpha1.ResourceSliceList{},
		"RemoteNamespace": &offloadingv1alpha1.RemoteNamespaceList{},
	}
	for kind, l := range lists {
		if err := c.List(ctx, l, client.InNamespace(peerNS)); err != nil {
			errs = append(errs, err)
			continue
		}
		items, _ := meta.ExtractList(l)
		for _, it := range items {
			left = append(left, kind+" "+peerNS+"/"+it.(client.Object).GetName())
		}
	}
	ncs := &networkingv1alpha1.NetworkConfigurationList{}
	if err := c.List(ctx, ncs); err != nil {
		errs = append(errs, err)
	}
	for _, nc := range ncs.Items {
		if nc.Spec.RemoteClusterID == providerName {
			left = append(left, "NetworkConfiguration "+nc.Namespace+"/"+nc.Name)
		}
	}
	pods, err := e.consumer.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		errs = append(errs, err)
	} else if len(pods.Items) > 0 {
		left = append(left, fmt.Sprintf("%d pods on %s", len(pods.Items), node))
	}
	return left, errors.Join(errs...)
}

// profileUnpeer brings the provider back after the last trial, then runs one
// more trial of size n (not counted) with the agents profiled throughout.
func profileUnpeer(ctx context.Context, e *env, last *UnpeerTrial, n int, est time.Duration) (UnpeerTrial, []Profile, error) {
	if err := recoverAfterUnpeer(ctx, e, last); err != nil {
		return UnpeerTrial{}, nil, err
	}
	t := UnpeerTrial{N: n, Profiled: true}
	// The trial's own set-up (offload, pods Ready, kill, detection) comes
	// first; the profile covers it and the command.
	profiles, err := e.profileDuring(ctx, "unpeer", fmt.Sprintf("a forced unpeer with %d pods, set-up included", n), est, func() error {
		return unpeerOnce(ctx, e, &t)
	})
	logUnpeer(e, t, 0, err)
	return t, profiles, err
}

// unpeerStats summarizes the trials of one size.
type unpeerStats struct {
	N                       int
	Trials, Failed          int
	Command, Clean, Unreach Summary
	// LeftBehind counts the trials after which something stayed.
	LeftBehind int
}

func summarizeUnpeers(trials []UnpeerTrial) []unpeerStats {
	var out []unpeerStats
	seen := map[int]bool{}
	for _, t := range trials {
		if seen[t.N] || t.Profiled {
			continue
		}
		seen[t.N] = true
		s := unpeerStats{N: t.N}
		var cmd, clean, unreach []float64
		for _, u := range trials {
			if u.N != t.N || u.Profiled {
				continue
			}
			s.Trials++
			if u.Error != "" {
				s.Failed++
				continue
			}
			cmd, clean, unreach = append(cmd, u.CommandSeconds), append(clean, u.CleanSeconds), append(unreach, u.UnreachableSeconds)
			if len(u.LeftBehind) > 0 {
				s.LeftBehind++
			}
		}
		s.Command, s.Clean, s.Unreach = summarize(cmd), summarize(clean), summarize(unreach)
		out = append(out, s)
	}
	return out
}
