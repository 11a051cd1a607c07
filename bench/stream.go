package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StreamRun is one steady stream of pods in one mode: the pod startup
// latency of SIG Scalability's SLO under a constant creation rate.
type StreamRun struct {
	Mode string `json:"mode"`
	// Rate is the pods per second asked for, for DurationSeconds.
	Rate            float64 `json:"rate"`
	DurationSeconds float64 `json:"durationSeconds"`
	// Created is how many create calls succeeded, CreateErrors how many
	// failed. AchievedRate is the rate the create calls were sent at (from
	// the first to the last); LateCreates how many were sent more than
	// streamLate after their slot.
	Created      int     `json:"created"`
	CreateErrors int     `json:"createErrors,omitempty"`
	AchievedRate float64 `json:"achievedRate"`
	LateCreates  int     `json:"lateCreates,omitempty"`
	// StoppedAfterSeconds is set when the stream stopped creating pods
	// before DurationSeconds was up because its SLO was already missed
	// (streamOverrun): LateAtStop pods were then not started more than
	// targetStartupP99 after their create call.
	StoppedAfterSeconds float64 `json:"stoppedAfterSeconds,omitempty"`
	LateAtStop          int     `json:"lateAtStop,omitempty"`
	// Started is how many pods were seen started; NotStarted how many
	// were not within streamWait after the last create call.
	Started    int `json:"started"`
	NotStarted int `json:"notStarted,omitempty"`
	// Startup is from the create call to the watch event showing the pod
	// Running with every container running (offloaded: the consumer's pod,
	// as the virtual node reports it). StartupFromCreation is the same from
	// the pod's creationTimestamp, which has whole seconds: it reads up to
	// 1 s longer.
	Startup             Latency `json:"startup"`
	StartupFromCreation Latency `json:"startupFromCreation"`
	// MaxAlive is the most pods of the stream that existed at once (seen
	// through the watch; each is deleted streamLinger after it started).
	MaxAlive int `json:"maxAlive"`
	// Stages are the delays between the stages of the pods' way, from the
	// API servers' audit logs (see streamStages).
	Stages []StageDelay `json:"stages,omitempty"`
	// CPUSeconds is the CPU time the whole machine used while the stream
	// sent its create calls (/proc/stat), CPUBusy the share of the
	// machine's CPU time that was, and ProcessCPUSeconds what each process
	// of both clusters used meanwhile, by "<cluster>/<name>" (as a burst
	// trial's). A stream whose pods need more CPU than the machine has
	// falls behind whatever Annex does.
	CPUSeconds        float64            `json:"cpuSeconds,omitempty"`
	CPUBusy           float64            `json:"cpuBusy,omitempty"`
	ProcessCPUSeconds map[string]float64 `json:"processCPUSeconds,omitempty"`
	// Queues is what each agent's work queues did over the same interval,
	// by "<cluster>/<queue name>" (see QueueStats).
	Queues map[string]QueueStats `json:"queues,omitempty"`
	// CleanupSeconds is from the deletion of the pods left (once the last
	// ones started, or streamWait passed) to no pod of the stream left on
	// either cluster; not a result.
	CleanupSeconds float64 `json:"cleanupSeconds,omitempty"`
	Error          string  `json:"error,omitempty"`
}

const (
	// streamLinger is how long a started pod of the stream lives on
	// before the benchmark deletes it.
	streamLinger = 2 * time.Second
	// streamWait bounds the wait for the last pods to start.
	streamWait = time.Minute
	// streamLate is how late a create call may be sent after its slot
	// before it counts as late.
	streamLate = 100 * time.Millisecond
	// streamCheck is how often the stream counts its late pods.
	streamCheck = time.Second
	// streamProfile bounds the CPU profiles of the offloaded stream,
	// taken from its start.
	streamProfile = 20 * time.Second
)

// streamOverrun reports whether a stream of planned pods has already
// missed the startup SLO with late pods not started more than
// targetStartupP99 after their create call: more than 1 % of the pods are
// then slower than the bound whatever happens next, so the p99 cannot meet
// it. Going on would only grow a backlog that the clean-up has to delete
// and the next phases would wait behind (the 20 pods/s stream of the
// 2026-12-05 full run left thousands).
func streamOverrun(late, planned int) bool {
	return late > planned/100
}

// stopped says why the stream stopped early ("" when it did not), for the
// target line and the page.
func (s StreamRun) stopped(planned int) string {
	if s.StoppedAfterSeconds == 0 {
		return ""
	}
	return fmt.Sprintf("stopped after %.0f s: %d pods were then not started %.0f s after their create call, more than 1 %% of the %d planned",
		s.StoppedAfterSeconds, s.LateAtStop, targetStartupP99, planned)
}

// late is how many pods sent before now-bound are not yet started.
func (w *streamWatch) late(now time.Time, bound time.Duration) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for name, sent := range w.sent {
		if !w.started[name] && now.Sub(sent) > bound {
			n++
		}
	}
	return n
}

// streamStages are the stages of a stream's pod as the audit logs show
// them, from its create call; the first write of each kind counts (a
// started pod is deleted soon after, which writes its status again).
func streamStages(mode string) []stageRule {
	if mode == modeDirect {
		return []stageRule{
			{"created", providerName, "create", "pods", false},
			{"bound", providerName, "create", "pods/binding", false},
			{"running", providerName, "patch", "pods/status", false},
		}
	}
	return []stageRule{
		{"created", consumerName, "create", "pods", false},
		{"bound", consumerName, "create", "pods/binding", false},
		{"shadowpod", providerName, "create", "shadowpods", false},
		{"remote pod", providerName, "create", "pods", false},
		{"remote bound", providerName, "create", "pods/binding", false},
		{"remote running", providerName, "patch", "pods/status", false},
		{"running", consumerName, "update", "pods/status", false},
	}
}

// runStreams runs the stream directly on the provider, then offloaded, and
// adds both to r.Streams.
func runStreams(ctx context.Context, e *env, cfg Config, r *Results) error {
	if err := createNamespace(ctx, e.provider, directNS); err != nil {
		return err
	}
	var errs []error
	for _, mode := range []string{modeDirect, modeOffloaded} {
		s := StreamRun{Mode: mode, Rate: cfg.StreamRate}
		d := time.Duration(cfg.StreamDuration)
		var err error
		if mode == modeOffloaded {
			// Kept only when the SLO is missed (finish), to show where
			// both clusters' CPU went.
			pd := min(d, streamProfile)
			var profiles []Profile
			profiles, err = e.profileDuring(ctx, keyStartupSLO, fmt.Sprintf("the first %s of the offloaded stream", pd), pd, func() error {
				return streamOnce(ctx, e, &s, d)
			})
			r.Profiles = append(r.Profiles, profiles...)
		} else {
			err = streamOnce(ctx, e, &s, d)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			s.Error = err.Error()
			errs = append(errs, fmt.Errorf("%s: %w", mode, err))
			e.log.printf("stream %-9s: FAILED: %v", mode, err)
		}
		if s.Created > 0 {
			e.log.printf("stream %-9s: %d pods at %.2f/s (asked %.0f/s, %d late), %d started: startup p50 %.2fs p90 %.2fs p99 %.2fs max %.2fs "+
				"(from creationTimestamp p50 %.2fs p99 %.2fs); at most %d alive; cleaned up in %.1fs",
				mode, s.Created, s.AchievedRate, s.Rate, s.LateCreates, s.Started, s.Startup.P50, s.Startup.P90, s.Startup.P99, s.Startup.Max,
				s.StartupFromCreation.P50, s.StartupFromCreation.P99, s.MaxAlive, s.CleanupSeconds)
		}
		if len(s.Stages) > 0 {
			e.log.printf("stream %-9s: stages: %s", mode, stagesLine(s.Stages))
		}
		r.Streams = append(r.Streams, s)
	}
	return errors.Join(errs...)
}

// streamWatch follows the pods of one stream: when each was seen started,
// and how many exist at once.
type streamWatch struct {
	broadcast
	mu       sync.Mutex
	sent     map[string]time.Time // create call sent, by pod name
	started  map[string]bool
	startup  []float64 // from the create call
	fromMeta []float64 // from creationTimestamp
	alive    map[string]bool
	maxAlive int
	// onStart is called (outside the lock) for each pod seen started.
	onStart func(name string)
}

func (w *streamWatch) observe(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	if deleted {
		delete(w.alive, p.Name)
	} else {
		w.alive[p.Name] = true
		w.maxAlive = max(w.maxAlive, len(w.alive))
	}
	first := false
	if sent, ok := w.sent[p.Name]; ok && !deleted && !w.started[p.Name] && p.DeletionTimestamp == nil && podStarted(p) {
		w.started[p.Name] = true
		w.startup = append(w.startup, now.Sub(sent).Seconds())
		w.fromMeta = append(w.fromMeta, now.Sub(p.CreationTimestamp.Time).Seconds())
		first = true
	}
	w.mu.Unlock()
	if first && w.onStart != nil {
		w.onStart(p.Name)
	}
	w.fire()
}

// podStarted reports whether a pod is Running with every container
// running: "all its containers reported started" of the SLO (readiness,
// which probes may delay, is not part of it).
func podStarted(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) < len(p.Spec.Containers) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}

// streamPod is a bare pod with the burst's pod template (offloaded, the
// namespace's admission policy adds the virtual node's toleration and
// affinity as for any pod).
func streamPod(ns, name, label string) *corev1.Pod {
	tmpl := deployment(ns, label, 1).Spec.Template
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: tmpl.Labels}, Spec: tmpl.Spec}
}

// streamSchedule is when pod i (from 0) of a stream at rate pods per
// second is due: slot i is start + i/rate, fixed in advance, so a late slot
// does not push the later ones back (no drift).
func streamSchedule(start time.Time, rate float64, i int) time.Time {
	return start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
}

// streamCount is how many pods a stream of rate for d creates.
func streamCount(rate float64, d time.Duration) int {
	return int(rate*d.Seconds() + 0.5)
}

// streamOnce creates pods at s.Rate for d in the mode's namespace, each in
// a goroutine of its own so that a slow create call holds back none of the
// others, deletes each streamLinger after it was seen started, waits for the
// last ones and cleans up.
func streamOnce(ctx context.Context, e *env, s *StreamRun, d time.Duration) error {
	k, ns := burstTarget(e, s.Mode)
	label := "stream-" + s.Mode
	rules := streamStages(s.Mode)
	namespaces := []string{directNS}
	if s.Mode == modeOffloaded {
		namespaces = []string{offloadNS, remoteNS(offloadNS)}
	}
	var cursors []auditCursor
	for _, c := range []*kube{e.consumer, e.provider} {
		if cur, ok := auditMark(c); ok {
			cursors = append(cursors, cur)
		}
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var deletes sync.WaitGroup
	var deletesMu sync.Mutex
	deletesClosed := false
	w := &streamWatch{sent: map[string]time.Time{}, started: map[string]bool{}, alive: map[string]bool{}}
	w.onStart = func(name string) {
		deletesMu.Lock()
		defer deletesMu.Unlock()
		if deletesClosed {
			return
		}
		deletes.Add(1)
		time.AfterFunc(streamLinger, func() {
			defer deletes.Done()
			if wctx.Err() == nil {
				_ = k.cs.CoreV1().Pods(ns).Delete(wctx, name, metav1.DeleteOptions{}) // leftovers go in the clean-up
			}
		})
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj, false) },
		UpdateFunc: func(_, obj any) { w.observe(obj, false) },
		DeleteFunc: func(obj any) { w.observe(obj, true) },
	}
	if err := runInformer(wctx, k.cs.CoreV1().RESTClient(), "pods", ns, "app="+label, &corev1.Pod{}, h); err != nil {
		return err
	}

	n := streamCount(s.Rate, d)
	e.log.printf("stream %-9s: %d pods at %.0f/s for %s into %s of %s", s.Mode, n, s.Rate, d, ns, k.Name())
	queues0 := e.markQueues(ctx)
	cpu0 := e.markCPU()
	var creates sync.WaitGroup
	var mu sync.Mutex
	var firstSent, lastSent time.Time
	created, failed := 0, 0
	var firstErr error
	start := time.Now()
	lastCheck := start
	bound := time.Duration(targetStartupP99 * float64(time.Second))
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i := range n {
		if now := time.Now(); now.Sub(lastCheck) >= streamCheck {
			lastCheck = now
			if late := w.late(now, bound); streamOverrun(late, n) {
				s.StoppedAfterSeconds, s.LateAtStop = now.Sub(start).Seconds(), late
				e.log.printf("stream %-9s: stopped after %.0fs and %d of %d pods: %d pods not started %.0fs after their create call, more than 1%% of them, so the SLO is missed whatever follows",
					s.Mode, s.StoppedAfterSeconds, i, n, late, targetStartupP99)
				break
			}
		}
		due := streamSchedule(start, s.Rate, i)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			}
		}
		if time.Since(due) > streamLate {
			s.LateCreates++
		}
		name := fmt.Sprintf("%s-%05d", label, i)
		creates.Add(1)
		go func() {
			defer creates.Done()
			now := time.Now()
			w.mu.Lock()
			w.sent[name] = now
			w.mu.Unlock()
			_, err := k.cs.CoreV1().Pods(ns).Create(ctx, streamPod(ns, name, label), metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			if firstSent.IsZero() || now.Before(firstSent) {
				firstSent = now
			}
			if now.After(lastSent) {
				lastSent = now
			}
			if err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			created++
		}()
	}
	creates.Wait()
	s.DurationSeconds = time.Since(start).Seconds()
	used := e.cpuSince(cpu0)
	s.CPUSeconds, s.CPUBusy, s.ProcessCPUSeconds = used.seconds, used.busy, used.procs
	s.Queues = e.queuesSince(ctx, queues0)
	if s.CPUSeconds > 0 {
		e.log.printf("stream %-9s: CPUs %.0f%% busy; CPU-seconds %s", s.Mode, 100*s.CPUBusy, processCPULine(s.ProcessCPUSeconds))
	}
	s.Created, s.CreateErrors = created, failed
	if span := lastSent.Sub(firstSent).Seconds(); created+failed > 1 && span > 0 {
		s.AchievedRate = float64(created+failed-1) / span // the calls sent: fewer than n when the stream stopped early
	}
	if firstErr != nil {
		e.log.printf("stream %-9s: %d create calls failed, the first: %v", s.Mode, failed, firstErr)
	}

	waitErr := waitFor(ctx, &w.broadcast, streamWait, fmt.Sprintf("%d pods started", created), func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.startup) >= created, fmt.Sprintf("%d of %d started", len(w.startup), created)
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	w.mu.Lock()
	s.Started = len(w.startup)
	s.NotStarted = created - s.Started
	s.Startup, s.StartupFromCreation = latency(w.startup), latency(w.fromMeta)
	s.MaxAlive = w.maxAlive
	w.mu.Unlock()

	cleanStart := time.Now()
	err := k.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=" + label})
	if err = client.IgnoreNotFound(err); err == nil {
		err = waitNoPods(ctx, e, k, ns, 2*time.Minute+time.Duration(s.MaxAlive)*100*time.Millisecond)
	}
	stopWatch()
	deletesMu.Lock()
	deletesClosed = true
	deletesMu.Unlock()
	deletes.Wait()
	s.CleanupSeconds = time.Since(cleanStart).Seconds()
	if err != nil {
		return fmt.Errorf("clean-up: %w", err)
	}
	if len(cursors) > 0 {
		if s.Stages, err = stageDelays(cursors, time.Time{}, rules, namespaces); err != nil {
			return fmt.Errorf("audit logs: %w", err)
		}
	}
	if s.NotStarted > 0 {
		return fmt.Errorf("%d of %d pods not started: %w", s.NotStarted, created, waitErr)
	}
	if failed > 0 {
		return fmt.Errorf("%d create calls failed, the first: %w", failed, firstErr)
	}
	return nil
}

// streamPair returns the stream's runs by mode (the last of each).
func streamPair(runs []StreamRun) (off, dir *StreamRun) {
	return pairOf(runs, func(r *StreamRun) string { return r.Mode })
}
