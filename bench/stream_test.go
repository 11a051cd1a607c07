package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLatency(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100 … 1
	}
	for _, tc := range []struct {
		name string
		in   []float64
		want Latency
	}{
		{"empty", nil, Latency{}},
		{"one", []float64{2}, Latency{N: 1, P50: 2, P90: 2, P99: 2, Max: 2}},
		{"ten, unsorted", []float64{10, 2, 3, 4, 5, 6, 7, 8, 9, 1}, Latency{N: 10, P50: 5, P90: 9, P99: 10, Max: 10}},
		{"hundred", hundred, Latency{N: 100, P50: 50, P90: 90, P99: 99, Max: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, latency(tc.in)); diff != "" {
				t.Errorf("latency(%v) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestStreamSchedule(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var got []time.Duration
	for _, i := range []int{0, 1, 2, 19, 20, 6000} {
		got = append(got, streamSchedule(start, 20, i).Sub(start))
	}
	want := []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond, 950 * time.Millisecond, time.Second, 300 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slots (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		rate float64
		d    time.Duration
		want int
	}{{20, 5 * time.Minute, 6000}, {20, time.Minute, 1200}, {20, 30 * time.Second, 600}, {2.5, time.Second, 3}} {
		if got := streamCount(tc.rate, tc.d); got != tc.want {
			t.Errorf("streamCount(%v, %s) = %d, want %d", tc.rate, tc.d, got, tc.want)
		}
	}
}

func TestPodStarted(t *testing.T) {
	running := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	waiting := corev1.ContainerStatus{Name: "side", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	pod := func(phase corev1.PodPhase, containers int, statuses ...corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase, ContainerStatuses: statuses}}
		for range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{})
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"running", pod(corev1.PodRunning, 1, running), true},
		{"pending", pod(corev1.PodPending, 1, waiting), false},
		{"running, a container waiting", pod(corev1.PodRunning, 2, running, waiting), false},
		{"running, a status missing", pod(corev1.PodRunning, 2, running), false},
	} {
		if got := podStarted(tc.pod); got != tc.want {
			t.Errorf("%s: podStarted = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestStreamPod(t *testing.T) {
	p := streamPod(offloadNS, "stream-offloaded-00007", "stream-offloaded")
	d := deployment(offloadNS, "stream-offloaded", 1)
	if p.Name != "stream-offloaded-00007" || p.Namespace != offloadNS || !cmp.Equal(d.Spec.Template.Labels, p.Labels) || !cmp.Equal(d.Spec.Template.Spec, p.Spec) {
		t.Errorf("stream pod %+v is not the burst's template", p)
	}
}

func TestPodState(t *testing.T) {
	node := "annex-beta"
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	affinity := func(v string) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "annex.dev/remote-cluster-id", Operator: corev1.NodeSelectorOpIn, Values: []string{v}}}}}}}}
	}
	got := map[string]int{}
	for _, p := range []corev1.Pod{
		{Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: ready}},
		{Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: ready}},
		{Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
		{Spec: corev1.PodSpec{NodeName: "alpha-worker-0"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: ready}},
		{Spec: corev1.PodSpec{Affinity: affinity("none-ready")}},
		{Spec: corev1.PodSpec{Affinity: affinity(providerName)}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/2 nodes are available"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "new"}},
	} {
		got[podState(&p, node)]++
	}
	want := map[string]int{
		"Ready on annex-beta":              2,
		"Pending on annex-beta, not Ready": 1,
		"bound to alpha-worker-0, not the virtual node annex-beta (admitted before the namespace was labelled)":               1,
		"Pending: node affinity to remote cluster none-ready (admitted while the namespace's remote namespace was not Ready)": 1,
		"Pending: 0/2 nodes are available": 1,
		"Pending, not scheduled yet":       1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod states (-want +got):\n%s", diff)
	}
	if line := podStatesLine(map[string]int{"b": 1, "a": 1, "c": 5}); line != "5× c, 1× a, 1× b" {
		t.Errorf("podStatesLine = %q", line)
	}
}

func TestSummarizeFresh(t *testing.T) {
	trials := []FreshTrial{
		{Mode: modeDirect, Trial: 1, AllReadySeconds: 2, FirstReadySeconds: 1},
		{Mode: modeOffloaded, Trial: 1, AllReadySeconds: 4, FirstReadySeconds: 2, LabelledSeconds: 0.1, RemoteNamespaceSeconds: 0.4, OffloadReadySeconds: 0.6},
		{Mode: modeOffloaded, Trial: 2, AllReadySeconds: 60, LabelledSeconds: 0.2, Error: "timeout", PodStates: map[string]int{"x": 20}},
		{Mode: modeDirect, Trial: 2, AllReadySeconds: 3, FirstReadySeconds: 1},
	}
	want := []freshStats{
		{Mode: modeOffloaded, Trials: 2, Failed: 1, FirstReady: summarize([]float64{2}), AllReady: summarize([]float64{4}),
			Labelled: summarize([]float64{0.1, 0.2}), RemoteNamespace: summarize([]float64{0.4}), OffloadReady: summarize([]float64{0.6}),
			FailedStates: map[string]int{"x": 20}},
		{Mode: modeDirect, Trials: 2, FirstReady: summarize([]float64{1, 1}), AllReady: summarize([]float64{2, 3})},
	}
	if diff := cmp.Diff(want, summarizeFresh(trials)); diff != "" {
		t.Errorf("summarizeFresh (-want +got):\n%s", diff)
	}
}

func TestStreamFreshFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		rate   float64
		d      time.Duration
		trials int
		pods   int
		custom bool
	}{
		{[]string{}, 20, time.Minute, 3, 20, false},
		{[]string{"-scale", "full"}, 20, 5 * time.Minute, 5, 20, false},
		{[]string{"-stream-duration", "30s"}, 20, 30 * time.Second, 3, 20, true},
		{[]string{"-stream-rate", "5", "-fresh-trials", "1", "-fresh-pods", "7"}, 5, time.Minute, 1, 7, true},
	} {
		cfg, _, err := configFromFlags(quietFlags(), tc.args)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		got := []any{cfg.StreamRate, time.Duration(cfg.StreamDuration), cfg.FreshTrials, cfg.FreshPods, cfg.custom()}
		if diff := cmp.Diff([]any{tc.rate, tc.d, tc.trials, tc.pods, tc.custom}, got); diff != "" {
			t.Errorf("%v (-want +got):\n%s", tc.args, diff)
		}
	}
	if _, _, err := configFromFlags(quietFlags(), []string{"-stream-rate", "-1"}); err == nil {
		t.Error("-stream-rate -1: want an error")
	}
	// A run from before the phases: not customized for lacking them.
	old := presets["small"]
	old.Scale, old.StreamRate, old.StreamDuration, old.FreshTrials, old.FreshPods = "small", 0, 0, 0, 0
	if old.custom() {
		t.Error("a run from before stream and fresh counts as customized")
	}
	cfg, _, _ := configFromFlags(quietFlags(), []string{"-phases", "fresh,stream"})
	if !cfg.runs(phaseStream) || !cfg.runs(phaseFresh) || cfg.runs(phaseBurst) {
		t.Errorf("phases %v", cfg.Phases)
	}
}

func TestStreamOverrun(t *testing.T) {
	for _, tc := range []struct {
		late, planned int
		want          bool
	}{
		{0, 6000, false},
		{60, 6000, false}, // exactly 1 %: the p99 may still be within the bound
		{61, 6000, true},
		{1, 50, true},
		{0, 50, false},
	} {
		if got := streamOverrun(tc.late, tc.planned); got != tc.want {
			t.Errorf("streamOverrun(%d, %d) = %v, want %v", tc.late, tc.planned, got, tc.want)
		}
	}
}

func TestStreamWatchLate(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	w := &streamWatch{
		sent: map[string]time.Time{
			"old-started":  now.Add(-10 * time.Second),
			"old-waiting":  now.Add(-6 * time.Second),
			"just-sent":    now.Add(-time.Second),
			"at-the-bound": now.Add(-5 * time.Second),
		},
		started: map[string]bool{"old-started": true},
	}
	if got := w.late(now, 5*time.Second); got != 1 {
		t.Errorf("late = %d, want 1 (only old-waiting)", got)
	}
}
