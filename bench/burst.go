package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// Modes of a burst trial.
const (
	modeOffloaded = "offloaded" // created on the consumer, run through the virtual node
	modeDirect    = "direct"    // the same Deployment created on the provider itself
)

// BurstTrial is one Deployment brought up from nothing to every pod Ready.
type BurstTrial struct {
	N    int    `json:"n"`
	Mode string `json:"mode"`
	// Placement is where the clusters' processes ran: placementShared or
	// placementPinned (empty in runs from before: shared).
	Placement string `json:"placement,omitempty"`
	Trial     int    `json:"trial"`
	// AllReadySeconds is from the Deployment's creation to the last pod
	// seen Ready; FirstReadySeconds to the first, HalfReadySeconds to the
	// one that made half of them (rounded up) Ready.
	AllReadySeconds   float64 `json:"allReadySeconds"`
	FirstReadySeconds float64 `json:"firstReadySeconds"`
	HalfReadySeconds  float64 `json:"halfReadySeconds,omitempty"`
	PodsPerSecond     float64 `json:"podsPerSecond"`
	// CleanupSeconds is how long deleting it took until no pod (and, when
	// offloaded, no ShadowPod) was left on either cluster; not a result.
	CleanupSeconds float64 `json:"cleanupSeconds"`
	// QuietWaitSeconds is how long the trial waited before it started for
	// the machine to be quiet (waitQuiet): the work the previous trial's
	// clean-up left behind (kwok deleting its pods) is not this trial's.
	QuietWaitSeconds float64 `json:"quietWaitSeconds,omitempty"`
	// CPUSeconds is the CPU time the whole machine used from the
	// Deployment's creation to the last pod Ready (both clusters, the
	// agents, the benchmark: /proc/stat), and CPUBusy the share of the
	// machine's CPU time that was (1: every CPU busy all along).
	CPUSeconds float64 `json:"cpuSeconds,omitempty"`
	CPUBusy    float64 `json:"cpuBusy,omitempty"`
	// CPUBusyPerCPU is how busy each CPU was over the same interval, by
	// CPU number (/proc/stat's cpuN lines).
	CPUBusyPerCPU []float64 `json:"cpuBusyPerCPU,omitempty"`
	// ProcessCPUSeconds is the CPU time (utime+stime) each process of
	// both clusters used over the same interval, by "<cluster>/<name>":
	// the components, the agent, and any process they started.
	ProcessCPUSeconds map[string]float64 `json:"processCPUSeconds,omitempty"`
	// PinCheck is what a pinned trial checked of its threads' affinity.
	PinCheck *PinCheck `json:"pinCheck,omitempty"`
	// Writes are the write requests both API servers answered from the
	// Deployment's creation until writesSettle after the last pod was
	// Ready, to objects in the trial's namespaces (on the provider, the
	// offloaded namespace's remote namespace), from their audit logs.
	Writes []WriteCount `json:"writes,omitempty"`
	// Stages are the delays between the stages of the trial's pods (see
	// offloadedStages and directStages), from the same audit logs.
	Stages []StageDelay `json:"stages,omitempty"`
	// AgentCPUSeconds is the CPU time (utime+stime) each agent used over
	// the same interval, by cluster.
	AgentCPUSeconds map[string]float64 `json:"agentCPUSeconds,omitempty"`
	// Queues is what each agent's work queues did over the same
	// interval, by "<cluster>/<queue name>" (queues that did nothing left
	// out).
	Queues map[string]QueueStats `json:"queues,omitempty"`
	// Profiled trials ran with the agents' CPU profilers on.
	Profiled bool   `json:"profiled,omitempty"`
	Error    string `json:"error,omitempty"`
}

// runBursts runs every size's trials, direct and offloaded interleaved
// (which goes first alternating, direct first in the first trial), smallest
// size first, and adds them to r.Bursts. Each trial runs in every placement
// of cfg (their order alternating too); a pinned one pins both clusters'
// processes for its time (see burstUp).
//
// With an odd number of trials the last trial of a size ends with the
// offloaded run. At size cfg.FootprintPods that run is taken with the
// agents' CPU profiles (the burst ratio target's explanation) and its pods
// are kept for the footprint phase (runFootprintWindow) before being
// deleted: that saves bringing up and deleting another 1000 offloaded pods.
// It reports whether the footprint phase ran.
func runBursts(ctx context.Context, e *env, cfg Config, r *Results) (footprintDone bool, err error) {
	if err := createNamespace(ctx, e.provider, directNS); err != nil {
		return false, err
	}
	placements := e.planPlacements(cfg, r)
	for _, n := range cfg.BurstSizes {
		for i := range cfg.BurstTrials {
			modes := []string{modeDirect, modeOffloaded}
			order := slices.Clone(placements)
			if i%2 == 1 {
				modes = []string{modeOffloaded, modeDirect}
				slices.Reverse(order)
			}
			for _, placement := range order {
				for _, mode := range modes {
					t := BurstTrial{N: n, Mode: mode, Placement: placement, Trial: i + 1}
					keep := mode == modeOffloaded && placement == placementShared && i == cfg.BurstTrials-1 && n == cfg.FootprintPods && cfg.runs(phaseFootprint) && !footprintDone
					name := fmt.Sprintf("burst-%d-%d-%s-%s", n, i+1, placement[:3], mode[:3])
					var err error
					if keep {
						est := profileEstimate(r, n)
						t.Profiled = true
						var profiles []Profile
						profiles, err = e.profileDuring(ctx, keyRatio, fmt.Sprintf("offloaded burst trial %d of %d pods", i+1, n), est, func() error {
							return burstUp(ctx, e, &t, name)
						})
						r.Profiles = append(r.Profiles, profiles...)
					} else {
						err = burstUp(ctx, e, &t, name)
					}
					if ctx.Err() != nil {
						return footprintDone, ctx.Err()
					}
					if err == nil && keep {
						logBurst(e, t, cfg, nil)
						if ferr := runFootprintWindow(ctx, e, cfg, r, n); ferr != nil {
							err = fmt.Errorf("footprint: %w", ferr)
						}
						footprintDone = true
					}
					if cerr := burstDown(ctx, e, &t, name); err == nil {
						err = cerr
					}
					if ctx.Err() != nil {
						return footprintDone, ctx.Err()
					}
					if err != nil {
						t.Error = err.Error()
					}
					if !keep || err != nil {
						logBurst(e, t, cfg, err)
					} else {
						e.log.printf("%s: cleaned up in %.1fs", burstLabel(t, cfg), t.CleanupSeconds)
					}
					r.Bursts = append(r.Bursts, t)
				}
			}
		}
	}
	return footprintDone, nil
}

// planPlacements returns the placements the bursts run in, and for the
// pinned one decides the CPUs (e.pinCPUs). Without two CPUs to pin to,
// pinned is left out and the reason recorded (r.Environment.PinnedSkipped).
func (e *env) planPlacements(cfg Config, r *Results) []string {
	var out []string
	for _, p := range cfg.placements() {
		if p == placementPinned {
			allowed, err := ownCPUs()
			if err == nil {
				e.pinCPUs, err = pinPlan(allowed)
			}
			if err != nil {
				r.Environment.PinnedSkipped = err.Error()
				e.log.printf("burst: pinned placement skipped: %v", err)
				continue
			}
			e.allowedCPUs = allowed
			e.log.printf("burst: pinned trials run %s's processes on CPU %s and %s's on CPU %s (every CPU, %s, given back after each)",
				consumerName, formatCPUList(e.pinCPUs[consumerName]), providerName, formatCPUList(e.pinCPUs[providerName]), formatCPUList(allowed))
		}
		out = append(out, p)
	}
	return out
}

func burstLabel(t BurstTrial, cfg Config) string {
	return fmt.Sprintf("burst N=%d trial %d/%d %-6s %-9s", t.N, t.Trial, cfg.BurstTrials, placementOf(t), t.Mode)
}

func logBurst(e *env, t BurstTrial, cfg Config, err error) {
	label := burstLabel(t, cfg)
	if c := t.PinCheck; c != nil {
		e.log.printf("%s: pinned (%s): right after pinning %s; all Ready %s; set again after %s: %d threads", label, pinCPUsLine(c.CPUs), c.Pinned, c.Ready, repinDelay, c.Repinned)
	}
	if err != nil {
		e.log.printf("%s: FAILED: %v", label, err)
		return
	}
	clean := fmt.Sprintf("; cleaned up in %.1fs", t.CleanupSeconds)
	if t.Profiled {
		clean = " (agents profiled meanwhile; pods kept for the footprint phase)"
	}
	e.log.printf("%s: all Ready in %6.2fs (first %5.2fs, half %5.2fs, %6.1f pods/s)%s; started after %.1fs waiting for a quiet machine", label, t.AllReadySeconds, t.FirstReadySeconds, t.HalfReadySeconds, t.PodsPerSecond, clean, t.QuietWaitSeconds)
	if len(t.CPUBusyPerCPU) > 0 || len(t.ProcessCPUSeconds) > 0 {
		e.log.printf("%s: CPUs busy %s; CPU-seconds %s", label, perCPULine(t.CPUBusyPerCPU), processCPULine(t.ProcessCPUSeconds))
	}
	if t.Mode == modeOffloaded && len(t.Writes) > 0 {
		cpu := ""
		for _, name := range []string{consumerName, providerName} {
			if v, ok := t.AgentCPUSeconds[name]; ok {
				cpu += fmt.Sprintf(" %s %.2f ms/pod", name, 1000*v/float64(t.N))
			}
		}
		e.log.printf("%s: Annex writes per pod %.2f (%s); agent CPU:%s", label, annexWritesPerPod(t.Writes, t.N), writesLine(t.Writes, t.N), cpu)
		if q := queuesShort(t.Queues, t.N); q != "" {
			e.log.printf("%s: work queues: %s", label, q)
		}
	}
	if len(t.Stages) > 0 {
		e.log.printf("%s: stages: %s", label, stagesLine(t.Stages))
	}
}

// profileEstimate is how long to profile an offloaded burst of n pods: as
// long as the ones before took (p50), else a guess.
func profileEstimate(r *Results, n int) time.Duration {
	for _, s := range summarizeBursts(r.Bursts) {
		if s.N == n && s.Mode == modeOffloaded && s.Placement == placementShared && s.AllReady.N > 0 {
			return time.Duration(s.AllReady.P50 * float64(time.Second))
		}
	}
	return 5*time.Second + time.Duration(n)*60*time.Millisecond
}

// burstTimeout bounds the wait for n pods.
func burstTimeout(n int) time.Duration { return 2*time.Minute + time.Duration(n)*300*time.Millisecond }

// burstTarget is where a trial's Deployment goes.
func burstTarget(e *env, mode string) (*kube, string) {
	if mode == modeDirect {
		return e.provider, directNS
	}
	return e.consumer, offloadNS
}

// burstUp creates Deployment name with t.N replicas and measures until every
// pod is Ready. In the pinned placement it first pins every thread of both
// clusters' processes (the consumer's to e.pinCPUs[consumerName], the
// provider's to e.pinCPUs[providerName]) and checks it, pins again
// repinDelay after the Deployment's creation, checks again once every pod
// is Ready, and gives every thread all CPUs back when it returns.
func burstUp(ctx context.Context, e *env, t *BurstTrial, name string) error {
	k, ns := burstTarget(e, t.Mode)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := watchPods(wctx, k, ns, "app="+name)
	if err != nil {
		return err
	}
	var cursors []auditCursor
	for _, c := range []*kube{e.consumer, e.provider} {
		if cur, ok := auditMark(c); ok {
			cursors = append(cursors, cur)
		}
	}
	var pin *pinning
	if placementOf(*t) == placementPinned {
		p, err := e.pin(e.pinCPUs, e.allowedCPUs)
		t.PinCheck = p.check
		if err != nil {
			return err
		}
		defer p.unpin()
		pin = p
		// The Go runtime of each process lowers GOMAXPROCS to its new
		// CPU count within about a second (sysmon rereads the affinity):
		// start once they run as they would on a machine of one CPU.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pinSettle):
		}
	}
	waited, err := waitQuiet(ctx, quietBusy, quietFor, quietMax)
	if err != nil {
		return err
	}
	t.QuietWaitSeconds = waited.Seconds()
	agentCPU0 := e.agentCPU()
	queues0 := e.markQueues(ctx)
	cpu0 := e.markCPU()
	start := time.Now()
	if _, err := k.cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, name, t.N), metav1.CreateOptions{}); err != nil {
		return err
	}
	if pin != nil {
		pin.started()
	}
	first, last, err := w.waitReady(ctx, t.N, burstTimeout(t.N))
	if err != nil {
		return err
	}
	used := e.cpuSince(cpu0)
	t.CPUSeconds, t.CPUBusy, t.CPUBusyPerCPU, t.ProcessCPUSeconds = used.seconds, used.busy, used.perCPU, used.procs
	t.AllReadySeconds = last.Sub(start).Seconds()
	t.FirstReadySeconds = first.Sub(start).Seconds()
	t.HalfReadySeconds = w.nthReady((t.N + 1) / 2).Sub(start).Seconds()
	t.PodsPerSecond = float64(t.N) / t.AllReadySeconds
	if pin != nil {
		if err := pin.ready(); err != nil {
			return err
		}
	}

	// Writes (and agent CPU) that follow the last Ready belong to the
	// burst too: the status writes that were still under way.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(writesSettle):
	}
	t.Queues = e.queuesSince(ctx, queues0)
	namespaces := []string{directNS}
	if t.Mode == modeOffloaded {
		namespaces = []string{offloadNS, remoteNS(offloadNS)}
	}
	for _, cur := range cursors {
		w, err := writesSince(cur, namespaces...)
		if err != nil {
			return fmt.Errorf("audit log of %s: %w", cur.cluster, err)
		}
		t.Writes = append(t.Writes, w...)
	}
	rules := directStages
	if t.Mode == modeOffloaded {
		rules = offloadedStages
	}
	if len(cursors) > 0 {
		if t.Stages, err = stageDelays(cursors, start, rules, namespaces); err != nil {
			return fmt.Errorf("audit logs: %w", err)
		}
	}
	if agentCPU1 := e.agentCPU(); len(agentCPU0) > 0 {
		t.AgentCPUSeconds = map[string]float64{}
		for name, v := range agentCPU1 {
			if v0, ok := agentCPU0[name]; ok {
				t.AgentCPUSeconds[name] = v - v0
			}
		}
	}
	return nil
}

// cpuMark is a reading of the machine's CPUs and of the CPU time of every
// process of both clusters, the start of an interval cpuSince measures.
type cpuMark struct {
	machine MachineCPU
	err     error // reading /proc/stat
	procs   map[string]float64
}

func (e *env) markCPU() cpuMark {
	m := cpuMark{procs: procCPU(e.clusterProcs())}
	m.machine, m.err = readMachineCPU()
	return m
}

// cpuUsed is what the machine's CPUs (all together and each) and every
// process of both clusters used over an interval.
type cpuUsed struct {
	seconds, busy float64
	perCPU        []float64
	procs         map[string]float64
}

// cpuSince is what was used since m; the machine's part stays zero when
// /proc/stat cannot be read.
func (e *env) cpuSince(m cpuMark) cpuUsed {
	u := cpuUsed{procs: cpuDelta(m.procs, procCPU(e.clusterProcs()))}
	if now, err := readMachineCPU(); err == nil && m.err == nil {
		u.seconds, u.busy = cpuUse(m.machine, now)
		u.perCPU = perCPUBusy(m.machine, now)
	}
	return u
}

// cpuDelta is the CPU-seconds used between two readings of procCPU, for
// the processes in both (and not restarted in between).
func cpuDelta(from, to map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range to {
		if v0, ok := from[k]; ok && v >= v0 {
			out[k] = math.Round((v-v0)*clockTicks) / clockTicks // whole ticks
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// writesSettle is how long after the last pod is Ready a burst trial's
// writes and agent CPU are still counted.
const writesSettle = 3 * time.Second

// agentCPU reads each agent's CPU-seconds, by cluster; agents that cannot be
// read are left out.
func (e *env) agentCPU() map[string]float64 {
	out := map[string]float64{}
	for name, a := range e.agents {
		if s, err := readProc(a.PID); err == nil {
			out[name] = s.CPUSeconds
		}
	}
	return out
}

// burstDown deletes the trial's Deployment and waits until its pods are gone.
func burstDown(ctx context.Context, e *env, t *BurstTrial, name string) error {
	k, ns := burstTarget(e, t.Mode)
	start := time.Now()
	if err := deleteDeployment(ctx, e, k, ns, name, t.N); err != nil {
		return fmt.Errorf("clean-up: %w", err)
	}
	t.CleanupSeconds = time.Since(start).Seconds()
	return nil
}

// deleteDeployment deletes a Deployment and waits until the namespace has
// no pods left on its cluster and, for the consumer's offloaded namespace,
// nothing left on the provider either.
func deleteDeployment(ctx context.Context, e *env, k *kube, ns, name string, n int) error {
	err := k.cs.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	return waitNoPods(ctx, e, k, ns, 2*time.Minute+time.Duration(n)*100*time.Millisecond)
}

// waitNoPods waits until namespace ns of k has no pods and, when k is the
// consumer, its remote namespace on the provider has neither ShadowPods nor
// pods. The counts go to the log file as they change.
func waitNoPods(ctx context.Context, e *env, k *kube, ns string, timeout time.Duration) error {
	start, last := time.Now(), ""
	return poll(ctx, 500*time.Millisecond, timeout, "pods of "+ns+" gone", func(ctx context.Context) error {
		local, err := countPods(ctx, k, ns)
		if err != nil {
			return err
		}
		state := fmt.Sprintf("%d pods on %s", local, k.Name())
		remote, shadows := 0, 0
		if k == e.consumer {
			rns := remoteNS(ns)
			if remote, err = countPods(ctx, e.provider, rns); err != nil {
				return err
			}
			sp := &offloadingv1alpha1.ShadowPodList{}
			if err := e.provider.cr.List(ctx, sp, client.InNamespace(rns), client.Limit(1)); err != nil {
				return err
			}
			shadows = len(sp.Items)
			if sp.RemainingItemCount != nil {
				shadows += int(*sp.RemainingItemCount)
			}
			state += fmt.Sprintf(", %d ShadowPods and %d pods on %s", shadows, remote, e.provider.Name())
		}
		if state != last {
			e.log.detail("clean-up of %s after %.1fs: %s", ns, time.Since(start).Seconds(), state)
			last = state
		}
		if local+remote+shadows > 0 {
			return errors.New(state + " left")
		}
		return nil
	})
}

// deployment is the Deployment every trial creates: one container with
// small requests, so that only the pod count limits where it fits.
func deployment(ns, name string, replicas int) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)), //nolint:gosec // G115: a burst is at most some thousand pods
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}}},
			},
		},
	}
}

// burstStats summarizes the trials of one size, mode and placement.
type burstStats struct {
	N                                    int
	Mode, Placement                      string
	Trials, Failed                       int
	AllReady, FirstReady, HalfReady, PPS Summary
	// CPUSeconds and CPUBusy summarize the machine's CPU use (trials
	// without a reading left out), CPUBusyPerCPU each CPU's by number.
	CPUSeconds, CPUBusy Summary
	CPUBusyPerCPU       []Summary
	// ClusterCPU summarizes the CPU-seconds of each cluster's processes
	// (their ProcessCPUSeconds added up), by cluster; ProcessCPU each
	// process's, by "<cluster>/<name>".
	ClusterCPU, ProcessCPU map[string]Summary
	// PinCheck adds up the pinned trials' checks (nil when none ran
	// pinned).
	PinCheck *PinCheck
	// Queues adds up the work queues of the trials that read them, and
	// QueuePods their pods.
	Queues    map[string]QueueStats
	QueuePods int
}

// burstKey is what a burstStats summarizes.
func burstKey(t BurstTrial) [3]any { return [3]any{t.N, t.Mode, placementOf(t)} }

func summarizeBursts(trials []BurstTrial) []burstStats {
	var out []burstStats
	index := map[[3]any]int{}
	for _, t := range trials {
		key := burstKey(t)
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, burstStats{N: t.N, Mode: t.Mode, Placement: placementOf(t)})
		}
		out[i].Trials++
		if t.Error != "" {
			out[i].Failed++
		}
		if c := t.PinCheck; c != nil {
			s := out[i].PinCheck
			if s == nil {
				s = &PinCheck{CPUs: c.CPUs}
				out[i].PinCheck = s
			}
			s.Pinned.add(c.Pinned)
			s.Ready.add(c.Ready)
		}
	}
	for i := range out {
		var all, first, half, rate, cpu, busy []float64
		var perCPU [][]float64
		clusters, procs := map[string][]float64{}, map[string][]float64{}
		for _, t := range trials {
			if burstKey(t) != statsKey(out[i]) || t.Error != "" {
				continue
			}
			all = append(all, t.AllReadySeconds)
			first = append(first, t.FirstReadySeconds)
			rate = append(rate, t.PodsPerSecond)
			if t.HalfReadySeconds > 0 {
				half = append(half, t.HalfReadySeconds)
			}
			if t.CPUBusy > 0 {
				cpu = append(cpu, t.CPUSeconds)
				busy = append(busy, t.CPUBusy)
			}
			for c, v := range t.CPUBusyPerCPU {
				for len(perCPU) <= c {
					perCPU = append(perCPU, nil)
				}
				perCPU[c] = append(perCPU[c], v)
			}
			sums := map[string]float64{}
			for name, v := range t.ProcessCPUSeconds {
				procs[name] = append(procs[name], v)
				cluster, _, _ := strings.Cut(name, "/")
				sums[cluster] += v
			}
			for c, v := range sums {
				clusters[c] = append(clusters[c], v)
			}
			if len(t.Queues) > 0 {
				if out[i].Queues == nil {
					out[i].Queues = map[string]QueueStats{}
				}
				addQueues(out[i].Queues, t.Queues)
				out[i].QueuePods += t.N
			}
		}
		out[i].AllReady, out[i].FirstReady, out[i].HalfReady, out[i].PPS = summarize(all), summarize(first), summarize(half), summarize(rate)
		out[i].CPUSeconds, out[i].CPUBusy = summarize(cpu), summarize(busy)
		for _, xs := range perCPU {
			out[i].CPUBusyPerCPU = append(out[i].CPUBusyPerCPU, summarize(xs))
		}
		out[i].ClusterCPU, out[i].ProcessCPU = summarizeAll(clusters), summarizeAll(procs)
	}
	return out
}

func statsKey(s burstStats) [3]any { return [3]any{s.N, s.Mode, s.Placement} }

// summarizeAll summarizes each key's samples (nil without any).
func summarizeAll(m map[string][]float64) map[string]Summary {
	if len(m) == 0 {
		return nil
	}
	out := map[string]Summary{}
	for k, xs := range m {
		out[k] = summarize(xs)
	}
	return out
}

// add counts another check in c.
func (c *ThreadCheck) add(o ThreadCheck) {
	c.Processes += o.Processes
	c.Threads += o.Threads
	c.Mismatches += o.Mismatches
	for _, x := range o.Examples {
		if len(c.Examples) < maxExamples {
			c.Examples = append(c.Examples, x)
		}
	}
}

// perCPULine is "cpu0 97%, cpu1 99%".
func perCPULine(busy []float64) string {
	parts := make([]string, len(busy))
	for i, b := range busy {
		parts[i] = fmt.Sprintf("cpu%d %.0f%%", i, 100*b)
	}
	return orDash(strings.Join(parts, ", "))
}

// processCPULine is "alpha 12.3 (kube-apiserver 5.1, etcd 2.0, …); beta …":
// each cluster's total and its processes, most first.
func processCPULine(cpu map[string]float64) string {
	byCluster := map[string][]string{}
	totals := map[string]float64{}
	for _, k := range byValue(cpu) {
		cluster, proc, _ := strings.Cut(k, "/")
		byCluster[cluster] = append(byCluster[cluster], fmt.Sprintf("%s %.2f", proc, cpu[k]))
		totals[cluster] += cpu[k]
	}
	var parts []string
	for _, c := range []string{consumerName, providerName} {
		if len(byCluster[c]) > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f (%s)", c, totals[c], strings.Join(byCluster[c], ", ")))
		}
	}
	return orDash(strings.Join(parts, "; "))
}

// pinCPUsLine is "alpha on CPU 0, beta on CPU 1".
func pinCPUsLine(cpus map[string]string) string {
	var parts []string
	for _, c := range []string{consumerName, providerName} {
		if l, ok := cpus[c]; ok {
			parts = append(parts, fmt.Sprintf("%s on CPU %s", c, l))
		}
	}
	return strings.Join(parts, ", ")
}
