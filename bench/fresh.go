package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/cli/offload"
)

// FreshTrial is one Deployment created right after its namespace was made
// (offloaded: right after the namespace's offload was requested).
type FreshTrial struct {
	Mode  string `json:"mode"`
	Trial int    `json:"trial"`
	N     int    `json:"n"`
	// DelaySeconds is from the offload request (direct: the namespace's
	// creation) to the Deployment's create call.
	DelaySeconds float64 `json:"delaySeconds"`
	// FirstReadySeconds and AllReadySeconds are from the Deployment's
	// create call to its first and its last pod seen Ready through a watch
	// (offloaded: Ready on the virtual node, as seen on the consumer).
	FirstReadySeconds float64 `json:"firstReadySeconds"`
	AllReadySeconds   float64 `json:"allReadySeconds"`
	// Offloaded only, from the offload request (the NamespaceOffloading's
	// create call), first seen by polling every freshPoll: LabelledSeconds
	// until the namespace has the admission policy's label,
	// RemoteNamespaceSeconds until its remote namespace exists on the
	// provider, OffloadReadySeconds until the namespace's
	// annex.dev/offloading-clusters annotation names the provider (from
	// then on a new pod may go to its virtual node). Zero: not seen.
	LabelledSeconds        float64 `json:"labelledSeconds,omitempty"`
	RemoteNamespaceSeconds float64 `json:"remoteNamespaceSeconds,omitempty"`
	OffloadReadySeconds    float64 `json:"offloadReadySeconds,omitempty"`
	// PodStates counts the pods by state when not all of them became
	// Ready in time (see podState).
	PodStates map[string]int `json:"podStates,omitempty"`
	// Stages are the delays between the stages of the pods' way (as in
	// the burst), from the API servers' audit logs.
	Stages []StageDelay `json:"stages,omitempty"`
	// CleanupSeconds is how long deleting the Deployment, unoffloading and
	// deleting the namespace took, until it was gone on both clusters.
	CleanupSeconds float64 `json:"cleanupSeconds,omitempty"`
	Error          string  `json:"error,omitempty"`
}

const (
	// freshDelay is how long after the offload request the Deployment is
	// created.
	freshDelay = time.Second
	// freshTimeout bounds the wait for the Deployment's pods.
	freshTimeout = time.Minute
	// freshPoll is how often the offload's progress is polled.
	freshPoll = 50 * time.Millisecond
	// freshCleanupTimeout bounds each wait of the clean-up.
	freshCleanupTimeout = 2 * time.Minute
)

// runFresh runs cfg.FreshTrials trials in each mode, interleaved as the
// bursts are, and adds them to r.Fresh.
func runFresh(ctx context.Context, e *env, cfg Config, r *Results) error {
	var errs []error
	for i := range cfg.FreshTrials {
		modes := []string{modeDirect, modeOffloaded}
		if i%2 == 1 {
			modes = []string{modeOffloaded, modeDirect}
		}
		for _, mode := range modes {
			t := FreshTrial{Mode: mode, Trial: i + 1, N: cfg.FreshPods}
			err := freshOnce(ctx, e, &t)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			label := fmt.Sprintf("fresh N=%d trial %d/%d %-9s", t.N, t.Trial, cfg.FreshTrials, mode)
			if err != nil {
				t.Error = err.Error()
				errs = append(errs, fmt.Errorf("trial %d %s: %w", t.Trial, mode, err))
				e.log.printf("%s: FAILED: %v", label, err)
				if len(t.PodStates) > 0 {
					e.log.printf("%s: pods: %s", label, podStatesLine(t.PodStates))
				}
			} else {
				e.log.printf("%s: all Ready in %5.2fs (first %5.2fs) after the Deployment's creation, %.1fs after the %s; cleaned up in %.1fs",
					label, t.AllReadySeconds, t.FirstReadySeconds, t.AllReadySeconds+t.DelaySeconds, map[bool]string{true: "offload request", false: "namespace's creation"}[mode == modeOffloaded],
					t.CleanupSeconds)
			}
			if mode == modeOffloaded {
				e.log.printf("%s: offload: namespace labelled after %.2fs, remote namespace created after %.2fs, annotated with %s after %.2fs",
					label, t.LabelledSeconds, t.RemoteNamespaceSeconds, providerName, t.OffloadReadySeconds)
			}
			if len(t.Stages) > 0 {
				e.log.printf("%s: stages: %s", label, stagesLine(t.Stages))
			}
			r.Fresh = append(r.Fresh, t)
		}
	}
	return errors.Join(errs...)
}

// freshNS is the namespace of a trial.
func freshNS(t *FreshTrial) string { return fmt.Sprintf("bench-fresh-%d-%s", t.Trial, t.Mode[:3]) }

// freshOnce creates a namespace (offloaded: on the consumer, and requests
// its offload), freshDelay later a Deployment of t.N pods in it, waits until
// every pod is Ready and removes the namespace again.
func freshOnce(ctx context.Context, e *env, t *FreshTrial) (err error) {
	ns := freshNS(t)
	name := "fresh"
	k, node := e.provider, ""
	namespaces := []string{ns}
	rules := directStages
	if t.Mode == modeOffloaded {
		k, node = e.consumer, corev1alpha1.VirtualNodeNamePrefix+providerName
		namespaces = append(namespaces, remoteNS(ns))
		rules = offloadedStages
	}
	if err := createNamespace(ctx, k, ns); err != nil {
		return err
	}
	defer func() {
		start := time.Now()
		cerr := freshCleanup(ctx, e, k, ns, t.N)
		t.CleanupSeconds = time.Since(start).Seconds()
		if err == nil && cerr != nil {
			err = fmt.Errorf("clean-up: %w", cerr)
		}
	}()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := watchPodsOn(wctx, k, ns, "app="+name, node)
	if err != nil {
		return err
	}
	var cursors []auditCursor
	for _, c := range []*kube{e.consumer, e.provider} {
		if cur, ok := auditMark(c); ok {
			cursors = append(cursors, cur)
		}
	}

	requested := time.Now()
	var progress *offloadProgress
	if t.Mode == modeOffloaded {
		o := offload.DefaultOptions()
		o.PodStrategy = string(offloadingv1alpha1.PodOffloadingRemote)
		spec, err := o.Spec()
		if err != nil {
			return err
		}
		nso := &offloadingv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Name: offloadingv1alpha1.NamespaceOffloadingName, Namespace: ns}, Spec: spec}
		requested = time.Now()
		if err := e.consumer.cr.Create(ctx, nso); err != nil {
			return fmt.Errorf("offload: %w", err)
		}
		progress = watchOffload(wctx, e, ns, requested)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(requested.Add(freshDelay))):
	}
	start := time.Now()
	t.DelaySeconds = start.Sub(requested).Seconds()
	if _, err := k.cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, name, t.N), metav1.CreateOptions{}); err != nil {
		return err
	}
	first, last, werr := w.waitReady(ctx, t.N, freshTimeout)
	if progress != nil {
		t.LabelledSeconds, t.RemoteNamespaceSeconds, t.OffloadReadySeconds = progress.seconds()
	}
	if werr != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t.PodStates = podStates(ctx, k, ns, "app="+name, node)
		return werr
	}
	t.FirstReadySeconds, t.AllReadySeconds = first.Sub(start).Seconds(), last.Sub(start).Seconds()
	if len(cursors) > 0 {
		if t.Stages, err = stageDelays(cursors, start, rules, namespaces); err != nil {
			return fmt.Errorf("audit logs: %w", err)
		}
	}
	return nil
}

// offloadProgress is what polling a freshly offloaded namespace saw, as
// times since the offload request.
type offloadProgress struct {
	mu                      sync.Mutex
	labelled, remote, ready time.Duration
}

func (p *offloadProgress) seconds() (labelled, remote, ready float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.labelled.Seconds(), p.remote.Seconds(), p.ready.Seconds()
}

// watchOffload polls, every freshPoll until all are seen or ctx ends, the
// consumer's namespace ns (the admission label, the annotation naming the
// provider) and its remote namespace on the provider.
func watchOffload(ctx context.Context, e *env, ns string, requested time.Time) *offloadProgress {
	p := &offloadProgress{}
	go func() {
		tick := time.NewTicker(freshPoll)
		defer tick.Stop()
		for {
			p.mu.Lock()
			done := p.labelled > 0 && p.remote > 0 && p.ready > 0
			p.mu.Unlock()
			if done {
				return
			}
			if n, err := e.consumer.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
				since := time.Since(requested)
				p.mu.Lock()
				if p.labelled == 0 && n.Labels[corev1alpha1.LabelOffloading] == "true" {
					p.labelled = since
				}
				if p.ready == 0 && contains(strings.Split(n.Annotations[corev1alpha1.AnnotationOffloadingClusters], ","), providerName) {
					p.ready = since
				}
				p.mu.Unlock()
			}
			p.mu.Lock()
			remote := p.remote
			p.mu.Unlock()
			if remote == 0 {
				if _, err := e.provider.cs.CoreV1().Namespaces().Get(ctx, remoteNS(ns), metav1.GetOptions{}); err == nil {
					p.mu.Lock()
					p.remote = time.Since(requested)
					p.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// podStates counts the pods of a selection by state (see podState); node
// is where they should run (empty: anywhere).
func podStates(ctx context.Context, k *kube, ns, selector, node string) map[string]int {
	pods, err := k.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return map[string]int{"unknown (" + err.Error() + ")": 1}
	}
	out := map[string]int{}
	for i := range pods.Items {
		out[podState(&pods.Items[i], node)]++
	}
	return out
}

// podState says where a pod is and why it is not Ready: "Ready on
// annex-beta", "bound to alpha-worker-0, not the virtual node", "Pending:
// node affinity to none-ready (the namespace's remote namespace was not
// Ready at its admission)", "Pending: <the scheduler's message>".
func podState(p *corev1.Pod, node string) string {
	switch {
	case p.Spec.NodeName != "" && node != "" && p.Spec.NodeName != node:
		return fmt.Sprintf("bound to %s, not the virtual node %s (admitted before the namespace was labelled)", p.Spec.NodeName, node)
	case p.Spec.NodeName != "" && podReady(p):
		return "Ready on " + p.Spec.NodeName
	case p.Spec.NodeName != "":
		return fmt.Sprintf("%s on %s, not Ready", p.Status.Phase, p.Spec.NodeName)
	case affinityValue(p, "none-ready"):
		return "Pending: node affinity to remote cluster none-ready (admitted while the namespace's remote namespace was not Ready)"
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			msg := c.Message
			if len(msg) > 120 {
				msg = msg[:120] + "…"
			}
			return "Pending: " + msg
		}
	}
	return "Pending, not scheduled yet"
}

// affinityValue reports whether a required node affinity term of p names
// value.
func affinityValue(p *corev1.Pod, value string) bool {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, r := range term.MatchExpressions {
			if contains(r.Values, value) {
				return true
			}
		}
	}
	return false
}

// podStatesLine is "12× Ready on annex-beta, 8× Pending: …", most first.
func podStatesLine(states map[string]int) string {
	keys := byValue(states)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d× %s", states[k], k)
	}
	return strings.Join(parts, ", ")
}

// freshCleanup deletes the trial's Deployment (waiting until no pod is
// left, on the provider too), unoffloads the namespace (waiting until its
// NamespaceOffloading is gone, which takes its remote namespace's deletion
// started) and deletes it, waiting until it is gone on k and its remote
// namespace gone on the provider; each wait is bounded by freshCleanupTimeout.
func freshCleanup(ctx context.Context, e *env, k *kube, ns string, n int) error {
	if err := deleteDeployment(ctx, e, k, ns, "fresh", n); err != nil {
		return err
	}
	if k == e.consumer {
		nso := &offloadingv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Name: offloadingv1alpha1.NamespaceOffloadingName, Namespace: ns}}
		if err := client.IgnoreNotFound(e.consumer.cr.Delete(ctx, nso)); err != nil {
			return err
		}
		if err := poll(ctx, 100*time.Millisecond, freshCleanupTimeout, "NamespaceOffloading of "+ns+" gone", func(ctx context.Context) error {
			err := e.consumer.cr.Get(ctx, client.ObjectKeyFromObject(nso), nso)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		}); err != nil {
			return err
		}
	}
	if err := k.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); client.IgnoreNotFound(err) != nil {
		return err
	}
	gone := func(k *kube, name string) error {
		return poll(ctx, 100*time.Millisecond, freshCleanupTimeout, "namespace "+name+" of "+k.Name()+" gone", func(ctx context.Context) error {
			_, err := k.cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		})
	}
	if err := gone(k, ns); err != nil {
		return err
	}
	if k == e.consumer {
		return gone(e.provider, remoteNS(ns))
	}
	return nil
}

// freshStats summarizes the trials of one mode (failed trials counted
// apart, their times left out).
type freshStats struct {
	Mode                                    string
	Trials, Failed                          int
	FirstReady, AllReady                    Summary
	Labelled, RemoteNamespace, OffloadReady Summary
	FailedStates                            map[string]int
}

func summarizeFresh(trials []FreshTrial) []freshStats {
	var out []freshStats
	for _, mode := range []string{modeOffloaded, modeDirect} {
		s := freshStats{Mode: mode}
		var first, all, labelled, remote, ready []float64
		for _, t := range trials {
			if t.Mode != mode {
				continue
			}
			s.Trials++
			if t.LabelledSeconds > 0 {
				labelled = append(labelled, t.LabelledSeconds)
			}
			if t.RemoteNamespaceSeconds > 0 {
				remote = append(remote, t.RemoteNamespaceSeconds)
			}
			if t.OffloadReadySeconds > 0 {
				ready = append(ready, t.OffloadReadySeconds)
			}
			if t.Error != "" {
				s.Failed++
				for k, v := range t.PodStates {
					if s.FailedStates == nil {
						s.FailedStates = map[string]int{}
					}
					s.FailedStates[k] += v
				}
				continue
			}
			first = append(first, t.FirstReadySeconds)
			all = append(all, t.AllReadySeconds)
		}
		if s.Trials == 0 {
			continue
		}
		s.FirstReady, s.AllReady = summarize(first), summarize(all)
		s.Labelled, s.RemoteNamespace, s.OffloadReady = summarize(labelled), summarize(remote), summarize(ready)
		out = append(out, s)
	}
	return out
}
