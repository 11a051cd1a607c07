package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/agent"
	"github.com/annexhq/annex/internal/cli/sandbox"
	"github.com/annexhq/annex/internal/localcluster"
)

// The tenants phase (issue #37, "Bounded work"): two consumers of one
// provider. Tenant B is the benchmark's consumer (alpha), which offloads a
// burst; tenant A is a third cluster (gamma) peered with the same provider,
// which writes on the provider with its tenant credential as fast as the
// API server takes it, as a hostile consumer would. B's offloading latency
// is measured with A quiet and with A flooding, interleaved in one run.

// Modes of a tenants trial: what tenant A does during tenant B's burst.
const (
	tenantQuiet    = "quiet"
	tenantFlooding = "flooding"
)

// Names of tenant A's side.
const (
	// floodCluster is tenant A's consumer cluster.
	floodCluster = "gamma"
	// floodNS is the namespace tenant A offloads; its ShadowPods are in
	// floodRemoteNS on the provider.
	floodNS = "bench-flood"
	// floodAnnotation is the annotation of spec.podAnnotations tenant A
	// changes (a key without a domain: the provider's pods carry it).
	floodAnnotation = "churn"
	// floodWarmup is how long the flood runs before B's burst starts, so
	// that B meets it at full speed.
	floodWarmup = 3 * time.Second
	// churnKeep is how many of tenant A's churned ShadowPods exist at once
	// (each churner deletes the one it made churnKeep creations before).
	churnKeep = 5
)

var floodRemoteNS = floodNS + "-" + floodCluster

// TenantTrial is one burst of tenant B (the consumer, alpha), with tenant A
// (gamma) quiet or writing at its maximum meanwhile.
type TenantTrial struct {
	Mode  string `json:"mode"`
	Trial int    `json:"trial"`
	N     int    `json:"n"`
	// PodSeconds are, for each of B's pods, from the Deployment's create
	// call to the pod seen Ready on the consumer (through the virtual node),
	// sorted; Latency summarizes them.
	PodSeconds      []float64 `json:"podSeconds,omitempty"`
	Latency         Latency   `json:"latency"`
	AllReadySeconds float64   `json:"allReadySeconds"`
	// Flood is what tenant A wrote over the same interval (flooding only).
	Flood *FloodStats `json:"flood,omitempty"`
	// CPUBusy is the share of the machine's CPU time that was busy from the
	// Deployment's creation to the last pod Ready; ProcessCPUSeconds what
	// each process of the consumer and the provider used meanwhile (tenant
	// A's cluster is idle: A writes to the provider directly).
	CPUBusy           float64            `json:"cpuBusy,omitempty"`
	ProcessCPUSeconds map[string]float64 `json:"processCPUSeconds,omitempty"`
	// BenchCPUSeconds is what the benchmark's own process used meanwhile:
	// its watches and, flooding, tenant A's writers, which on real
	// clusters run on A's machines, not the provider's.
	BenchCPUSeconds float64 `json:"benchCPUSeconds,omitempty"`
	// Queues is what the agents' work queues did meanwhile, by
	// "<cluster>/<queue>"; Stages where B's pods' time went (audit logs).
	Queues map[string]QueueStats `json:"queues,omitempty"`
	Stages []StageDelay          `json:"stages,omitempty"`
	// QuietWaitSeconds is how long the trial waited for a quiet machine
	// before it started (before the flood, when flooding).
	QuietWaitSeconds float64 `json:"quietWaitSeconds,omitempty"`
	CleanupSeconds   float64 `json:"cleanupSeconds,omitempty"`
	// Profiled is the extra flooding trial of a missed target, which ran
	// with the agents' and API servers' CPU profilers on: not counted.
	Profiled bool   `json:"profiled,omitempty"`
	Error    string `json:"error,omitempty"`
}

// FloodStats is what tenant A's writers did over an interval.
type FloodStats struct {
	Seconds float64 `json:"seconds"`
	// Patches are the changes of spec.podAnnotations the API server took;
	// Creates and Deletes the churners' ShadowPods; Errors the writes it
	// refused or that failed (FirstError the first of them).
	Patches    int    `json:"patches"`
	Creates    int    `json:"creates,omitempty"`
	Deletes    int    `json:"deletes,omitempty"`
	Errors     int    `json:"errors,omitempty"`
	FirstError string `json:"firstError,omitempty"`
}

// WritesPerSecond is tenant A's successful writes per second.
func (f FloodStats) WritesPerSecond() float64 {
	return ratio(float64(f.Patches+f.Creates+f.Deletes), f.Seconds)
}

// floodTenant is tenant A: its cluster, and a client that holds exactly
// the credential its peering gave it on the provider.
type floodTenant struct {
	kube   *kube
	agent  *sandbox.Agent
	client client.Client
	// pods are the ShadowPods its writers change.
	pods []string
	// floods counts the floods started: each churns ShadowPods of names
	// of its own (the last ones of a flood are still there).
	floods int
}

// runTenants sets tenant A up, runs a warm-up burst (not counted), then
// cfg.TenantTrials trials in each mode (interleaved: quiet first in odd
// trials, flooding first in even ones) and adds them to r.Tenants; tenant
// A's cluster is stopped at the end.
func runTenants(ctx context.Context, e *env, cfg Config, r *Results) error {
	a, err := startFloodTenant(ctx, e, cfg)
	defer func() {
		if a != nil {
			a.stop(e)
		}
	}()
	if err != nil {
		return fmt.Errorf("tenant A (%s): %w", floodCluster, err)
	}
	// The first burst after the set-up is slower than the others (in three
	// runs, its p99 was 1.3–1.5 times the next quiet trials'): it warms
	// up, unmeasured.
	warmup := TenantTrial{Mode: tenantQuiet, N: cfg.TenantPods}
	if _, err := tenantTrial(ctx, e, cfg, a, &warmup, 0); err != nil {
		return fmt.Errorf("warm-up burst: %w", err)
	}
	e.log.printf("tenants N=%d warm-up burst (not counted): B's pods Ready p50 %.2fs p99 %.2fs", warmup.N, warmup.Latency.P50, warmup.Latency.P99)
	var errs []error
	for i := range cfg.TenantTrials {
		modes := []string{tenantQuiet, tenantFlooding}
		if i%2 == 1 {
			modes = []string{tenantFlooding, tenantQuiet}
		}
		for _, mode := range modes {
			t := TenantTrial{Mode: mode, Trial: i + 1, N: cfg.TenantPods}
			_, err := tenantTrial(ctx, e, cfg, a, &t, 0)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("trial %d %s: %w", t.Trial, mode, err))
			}
			logTenantTrial(e, cfg, &t, err)
			r.Tenants = append(r.Tenants, t)
		}
	}
	if err := errors.Join(errs...); err != nil || !tenantTarget(r).missed() {
		// Last, as it leaves tenant A's quotas full: A writes its maximum
		// of every kind.
		r.TenantBytes = runTenantBytes(ctx, e, a)
		return err
	}
	// Missed: one more flooding trial, not counted, with the agents and
	// both API servers profiled from B's create call.
	est := 5 * time.Second
	if _, flooding := tenantPair(summarizeTenants(r.Tenants)); flooding != nil && flooding.AllReady.N > 0 {
		est = time.Duration(flooding.AllReady.P50 * float64(time.Second))
	}
	e.log.printf("tenants: target missed: one more flooding trial with the agents and API servers profiled")
	t := TenantTrial{Mode: tenantFlooding, Trial: cfg.TenantTrials + 1, N: cfg.TenantPods, Profiled: true}
	profiles, err := tenantTrial(ctx, e, cfg, a, &t, est)
	r.Profiles = append(r.Profiles, profiles...)
	logTenantTrial(e, cfg, &t, err)
	r.Tenants = append(r.Tenants, t)
	r.TenantBytes = runTenantBytes(ctx, e, a)
	return err
}

// logTenantTrial prints a trial's line (and records err in it).
func logTenantTrial(e *env, cfg Config, t *TenantTrial, err error) {
	label := fmt.Sprintf("tenants N=%d trial %d/%d %-8s", t.N, t.Trial, cfg.TenantTrials, t.Mode)
	if t.Profiled {
		label += " (profiled, not counted)"
	}
	if err != nil {
		t.Error = err.Error()
		e.log.printf("%s: FAILED: %v", label, err)
		return
	}
	flood := ""
	if f := t.Flood; f != nil {
		flood = fmt.Sprintf("; tenant A wrote %.0f/s (%d patches, %d creates, %d deletes, %d errors)", f.WritesPerSecond(), f.Patches, f.Creates, f.Deletes, f.Errors)
	}
	e.log.printf("%s: B's pods Ready p50 %.2fs p99 %.2fs, all in %.2fs, CPUs %.0f%% busy%s; cleaned up in %.1fs",
		label, t.Latency.P50, t.Latency.P99, t.AllReadySeconds, 100*t.CPUBusy, flood, t.CleanupSeconds)
	if q := queuesShort(t.Queues, t.N); q != "" {
		e.log.printf("%s: work queues: %s", label, q)
	}
	if len(t.Stages) > 0 {
		e.log.printf("%s: stages: %s", label, stagesLine(t.Stages))
	}
}

// startFloodTenant starts tenant A's cluster, installs Annex there, peers
// it with the provider (a grant of the flood's pods and a little more),
// offloads floodNS, stops its agent (a hostile consumer runs none: its
// agent would delete the ShadowPods it does not know) and creates the
// ShadowPods its writers change, waiting for their pods. The tenant it
// returns is to be stopped, also with an error.
func startFloodTenant(ctx context.Context, e *env, cfg Config) (*floodTenant, error) {
	var spec sandbox.Spec
	for _, s := range sandbox.Clusters {
		if s.Name == floodCluster {
			spec = s
		}
	}
	e.log.printf("tenants: starting tenant A's cluster %s (1 kwok node)", floodCluster)
	c, err := localcluster.Start(ctx, localcluster.Options{Name: floodCluster, Dir: filepath.Join(e.dir, floodCluster), BinDir: e.kubeBin,
		PodCIDR: spec.PodCIDR, ServiceCIDR: spec.ServiceCIDR, Nodes: 1, BeforeControllers: sandbox.ApplyCRDs})
	if err != nil {
		return nil, err
	}
	k, err := newKube(c)
	a := &floodTenant{kube: k}
	if err != nil {
		a.kube = &kube{Cluster: c}
		return a, err
	}
	if _, err := e.annexctl(ctx, "install", "--kubeconfig", k.KubeconfigPath(), "--cluster-id", floodCluster,
		"--pod-cidr", spec.PodCIDR, "--service-cidr", spec.ServiceCIDR, "--external-cidr", spec.ExternalCIDR, "--local-agent"); err != nil {
		return a, err
	}
	if a.agent, err = sandbox.StartAgent(ctx, k.Cluster, sandbox.AgentOptions{Binary: filepath.Join(e.bin, "annex-agent"), TokenTTL: 24 * time.Hour, Args: e.agentArgs}); err != nil {
		return a, err
	}
	pods := cfg.TenantFloodPods + cfg.TenantChurners*churnKeep + 10
	if _, err := e.annexctl(ctx, "peer", "--kubeconfig", k.KubeconfigPath(), "--remote-kubeconfig", e.provider.KubeconfigPath(),
		"--cpu", "8", "--memory", "16Gi", "--pods", strconv.Itoa(pods)); err != nil {
		return a, err
	}
	if err := createNamespace(ctx, k, floodNS); err != nil {
		return a, err
	}
	if _, err := e.annexctl(ctx, "offload", "namespace", floodNS, "--kubeconfig", k.KubeconfigPath(), "--pod-strategy", "Remote"); err != nil {
		return a, err
	}
	if err := poll(ctx, 200*time.Millisecond, 2*time.Minute, "remote namespace "+floodRemoteNS, func(ctx context.Context) error {
		ns := &corev1.Namespace{}
		if err := e.provider.cr.Get(ctx, client.ObjectKey{Name: floodRemoteNS}, ns); err != nil {
			return err
		}
		if ns.Labels[corev1alpha1.LabelRemoteClusterID] != floodCluster {
			return errors.New("not labelled for " + floodCluster + " yet")
		}
		return nil
	}); err != nil {
		return a, err
	}
	if a.client, err = tenantCredential(ctx, k); err != nil {
		return a, err
	}
	if err := a.agent.Stop(); err != nil {
		return a, err
	}
	for a.agent.Running() {
		time.Sleep(50 * time.Millisecond)
	}
	for i := range cfg.TenantFloodPods {
		name := fmt.Sprintf("flood-%d", i)
		if err := a.client.Create(ctx, floodShadowPod(name)); err != nil {
			return a, fmt.Errorf("create ShadowPod %s with the tenant's credential: %w", name, err)
		}
		a.pods = append(a.pods, name)
	}
	if err := poll(ctx, 500*time.Millisecond, 2*time.Minute, fmt.Sprintf("tenant A's %d pods", len(a.pods)), func(ctx context.Context) error {
		n, err := countPods(ctx, e.provider, floodRemoteNS)
		if err != nil {
			return err
		}
		if n < len(a.pods) {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	}); err != nil {
		return a, err
	}
	e.log.printf("tenants: tenant A (%s) peered with %s, its agent stopped; %d ShadowPods of it run in %s", floodCluster, providerName, len(a.pods), floodRemoteNS)
	return a, nil
}

// tenantCredential returns a client for the provider with the credential
// k's peering holds for it (its ForeignCluster's kubeconfig Secret),
// without client-side rate limiting: the tenant writes as fast as the
// provider's API server takes it.
func tenantCredential(ctx context.Context, k *kube) (client.Client, error) {
	fc := &corev1alpha1.ForeignCluster{}
	if err := k.cr.Get(ctx, client.ObjectKey{Name: providerName}, fc); err != nil {
		return nil, err
	}
	ref := fc.Spec.CredentialsSecretRef
	if ref == nil {
		return nil, fmt.Errorf("ForeignCluster %s has no credentials", providerName)
	}
	secret := &corev1.Secret{}
	if err := k.cr.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[corev1alpha1.CredentialsKubeconfigKey])
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Timeout = -1, 30*time.Second
	scheme, err := agent.Scheme()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// floodShadowPod is one of tenant A's ShadowPods: a pod of 10m CPU and
// 16Mi, as the burst's.
func floodShadowPod(name string) *offloadingv1alpha1.ShadowPod {
	return &offloadingv1alpha1.ShadowPod{
		ObjectMeta: metav1.ObjectMeta{Namespace: floodRemoteNS, Name: name},
		Spec: offloadingv1alpha1.ShadowPodSpec{
			PodLabels:      map[string]string{"app": "flood"},
			PodAnnotations: map[string]string{floodAnnotation: "0"},
			Pod: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}}},
		},
	}
}

// stop stops tenant A's cluster (its agent is stopped already, but after
// a failed set-up). Its tenant stays on the provider, silent: the
// provider's agent removes it after --tenant-grace-period, long after the
// benchmark.
func (a *floodTenant) stop(e *env) {
	if a.agent != nil && a.agent.Running() {
		_ = a.agent.Stop()
	}
	if a.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Its pods go with their ShadowPods: later phases see an idle provider.
		if err := e.provider.cr.DeleteAllOf(ctx, &offloadingv1alpha1.ShadowPod{}, client.InNamespace(floodRemoteNS)); err != nil {
			e.log.printf("tenants: delete tenant A's ShadowPods: %v", err)
		}
	}
	if a.kube != nil && a.kube.Cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := a.kube.Stop(ctx); err != nil {
			e.log.printf("stop %s: %v", floodCluster, err)
		}
	}
}

// flood is tenant A writing at its maximum: writers goroutines each change
// spec.podAnnotations of their share of its ShadowPods in turn, every
// change a new value, as fast as the API server answers (no client-side
// limit); churners goroutines each create ShadowPods and delete the one
// they made churnKeep creations before, within the tenant's grant.
type flood struct {
	patches, creates, deletes, errs atomic.Int64
	mu                              sync.Mutex
	firstErr                        string
	cancel                          context.CancelFunc
	wg                              sync.WaitGroup
}

// floodMark is a reading of a flood's counters.
type floodMark struct {
	at                              time.Time
	patches, creates, deletes, errs int64
}

func startFlood(ctx context.Context, a *floodTenant, writers, churners int) *flood {
	a.floods++
	c, pods, round := a.client, a.pods, a.floods
	ctx, cancel := context.WithCancel(ctx)
	f := &flood{cancel: cancel}
	var seq atomic.Int64
	for w := range writers {
		f.wg.Go(func() {
			for i := w; ctx.Err() == nil; i += writers {
				name := pods[i%len(pods)]
				patch := fmt.Appendf(nil, `{"spec":{"podAnnotations":{%q:%q}}}`, floodAnnotation, strconv.FormatInt(seq.Add(1), 10))
				sp := &offloadingv1alpha1.ShadowPod{ObjectMeta: metav1.ObjectMeta{Namespace: floodRemoteNS, Name: name}}
				f.count(ctx, c.Patch(ctx, sp, client.RawPatch(types.MergePatchType, patch)), &f.patches)
			}
		})
	}
	for ch := range churners {
		f.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				f.count(ctx, c.Create(ctx, floodShadowPod(fmt.Sprintf("churn-%d-%d-%d", round, ch, i))), &f.creates)
				if i >= churnKeep {
					sp := &offloadingv1alpha1.ShadowPod{ObjectMeta: metav1.ObjectMeta{Namespace: floodRemoteNS, Name: fmt.Sprintf("churn-%d-%d-%d", round, ch, i-churnKeep)}}
					f.count(ctx, client.IgnoreNotFound(c.Delete(ctx, sp)), &f.deletes)
				}
			}
		})
	}
	return f
}

// count counts a write's outcome; one cut short by the flood's end is
// neither.
func (f *flood) count(ctx context.Context, err error, ok *atomic.Int64) {
	switch {
	case err == nil:
		ok.Add(1)
	case ctx.Err() != nil:
	default:
		if f.errs.Add(1) == 1 {
			f.mu.Lock()
			f.firstErr = err.Error()
			f.mu.Unlock()
		}
	}
}

func (f *flood) mark() floodMark {
	return floodMark{at: time.Now(), patches: f.patches.Load(), creates: f.creates.Load(), deletes: f.deletes.Load(), errs: f.errs.Load()}
}

// since is what the flood did since m.
func (f *flood) since(m floodMark) *FloodStats {
	n := f.mark()
	f.mu.Lock()
	defer f.mu.Unlock()
	return &FloodStats{Seconds: n.at.Sub(m.at).Seconds(), Patches: int(n.patches - m.patches), Creates: int(n.creates - m.creates),
		Deletes: int(n.deletes - m.deletes), Errors: int(n.errs - m.errs), FirstError: f.firstErr}
}

// stop ends the flood and waits for its writers.
func (f *flood) stop() {
	f.cancel()
	f.wg.Wait()
}

// tenantTrial waits for a quiet machine, starts tenant A's flood (flooding
// mode) and floodWarmup later creates tenant B's Deployment of t.N pods in
// the offloaded namespace, timing each pod from the create call to Ready
// on the consumer; then it stops the flood, deletes the Deployment and
// waits until its pods are gone on both clusters. With profile > 0 the
// agents and both API servers are profiled for about that long from B's
// create call.
func tenantTrial(ctx context.Context, e *env, cfg Config, a *floodTenant, t *TenantTrial, profile time.Duration) ([]Profile, error) {
	name := fmt.Sprintf("tenants-%d-%s", t.Trial, t.Mode[:3]) // trial 0: the warm-up
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := watchPods(wctx, e.consumer, offloadNS, "app="+name)
	if err != nil {
		return nil, err
	}
	waited, err := waitQuiet(ctx, quietBusy, quietFor, quietMax)
	if err != nil {
		return nil, err
	}
	t.QuietWaitSeconds = waited.Seconds()
	var f *flood
	if t.Mode == tenantFlooding {
		f = startFlood(ctx, a, cfg.TenantFloodWriters, cfg.TenantChurners)
		defer f.stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(floodWarmup):
		}
	}
	var cursors []auditCursor
	for _, c := range []*kube{e.consumer, e.provider} {
		if cur, ok := auditMark(c); ok {
			cursors = append(cursors, cur)
		}
	}
	queues0 := e.markQueues(ctx)
	cpu0 := e.markCPU()
	self0, selfErr := readProc(os.Getpid())
	var flood0 floodMark
	if f != nil {
		flood0 = f.mark()
	}
	start := time.Now()
	var last time.Time
	burst := func() error {
		if _, err := e.consumer.cs.AppsV1().Deployments(offloadNS).Create(ctx, deployment(offloadNS, name, t.N), metav1.CreateOptions{}); err != nil {
			return err
		}
		var err error
		_, last, err = w.waitReady(ctx, t.N, burstTimeout(t.N))
		return err
	}
	var profiles []Profile
	if profile > 0 {
		profiles, err = e.profileDuring(ctx, keyTenants, fmt.Sprintf("B's burst of %d pods while tenant A floods (an extra trial)", t.N), profile, burst)
	} else {
		err = burst()
	}
	if f != nil {
		t.Flood = f.since(flood0)
		f.stop()
	}
	if err != nil {
		return profiles, errors.Join(err, tenantCleanup(ctx, e, t, name))
	}
	used := e.cpuSince(cpu0)
	t.CPUBusy, t.ProcessCPUSeconds = used.busy, used.procs
	if self1, err := readProc(os.Getpid()); err == nil && selfErr == nil {
		t.BenchCPUSeconds = self1.CPUSeconds - self0.CPUSeconds
	}
	t.Queues = e.queuesSince(ctx, queues0)
	t.AllReadySeconds = last.Sub(start).Seconds()
	w.mu.Lock()
	for _, at := range w.ready {
		t.PodSeconds = append(t.PodSeconds, at.Sub(start).Seconds())
	}
	w.mu.Unlock()
	slices.Sort(t.PodSeconds)
	t.Latency = latency(t.PodSeconds)
	if len(cursors) > 0 {
		if t.Stages, err = stageDelays(cursors, start, offloadedStages, []string{offloadNS, remoteNS(offloadNS)}); err != nil {
			return profiles, errors.Join(fmt.Errorf("audit logs: %w", err), tenantCleanup(ctx, e, t, name))
		}
	}
	return profiles, tenantCleanup(ctx, e, t, name)
}

// tenantCleanup deletes a trial's Deployment and waits until its pods are
// gone on both clusters.
func tenantCleanup(ctx context.Context, e *env, t *TenantTrial, name string) error {
	start := time.Now()
	err := deleteDeployment(ctx, e, e.consumer, offloadNS, name, t.N)
	t.CleanupSeconds = time.Since(start).Seconds()
	return err
}

// tenantStats summarizes the trials of one mode that did not fail: every
// pod of them, pooled, and each trial's p50 and p99.
type tenantStats struct {
	Mode           string
	Trials, Failed int
	Pods           Latency
	// P50s and P99s summarize the trials' p50 and p99: their p50 is the
	// target's, which one slow trial does not decide.
	P50s, P99s Summary
	AllReady   Summary
	// WritesPerSecond summarizes tenant A's writes per second over the
	// trials (flooding only); CPUBusy the machine's busy share.
	WritesPerSecond, CPUBusy Summary
	// Queues adds up the agents' queues over the trials.
	Queues map[string]QueueStats
}

func summarizeTenants(trials []TenantTrial) []tenantStats {
	var out []tenantStats
	for _, mode := range []string{tenantQuiet, tenantFlooding} {
		s := tenantStats{Mode: mode}
		var pods, p50s, p99s, all, rate, busy []float64
		for _, t := range trials {
			if t.Mode != mode || t.Profiled {
				continue
			}
			s.Trials++
			if t.Error != "" {
				s.Failed++
				continue
			}
			pods = append(pods, t.PodSeconds...)
			p50s, p99s = append(p50s, t.Latency.P50), append(p99s, t.Latency.P99)
			all = append(all, t.AllReadySeconds)
			if t.CPUBusy > 0 {
				busy = append(busy, t.CPUBusy)
			}
			if t.Flood != nil {
				rate = append(rate, t.Flood.WritesPerSecond())
			}
			for k, q := range t.Queues {
				if s.Queues == nil {
					s.Queues = map[string]QueueStats{}
				}
				s.Queues[k] = s.Queues[k].plus(q, 1)
			}
		}
		if s.Trials == 0 {
			continue
		}
		s.Pods, s.P50s, s.P99s = latency(pods), summarize(p50s), summarize(p99s)
		s.AllReady, s.WritesPerSecond, s.CPUBusy = summarize(all), summarize(rate), summarize(busy)
		out = append(out, s)
	}
	return out
}

// targetTenantSlowdown is how much longer tenant B's p99 offloading
// latency may be while tenant A writes at its maximum (issue #37).
const targetTenantSlowdown = 1.2

// keyTenants is the tenants phase's target.
const keyTenants = "tenant-fairness"

// tenantTarget compares tenant B's latency with tenant A flooding against
// the same with A quiet.
func tenantTarget(r *Results) TargetResult {
	cfg := r.Config
	t := TargetResult{Key: keyTenants,
		What: fmt.Sprintf("Bounded work: tenant B's offloading latency while tenant A writes on the same provider at its maximum (B: a burst of %d pods; "+
			"A: %d writers changing the annotations of %d ShadowPods, %d creating and deleting ShadowPods, with its tenant credential, no client-side limit)",
			cfg.TenantPods, cfg.TenantFloodWriters, cfg.TenantFloodPods, cfg.TenantChurners),
		How: "each trial's p99 (nearest rank) over B's pods, from the Deployment's create call to each pod seen Ready on the consumer; " +
			"the p50 of those over the trials of each mode, flooding / quiet, the modes interleaved after an unmeasured warm-up burst (see Two tenants)",
		Target: fmt.Sprintf("≤ %.1f (B's p99 at most %.0f %% longer)", targetTenantSlowdown, 100*(targetTenantSlowdown-1))}
	quiet, flooding := tenantPair(summarizeTenants(r.Tenants))
	if quiet == nil || flooding == nil || quiet.P99s.N == 0 || flooding.P99s.N == 0 {
		return t
	}
	slowdown := flooding.P99s.P50 / quiet.P99s.P50
	t.Result = fmt.Sprintf("%.2f (p99 %.2f s flooding vs %.2f s quiet; p50 %.2f s vs %.2f s; p50 over the trials; tenant A wrote %.0f/s)",
		slowdown, flooding.P99s.P50, quiet.P99s.P50, flooding.P50s.P50, quiet.P50s.P50, flooding.WritesPerSecond.P50)
	if flooding.Failed+quiet.Failed > 0 {
		t.Result += fmt.Sprintf("; %d trials failed", flooding.Failed+quiet.Failed)
	}
	t.Met = ptrTo(slowdown <= targetTenantSlowdown && flooding.Failed == 0 && quiet.Failed == 0)
	if !*t.Met {
		t.Why = tenantWhy(r.Tenants, quiet, flooding)
	}
	return t
}

// tenantPair returns the quiet and the flooding stats, nil where missing.
func tenantPair(stats []tenantStats) (quiet, flooding *tenantStats) {
	for i := range stats {
		switch stats[i].Mode {
		case tenantQuiet:
			quiet = &stats[i]
		case tenantFlooding:
			flooding = &stats[i]
		}
	}
	return quiet, flooding
}

// tenantWhy explains a missed target by where B's pods' time went and
// what the machine and the queues did in each mode.
func tenantWhy(trials []TenantTrial, quiet, flooding *tenantStats) string {
	var parts []string
	for _, mode := range []string{tenantQuiet, tenantFlooding} {
		if t := lastTenantTrial(trials, mode); t != nil && len(t.Stages) > 0 {
			parts = append(parts, fmt.Sprintf("Where B's pods' time went, A %s (trial %d; p50 / p99, audit logs): %s.", mode, t.Trial, stagesShort(t.Stages)))
		}
	}
	parts = append(parts, fmt.Sprintf("The machine's CPUs were %.0f %% busy with A flooding, %.0f %% with A quiet (p50).", 100*flooding.CPUBusy.P50, 100*quiet.CPUBusy.P50))
	if q := queuesShort(flooding.Queues, flooding.Pods.N); q != "" {
		parts = append(parts, "Annex's work queues with A flooding, over the trials: "+q+".")
	}
	return strings.Join(parts, " ")
}

// lastTenantTrial is the last trial of mode that did not fail.
func lastTenantTrial(trials []TenantTrial, mode string) *TenantTrial {
	var last *TenantTrial
	for i := range trials {
		if trials[i].Mode == mode && trials[i].Error == "" && !trials[i].Profiled {
			last = &trials[i]
		}
	}
	return last
}

// renderTenants writes the tenants phase's section.
func renderTenants(b *strings.Builder, r *Results) {
	if len(r.Tenants) == 0 {
		return
	}
	cfg := r.Config
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Two tenants\n\n")
	p("Issue #37, *Bounded work*: one provider (`%s`), two consumers. **Tenant B** is the consumer `%s`; it creates a Deployment of %d pods in its "+
		"offloaded namespace `%s` (the burst's pod template), and each pod is timed from the create call to the pod seen Ready on the consumer "+
		"(through the virtual node). **Tenant A** is a third cluster, `%s` (1 kwok node), peered with `%s` too (a grant of its pods and a few more), "+
		"whose agent is stopped after it offloaded `%s`: a hostile consumer runs none. With exactly the credential its peering gave it, and no "+
		"client-side rate limit, A owns %d running ShadowPods in `%s`; **flooding**, %d goroutines change their `spec.podAnnotations` (each change a "+
		"new value, which the provider carries to the pod) and %d create ShadowPods and delete the one they made %d creations before, as fast as the "+
		"provider's API server answers, from %s before B's create call until B's last pod is Ready; **quiet**, A writes nothing. Trials: %d per mode, "+
		"interleaved, each after the machine was quiet (before the flood started), after one unmeasured warm-up burst (the first burst after the "+
		"set-up is slower than the others); after each, B's Deployment is deleted and the benchmark waits until its pods are gone on both clusters. "+
		"Seconds; percentiles nearest-rank, over each trial's pods and then the p50 of those over the trials of the mode (the target's), or over the "+
		"pods of every trial of the mode, pooled.\n\n",
		providerName, consumerName, cfg.TenantPods, offloadNS, floodCluster, providerName, floodNS, cfg.TenantFloodPods, floodRemoteNS,
		cfg.TenantFloodWriters, cfg.TenantChurners, churnKeep, floodWarmup, cfg.TenantTrials)
	stats := summarizeTenants(r.Tenants)
	p("| tenant A | trials | B's pods | p50 (p50 of the trials') | p99 (p50 of the trials') | p50 (pooled) | p90 (pooled) | p99 (pooled) | max | all Ready p50 | A's writes /s p50 | CPUs busy p50 |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range stats {
		trials := fmt.Sprint(s.Trials)
		if s.Failed > 0 {
			trials += fmt.Sprintf(" (%d failed)", s.Failed)
		}
		writes := "–"
		if s.WritesPerSecond.N > 0 {
			writes = fmt.Sprintf("%.0f", s.WritesPerSecond.P50)
		}
		busy := "–"
		if s.CPUBusy.N > 0 {
			busy = fmt.Sprintf("%.0f %%", 100*s.CPUBusy.P50)
		}
		p("| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s |\n", s.Mode, trials, s.Pods.N, s.P50s.P50, s.P99s.P50,
			s.Pods.P50, s.Pods.P90, s.Pods.P99, s.Pods.Max, s.AllReady.P50, writes, busy)
	}
	p("\nEvery trial (CPU per second of the interval: the provider's processes, the consumer's, and the benchmark's own process, which holds tenant A's "+
		"writers):\n\n| tenant A | trial | B's p50 | B's p99 | all Ready | A's patches | A's creates / deletes | A's errors | A's writes /s | CPUs busy | "+
		"CPU/s %s | CPU/s %s | CPU/s %s's kube-apiserver | CPU/s %s's agent | CPU/s benchmark |\n", providerName, consumerName, providerName, providerName)
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, t := range r.Tenants {
		if t.Error != "" {
			p("| %s | %d | failed: %s | | | | | | | | | | | | |\n", t.Mode, t.Trial, cell(t.Error))
			continue
		}
		perSecond := func(v float64) string { return fmt.Sprintf("%.2f", ratio(v, t.AllReadySeconds)) }
		var beta, alpha float64
		for k, v := range t.ProcessCPUSeconds {
			switch {
			case strings.HasPrefix(k, providerName+"/"):
				beta += v
			case strings.HasPrefix(k, consumerName+"/"):
				alpha += v
			}
		}
		patches, churn, errs, rate := "–", "–", "–", "–"
		if f := t.Flood; f != nil {
			patches, churn, errs, rate = fmt.Sprint(f.Patches), fmt.Sprintf("%d / %d", f.Creates, f.Deletes), fmt.Sprint(f.Errors), fmt.Sprintf("%.0f", f.WritesPerSecond())
			if f.FirstError != "" {
				errs += " (" + cell(f.FirstError) + ")"
			}
		}
		mode := t.Mode
		if t.Profiled {
			mode += " (profiled, not counted)"
		}
		p("| %s | %d | %.2f | %.2f | %.2f | %s | %s | %s | %s | %.0f %% | %s | %s | %s | %s | %s |\n", mode, t.Trial, t.Latency.P50, t.Latency.P99, t.AllReadySeconds,
			patches, churn, errs, rate, 100*t.CPUBusy, perSecond(beta), perSecond(alpha), perSecond(t.ProcessCPUSeconds[providerName+"/kube-apiserver"]),
			perSecond(t.ProcessCPUSeconds[providerName+"/annex-agent"]), perSecond(t.BenchCPUSeconds))
	}
	p("\n")
	var qrows []queueRow
	for _, s := range stats {
		if len(s.Queues) > 0 {
			qrows = append(qrows, queueRow{"tenant A " + s.Mode, s.Queues, s.Pods.N})
		}
	}
	renderQueueTable(b, "Work queues over the trials of each mode, from B's create call to its last pod Ready (the provider's `shadowpod`, `shadowendpointslice`, "+
		"`resourceslice` and `fencing` queues serve the tenants in turn). "+queueTableIntro, qrows)
	var rows []stageRow
	for _, mode := range []string{tenantQuiet, tenantFlooding} {
		if t := lastTenantTrial(r.Tenants, mode); t != nil {
			rows = append(rows, stageRow{fmt.Sprintf("A %s (trial %d)", mode, t.Trial), t.Stages})
		}
	}
	renderStageTable(b, "Where B's pods' time went in the last trial of each mode (as in *Where a pod's time goes*; start = the Deployment's creation):", rows)
	for _, t := range r.Tenants {
		if len(t.ProcessCPUSeconds) > 0 {
			p("- Trial %d, A %s: CPU-seconds by process %s.\n", t.Trial, t.Mode, processCPULine(t.ProcessCPUSeconds))
		}
	}
	p("\n")
}
