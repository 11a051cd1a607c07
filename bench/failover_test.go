package main

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(name, node string, phase corev1.PodPhase, deleting bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	if deleting {
		p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	}
	return p
}

func TestOverlapSampler(t *testing.T) {
	s := &overlapSampler{local: map[string]bool{"alpha-worker-0": true}}
	at := func(sec int) time.Time { return time.Unix(1000+int64(sec), 0) }
	run, pend := corev1.PodRunning, corev1.PodPending
	for i, step := range []struct {
		provider []corev1.Pod
		answered bool
		consumer []corev1.Pod
	}{
		// 0: the members on the provider; the consumer's copies are bound
		// to the virtual node, not its own node: no overlap.
		{[]corev1.Pod{pod("db-0", "beta-worker-0", run, false)}, true, []corev1.Pod{pod("db-0", "annex-beta", run, false)}},
		// 1: the provider does not answer: it runs nothing.
		{nil, false, []corev1.Pod{pod("db-0", "alpha-worker-0", run, false)}},
		// 2: a replacement Pending on the consumer's node: no overlap.
		{[]corev1.Pod{pod("db-0", "beta-worker-0", run, true)}, true, []corev1.Pod{pod("db-0", "alpha-worker-0", pend, false)}},
		// 3: Running in both, the provider's being deleted: an overlap.
		{[]corev1.Pod{pod("db-0", "beta-worker-0", run, true)}, true, []corev1.Pod{pod("db-0", "alpha-worker-0", run, false)}},
		// 4: another member in each place: no overlap.
		{[]corev1.Pod{pod("db-1", "beta-worker-0", run, false)}, true, []corev1.Pod{pod("db-0", "alpha-worker-0", run, false)}},
	} {
		s.observe(at(i), step.provider, step.answered, step.consumer)
	}
	if s.samples != 5 || s.overlaps != 1 || !strings.HasPrefix(s.firstOverlap, "db-0 Running on beta and on alpha's node") {
		t.Errorf("samples %d, overlaps %d, first %q", s.samples, s.overlaps, s.firstOverlap)
	}
	if unfenced, running := s.providerLast(); !unfenced.Equal(at(4)) || !running.Equal(at(4)) {
		t.Errorf("provider last listed a member unfenced at %v, Running at %v", unfenced, running)
	}

	// Ignored (a killed provider restarted): its copies are stale, not
	// overlaps.
	s.ignoreProvider(true)
	s.observe(at(10), nil, false, []corev1.Pod{pod("db-0", "alpha-worker-0", run, false)})
	s.observe(at(11), []corev1.Pod{pod("db-0", "beta-worker-0", run, false)}, true, []corev1.Pod{pod("db-0", "alpha-worker-0", run, false)})
	s.observe(at(12), []corev1.Pod{pod("db-0", "beta-worker-0", run, true)}, true, []corev1.Pod{pod("db-0", "alpha-worker-0", run, false)})
	s.observe(at(13), nil, true, []corev1.Pod{pod("db-0", "alpha-worker-0", run, false)})
	answered, unfenced, running, n := s.stale()
	s.ignoreProvider(false)
	if !answered.Equal(at(11)) || !unfenced.Equal(at(11)) || !running.Equal(at(12)) || n != 2 {
		t.Errorf("stale: answered %v, unfenced until %v, Running until %v, %d samples", answered, unfenced, running, n)
	}
	if s.samples != 9 || s.overlaps != 1 {
		t.Errorf("after the stale samples: samples %d, overlaps %d", s.samples, s.overlaps)
	}
}

func TestConnsTo(t *testing.T) {
	// /proc/net/tcp: 127.0.0.1:41234 → 127.0.0.1:6443 (0x192B) established
	// twice (inodes 100, 101), once in TIME_WAIT (06), once to another port.
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A0D2 0100007F:192B 01 00000000:00000000 00:00000000 00000000     0        0 100 1 0000000000000000 20 4 30 10 -1
   1: 0100007F:A0D3 0100007F:192B 01 00000000:00000000 00:00000000 00000000     0        0 101 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:A0D4 0100007F:192B 06 00000000:00000000 03:00000000 00000000     0        0 0 3 0000000000000000
   3: 0100007F:A0D5 0100007F:192C 01 00000000:00000000 00:00000000 00000000     0        0 102 1 0000000000000000 20 4 30 10 -1
`
	for _, tc := range []struct {
		inodes map[string]bool
		port   int
		want   int
	}{
		{map[string]bool{"100": true, "101": true, "102": true}, 6443, 2},
		{map[string]bool{"101": true}, 6443, 1}, // another process's socket
		{map[string]bool{"102": true}, 6444, 1},
		{map[string]bool{}, 6443, 0},
	} {
		if got := connsTo(tcp, tc.inodes, tc.port); got != tc.want {
			t.Errorf("connsTo(%v, %d) = %d, want %d", tc.inodes, tc.port, got, tc.want)
		}
	}
}

func TestFailoverFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		trials int
		custom bool
	}{
		{[]string{}, 1, false},
		{[]string{"-scale", "full"}, 3, false},
		{[]string{"-failover-trials", "2"}, 2, true},
	} {
		cfg, _, err := configFromFlags(quietFlags(), tc.args)
		if err != nil || cfg.FailoverTrials != tc.trials || cfg.custom() != tc.custom {
			t.Errorf("%v: trials %d, custom %v, %v", tc.args, cfg.FailoverTrials, cfg.custom(), err)
		}
	}
	cfg, _, err := configFromFlags(quietFlags(), []string{"-phases", "failover"})
	if err != nil || !cfg.runs(phaseFailover) || cfg.runs(phaseFailure) || !cfg.needsClusters() {
		t.Errorf("-phases failover: %v, %v", cfg.Phases, err)
	}
	// A run from before the phase: not customized for lacking it.
	old := presets["small"]
	old.Scale, old.FailoverTrials = "small", 0
	if old.custom() {
		t.Error("a run from before the failover phase counts as customized")
	}
}
