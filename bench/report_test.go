package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// sampleResults is a small run: every kind of trial, four targets missed.
func sampleResults() *Results {
	r := &Results{Environment: Environment{Date: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), CPUs: 2, GoVersion: "go1.26", ProviderNodes: 11},
		Config: presets["small"]}
	r.Config.Scale = "small"
	r.Config.Placements = allPlacements
	check := &PinCheck{CPUs: map[string]string{consumerName: "0", providerName: "1"},
		Pinned: ThreadCheck{Processes: 12, Threads: 97}, Ready: ThreadCheck{Processes: 12, Threads: 98}}
	for i, s := range []float64{10, 12, 11} {
		r.Bursts = append(r.Bursts,
			BurstTrial{N: 1000, Mode: modeOffloaded, Placement: placementShared, Trial: i + 1, AllReadySeconds: s * 2.5, FirstReadySeconds: 1,
				HalfReadySeconds: s, PodsPerSecond: 1000 / (s * 2.5), CPUSeconds: 3 * s, CPUBusy: 0.99, CPUBusyPerCPU: []float64{0.99, 0.98}},
			BurstTrial{N: 1000, Mode: modeDirect, Placement: placementShared, Trial: i + 1, AllReadySeconds: s, FirstReadySeconds: 0.5,
				HalfReadySeconds: s / 2, PodsPerSecond: 1000 / s, CPUSeconds: 2 * s, CPUBusy: 0.98, CPUBusyPerCPU: []float64{0.97, 0.99}},
			BurstTrial{N: 1000, Mode: modeOffloaded, Placement: placementPinned, Trial: i + 1, AllReadySeconds: s * 1.1, FirstReadySeconds: 3,
				HalfReadySeconds: s / 2, PodsPerSecond: 1000 / (s * 1.1), CPUSeconds: 1.5 * s, CPUBusy: 0.8, CPUBusyPerCPU: []float64{0.6, 0.99},
				ProcessCPUSeconds: map[string]float64{"alpha/kube-apiserver": s / 2, "alpha/etcd": 1, "beta/kube-apiserver": s, "beta/annex-agent": 2},
				PinCheck:          check},
			BurstTrial{N: 1000, Mode: modeDirect, Placement: placementPinned, Trial: i + 1, AllReadySeconds: s, FirstReadySeconds: 0.5,
				HalfReadySeconds: s / 2, PodsPerSecond: 1000 / s, CPUSeconds: s, CPUBusy: 0.5, CPUBusyPerCPU: []float64{0.02, 0.97},
				ProcessCPUSeconds: map[string]float64{"alpha/etcd": 0.1, "beta/kube-apiserver": s * 0.8}, PinCheck: check})
	}
	r.Bursts[8].Profiled = true // trial 3's offloaded run: counted like the others
	// Annex's writes and the agents' CPU of the offloaded trials: 3 and
	// 4.5 ms per pod shared (a trial without readings left out), 3.5 and
	// 2.5 ms pinned.
	annexWrites := func(perPod float64) []WriteCount {
		return []WriteCount{
			{Cluster: "beta", Writer: "annex-agent as annex-tenant-alpha:annex", Verb: "create", Resource: "shadowpods", Count: 1000},
			{Cluster: "alpha", Writer: "annex-agent as annex-system:annex-agent", Verb: "update", Resource: "pods/status", Count: int(1000 * (perPod - 1))},
			{Cluster: "alpha", Writer: "kube-scheduler as system:kube-scheduler", Verb: "create", Resource: "pods/binding", Count: 1000},
		}
	}
	for i, tr := range r.Bursts {
		switch {
		case tr.Mode == modeOffloaded && tr.Placement == placementShared && tr.Trial < 3:
			r.Bursts[i].Writes, r.Bursts[i].AgentCPUSeconds = annexWrites(3), map[string]float64{"alpha": 3, "beta": 1.5}
		case tr.Mode == modeOffloaded && tr.Placement == placementPinned:
			r.Bursts[i].Writes = annexWrites(3 + float64(tr.Trial)/2)
			r.Bursts[i].AgentCPUSeconds = map[string]float64{"alpha": 1.5, "beta": 0.5 + float64(tr.Trial)/2}
		}
	}
	for i := range 3 {
		r.Failures = append(r.Failures,
			FailureTrial{Fault: faultDead, Trial: i + 1, Pods: 100, DetectionSeconds: 3, RecoverySeconds: 5, APIServerReadySeconds: 2.5, RecoveryAfterAPIServerSeconds: 2.5},
			FailureTrial{Fault: faultHung, Trial: i + 1, Pods: 100, DetectionSeconds: 4, RecoverySeconds: 2, APIServerReadySeconds: 0.1, RecoveryAfterAPIServerSeconds: 1.9})
	}
	r.Unpeers = []UnpeerTrial{{N: 10, Trial: 1, CommandSeconds: 3, CleanSeconds: 3}, {N: 100, Trial: 1, CommandSeconds: 6, CleanSeconds: 6}}
	r.Failovers = []FailoverTrial{
		{Fault: faultKilled, Trial: 1, Members: 3, FenceAfterSeconds: 10, ReleaseAfterSeconds: 25, FailoverSeconds: 27.5, ReleasedSeconds: 24.2, HeartbeatAgeSeconds: 1.1,
			APIServerBackSeconds: 3.2, StaleFencedSeconds: 0.8, StaleRunningSeconds: 5.9, StaleSamples: 52, Samples: 700, Overlaps: 0, ProviderFenced: true},
		{Fault: faultPartitioned, Trial: 1, Members: 3, FenceAfterSeconds: 10, ReleaseAfterSeconds: 25, FailoverSeconds: 36.5, ReleasedSeconds: 34, HeartbeatAgeSeconds: 0.5,
			FencedSeconds: 9.6, StoppedSeconds: 15.2, ProviderFenced: true, Samples: 650, Overlaps: 2, FirstOverlap: "db-1 Running on beta and on alpha's node at T"},
	}
	agents := func(rss int64, writes float64) []AgentWindow {
		return []AgentWindow{
			{Cluster: "alpha", Role: "consumer", RSSMaxBytes: rss, CPUSeconds: 0.3, Writes: writes * 30, WritesPerSecond: writes,
				Requests: []RequestCount{{Host: "127.0.0.1:1", Server: "alpha", Method: "PUT", Count: writes * 30}, {Host: "127.0.0.1:1", Server: "alpha", Method: "GET", Count: 4}}},
			{Cluster: "beta", Role: "provider", RSSMaxBytes: rss / 2, CPUSeconds: 0.2},
		}
	}
	r.Windows = []IdleWindow{
		{Name: "no offloaded pods", WindowSeconds: 30, Agents: agents(60<<20, 0)},
		{Name: "1000 offloaded pods", OffloadedPods: 1000, WindowSeconds: 30, Agents: agents(200<<20, 0.6), Changes: []ObjectChanges{
			{Cluster: "alpha", Resource: "leases.coordination.k8s.io", Event: "MODIFIED", Writer: "annex-agent Update", Count: 15, Objects: []string{"annex-system/annex-agent ×15"},
				Meaning: meaning("leases.coordination.k8s.io", "annex-system/annex-agent")},
			{Cluster: "alpha", Resource: "foreignclusters.core.annex.dev", Event: "MODIFIED", Writer: "annex-agent Update status", Count: 3, Objects: []string{"beta ×3"},
				Meaning: meaning("foreignclusters.core.annex.dev", "beta")},
			{Cluster: "beta", Resource: "leases.coordination.k8s.io", Event: "MODIFIED", Writer: "kwok Update", Count: 30, Objects: []string{"kube-node-lease/beta-worker-0 ×30"}},
		}},
	}
	r.Windows[1].Agents[0].LivenessWrites = 15 // the leader-election Lease (measureWindow counts them)
	r.Streams = []StreamRun{
		{Mode: modeDirect, Rate: 20, DurationSeconds: 60, Created: 1200, AchievedRate: 19.99, Started: 1200, MaxAlive: 80,
			Startup: Latency{N: 1200, P50: 0.2, P90: 0.8, P99: 1.5, Max: 1.7}, StartupFromCreation: Latency{N: 1200, P50: 0.7, P90: 1.2, P99: 2, Max: 2.1},
			Stages: []StageDelay{{From: "created", To: "bound", Pods: 1200, P50: 0.03, P99: 0.3, Max: 0.4}}},
		{Mode: modeOffloaded, Rate: 20, DurationSeconds: 60, Created: 1200, AchievedRate: 19.98, LateCreates: 2, Started: 1197, NotStarted: 3, MaxAlive: 240,
			Startup: Latency{N: 1197, P50: 1.1, P90: 3.2, P99: 6.4, Max: 9}, StartupFromCreation: Latency{N: 1197, P50: 1.6, P90: 3.7, P99: 7, Max: 9.5},
			Stages: []StageDelay{{From: "created", To: "bound", Pods: 1200, P50: 0.04, P99: 0.5, Max: 0.6}, {From: "bound", To: "shadowpod", Pods: 1199, P50: 0.5, P99: 4, Max: 6}},
			Error:  "3 of 1200 pods not started"},
	}
	none := map[string]int{"Pending: node affinity to remote cluster none-ready (admitted while the namespace's remote namespace was not Ready)": 20}
	for i, s := range []float64{2, 3, 4} {
		r.Fresh = append(r.Fresh,
			FreshTrial{Mode: modeDirect, Trial: i + 1, N: 20, DelaySeconds: 1, FirstReadySeconds: 0.5, AllReadySeconds: s / 2},
			FreshTrial{Mode: modeOffloaded, Trial: i + 1, N: 20, DelaySeconds: 1, FirstReadySeconds: 1, AllReadySeconds: s + 1,
				LabelledSeconds: 0.1, RemoteNamespaceSeconds: 0.5, OffloadReadySeconds: 1.5,
				Stages: []StageDelay{{From: "start", To: "bound", Pods: 20, P50: 0.2, P99: 0.4, Max: 0.4}}})
	}
	r.Fresh[5].Error, r.Fresh[5].PodStates, r.Fresh[5].Stages = "20 pods Ready: not reached after 1m0s", none, nil
	r.Tunnel = &TunnelResult{BulkSeconds: 5, RoundTrips: 1000, MessageBytes: 64, Paths: []TunnelPath{
		{Name: pathTunnel, Bytes: 500e6, Seconds: 5, MBPerSecond: 100, RTTMicroseconds: Summary{N: 1000, P50: 200, P99: 400, Max: 900}},
		{Name: pathFabric, Bytes: 450e6, Seconds: 5, MBPerSecond: 90, RTTMicroseconds: Summary{N: 1000, P50: 230, P99: 500, Max: 1000}},
		{Name: pathVeth, Bytes: 10e9, Seconds: 5, MBPerSecond: 2000, RTTMicroseconds: Summary{N: 1000, P50: 20, P99: 50, Max: 100}},
	}}
	return r
}

func TestEvaluate(t *testing.T) {
	got := map[string]string{}
	for _, tr := range evaluate(sampleResults()) {
		got[tr.Key] = tr.Result + " => " + tr.met()
	}
	want := map[string]string{
		keyRatio:       "2.50 (27.5 s vs 11.0 s) => **no**",
		keyRatioPinned: "1.10 (12.1 s vs 11.0 s) => yes",
		keyAnnexWrites: "N=1000 shared 3.00, N=1000 pinned 4.00 => yes",
		keyAgentCPU:    "N=1000 shared 4.50 ms (alpha 3.00 + beta 1.50); N=1000 pinned 3.00 ms (alpha 1.50 + beta 1.50) => **no**",
		keyFirstReady:  "+2.50 s at N=1000 pinned (3.00 s vs 0.50 s); the largest of 2 (N, placement) pairs => **no**",
		keyDetection:   "dead 3.00 s, hung 4.00 s => yes",
		keyRecovery:    "dead 2.50 s, hung 1.90 s => yes",
		keyFailover:    "killed 27.5 s, partitioned 36.5 s => **no**",
		keyOverlaps: "2 in 1350 samples; apart: after its restart the killed provider listed its stale copies Running 0.8 s after its API server answered, " +
			"until they were being deleted (5.9 s until none was listed Running; p50; its agent fenced them in 1 of 1 trials) => **no**",
		keyUnpeer: "N=10 3.0 s, N=100 6.0 s => yes",
		keyRSS:    "200 MiB => **no**",
		keyWrites: "consumer 0.10/s, provider 0.00/s; liveness writes besides: consumer 0.50/s, provider 0.00/s => **no**",
		keyStartupSLO: "6.40 s (p50 1.10 s, p90 3.20 s; 1200 pods at 20.0/s); direct 1.50 s (p50 0.20 s); " +
			"3 pods not started within 1m0s of the last create, 0 create calls failed => **no**",
		keyFresh:       "+1.50 s (3.00 s vs 1.50 s; first Ready 1.00 s vs 0.50 s); 1 of 3 offloaded trials failed (pods not all Ready within 1m0s) => **no**",
		keyTenants:     " => not measured",
		keyTenantBytes: " => not measured",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
}

func TestEvaluateNotMeasured(t *testing.T) {
	r := &Results{Config: presets["small"]}
	for _, tr := range evaluate(r) {
		if tr.Met != nil || tr.met() != "not measured" {
			t.Errorf("%s: met %v with nothing measured", tr.Key, *tr.Met)
		}
	}
}

func TestMarkdown(t *testing.T) {
	r := sampleResults()
	r.Targets = evaluate(r)
	md := markdown(r, t.TempDir())
	for _, want := range []string{
		"| what | how | result | target | met? |",
		"### Missed targets",
		"| 1000 | shared | offloaded | 3 | 27.50 | 30.00 | 1.00 | 11.00 | 36.4 | 33.0 | 99% | cpu0 99%, cpu1 98% | – | **2.50** | 1.50 |",
		"| 1000 | pinned | offloaded | 3 | 12.10 | 13.20 | 3.00 | 5.50 | 82.6 | 16.5 | 80% | cpu0 60%, cpu1 99% | 6.5 / 13.0 | **1.10** | 1.50 |",
		"| 1000 | pinned | direct | 3 | 11.00 | 12.00 | 0.50 | 5.50 | 90.9 | 11.0 | 50% | cpu0 2%, cpu1 97% | 0.1 / 8.8 |  |  |",
		"| 1000 | offloaded | alpha on CPU 0, beta on CPU 1 | 291 | 0 | 294 | 0 |",
		"| 1000 | pinned | offloaded | **6.50**: kube-apiserver 5.50, etcd 1.00 | **13.00**: kube-apiserver 11.00, annex-agent 2.00 |",
		"were 98% busy during the direct trials and 99% during the offloaded ones",
		"| dead | 3 | 3.00 | 3.00 | 3.00 | 5.00 |",
		"| 100 | 1 | 6.00 | 6.00 | 6.00 | 6.00 |",
		"## Failover",
		"| killed | 1 | 27.50 | 27.50 | 24.20 | 1.10 | – | – | 3.20 | 0.80 | 5.90 | 1 of 1 | 700 | 52 | 0 |",
		"| partitioned | 1 | 36.50 | 36.50 | 34.00 | 0.50 | 9.60 | 15.20 | – | – | – | 1 of 1 | 650 | – | 2 |",
		"- Trial 1 partitioned: first overlap: db-1 Running on beta and on alpha's node at T",
		"partitioned: the heartbeat was 0.5 s old at the fault, the first replacement appeared 34.0 s after it",
		"| consumer (alpha) | 1000 | 200.0 |",
		"| consumer (alpha) | 1000 | 0.60 | 0.50 | 0.10 | 18 | PUT on alpha: 18 |",
		"The writes that remain, by object (from the API servers' watches; see Status churn): 3× modified a peer's status",
		"Liveness writes in the window with 1000 offloaded pods: 15× modified the agent's leader-election Lease",
		"| alpha | leases.coordination.k8s.io | the agent's leader-election Lease | modified | annex-agent Update | 15 | annex-system/annex-agent ×15 |",
		"No other cluster ran",
		"| Annex tunnel (annex-gateway, WireGuard) | 100.0 | 200 | 400 | 900 |",
		"| **tunnel / veth** | **0.05** | **10.0** | 8.0 | |",
		"| fabric: non-gateway node → gateway node, then the tunnel | 90.0 | 230 | 500 | 1000 |",
		"| **fabric / tunnel** | **0.90** | **1.15** | 1.25 | |",
		"## Pod startup under a steady stream",
		"| offloaded | 1200 | 20 | 19.98 | 2 | 1197 | 3 | 1.10 | 3.20 | 6.40 | 9.00 | 1.60 | 7.00 | 240 |",
		"| offloaded | bound → shadowpod | 1199 | 0.50 | 4.00 | 6.00 |",
		"Where an offloaded pod's time went (p50 / p99 over the pods, from the API servers' audit logs): created→bound 0.04/0.50 s, bound→shadowpod 0.50/4.00 s.",
		"## Burst into a fresh namespace",
		"| offloaded | 3 (1 failed) | 1.00 | 3.00 | 4.00 | 0.10 | 0.50 | 1.50 |",
		"| direct | 3 | 0.50 | 1.50 | 2.00 | – | – | – |",
		"- Trial 3 offloaded failed: 20 pods Ready: not reached after 1m0s Pods: 20× Pending: node affinity to remote cluster none-ready",
		"| offloaded (trial 2) | start → bound | 20 | 0.20 | 0.40 | 0.40 |",
		"the namespace was annotated with beta (pods admitted from then on may go to the virtual node) after 1.50 s",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	// Annex's writers come first even with fewer changes.
	if strings.Index(md, "annex-agent Update") > strings.Index(md, "kwok Update") {
		t.Error("kwok's changes listed before Annex's")
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
}

func TestBurstRows(t *testing.T) {
	check := func(mismatches int) *PinCheck {
		return &PinCheck{CPUs: map[string]string{consumerName: "0", providerName: "1"},
			Pinned: ThreadCheck{Processes: 12, Threads: 90}, Ready: ThreadCheck{Processes: 12, Threads: 91, Mismatches: mismatches}}
	}
	trials := []BurstTrial{
		// Runs from before placements: shared, without the new columns.
		{N: 10, Mode: modeDirect, Trial: 1, AllReadySeconds: 2, FirstReadySeconds: 0.5, PodsPerSecond: 5},
		{N: 10, Mode: modeOffloaded, Placement: placementShared, Trial: 1, AllReadySeconds: 3, FirstReadySeconds: 1, PodsPerSecond: 10.0 / 3},
		{N: 10, Mode: modeDirect, Placement: placementPinned, Trial: 1, AllReadySeconds: 1, FirstReadySeconds: 0.25, HalfReadySeconds: 0.5,
			PodsPerSecond: 10, CPUSeconds: 1.2, CPUBusy: 0.6, CPUBusyPerCPU: []float64{0.1, 1},
			ProcessCPUSeconds: map[string]float64{"beta/kube-apiserver": 0.8, "beta/etcd": 0.3}, PinCheck: check(0)},
		{N: 10, Mode: modeDirect, Placement: placementPinned, Trial: 2, AllReadySeconds: 3, FirstReadySeconds: 0.75, HalfReadySeconds: 1.5,
			PodsPerSecond: 10.0 / 3, CPUSeconds: 2.4, CPUBusy: 0.4, CPUBusyPerCPU: []float64{0.05, 0.75},
			ProcessCPUSeconds: map[string]float64{"beta/kube-apiserver": 1.6, "alpha/etcd": 0.1}, PinCheck: check(0)},
		// A pinned trial whose threads escaped: failed, its numbers left out.
		{N: 10, Mode: modeOffloaded, Placement: placementPinned, Trial: 1, AllReadySeconds: 99, PinCheck: check(2), Error: "pin check"},
	}
	stats := summarizeBursts(trials)
	for _, tc := range []struct {
		placement, mode string
		want            []string
	}{
		{placementShared, modeDirect, []string{"10", "shared", "direct", "1", "2.00", "2.00", "0.50", "–", "5.0", "–", "–", "–", "–", "r", "c"}},
		{placementShared, modeOffloaded, []string{"10", "shared", "offloaded", "1", "3.00", "3.00", "1.00", "–", "3.3", "–", "–", "–", "–", "r", "c"}},
		{placementPinned, modeDirect, []string{"10", "pinned", "direct", "2", "1.00", "3.00", "0.25", "0.50", "3.3", "1.2", "40%",
			"cpu0 5%, cpu1 75%", "0.1 / 1.1", "r", "c"}},
	} {
		var s *burstStats
		for i := range stats {
			if stats[i].Placement == tc.placement && stats[i].Mode == tc.mode {
				s = &stats[i]
			}
		}
		if s == nil {
			t.Errorf("no stats for %s %s", tc.placement, tc.mode)
			continue
		}
		if diff := cmp.Diff(tc.want, burstRow(*s, fmt.Sprint(s.Trials), "r", "c")); diff != "" {
			t.Errorf("%s %s row (-want +got):\n%s", tc.placement, tc.mode, diff)
		}
	}
	// The per-cluster CPU sums each trial's processes before the p50: alpha
	// has a process in one trial only.
	var pinnedDirect, pinnedOff burstStats
	for _, s := range stats {
		if s.Placement == placementPinned {
			if s.Mode == modeDirect {
				pinnedDirect = s
			} else {
				pinnedOff = s
			}
		}
	}
	if diff := cmp.Diff(map[string]Summary{
		consumerName: {N: 1, Min: 0.1, P50: 0.1, P99: 0.1, Max: 0.1},
		providerName: {N: 2, Min: 1.1, P50: 1.1, P99: 1.6, Max: 1.6},
	}, pinnedDirect.ClusterCPU); diff != "" {
		t.Errorf("cluster CPU (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&PinCheck{CPUs: map[string]string{consumerName: "0", providerName: "1"},
		Pinned: ThreadCheck{Processes: 12, Threads: 90}, Ready: ThreadCheck{Processes: 12, Threads: 91, Mismatches: 2}}, pinnedOff.PinCheck); diff != "" {
		t.Errorf("pin check of the failed trial (-want +got):\n%s", diff)
	}
	if pinnedOff.Trials != 1 || pinnedOff.Failed != 1 || pinnedOff.AllReady.N != 0 {
		t.Errorf("failed pinned trial: %d trials, %d failed, %d measured", pinnedOff.Trials, pinnedOff.Failed, pinnedOff.AllReady.N)
	}
}

func TestPinnedSkipped(t *testing.T) {
	r := sampleResults()
	var shared []BurstTrial
	for _, b := range r.Bursts {
		if b.Placement == placementShared {
			shared = append(shared, b)
		}
	}
	r.Bursts = shared
	r.Environment.PinnedSkipped = "only 1 CPU (0) available: pinning needs 2"
	r.Targets = evaluate(r)
	for _, tr := range r.Targets {
		if tr.Key == keyRatioPinned && (tr.Met != nil || tr.Result != "not run: "+r.Environment.PinnedSkipped) {
			t.Errorf("pinned ratio target without pinned trials: %q, met %s", tr.Result, tr.met())
		}
	}
	if md := markdown(r, t.TempDir()); !strings.Contains(md, "**The pinned placement was skipped**: only 1 CPU (0) available: pinning needs 2.") {
		t.Errorf("Markdown does not say why pinned was skipped:\n%s", md)
	}
}

func quietFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func TestConfigFromFlags(t *testing.T) {
	cfg, o, err := configFromFlags(quietFlags(), []string{"-scale", "full", "-sizes", "5,7", "-trials", "1", "-phases", "burst,unpeer", "-out", "/tmp/x"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{5, 7}, cfg.BurstSizes); diff != "" || cfg.BurstTrials != 1 || cfg.FailureTrials != 20 || o.out != "/tmp/x" {
		t.Errorf("config %+v, options %+v", cfg, o)
	}
	if !cfg.runs(phaseBurst) || cfg.runs(phaseFailure) || !cfg.custom() {
		t.Errorf("phases %v", cfg.Phases)
	}
	if full, _, _ := configFromFlags(quietFlags(), []string{"-scale", "full"}); full.custom() || full.maxPods() != 5000 {
		t.Errorf("full preset: custom %v, maxPods %d", full.custom(), full.maxPods())
	}
	if diff := cmp.Diff(allPlacements, cfg.Placements); diff != "" {
		t.Errorf("default placements (-want +got):\n%s", diff)
	}
	pinned, _, err := configFromFlags(quietFlags(), []string{"-placements", "pinned"})
	if err != nil || !cmp.Equal([]string{placementPinned}, pinned.Placements) || !pinned.custom() {
		t.Errorf("-placements pinned: %v, custom %v, %v", pinned.Placements, pinned.custom(), err)
	}
	if old := (Config{Scale: "small"}); !cmp.Equal([]string{placementShared}, old.placements()) {
		t.Errorf("a run from before placements: %v, want shared", old.placements())
	}
	for _, bad := range [][]string{{"-scale", "huge"}, {"-sizes", "0"}, {"-phases", "nope"}, {"-placements", "split"}, {"extra"}} {
		if _, _, err := configFromFlags(quietFlags(), bad); err == nil {
			t.Errorf("%v: want an error", bad)
		}
	}
}

func TestMeaning(t *testing.T) {
	for _, tc := range []struct{ resource, obj, want string }{
		{"leases.coordination.k8s.io", "annex-system/annex-agent", "the agent's leader-election Lease"},
		{"leases.coordination.k8s.io", "kube-node-lease/annex-beta", "a virtual node's Lease (node heartbeat)"},
		{"leases.coordination.k8s.io", "kube-node-lease/beta-worker-3", "a kwok node's Lease"},
		{"leases.coordination.k8s.io", "annex-tenant-alpha/annex-consumer-heartbeat", "the consumer's heartbeat Lease on the provider"},
		{"nodes", "annex-beta", "a virtual node's status"},
		{"configmaps", "x/y", ""},
	} {
		if got := meaning(tc.resource, tc.obj); got != tc.want {
			t.Errorf("meaning(%s, %s) = %q, want %q", tc.resource, tc.obj, got, tc.want)
		}
	}
}

func TestProviderNodes(t *testing.T) {
	for pods, want := range map[int]int{10: 2, 1000: 11, 5000: 48} {
		if got := providerNodes(pods); got != want || got*kwokPodsPerNode < pods+spareProviderPods {
			t.Errorf("providerNodes(%d) = %d, want %d", pods, got, want)
		}
	}
}

func TestRender(t *testing.T) {
	r := sampleResults()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, stamp(r.Environment.Date)+".json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := render(path, "A *note*."); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"2026-01-02T0304Z.md", "latest.md"} {
		md, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !strings.Contains(string(md), "## Targets") || !strings.Contains(string(md), "## Notes\n\nA *note*.") {
			t.Errorf("%s: %v\n%s", name, err, md)
		}
	}
	back := &Results{}
	data, _ = os.ReadFile(path)
	if err := json.Unmarshal(data, back); err != nil || len(back.Targets) != 16 || len(back.Bursts) != len(r.Bursts) {
		t.Errorf("rewritten JSON: %v, %d targets", err, len(back.Targets))
	}
}

func TestLiveness(t *testing.T) {
	lease := ObjectChanges{Cluster: "beta", Resource: "leases.coordination.k8s.io", Event: "MODIFIED", Writer: "Go-http-client Update",
		Meaning: meaning("leases.coordination.k8s.io", "annex-tenant-alpha/annex-consumer-heartbeat")}
	if !liveness(lease) || writerCluster(lease) != consumerName {
		t.Errorf("the consumer's heartbeat Lease: liveness %v, written by %s", liveness(lease), writerCluster(lease))
	}
	created := lease
	created.Event = "ADDED"
	if !liveness(created) {
		t.Error("the heartbeat Lease's creation (its first renewal) is not liveness")
	}
	status := ObjectChanges{Cluster: "alpha", Resource: "nodes", Event: "MODIFIED", Writer: "annex-virtual-node Update status", Meaning: meaningVirtualNodeStatus}
	kwok := ObjectChanges{Cluster: "beta", Resource: "leases.coordination.k8s.io", Event: "MODIFIED", Writer: "kwok Update", Meaning: "a kwok node's Lease"}
	if liveness(status) || liveness(kwok) {
		t.Error("a node status change or a kwok Lease counted as Annex's liveness")
	}
	status.Meaning = meaningVirtualNodeHeartbeat
	if !liveness(status) || writerCluster(status) != "alpha" {
		t.Error("a heartbeat-only status write of a virtual node is liveness of the consumer's agent")
	}
}

func TestHeartbeatOnly(t *testing.T) {
	node := func(rv, heartbeat, ready string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "annex-beta", "resourceVersion": rv},
			"status": map[string]any{"conditions": []any{map[string]any{
				"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat}}},
		}}
	}
	a := node("1", "2026-01-01T00:00:00Z", "True")
	if !heartbeatOnly(a, node("2", "2026-01-01T00:05:00Z", "True")) {
		t.Error("a new lastHeartbeatTime only: want heartbeat only")
	}
	if heartbeatOnly(a, node("2", "2026-01-01T00:05:00Z", "False")) {
		t.Error("Ready changed: want more than a heartbeat")
	}
	if a.Object["metadata"].(map[string]any)["resourceVersion"] != "1" {
		t.Error("heartbeatOnly changed its argument")
	}
}

func TestMarkdownTunnelNotMeasured(t *testing.T) {
	r := &Results{Config: presets["small"], Tunnel: &TunnelResult{NotMeasured: "needs root (CAP_NET_ADMIN)"}}
	if md := markdown(r, t.TempDir()); !strings.Contains(md, "## Pod-to-pod tunnel\n\nNot measured: needs root (CAP_NET_ADMIN).") {
		t.Errorf("Markdown without the tunnel's reason:\n%s", md)
	}
}

// A run that measured nothing (a failed set-up) leaves latest.md alone.
func TestWriteResultsKeepsLatest(t *testing.T) {
	dir := t.TempDir()
	good := sampleResults()
	good.Targets = evaluate(good)
	if _, err := writeResults(dir, good, "good", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	failed := &Results{Environment: Environment{Date: good.Environment.Date.Add(time.Hour)}, Config: presets["full"], Errors: []string{"set-up: boom"}}
	failed.Targets = evaluate(failed)
	files, err := writeResults(dir, failed, "failed", []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if md, _ := os.ReadFile(filepath.Join(dir, "latest.md")); string(md) != "good" || len(files) != 2 {
		t.Errorf("latest.md = %q after a run that measured nothing (wrote %v)", md, files)
	}
}

func TestChangedFields(t *testing.T) {
	node := func(rv, heartbeat, ready, pods string) *unstructured.Unstructured {
		status := map[string]any{
			"allocatable": map[string]any{"cpu": "8", "pods": pods},
			"conditions": []any{
				map[string]any{"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat},
				map[string]any{"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": heartbeat},
			}}
		// virtual-kubelet's copy of the status it wrote (JSON, fields
		// in its own order).
		applied := fmt.Sprintf(`{"conditions":[{"type":"Ready","status":%q,"lastHeartbeatTime":%q},`+
			`{"type":"MemoryPressure","status":"False","lastHeartbeatTime":%q}],"allocatable":{"pods":%q,"cpu":"8"}}`, ready, heartbeat, heartbeat, pods)
		return &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "annex-beta", "resourceVersion": rv,
				"annotations": map[string]any{vkLastAppliedStatus: applied}},
			"status": status,
		}}
	}
	a := node("1", "2026-01-01T00:00:00Z", "True", "110")
	for _, tc := range []struct {
		name string
		b    *unstructured.Unstructured
		want []string
	}{
		{name: "heartbeat only", b: node("2", "2026-01-01T00:05:00Z", "True", "110")},
		{name: "Ready and allocatable pods", b: node("2", "2026-01-01T00:05:00Z", "False", "100"),
			want: []string{"metadata.annotations." + vkLastAppliedStatus, "status.allocatable.pods", "status.conditions[Ready].status"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, changedFields(a, tc.b)); diff != "" {
				t.Errorf("changedFields (-want +got):\n%s", diff)
			}
		})
	}
}

// A virtual node status write that changed more than its heartbeat says
// what it changed, in the missed target's summary.
func TestChangeSummaryFields(t *testing.T) {
	status := ObjectChanges{Cluster: "alpha", Resource: "nodes", Event: "MODIFIED", Writer: "annex-virtual-node Update status",
		Meaning: meaningVirtualNodeStatus, Count: 1, Objects: []string{"annex-beta ×1"}, Fields: []string{"status.allocatable.pods"}}
	got := annexChangeSummary([]ObjectChanges{status}, 5, func(ObjectChanges) bool { return true })
	if want := "annex-beta ×1 (changed: status.allocatable.pods)"; !strings.Contains(got, want) {
		t.Errorf("summary %q does not contain %q", got, want)
	}
}

// Sizes beyond the first get ratio rows of their own once measured.
func TestEvaluateLargerSize(t *testing.T) {
	r := sampleResults()
	for i, s := range []float64{50, 60, 55} {
		r.Bursts = append(r.Bursts,
			BurstTrial{N: 5000, Mode: modeOffloaded, Placement: placementShared, Trial: i + 1, AllReadySeconds: s * 1.5, FirstReadySeconds: 1},
			BurstTrial{N: 5000, Mode: modeDirect, Placement: placementShared, Trial: i + 1, AllReadySeconds: s, FirstReadySeconds: 0.5})
	}
	got := map[string]string{}
	for _, tr := range evaluate(r) {
		got[tr.Key] = tr.Result + " => " + tr.met()
	}
	for key, want := range map[string]string{
		keyRatio + "-5000":       "1.50 (82.5 s vs 55.0 s) => yes",
		keyRatioPinned + "-5000": " => not measured",
	} {
		if got[key] != want {
			t.Errorf("%s: got %q, want %q", key, got[key], want)
		}
	}
	if _, ok := got[keyRatio+"-5000"]; ok && len(evaluate(sampleResults())) != len(got)-2 {
		t.Errorf("want two more targets with size 5000 measured")
	}
}

func TestProfileExplains(t *testing.T) {
	agent := Profile{Target: keyRatio, Agent: "alpha", Kind: "cpu"}
	server := Profile{Target: keyRatio, Agent: "beta", Component: apiServer, Kind: "cpu"}
	failure := Profile{Target: "failure-" + faultHung, Agent: "alpha", Kind: "cpu"}
	for _, tc := range []struct {
		p    Profile
		key  string
		want bool
	}{
		{agent, keyRatio, true},
		{agent, keyRatio + "-5000", true},
		{agent, keyRatioPinned, false},
		{agent, keyRatioPinned + "-5000", false},
		{agent, keyAgentCPU, true},
		{server, keyAgentCPU, false},
		{server, keyRatio + "-5000", true},
		{failure, keyDetection, true},
		{failure, keyRecovery, true},
		{failure, keyRatio, false},
		{Profile{Target: keyStartupSLO}, keyStartupSLO, true},
		{Profile{Target: keyStartupSLO}, keyRatio, false},
	} {
		if got := tc.p.explains(tc.key); got != tc.want {
			t.Errorf("%s profile of %s/%s explains %s: got %v, want %v", tc.p.Target, tc.p.Agent, tc.p.Component, tc.key, got, tc.want)
		}
	}
}
