package main

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Targets of issues #9, #20 and #21: goals to report against, never test
// assertions.
const (
	targetRatio       = 2.0       // offloaded/direct time to all Ready at ratioSizes, shared placement
	targetRatioPinned = 1.2       // the same, pinned placement (each cluster on a CPU of its own)
	targetAnnexWrites = 4.0       // Annex's API writes per offloaded pod, both clusters (issue #20)
	targetAgentCPU    = 3.0       // ms of CPU of both agents together per offloaded pod (issue #20)
	targetFirstReady  = 2.0       // seconds the offloaded first Ready may take beyond the direct one
	targetDetection   = 5.0       // seconds, p99
	targetRecovery    = 5.0       // seconds, p99
	targetUnpeer      = 15.0      // seconds
	targetRSS         = 150 << 20 // bytes, consumer agent at footprint pods
	targetWritesRate  = 0.0       // writes per second at steady state
	targetStartupP99  = 5.0       // seconds, p99 pod startup latency of the offloaded stream
	targetFresh       = 2.0       // seconds the offloaded fresh-namespace burst may take beyond the direct one
	// targetFailoverMargin is how long after T (releaseAfterSeconds) every
	// member of a failed-over StatefulSet may take to run Ready elsewhere
	// (issue #21), p50 of each fault.
	targetFailoverMargin = 10.0
)

// ratioSizes are the burst sizes the burst targets (ratios, Annex's writes
// and the agents' CPU per pod) are judged at; a size a run did not measure
// is left out.
var ratioSizes = []int{1000, 5000}

// Target keys; profiles name the key they explain (see Profile.explains).
const (
	keyRatio       = "burst-ratio"
	keyRatioPinned = "burst-ratio-pinned"
	keyAnnexWrites = "annex-writes"
	keyAgentCPU    = "agent-cpu"
	keyFirstReady  = "first-ready"
	keyDetection   = "detection"
	keyRecovery    = "recovery"
	keyUnpeer      = "unpeer"
	keyRSS         = "consumer-rss"
	keyWrites      = "writes"
	keyStartupSLO  = "pod-startup-slo"
	keyFresh       = "fresh-burst"
	keyFailover    = "failover"
	keyOverlaps    = "failover-overlaps"
)

func ptrTo(b bool) *bool { return &b }

// evaluate computes the targets from the raw results.
func evaluate(r *Results) []TargetResult {
	var out []TargetResult
	cfg := r.Config

	// Offload burst.
	bursts := summarizeBursts(r.Bursts)
	for _, n := range ratioSizes {
		if n != ratioSizes[0] && !measuredSize(bursts, n) {
			continue // the first size's rows say "not measured"; larger ones only show when run
		}
		out = append(out, ratioTarget(r, bursts, n, placementShared), ratioTarget(r, bursts, n, placementPinned))
	}
	out = append(out, annexWritesTarget(r.Bursts), agentCPUTarget(r.Bursts))
	out = append(out, firstReady(bursts), startupSLO(r), freshBurst(r), tenantTarget(r), tenantBytesTarget(r))

	// Failure reaction.
	fs := summarizeFailures(r.Failures)
	det := TargetResult{Key: keyDetection,
		What:   fmt.Sprintf("Failure detection: fault → the %d endpoints on the provider not ready", cfg.FailurePods),
		How:    "p99 over the trials (nearest rank), dead (SIGKILL) and hung (SIGSTOP) API server",
		Target: fmt.Sprintf("≤ %.0f s p99", targetDetection)}
	rec := TargetResult{Key: keyRecovery,
		What: "Failure recovery: provider back → every endpoint ready again",
		How: "p99 over the trials, from the moment the provider's API server answers /readyz again (SIGCONT: at once; " +
			"a killed one is restarted, which takes Kubernetes itself a few seconds: see the table for the time from the restart)",
		Target: fmt.Sprintf("≤ %.0f s p99", targetRecovery)}
	var detParts, recParts []string
	detOK, recOK, measured := true, true, false
	for _, s := range fs {
		if s.Detection.N == 0 {
			continue
		}
		measured = true
		detParts = append(detParts, fmt.Sprintf("%s %.2f s", s.Fault, s.Detection.P99))
		recParts = append(recParts, fmt.Sprintf("%s %.2f s", s.Fault, s.RecoveryAfterAPI.P99))
		detOK = detOK && s.Detection.P99 <= targetDetection && s.Failed == 0
		recOK = recOK && s.RecoveryAfterAPI.P99 <= targetRecovery && s.Failed == 0
	}
	if measured {
		det.Result, det.Met = strings.Join(detParts, ", "), ptrTo(detOK)
		rec.Result, rec.Met = strings.Join(recParts, ", "), ptrTo(recOK)
	}
	out = append(out, det, rec)
	out = append(out, failoverTargets(r)...)

	// Forced unpeer.
	up := TargetResult{Key: keyUnpeer,
		What: "Forced unpeer with a dead provider: `annexctl unpeer --force` until nothing of the peering is left on the consumer",
		How: fmt.Sprintf("max over the trials of each size, from the command's start until nothing of the peering is left on the consumer "+
			"(checked every 100 ms after the command returned); anything still there %s later is left behind, a miss", leftoverGrace),
		Target: fmt.Sprintf("≤ %.0f s", targetUnpeer)}
	var upParts []string
	upOK := true
	left := map[string]bool{}
	for _, t := range r.Unpeers {
		for _, l := range t.LeftBehind {
			left[l] = true
		}
	}
	for _, s := range summarizeUnpeers(r.Unpeers) {
		switch {
		case s.Command.N == 0:
			upOK = false
			upParts = append(upParts, fmt.Sprintf("N=%d failed", s.N))
		case s.LeftBehind > 0:
			upOK = false
			upParts = append(upParts, fmt.Sprintf("N=%d %.1f s, but something left behind in %d of %d trials", s.N, s.Clean.Max, s.LeftBehind, s.Trials))
		default:
			upParts = append(upParts, fmt.Sprintf("N=%d %.1f s", s.N, s.Clean.Max))
			upOK = upOK && s.Clean.Max <= targetUnpeer && s.Failed == 0
		}
	}
	if len(upParts) > 0 {
		up.Result, up.Met = strings.Join(upParts, ", "), ptrTo(upOK)
	}
	if len(left) > 0 {
		names := make([]string, 0, len(left))
		for l := range left {
			names = append(names, l)
		}
		sort.Strings(names)
		up.Why = fmt.Sprintf("The command returns, but %s stayed on the consumer (still there %s later): `annexctl unpeer --force` does not remove it.", strings.Join(names, ", "), leftoverGrace)
	}
	out = append(out, up)

	// Footprint and churn.
	rss := TargetResult{Key: keyRSS,
		What:   fmt.Sprintf("Consumer agent memory with %d offloaded pods", cfg.FootprintPods),
		How:    "largest VmRSS (/proc/<pid>/status) sampled every second over the idle window",
		Target: fmt.Sprintf("≤ %d MiB", targetRSS>>20)}
	writes := TargetResult{Key: keyWrites,
		What: fmt.Sprintf("Status churn: agent API writes at steady state with %d offloaded pods, liveness writes (Lease renewals) apart", cfg.FootprintPods),
		How: "increase of rest_client_requests_total (POST, PUT, PATCH, DELETE; every API server the agent talks to) " +
			"over the idle window, per second, less the agent's liveness writes seen by the API servers' watches (renewals of its leader-election Lease, " +
			"the virtual node's Lease and the consumer's heartbeat Lease; virtual node status writes that only move lastHeartbeatTime); " +
			"the liveness writes are reported after it (see Status churn)",
		Target: "0 /s"}
	if w := footprintWindow(r); w != nil {
		for _, a := range w.Agents {
			if a.Role == "consumer" {
				rss.Result = fmt.Sprintf("%.0f MiB", mib(a.RSSMaxBytes))
				rss.Met = ptrTo(a.RSSMaxBytes <= targetRSS)
				if m := a.GoMemory; !*rss.Met && m.SysBytes > 0 {
					rss.Why = fmt.Sprintf("At the end of the window the Go runtime held %.0f MiB of heap objects (live ones and garbage not yet collected; "+
						"the heap profile shows the live ones) in %.0f MiB of heap spans; %.0f MiB of free heap spans were not yet returned to the OS; "+
						"it had %.0f MiB from the OS in all, %.0f MiB of which it had released again (%.0f goroutines).",
						m.HeapAllocBytes/(1<<20), m.HeapInuseBytes/(1<<20), (m.HeapIdleBytes-m.HeapReleasedBytes)/(1<<20), m.SysBytes/(1<<20),
						m.HeapReleasedBytes/(1<<20), m.Goroutines)
					if a.RSSFileBytes > 0 {
						rss.Why += fmt.Sprintf(" %.0f MiB of the RSS were file-backed (the executable's pages).", mib(a.RSSFileBytes))
					}
				}
			}
		}
		var parts, live []string
		ok := true
		for _, a := range w.Agents {
			other := a.OtherWritesPerSecond(w.WindowSeconds)
			parts = append(parts, fmt.Sprintf("%s %.2f/s", a.Role, other))
			live = append(live, fmt.Sprintf("%s %.2f/s", a.Role, a.LivenessWrites/max(w.WindowSeconds, 1)))
			ok = ok && other <= targetWritesRate
		}
		writes.Result, writes.Met = strings.Join(parts, ", ")+"; liveness writes besides: "+strings.Join(live, ", "), ptrTo(ok)
		if !ok {
			writes.Why = "The writes that remain, by object (from the API servers' watches; see Status churn): " +
				annexChangeSummary(w.Changes, 6, func(c ObjectChanges) bool { return !liveness(c) }) + "."
		}
	}
	out = append(out, rss, writes)
	return out
}

// ratioKey is the key of the ratio target of size n in placement: the
// first size's keep the names they had before other sizes were judged.
func ratioKey(n int, placement string) string {
	key := keyRatio
	if placement == placementPinned {
		key = keyRatioPinned
	}
	if n != ratioSizes[0] {
		key += "-" + strconv.Itoa(n)
	}
	return key
}

// measuredSize reports whether bursts of size n ran in some placement.
func measuredSize(bursts []burstStats, n int) bool {
	for _, s := range bursts {
		if s.N == n && s.AllReady.N > 0 {
			return true
		}
	}
	return false
}

// ratioTarget judges the time to all Ready of the offloaded bursts of size
// n against the direct ones, in placement.
func ratioTarget(r *Results, bursts []burstStats, n int, placement string) TargetResult {
	t := TargetResult{Key: ratioKey(n, placement),
		What:   fmt.Sprintf("Offload burst, %s placement: time to all %d pods Ready, offloaded / direct", placement, n),
		How:    "p50 over the trials of each mode, same run, interleaved; every process on every CPU (see Offload burst)",
		Target: fmt.Sprintf("≤ %.1f", targetRatio)}
	if placement == placementPinned {
		t.How = "p50 over the trials of each mode, same run, interleaved; the consumer's processes on one CPU, the provider's on another, " +
			"in both modes (two one-CPU machines, emulated: see Pinned bursts)"
		t.Target = fmt.Sprintf("≤ %.1f", targetRatioPinned)
	}
	off, dir, ok := burstPair(bursts, n, placement)
	if !ok {
		if placement == placementPinned && r.Environment.PinnedSkipped != "" {
			t.Result = "not run: " + r.Environment.PinnedSkipped
		}
		return t
	}
	v := off.AllReady.P50 / dir.AllReady.P50
	t.Result = fmt.Sprintf("%.2f (%.1f s vs %.1f s)", v, off.AllReady.P50, dir.AllReady.P50)
	if placement == placementPinned {
		t.Met = ptrTo(v <= targetRatioPinned)
		if !*t.Met {
			t.Why = pinnedWhy(off, dir)
		}
	} else {
		t.Met = ptrTo(v <= targetRatio)
		if !*t.Met {
			t.Why = cpuBound(off, dir, r.Environment.CPUs)
		}
	}
	return t
}

// burstSizes are the (size, placement) pairs of ratioSizes with offloaded
// trials that succeeded, in the order of ratioSizes and allPlacements, and
// those trials.
func burstSizes(trials []BurstTrial) (keys [][2]any, byKey map[[2]any][]BurstTrial) {
	byKey = map[[2]any][]BurstTrial{}
	for _, t := range trials {
		if t.Mode == modeOffloaded && t.Error == "" {
			k := [2]any{t.N, placementOf(t)}
			byKey[k] = append(byKey[k], t)
		}
	}
	for _, n := range ratioSizes {
		for _, p := range allPlacements {
			if k := [2]any{n, p}; len(byKey[k]) > 0 {
				keys = append(keys, k)
			}
		}
	}
	return keys, byKey
}

// annexWritesTarget judges Annex's own API writes per offloaded pod, both
// clusters together (the audit logs' count), at every size of ratioSizes and
// placement: the largest p50 is the result.
func annexWritesTarget(trials []BurstTrial) TargetResult {
	t := TargetResult{Key: keyAnnexWrites,
		What: "Offload burst: Annex's own API writes per offloaded pod, both clusters",
		How: fmt.Sprintf("p50 over the offloaded trials of each N (%s) and placement, from the API servers' audit logs (writes by the agents and the consumer's tenant "+
			"ServiceAccount, from the Deployment's creation until 3 s after the last pod was Ready); the largest (see API writes per pod)", sizesList()),
		Target: fmt.Sprintf("≤ %.0f", targetAnnexWrites)}
	keys, byKey := burstSizes(trials)
	worst, ok := 0.0, true
	var parts []string
	for _, k := range keys {
		var per []float64
		for _, tr := range byKey[k] {
			if len(tr.Writes) > 0 {
				per = append(per, annexWritesPerPod(tr.Writes, tr.N))
			}
		}
		if len(per) == 0 {
			continue
		}
		v := summarize(per).P50
		parts = append(parts, fmt.Sprintf("N=%d %s %.2f", k[0], k[1], v))
		worst = max(worst, v)
		ok = ok && v <= targetAnnexWrites
	}
	if len(parts) == 0 {
		return t
	}
	t.Result, t.Met = strings.Join(parts, ", "), ptrTo(ok)
	if !ok {
		t.Why = fmt.Sprintf("The largest is %.2f: see API writes per pod for the writes by cluster, verb and resource.", worst)
	}
	return t
}

// agentCPUTarget judges the CPU both agents used per offloaded pod, at
// every size of ratioSizes and placement: the largest p50 is the result.
func agentCPUTarget(trials []BurstTrial) TargetResult {
	t := TargetResult{Key: keyAgentCPU,
		What: "Offload burst: CPU of both agents together per offloaded pod",
		How: fmt.Sprintf("p50 over the offloaded trials of each N (%s) and placement of the agents' utime+stime (/proc/<pid>/stat) from the Deployment's creation "+
			"until 3 s after the last pod was Ready, per pod; the largest (see API writes per pod)", sizesList()),
		Target: fmt.Sprintf("≤ %.0f ms", targetAgentCPU)}
	keys, byKey := burstSizes(trials)
	ok := true
	var parts []string
	for _, k := range keys {
		var sum []float64
		per := map[string][]float64{}
		for _, tr := range byKey[k] {
			if len(tr.AgentCPUSeconds) == 0 {
				continue
			}
			total := 0.0
			for c, v := range tr.AgentCPUSeconds {
				per[c] = append(per[c], 1000*v/float64(tr.N))
				total += v
			}
			sum = append(sum, 1000*total/float64(tr.N))
		}
		if len(sum) == 0 {
			continue
		}
		v := summarize(sum).P50
		parts = append(parts, fmt.Sprintf("N=%d %s %.2f ms (%s %.2f + %s %.2f)", k[0], k[1], v,
			consumerName, summarize(per[consumerName]).P50, providerName, summarize(per[providerName]).P50))
		ok = ok && v <= targetAgentCPU
	}
	if len(parts) == 0 {
		return t
	}
	t.Result, t.Met = strings.Join(parts, "; "), ptrTo(ok)
	if !ok {
		t.Why = "Where the agents' CPU went: the profiles of both agents below, taken during the profiled shared offloaded trial (see Offload burst)."
	}
	return t
}

// sizesList is "1000 and 5000".
func sizesList() string {
	var s []string
	for _, n := range ratioSizes {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, " and ")
}

// cpuBound explains a burst ratio by the machine's CPU use, when it was
// measured: if the CPUs were (nearly) saturated in both modes, time follows
// CPU work, and the offloaded path's share of it bounds the ratio.
func cpuBound(off, dir burstStats, cpus int) string {
	if off.CPUBusy.N == 0 || dir.CPUBusy.N == 0 || dir.CPUSeconds.P50 == 0 {
		return ""
	}
	why := fmt.Sprintf("The machine's %d CPUs were %.0f%% busy during the direct trials and %.0f%% during the offloaded ones (p50, /proc/stat); "+
		"an offloaded burst used %.0f CPU-seconds (both clusters, the agents, the benchmark) against %.0f for the direct one, %.2f times as much.",
		cpus, 100*dir.CPUBusy.P50, 100*off.CPUBusy.P50, off.CPUSeconds.P50, dir.CPUSeconds.P50, off.CPUSeconds.P50/dir.CPUSeconds.P50)
	if dir.CPUBusy.P50 >= cpuSaturated && off.CPUBusy.P50 >= cpuSaturated {
		why += " With the CPUs saturated in both modes the time follows the CPU work: every offloaded pod goes through two control planes " +
			"sharing this machine (the consumer's: ReplicaSet, scheduler, pod status; the provider's: ShadowPod, pod, scheduler, status), " +
			"so here the ratio cannot go much below that CPU ratio; what Annex can lower is its own part of the work (the agents' profiles below, " +
			"and the writes it makes per pod)."
	}
	return why
}

// firstReady compares the first pod's time to Ready, offloaded against
// direct, at every size and placement measured in both modes; the worst
// difference is the result.
func firstReady(bursts []burstStats) TargetResult {
	t := TargetResult{Key: keyFirstReady,
		What:   "Offload burst: time to the first pod Ready, offloaded against direct",
		How:    "p50 over the trials of each mode; the largest difference over every N and placement measured (see Offload burst)",
		Target: fmt.Sprintf("≤ direct + %.0f s", targetFirstReady)}
	pairs, worst := 0, 0.0
	for _, s := range bursts {
		if s.Mode != modeOffloaded {
			continue
		}
		off, dir, ok := burstPair(bursts, s.N, s.Placement)
		if !ok {
			continue
		}
		d := off.FirstReady.P50 - dir.FirstReady.P50
		if pairs == 0 || d > worst {
			worst = d
			t.Result = fmt.Sprintf("%+.2f s at N=%d %s (%.2f s vs %.2f s)", d, s.N, s.Placement, off.FirstReady.P50, dir.FirstReady.P50)
		}
		pairs++
	}
	if pairs == 0 {
		return t
	}
	if pairs > 1 {
		t.Result += fmt.Sprintf("; the largest of %d (N, placement) pairs", pairs)
	}
	t.Met = ptrTo(worst <= targetFirstReady)
	return t
}

// pinnedWhy explains a pinned burst ratio by how busy each CPU, and so
// each cluster, was.
func pinnedWhy(off, dir burstStats) string {
	if len(off.CPUBusyPerCPU) == 0 || off.PinCheck == nil {
		return ""
	}
	var parts []string
	for _, c := range []string{consumerName, providerName} {
		list := off.PinCheck.CPUs[c]
		cpu, err := strconv.Atoi(list)
		if err != nil || cpu >= len(off.CPUBusyPerCPU) {
			continue
		}
		part := fmt.Sprintf("CPU %d (%s) %.0f%%", cpu, c, 100*off.CPUBusyPerCPU[cpu].P50)
		if cpu < len(dir.CPUBusyPerCPU) {
			part += fmt.Sprintf(" against %.0f%% in the direct ones", 100*dir.CPUBusyPerCPU[cpu].P50)
		}
		if s, ok := off.ClusterCPU[c]; ok {
			part += fmt.Sprintf(", its processes %.1f CPU-seconds", s.P50)
			if d, ok := dir.ClusterCPU[c]; ok {
				part += fmt.Sprintf(" against %.1f", d.P50)
			}
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return ""
	}
	why := "During the pinned offloaded trials (p50, /proc/stat and /proc/<pid>/stat): " + strings.Join(parts, "; ") +
		". A CPU near 100% is the cluster that sets the pace; the provider's CPU-seconds against the direct ones are what Annex adds there."
	if q := queuesShort(off.Queues, off.QueuePods); q != "" {
		why += " Annex's work queues over these trials (see Work queues): " + q + "."
	}
	return why
}

// cpuSaturated is the CPU busy share above which a burst counts as
// CPU-bound (the rest is mostly the start, when few pods exist yet).
const cpuSaturated = 0.85

// burstPair returns the offloaded and direct stats of size n in a
// placement.
func burstPair(stats []burstStats, n int, placement string) (off, dir burstStats, ok bool) {
	var haveOff, haveDir bool
	for _, s := range stats {
		if s.N != n || s.Placement != placement || s.AllReady.N == 0 {
			continue
		}
		switch s.Mode {
		case modeOffloaded:
			off, haveOff = s, true
		case modeDirect:
			dir, haveDir = s, true
		}
	}
	return off, dir, haveOff && haveDir
}

// footprintWindow is the idle window with offloaded pods, if measured.
func footprintWindow(r *Results) *IdleWindow {
	for i := range r.Windows {
		if r.Windows[i].OffloadedPods > 0 {
			return &r.Windows[i]
		}
	}
	return nil
}

// idleWindow is the idle window without offloaded pods, if measured.
func idleWindow(r *Results) *IdleWindow {
	for i := range r.Windows {
		if r.Windows[i].OffloadedPods == 0 {
			return &r.Windows[i]
		}
	}
	return nil
}

// annexChangeSummary lists the largest changes made by Annex's writers
// that keep selects.
func annexChangeSummary(changes []ObjectChanges, n int, keep func(ObjectChanges) bool) string {
	var parts []string
	for _, c := range changes {
		if !annexChange(c) || !keep(c) {
			continue
		}
		if len(parts) == n {
			parts = append(parts, "…")
			break
		}
		what := c.Resource
		if c.Meaning != "" {
			what = c.Meaning + " (" + c.Resource + ")"
		}
		parts = append(parts, fmt.Sprintf("%d× %s %s on %s by %s: %s", c.Count, strings.ToLower(c.Event), what, c.Cluster, c.Writer, c.objectsText()))
	}
	if len(parts) == 0 {
		return "none attributed to Annex (see the table)"
	}
	return strings.Join(parts, "; ")
}

// missed reports whether a target of keys was missed.
func missed(targets []TargetResult, keys ...string) bool {
	for _, t := range targets {
		if slices.Contains(keys, t.Key) && t.missed() {
			return true
		}
	}
	return false
}

// startupSLO judges the offloaded stream's pod startup latency against
// SIG Scalability's SLO (p99 ≤ 5 s).
func startupSLO(r *Results) TargetResult {
	cfg := r.Config
	t := TargetResult{Key: keyStartupSLO,
		What: fmt.Sprintf("Pod startup SLO under a steady stream of %.0f pods/s for %s: offloaded pods' startup latency", cfg.StreamRate, cfg.StreamDuration),
		How: "p99 (nearest rank) over the stream's pods, from the create call to the pod seen Running with every container running through a watch " +
			"of the consumer's pods (the virtual node's status); stateless pods, image present (kwok); the same stream directly on the provider for comparison " +
			"(see Pod startup under a steady stream)",
		Target: fmt.Sprintf("≤ %.0f s p99", targetStartupP99)}
	off, dir := streamPair(r.Streams)
	if off == nil || off.Created == 0 {
		return t
	}
	t.Result = fmt.Sprintf("%.2f s (p50 %.2f s, p90 %.2f s; %d pods at %.1f/s)", off.Startup.P99, off.Startup.P50, off.Startup.P90, off.Created, off.AchievedRate)
	if dir != nil && dir.Started > 0 {
		t.Result += fmt.Sprintf("; direct %.2f s (p50 %.2f s)", dir.Startup.P99, dir.Startup.P50)
	}
	if off.NotStarted > 0 || off.CreateErrors > 0 {
		t.Result += fmt.Sprintf("; %d pods not started within %s of the last create, %d create calls failed", off.NotStarted, streamWait, off.CreateErrors)
	}
	if why := off.stopped(streamCount(off.Rate, time.Duration(cfg.StreamDuration))); why != "" {
		t.Result += "; " + why
	}
	t.Met = ptrTo(off.Started > 0 && off.Startup.P99 <= targetStartupP99 && off.NotStarted == 0 && off.CreateErrors == 0 && off.StoppedAfterSeconds == 0)
	if !*t.Met {
		t.Why = streamWhy(off, dir)
	}
	return t
}

// streamWhy explains a missed startup SLO by the stages of the pods' way
// and the stream's own pace.
func streamWhy(off, dir *StreamRun) string {
	var parts []string
	if len(off.Stages) > 0 {
		parts = append(parts, "Where an offloaded pod's time went (p50 / p99 over the pods, from the API servers' audit logs): "+stagesShort(off.Stages)+".")
	}
	if dir != nil && len(dir.Stages) > 0 {
		parts = append(parts, "Direct: "+stagesShort(dir.Stages)+".")
	}
	parts = append(parts, fmt.Sprintf("The stream sent its create calls at %.1f pods/s (%.0f asked; %d calls more than %s late) and had at most %d pods at once.",
		off.AchievedRate, off.Rate, off.LateCreates, streamLate, off.MaxAlive))
	if q := queuesShort(off.Queues, off.Created); q != "" {
		parts = append(parts, "Annex's work queues while the stream sent its create calls: "+q+".")
	}
	if off.CPUSeconds > 0 {
		c := fmt.Sprintf("Meanwhile the machine's CPUs were %.0f %% busy", 100*off.CPUBusy)
		if dir != nil && dir.CPUSeconds > 0 {
			c += fmt.Sprintf(" (%.0f %% during the direct stream)", 100*dir.CPUBusy)
		}
		if off.CPUBusy >= 0.9 {
			c += ": the stream was CPU-bound, and a backlog grows once the pods need more CPU than the machine has"
		}
		parts = append(parts, c+" (CPU-seconds by process: see Pod startup under a steady stream).")
	}
	return strings.Join(parts, " ")
}

// stagesShort is "created→bound 0.01/0.05 s, …".
func stagesShort(delays []StageDelay) string {
	parts := make([]string, len(delays))
	for i, d := range delays {
		parts[i] = fmt.Sprintf("%s→%s %.2f/%.2f s", d.From, d.To, d.P50, d.P99)
	}
	return strings.Join(parts, ", ")
}

// freshBurst compares the burst into a freshly offloaded namespace with
// the one into a fresh namespace of the provider.
func freshBurst(r *Results) TargetResult {
	t := TargetResult{Key: keyFresh,
		What: fmt.Sprintf("Burst into a freshly offloaded namespace: a Deployment of %d pods created %s after the offload request, time to all Ready", r.Config.FreshPods, freshDelay),
		How: fmt.Sprintf("p50 over the trials of each mode, from the Deployment's create call; direct: the same Deployment %s after a fresh namespace's creation on the provider; "+
			"a trial whose pods are not all Ready within %s fails, and a failed offloaded trial misses the target (see Burst into a fresh namespace)", freshDelay, freshTimeout),
		Target: fmt.Sprintf("≤ direct + %.0f s (p50)", targetFresh)}
	off, dir := pairOf(summarizeFresh(r.Fresh), func(s *freshStats) string { return s.Mode })
	if off == nil || dir == nil {
		return t
	}
	var parts []string
	met := off.Failed == 0
	if off.AllReady.N > 0 && dir.AllReady.N > 0 {
		d := off.AllReady.P50 - dir.AllReady.P50
		parts = append(parts, fmt.Sprintf("%+.2f s (%.2f s vs %.2f s; first Ready %.2f s vs %.2f s)", d, off.AllReady.P50, dir.AllReady.P50, off.FirstReady.P50, dir.FirstReady.P50))
		met = met && d <= targetFresh
	}
	if off.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d offloaded trials failed (pods not all Ready within %s)", off.Failed, off.Trials, freshTimeout))
	}
	if dir.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d direct trials failed", dir.Failed, dir.Trials))
	}
	if len(parts) == 0 || off.Failed == 0 && (off.AllReady.N == 0 || dir.AllReady.N == 0) {
		t.Result = strings.Join(parts, "; ")
		return t // nothing to compare
	}
	t.Result, t.Met = strings.Join(parts, "; "), ptrTo(met)
	if !met {
		t.Why = freshWhy(off, r.Fresh)
	}
	return t
}

// freshWhy explains a missed fresh-burst target by the offload's progress,
// where the pods of failed trials were and the stages of the last
// offloaded trial.
func freshWhy(off *freshStats, trials []FreshTrial) string {
	var parts []string
	if off.OffloadReady.N > 0 || off.Labelled.N > 0 {
		parts = append(parts, fmt.Sprintf("After the offload request (p50 over the offloaded trials): the namespace was labelled for the admission policy after %.2f s, "+
			"its remote namespace existed on %s after %.2f s and the namespace was annotated with %s (pods admitted from then on may go to the virtual node) after %.2f s; "+
			"the Deployment was created after %s.", off.Labelled.P50, providerName, off.RemoteNamespace.P50, providerName, off.OffloadReady.P50, freshDelay))
	}
	if len(off.FailedStates) > 0 {
		parts = append(parts, "Pods of the failed trials when the wait ended: "+podStatesLine(off.FailedStates)+".")
	}
	for i := len(trials) - 1; i >= 0; i-- {
		if t := trials[i]; t.Mode == modeOffloaded && len(t.Stages) > 0 {
			parts = append(parts, fmt.Sprintf("Stages of trial %d's pods (p50/p99, audit logs): %s.", t.Trial, stagesShort(t.Stages)))
			break
		}
	}
	return strings.Join(parts, " ")
}

// failoverTargets judges the failover phase: the time until the members
// run elsewhere, for each fault, and the samples with two copies of one.
func failoverTargets(r *Results) []TargetResult {
	stats := summarizeFailovers(r.Failovers)
	release := failoverRelease
	for _, s := range stats {
		release = s.Release
	}
	members, fence := failoverMembers, failoverFence
	if len(r.Failovers) > 0 {
		members, fence = r.Failovers[0].Members, r.Failovers[0].FenceAfterSeconds
	}
	limit := float64(release) + targetFailoverMargin
	fo := TargetResult{Key: keyFailover,
		What: fmt.Sprintf("Failover with fencing (F = %d s, T = %d s): a StatefulSet of %d members on a provider that is killed or partitioned, "+
			"until every member runs Ready elsewhere", fence, release, members),
		How: "p50 over the trials of each fault, from the fault (the provider's API server SIGKILLed; the proxy that is the consumer's only way to the provider cut) " +
			"to the last member seen Ready on the consumer's own node through a watch (see Failover)",
		Target: fmt.Sprintf("≤ T + %.0f s (%.0f s) for each fault", targetFailoverMargin, limit)}
	ov := TargetResult{Key: keyOverlaps,
		What: "Failover: moments at which two copies of one StatefulSet member ran at once",
		How: fmt.Sprintf("samples in which one member was Running (also while being deleted) both on the provider and on the consumer's node; both listed every %s "+
			"through every trial, from the StatefulSet's creation to its deletion; a provider that does not answer runs nothing; a killed provider's copies "+
			"listed after its restart are counted apart (see Failover)", failoverSample),
		Target: "0"}
	var parts []string
	ok, measured := true, false
	samples, overlaps := 0, 0
	for _, s := range stats {
		samples += s.Samples
		overlaps += s.Overlaps
		if s.Failover.N == 0 {
			ok, measured = false, true
			parts = append(parts, fmt.Sprintf("%s: all %d trials failed", s.Fault, s.Trials))
			continue
		}
		measured = true
		part := fmt.Sprintf("%s %.1f s", s.Fault, s.Failover.P50)
		if s.Failed > 0 {
			part += fmt.Sprintf(" (%d of %d trials failed)", s.Failed, s.Trials)
		}
		parts = append(parts, part)
		ok = ok && s.Failover.P50 <= limit && s.Failed == 0
	}
	if len(stats) < 2 && measured {
		ok = false
		parts = append(parts, "one fault not run")
	}
	if measured {
		fo.Result, fo.Met = strings.Join(parts, ", "), ptrTo(ok)
		if !ok {
			fo.Why = failoverWhy(stats)
		}
	}
	if samples > 0 {
		ov.Result, ov.Met = fmt.Sprintf("%d in %d samples", overlaps, samples), ptrTo(overlaps == 0)
		for _, s := range stats {
			if s.Fault == faultKilled && s.StaleRunning.N > 0 {
				ov.Result += fmt.Sprintf("; apart: after its restart the killed provider listed its stale copies Running %.1f s after its API server answered, until they were being deleted (%.1f s until none was listed Running; p50; its agent fenced them in %d of %d trials)",
					s.StaleFenced.P50, s.StaleRunning.P50, s.ProviderFenced, s.StaleRunning.N)
			}
		}
		if overlaps > 0 {
			for _, t := range r.Failovers {
				if t.FirstOverlap != "" {
					ov.Why = fmt.Sprintf("First in the %s trial %d: %s.", t.Fault, t.Trial, t.FirstOverlap)
					break
				}
			}
		}
	}
	return []TargetResult{fo, ov}
}

// failoverWhy explains a missed failover time by its parts: the heartbeat's
// age at the fault, the release and the replacements' start.
func failoverWhy(stats []failoverStats) string {
	var parts []string
	for _, s := range stats {
		if s.Failover.N == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: the heartbeat was %.1f s old at the fault, the first replacement appeared %.1f s after it and the last member was Ready %.1f s after it (p50)",
			s.Fault, s.HeartbeatAge.P50, s.Released.P50, s.Failover.P50))
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + ". The consumer releases T after the last heartbeat it sent; the rest is its controllers and the consumer's scheduler and node."
}
