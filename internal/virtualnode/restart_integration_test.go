package virtualnode_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
	"github.com/annexhq/annex/internal/virtualnode/podreflector"
)

// TestNoLostUpdatesAcrossRestarts: the consumer's agent writes a pod's
// status only when the provider has something to say, so nothing may be
// lost when it stops in the middle of a burst. The agent is stopped while
// the first half of a burst is being offloaded; meanwhile the second half
// is created, the provider starts the first half's pods and two of them
// finish (one Succeeded, one Failed; the provider records their final state
// in their ShadowPods and then removes the succeeded one's pod); the agent
// is started, stopped again a
// moment later (in the middle of its status writes), and started again.
// Every pod must reach its final state on the consumer: Running and Ready,
// or finished with its containers' final state; each with one ShadowPod,
// those created before the restarts never re-created.
func TestNoLostUpdatesAcrossRestarts(t *testing.T) {
	ctx, te := integration(t, 5*time.Minute)
	cc, pc := te.cc, te.pc

	start := func() (stop func()) {
		agentCtx, stopAgent := context.WithCancel(ctx)
		done, _ := runAgent(agentCtx, t, te.ccfg, te.pcfg, te.scheme)
		return func() {
			stopAgent()
			<-done
		}
	}
	stop := start()
	defer func() { stop() }()
	clustertest.Eventually(t, 30*time.Second, "Node Ready", func() error {
		n := &corev1.Node{}
		if err := cc.Get(ctx, client.ObjectKey{Name: nodeName}, n); err != nil {
			return err
		}
		return nodeReady(n, corev1.ConditionTrue)
	})

	const n = 30
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("burst-%02d", i)
	}
	succeeded, failed := names[0], names[1]
	create := func(names []string) {
		for _, name := range names {
			p := newPod(name)
			if name == succeeded || name == failed {
				p.Spec.RestartPolicy = corev1.RestartPolicyNever
			}
			clustertest.Must(t, cc.Create(ctx, p))
		}
	}

	// First half; the agent stops as soon as the two pods that will
	// finish have their ShadowPods.
	create(names[:n/2])
	waitShadowPod(ctx, t, pc, succeeded)
	waitShadowPod(ctx, t, pc, failed)
	stop()
	before := shadowPodUIDs(ctx, t, pc)
	t.Logf("agent stopped with %d ShadowPods and %d pods Ready on the consumer", len(before), readyPods(ctx, t, cc))

	// While it is down: the second half is created, the provider runs the
	// first half's pods, and two of them finish.
	create(names[n/2:])
	for name := range before {
		clustertest.Eventually(t, 30*time.Second, "provider pod "+name+" Running", func() error {
			p := &corev1.Pod{}
			if err := pc.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: name}, p); err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("phase %q", p.Status.Phase)
			}
			return nil
		})
	}
	finish(ctx, t, pc, succeeded, 0)
	finish(ctx, t, pc, failed, 3)
	for name, phase := range map[string]corev1.PodPhase{succeeded: corev1.PodSucceeded, failed: corev1.PodFailed} {
		clustertest.Eventually(t, 20*time.Second, "ShadowPod "+name+" "+string(phase), func() error {
			sp := &offloadingv1alpha1.ShadowPod{}
			if err := pc.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: name}, sp); err != nil {
				return err
			}
			if sp.Status.Phase != phase {
				return fmt.Errorf("phase %q", sp.Status.Phase)
			}
			return nil
		})
	}

	// The provider removes the succeeded pod (as its pod garbage collector
	// may): only the ShadowPod's record of the final state is left to say
	// how it ended.
	clustertest.Must(t, pc.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: succeeded}},
		client.GracePeriodSeconds(0)))

	// Started, stopped in the middle of its writes, started again.
	stop = start()
	time.Sleep(1500 * time.Millisecond)
	stop()
	t.Logf("agent stopped again with %d pods Ready on the consumer", readyPods(ctx, t, cc))
	stop = start()

	restarted := time.Now()
	clustertest.Eventually(t, 90*time.Second, "every pod in its final state", func() error {
		for _, name := range names {
			p := getPod(ctx, t, cc, name)
			var err error
			switch name {
			case succeeded:
				err = finishedAs(p, corev1.PodSucceeded, 0)
			case failed:
				err = finishedAs(p, corev1.PodFailed, 3)
			default:
				err = podReady(p, corev1.ConditionTrue)
				if err == nil && p.Status.Phase != corev1.PodRunning {
					err = fmt.Errorf("pod %s: phase %s", name, p.Status.Phase)
				}
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("timing: every pod in its final state %s after the last start", time.Since(restarted).Round(time.Millisecond))
	after := shadowPodUIDs(ctx, t, pc)
	if len(after) != n {
		t.Errorf("%d ShadowPods, want %d", len(after), n)
	}
	for name, uid := range before {
		if after[name] != uid {
			t.Errorf("ShadowPod %s re-created across the restarts: UID %s -> %s", name, uid, after[name])
		}
	}
	for _, name := range []string{succeeded, failed} {
		if p := getPod(ctx, t, cc, name); !offloaded(p) {
			t.Errorf("pod %s: no Offloaded=True condition: %+v", name, p.Status.Conditions)
		}
	}
}

// finish makes the provider's pod name finish as a kubelet would report it:
// its container terminated with exitCode, phase Succeeded (0) or Failed.
func finish(ctx context.Context, t *testing.T, pc client.Client, name string, exitCode int32) {
	t.Helper()
	p := &corev1.Pod{}
	clustertest.Must(t, pc.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: name}, p))
	now := metav1.Now()
	phase, reason := corev1.PodSucceeded, "Completed"
	if exitCode != 0 {
		phase, reason = corev1.PodFailed, "Error"
	}
	p.Status.Phase = phase
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Status, c.Reason, c.LastTransitionTime = corev1.ConditionFalse, "PodCompleted", now
		}
	}
	for i := range p.Status.ContainerStatuses {
		c := &p.Status.ContainerStatuses[i]
		startedAt := now
		if c.State.Running != nil {
			startedAt = c.State.Running.StartedAt
		}
		c.Ready, c.Started = false, new(false)
		c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exitCode, Reason: reason, StartedAt: startedAt, FinishedAt: now}}
	}
	clustertest.Must(t, pc.Status().Update(ctx, p))
}

// finishedAs checks that local pod p finished in phase with its container
// terminated with exitCode.
func finishedAs(p *corev1.Pod, phase corev1.PodPhase, exitCode int32) error {
	if p.Status.Phase != phase {
		return fmt.Errorf("pod %s: phase %q, want %s", p.Name, p.Status.Phase, phase)
	}
	if len(p.Status.ContainerStatuses) != 1 {
		return fmt.Errorf("pod %s: container statuses %+v", p.Name, p.Status.ContainerStatuses)
	}
	term := p.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != exitCode {
		return fmt.Errorf("pod %s: container state %+v, want terminated with exit code %d", p.Name, p.Status.ContainerStatuses[0].State, exitCode)
	}
	if c := podCondition(p, corev1.PodReady); c != nil && c.Status == corev1.ConditionTrue {
		return errors.New("pod " + p.Name + " finished but Ready")
	}
	return nil
}

func offloaded(p *corev1.Pod) bool {
	c := podCondition(p, podreflector.ConditionOffloaded)
	return c != nil && c.Status == corev1.ConditionTrue
}

// shadowPodUIDs lists the remote namespace's ShadowPods: UID by name.
func shadowPodUIDs(ctx context.Context, t *testing.T, pc client.Client) map[string]string {
	t.Helper()
	var list offloadingv1alpha1.ShadowPodList
	clustertest.Must(t, pc.List(ctx, &list, client.InNamespace(remoteNS)))
	out := map[string]string{}
	for _, sp := range list.Items {
		out[sp.Name] = string(sp.UID)
	}
	return out
}

// readyPods counts the Ready pods of the local namespace.
func readyPods(ctx context.Context, t *testing.T, cc client.Client) int {
	t.Helper()
	var list corev1.PodList
	clustertest.Must(t, cc.List(ctx, &list, client.InNamespace(localNS)))
	n := 0
	for i := range list.Items {
		if podReady(&list.Items[i], corev1.ConditionTrue) == nil {
			n++
		}
	}
	return n
}
