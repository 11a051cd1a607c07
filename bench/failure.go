package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// Faults of the failure-reaction trials.
const (
	faultDead = "dead" // the provider's API server killed with SIGKILL, restarted to resume
	faultHung = "hung" // the provider's API server stopped with SIGSTOP, continued to resume
)

// failureApp names the Service and the Deployment behind it.
const failureApp = "failover"

// FailureTrial is one fault of the provider and the consumer's reaction.
type FailureTrial struct {
	Fault string `json:"fault"`
	Trial int    `json:"trial"`
	Pods  int    `json:"pods"`
	// DetectionSeconds is from the fault to the consumer's EndpointSlices
	// of the Service having no ready endpoint left.
	DetectionSeconds float64 `json:"detectionSeconds"`
	// RecoverySeconds is from the resume (SIGCONT, or the restart of the
	// killed API server) to every endpoint ready again.
	RecoverySeconds float64 `json:"recoverySeconds"`
	// APIServerReadySeconds is from the resume to the provider's API server
	// answering /readyz; RecoveryAfterAPIServerSeconds from then to every
	// endpoint ready again (what is Annex's share of the recovery).
	APIServerReadySeconds         float64 `json:"apiServerReadySeconds"`
	RecoveryAfterAPIServerSeconds float64 `json:"recoveryAfterAPIServerSeconds"`
	Profiled                      bool    `json:"profiled,omitempty"`
	Error                         string  `json:"error,omitempty"`
}

// failureSetup creates the Service and its offloaded pods and returns a
// watch of the Service's endpoints once all are ready.
func failureSetup(ctx context.Context, e *env, pods int) (*endpointWatch, error) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: offloadNS, Name: failureApp}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": failureApp}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := e.consumer.cs.CoreV1().Services(offloadNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	ew, err := watchEndpoints(ctx, e.consumer, offloadNS, failureApp)
	if err != nil {
		return nil, err
	}
	if _, err := e.consumer.cs.AppsV1().Deployments(offloadNS).Create(ctx, deployment(offloadNS, failureApp, pods), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := ew.waitCount(ctx, time.Now(), pods, burstTimeout(pods)); err != nil {
		return nil, err
	}
	e.log.printf("failure reaction: Service %s/%s has %d ready endpoints, all on %s", offloadNS, failureApp, pods, providerName)
	return ew, nil
}

// runFailures runs the trials, dead and hung alternating (which goes first
// alternating too).
func runFailures(ctx context.Context, e *env, cfg Config) ([]FailureTrial, error) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ew, err := failureSetup(wctx, e, cfg.FailurePods)
	if err != nil {
		return nil, err
	}
	var out []FailureTrial
	for i := range cfg.FailureTrials {
		faults := []string{faultDead, faultHung}
		if i%2 == 1 {
			faults = []string{faultHung, faultDead}
		}
		for _, f := range faults {
			t := FailureTrial{Fault: f, Trial: i + 1, Pods: cfg.FailurePods}
			err := failureOnce(ctx, e, ew, &t)
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			logFailure(e, t, cfg.FailureTrials, err)
			out = append(out, t)
			if err != nil && !e.providerReady(ctx, 2*time.Second) {
				return out, fmt.Errorf("provider not back after a failed trial: %w", err)
			}
		}
	}
	return out, nil
}

func logFailure(e *env, t FailureTrial, trials int, err error) {
	label := fmt.Sprintf("failure %s trial %d/%d", t.Fault, t.Trial, trials)
	if t.Profiled {
		label = fmt.Sprintf("failure %s (profiled, not counted)", t.Fault)
	}
	if err != nil {
		e.log.printf("%s: FAILED: %v", label, err)
		return
	}
	e.log.printf("%s: endpoints not ready %.2fs after the fault; ready again %.2fs after the resume (API server answered after %.2fs, +%.2fs)",
		label, t.DetectionSeconds, t.RecoverySeconds, t.APIServerReadySeconds, t.RecoveryAfterAPIServerSeconds)
}

// failureOnce injects t.Fault, measures, and resumes the provider.
func failureOnce(ctx context.Context, e *env, ew *endpointWatch, t *FailureTrial) (err error) {
	defer func() {
		if err != nil {
			t.Error = err.Error()
		}
	}()
	// A healthy start: every endpoint ready, and a few quiet seconds so
	// that the consumer's probes have a streak of successes.
	if _, err := ew.waitCount(ctx, time.Now(), t.Pods, time.Minute); err != nil {
		return fmt.Errorf("before the fault: %w", err)
	}
	sleep(ctx, 3*time.Second)
	fault := e.provider.KillAPIServer
	if t.Fault == faultHung {
		fault = e.provider.PauseAPIServer
	}
	t0 := time.Now()
	if err := fault(); err != nil {
		return err
	}
	detected, detErr := ew.waitCount(ctx, t0, 0, time.Minute)
	if detErr == nil {
		t.DetectionSeconds = detected.Sub(t0).Seconds()
	}

	t1 := time.Now()
	apiReady := make(chan time.Time, 1)
	pctx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	go func() {
		for pctx.Err() == nil {
			if e.providerReady(pctx, 300*time.Millisecond) {
				apiReady <- time.Now()
				return
			}
			sleep(pctx, 50*time.Millisecond)
		}
	}()
	if err := e.provider.ResumeAPIServer(ctx); err != nil {
		return errors.Join(detErr, fmt.Errorf("resume: %w", err))
	}
	recovered, recErr := ew.waitCount(ctx, t1, t.Pods, 2*time.Minute)
	var ready time.Time
	select {
	case ready = <-apiReady:
	case <-time.After(time.Minute):
		return errors.Join(detErr, recErr, errors.New("the provider's /readyz did not answer within a minute of the resume"))
	}
	if recErr == nil {
		t.RecoverySeconds = recovered.Sub(t1).Seconds()
		t.APIServerReadySeconds = ready.Sub(t1).Seconds()
		t.RecoveryAfterAPIServerSeconds = max(recovered.Sub(ready).Seconds(), 0)
	}
	return errors.Join(detErr, recErr)
}

// profileFailure runs one more trial of fault (not counted) with the agents
// profiled throughout.
func profileFailure(ctx context.Context, e *env, cfg Config, fault string, est time.Duration) (FailureTrial, []Profile, error) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ew, err := watchEndpoints(wctx, e.consumer, offloadNS, failureApp)
	if err != nil {
		return FailureTrial{}, nil, err
	}
	t := FailureTrial{Fault: fault, Pods: cfg.FailurePods, Profiled: true}
	profiles, err := e.profileDuring(ctx, "failure-"+fault, "a "+fault+"-provider trial", est, func() error {
		return failureOnce(ctx, e, ew, &t)
	})
	logFailure(e, t, 0, err)
	return t, profiles, err
}

// failureCleanup deletes the Service and its pods and waits until they and
// their ShadowPods are gone. The provider's pods are left to its garbage
// collector: after a restart of its controller-manager (every dead trial) it
// only notices ShadowPods are gone after ~30 s, and nothing measured next
// depends on them.
func failureCleanup(ctx context.Context, e *env, pods int) error {
	if err := e.consumer.cs.CoreV1().Services(offloadNS).Delete(ctx, failureApp, metav1.DeleteOptions{}); err != nil {
		return err
	}
	err := e.consumer.cs.AppsV1().Deployments(offloadNS).Delete(ctx, failureApp, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if err != nil {
		return err
	}
	return poll(ctx, 500*time.Millisecond, 2*time.Minute+time.Duration(pods)*100*time.Millisecond, "pods of "+failureApp+" gone", func(ctx context.Context) error {
		n, err := countPods(ctx, e.consumer, offloadNS)
		if err != nil || n > 0 {
			return fmt.Errorf("%d pods left on %s (%v)", n, consumerName, err)
		}
		sp := &offloadingv1alpha1.ShadowPodList{}
		if err := e.provider.cr.List(ctx, sp, client.InNamespace(remoteNS(offloadNS)), client.Limit(1)); err != nil {
			return err
		}
		if len(sp.Items) > 0 {
			return fmt.Errorf("ShadowPods left on %s", providerName)
		}
		return nil
	})
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// failureStats summarizes the trials of one fault.
type failureStats struct {
	Fault                                            string
	Trials, Failed                                   int
	Detection, Recovery, APIServer, RecoveryAfterAPI Summary
}

func summarizeFailures(trials []FailureTrial) []failureStats {
	var out []failureStats
	for _, f := range []string{faultDead, faultHung} {
		s := failureStats{Fault: f}
		var det, rec, api, after []float64
		for _, t := range trials {
			if t.Fault != f || t.Profiled {
				continue
			}
			s.Trials++
			if t.Error != "" {
				s.Failed++
				continue
			}
			det, rec = append(det, t.DetectionSeconds), append(rec, t.RecoverySeconds)
			api, after = append(api, t.APIServerReadySeconds), append(after, t.RecoveryAfterAPIServerSeconds)
		}
		if s.Trials == 0 {
			continue
		}
		s.Detection, s.Recovery, s.APIServer, s.RecoveryAfterAPI = summarize(det), summarize(rec), summarize(api), summarize(after)
		out = append(out, s)
	}
	return out
}
