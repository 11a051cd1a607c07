package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/annexhq/annex/internal/agent"
)

// markdown renders the results as the table a person reads; outDir is
// where the profiles were copied (for excerpts).
func markdown(r *Results, outDir string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	env := r.Environment
	p("# Annex benchmarks, %s\n\n", env.Date.Format("2006-01-02 15:04 MST"))
	commit := env.GitCommit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if env.GitDirty {
		commit += " (with uncommitted changes)"
	}
	p("Scale **%s**%s · commit %s · %s · %d CPUs (%s/%s) · Kubernetes %s · load average at the start %s · run took %s.\n\n",
		r.Config.Scale, map[bool]string{true: " (customized: see the JSON's config)", false: ""}[r.Config.custom()],
		commit, env.GoVersion, env.CPUs, env.OS, env.Arch, env.KubeVersion, env.LoadAverage,
		(time.Duration(env.DurationSeconds) * time.Second).String())
	if env.OtherAPIServers > 0 {
		p("**Other clusters were running on this machine during the run** (up to %d other kube-apiserver processes): the numbers are skewed by their load.\n\n", env.OtherAPIServers)
	} else {
		p("No other cluster ran on this machine during the run.\n\n")
	}
	p("Two fresh local clusters (`internal/localcluster`: real etcd, kube-apiserver, controller-manager, scheduler; kwok nodes): "+
		"consumer **%s** (1 kwok node) and provider **%s** (%d kwok nodes of %d pods), Annex installed in both, each agent a local process "+
		"authenticated as its ServiceAccount, peered with room for every pod. Everything ran on this one machine, so the clusters, the agents and the "+
		"benchmark share its CPUs (but for the pinned burst trials, where each cluster had a CPU of its own). Raw numbers of every trial: the JSON next to this file. How to run: [docs/bench.md](../../docs/bench.md).\n\n",
		consumerName, providerName, env.ProviderNodes, kwokPodsPerNode)

	p("## Targets\n\n")
	p("| what | how | result | target | met? |\n| --- | --- | --- | --- | --- |\n")
	for _, t := range r.Targets {
		p("| %s | %s | %s | %s | %s |\n", cell(t.What), cell(t.How), cell(orDash(t.Result)), cell(t.Target), t.met())
	}
	p("\n")
	var misses []TargetResult
	for _, t := range r.Targets {
		if t.missed() {
			misses = append(misses, t)
		}
	}
	if len(misses) > 0 {
		p("### Missed targets\n\n")
		for _, t := range misses {
			p("- **%s**: %s, target %s.", t.What, t.Result, t.Target)
			if t.Why != "" {
				p(" %s", t.Why)
			}
			var profs []Profile
			for _, pr := range r.Profiles {
				if pr.explains(t.Key) {
					if pr.Top != "" {
						profs = append(profs, pr)
					}
				}
			}
			sort.SliceStable(profs, func(i, j int) bool { return kindOrder[profs[i].Kind] < kindOrder[profs[j].Kind] })
			if len(profs) > 0 {
				p(" Profiles:")
				for _, pr := range profs {
					p(" [%s %s of %s](%s) ([raw](%s));", pr.Kind, "profile", pr.of(), pr.Top, pr.File)
				}
				p(" excerpts below.")
			}
			p("\n")
			for _, pr := range profs {
				if pr.Kind == "cpu" {
					if h := cpuHotspots(filepath.Join(outDir, pr.Top)); h != "" {
						p("  - %s: %s\n", pr.of(), h)
					}
				}
			}
			for _, pr := range profs {
				p("\n  <details><summary>%s profile of %s, %s (top of <code>go tool pprof -top</code>%s)</summary>\n\n  ```\n%s  ```\n  </details>\n",
					pr.Kind, pr.of(), pr.When, " <code>-cum</code>, runtime frames hidden",
					indent(topExcerpt(filepath.Join(outDir, pr.Top), map[bool]int{true: 12, false: 25}[pr.Kind == "goroutine"]), "  "))
			}
		}
		p("\n")
	}

	if r.Notes != "" {
		p("## Notes\n\n%s\n\n", strings.TrimSpace(r.Notes))
	}
	renderBursts(&b, r)
	renderStreams(&b, r)
	renderFresh(&b, r)
	renderTenants(&b, r)
	renderFailures(&b, r)
	renderFailovers(&b, r)
	renderUnpeers(&b, r)
	renderWindows(&b, r)
	renderTunnel(&b, r)
	if len(r.Errors) > 0 {
		p("## Errors\n\n")
		for _, e := range r.Errors {
			p("- %s\n", cell(e))
		}
		p("\n")
	}
	return b.String()
}

func renderBursts(b *strings.Builder, r *Results) {
	stats := summarizeBursts(r.Bursts)
	if len(stats) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Offload burst\n\n")
	p("A Deployment of N replicas (one container, requests 10m CPU and 16Mi) is created and timed from the create call to the last of its pods "+
		"seen Ready through a watch: **offloaded** = created in namespace `%s` of the consumer (offloaded, strategy Remote), so every pod goes "+
		"through the virtual node `annex-%s` and runs on the provider as a ShadowPod's pod, Ready as seen on the consumer; **direct** = the same "+
		"Deployment created in a plain namespace of the provider. Trials per N, placement and mode: %d, interleaved (direct, offloaded, then offloaded, direct, …; each trial in every placement); "+
		"after each trial the Deployment is deleted and the benchmark waits until no pod (and no ShadowPod) is left on either cluster. "+
		"Times in seconds; pods/s = N / time to all Ready.\n\n", offloadNS, providerName, r.Config.BurstTrials)
	for _, t := range r.Bursts {
		if t.Profiled {
			p("Trial %d of the offloaded runs at N=%d ran with both agents' CPU profilers on (they cost a few percent), and its pods stayed "+
				"for the footprint window before it was cleaned up.\n\n", t.Trial, t.N)
		}
	}
	p("CPU is the whole machine's from /proc/stat over the same interval (every process of both clusters, the agents and the benchmark): "+
		"CPU-seconds used and how busy the %d CPUs were, all together and each (`cpuN` lines); per cluster, the CPU-seconds (utime+stime) "+
		"of its processes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, its agent) over the same interval. "+
		"Half Ready is the time until half of the pods (rounded up) were Ready.\n\n", r.Environment.CPUs)
	p("Placement: **shared** = every process may run on every CPU; **pinned** = every thread of %s's processes on one CPU and every thread of "+
		"%s's on another, in both modes (two one-CPU machines, emulated; the benchmark itself is not pinned): see *Pinned bursts* in "+
		"[docs/bench.md](../../docs/bench.md). The ratios compare offloaded with direct in the same placement.\n\n", consumerName, providerName)
	if why := r.Environment.PinnedSkipped; why != "" {
		p("**The pinned placement was skipped**: %s.\n\n", why)
	}
	p("| N | placement | mode | trials | all Ready p50 | all Ready max | first Ready p50 | half Ready p50 | pods/s p50 | CPU-s p50 | CPUs busy p50 | each CPU busy p50 | CPU-s %s / %s p50 | offloaded / direct (p50) | CPU-s offloaded / direct |\n",
		consumerName, providerName)
	p("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |\n")
	for _, s := range stats {
		ratio, cpuRatio := "", ""
		if s.Mode == modeOffloaded {
			if off, dir, ok := burstPair(stats, s.N, s.Placement); ok {
				ratio = fmt.Sprintf("**%.2f**", off.AllReady.P50/dir.AllReady.P50)
				if off.CPUSeconds.N > 0 && dir.CPUSeconds.N > 0 && dir.CPUSeconds.P50 > 0 {
					cpuRatio = fmt.Sprintf("%.2f", off.CPUSeconds.P50/dir.CPUSeconds.P50)
				}
			}
		}
		trials := fmt.Sprint(s.Trials)
		if s.Failed > 0 {
			trials += fmt.Sprintf(" (%d failed)", s.Failed)
		}
		if s.AllReady.N == 0 {
			p("| %d | %s | %s | %s | – | – | – | – | – | – | – | – | – | | |\n", s.N, s.Placement, s.Mode, trials)
			continue
		}
		p("| %s |\n", strings.Join(burstRow(s, trials, ratio, cpuRatio), " | "))
	}
	p("\n")
	renderPinChecks(b, stats)
	renderProcessCPU(b, stats)
	renderBurstWrites(b, r)
	renderBurstStages(b, r)
	renderBurstQueues(b, stats)
}

// renderBurstQueues renders the agents' work queues of the offloaded
// bursts, added up over the trials of each N and placement.
func renderBurstQueues(b *strings.Builder, stats []burstStats) {
	var rows []queueRow
	for _, s := range stats {
		if s.Mode == modeOffloaded && len(s.Queues) > 0 {
			rows = append(rows, queueRow{fmt.Sprintf("N=%d %s", s.N, s.Placement), s.Queues, s.QueuePods})
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("### Work queues\n\n")
	renderQueueTable(b, "The offloaded trials of each N and placement, from the Deployment's creation until 3 s after the last pod was Ready, added up over the trials. "+queueTableIntro, rows)
}

// burstRow is the cells of one row of the burst table (see renderBursts).
func burstRow(s burstStats, trials, ratio, cpuRatio string) []string {
	cpu, busy := "–", "–"
	if s.CPUBusy.N > 0 {
		cpu, busy = fmt.Sprintf("%.1f", s.CPUSeconds.P50), fmt.Sprintf("%.0f%%", 100*s.CPUBusy.P50)
	}
	half := "–"
	if s.HalfReady.N > 0 {
		half = fmt.Sprintf("%.2f", s.HalfReady.P50)
	}
	each := make([]float64, len(s.CPUBusyPerCPU))
	for i, c := range s.CPUBusyPerCPU {
		each[i] = c.P50
	}
	clusters := "–"
	if len(s.ClusterCPU) > 0 {
		var parts []string
		for _, c := range []string{consumerName, providerName} {
			if v, ok := s.ClusterCPU[c]; ok {
				parts = append(parts, fmt.Sprintf("%.1f", v.P50))
			} else {
				parts = append(parts, "–")
			}
		}
		clusters = strings.Join(parts, " / ")
	}
	return []string{fmt.Sprint(s.N), s.Placement, s.Mode, trials, fmt.Sprintf("%.2f", s.AllReady.P50), fmt.Sprintf("%.2f", s.AllReady.Max),
		fmt.Sprintf("%.2f", s.FirstReady.P50), half, fmt.Sprintf("%.1f", s.PPS.P50), cpu, busy, perCPULine(each), clusters, ratio, cpuRatio}
}

// renderPinChecks renders what the pinned trials checked of their threads'
// affinity.
func renderPinChecks(b *strings.Builder, stats []burstStats) {
	var rows []burstStats
	for _, s := range stats {
		if s.PinCheck != nil {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("Pin check of the pinned trials: `Cpus_allowed_list` of every thread (`/proc/<pid>/task/*/status`) of every process of both clusters, " +
		"right after pinning (a mismatch fails the trial before it starts) and once every pod was Ready (a mismatch fails the trial), " +
		"added up over the trials.\n\n")
	p("| N | mode | CPUs | threads checked after pinning | mismatched | threads checked all Ready | mismatched |\n| ---: | --- | --- | ---: | ---: | ---: | ---: |\n")
	for _, s := range rows {
		c := s.PinCheck
		p("| %d | %s | %s | %d | %d | %d | %d |\n", s.N, s.Mode, pinCPUsLine(c.CPUs), c.Pinned.Threads, c.Pinned.Mismatches, c.Ready.Threads, c.Ready.Mismatches)
	}
	p("\n")
}

// renderProcessCPU renders the CPU-seconds of each process of both
// clusters during the bursts.
func renderProcessCPU(b *strings.Builder, stats []burstStats) {
	var rows []burstStats
	for _, s := range stats {
		if len(s.ProcessCPU) > 0 {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("### CPU-seconds by process\n\n")
	p("Each process's utime+stime (`/proc/<pid>/stat`, every thread) from the Deployment's creation to the last pod Ready, p50 over the trials; " +
		"per cluster the total first, then its processes, most first.\n\n")
	p("| N | placement | mode | %s | %s |\n| ---: | --- | --- | --- | --- |\n", consumerName, providerName)
	for _, s := range rows {
		cells := []string{}
		for _, c := range []string{consumerName, providerName} {
			type proc struct {
				name string
				v    float64
			}
			var procs []proc
			for k, v := range s.ProcessCPU {
				if cluster, name, _ := strings.Cut(k, "/"); cluster == c {
					procs = append(procs, proc{name, v.P50})
				}
			}
			sort.Slice(procs, func(i, j int) bool {
				if procs[i].v != procs[j].v {
					return procs[i].v > procs[j].v
				}
				return procs[i].name < procs[j].name
			})
			parts := make([]string, len(procs))
			for i, pr := range procs {
				parts[i] = fmt.Sprintf("%s %.2f", pr.name, pr.v)
			}
			total := "–"
			if v, ok := s.ClusterCPU[c]; ok {
				total = fmt.Sprintf("**%.2f**", v.P50)
			}
			if len(parts) > 0 {
				total += ": " + strings.Join(parts, ", ")
			}
			cells = append(cells, total)
		}
		p("| %d | %s | %s | %s | %s |\n", s.N, s.Placement, s.Mode, cells[0], cells[1])
	}
	p("\n")
}

// renderBurstStages renders, for the last trial of each N and mode, the
// delays between the stages of its pods.
func renderBurstStages(b *strings.Builder, r *Results) {
	last := map[[3]any]BurstTrial{}
	var order [][3]any
	for _, t := range r.Bursts {
		if t.Error != "" || len(t.Stages) == 0 {
			continue
		}
		k := burstKey(t)
		if _, ok := last[k]; !ok {
			order = append(order, k)
		}
		last[k] = t
	}
	if len(order) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("### Where a pod's time goes\n\n")
	p("For the last trial of each N, placement and mode: the delay between consecutive stages of each pod, from the stage timestamps of the API servers' audit logs " +
		"(start = the Deployment's creation; bound = the scheduler's binding; offloaded: shadowpod = the ShadowPod created on the provider, remote pod = " +
		"its pod created, remote bound, remote running = kwok's status write, ready = the last status write " +
		"of the consumer's pod; direct: running = kwok's status write). p50 and p99 over the pods; *first* is the pod that reached the last stage first.\n\n")
	p("| N | placement | mode | stage | p50 s | p99 s | first pod s |\n| ---: | --- | --- | --- | ---: | ---: | ---: |\n")
	for _, k := range order {
		t := last[k]
		for _, d := range t.Stages {
			p("| %d | %s | %s | %s → %s | %.2f | %.2f | %.2f |\n", t.N, placementOf(t), t.Mode, d.From, d.To, d.P50, d.P99, d.First)
		}
	}
	p("\n")
}

// renderBurstWrites renders the writes per pod of the offloaded bursts:
// Annex's by cluster, writer, verb and resource, the other writers' total
// next to the direct bursts', and the agents' CPU per pod.
func renderBurstWrites(b *strings.Builder, r *Results) {
	type key struct {
		n               int
		placement, mode string
	}
	type agg struct {
		trials int
		pods   int
		writes map[WriteCount]int
		cpu    map[string]float64
	}
	var order []key
	aggs := map[key]*agg{}
	for _, t := range r.Bursts {
		if t.Error != "" || len(t.Writes) == 0 {
			continue
		}
		k := key{t.N, placementOf(t), t.Mode}
		a, ok := aggs[k]
		if !ok {
			a = &agg{writes: map[WriteCount]int{}, cpu: map[string]float64{}}
			aggs[k] = a
			order = append(order, k)
		}
		a.trials++
		a.pods += t.N
		for _, w := range t.Writes {
			c := w.Count
			w.Count = 0
			a.writes[w] += c
		}
		for name, v := range t.AgentCPUSeconds {
			a.cpu[name] += v
		}
	}
	if len(order) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("### API writes per pod\n\n")
	p("Every write request (create, update, patch, delete) both API servers answered from the Deployment's creation until %s after its last pod was Ready, "+
		"to objects in the trial's namespaces (offloaded: `%s` on %s and its remote namespace `%s` on %s; direct: `%s`), from the API servers' audit logs "+
		"(level Metadata, writes only); per pod, over all trials of that N, placement and mode. A writer is the request's user-agent program and user; "+
		"Annex's are the agents' ServiceAccount and, on the provider, the consumer's tenant ServiceAccount. Failed requests (HTTP code) are listed apart. "+
		"Agent CPU is each agent process's utime+stime over the same interval.\n\n",
		writesSettle, offloadNS, consumerName, remoteNS(offloadNS), providerName, directNS)
	p("| N | placement | mode | Annex writes / pod | by cluster, verb and resource | other writers / pod | agent CPU ms / pod |\n")
	p("| ---: | --- | --- | ---: | --- | ---: | --- |\n")
	for _, k := range order {
		a := aggs[k]
		var ws []WriteCount
		annex, other := 0, 0
		for w, c := range a.writes {
			w.Count = c
			ws = append(ws, w)
			if w.Annex() {
				annex += c
			} else {
				other += c
			}
		}
		sortWrites(ws)
		var cpu []string
		for _, name := range []string{consumerName, providerName} {
			if v, ok := a.cpu[name]; ok {
				cpu = append(cpu, fmt.Sprintf("%s %.2f", name, 1000*v/float64(a.pods)))
			}
		}
		p("| %d | %s | %s | %.2f | %s | %.2f | %s |\n", k.n, k.placement, k.mode, float64(annex)/float64(a.pods), orDash(cell(writesLine(ws, a.pods))),
			float64(other)/float64(a.pods), orDash(strings.Join(cpu, ", ")))
	}
	p("\n")
}

func renderStreams(b *strings.Builder, r *Results) {
	if len(r.Streams) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Pod startup under a steady stream\n\n")
	p("SIG Scalability's pod startup SLO (stateless pods, image present: kwok runs no containers): bare pods with the burst's pod template are created "+
		"at a steady rate, each create call in a goroutine of its own at its slot (start + i/rate, fixed in advance, so a slow call holds back no other), "+
		"first directly in `%s` of the provider, then in `%s` of the consumer (offloaded through the virtual node `annex-%s`). Startup latency is from the "+
		"create call to the watch event showing the pod Running with every container running: offloaded, the consumer's pod as the virtual node reports it; "+
		"direct, the provider's pod. The same from the pod's creationTimestamp (whole seconds, so up to 1 s longer) is given for comparison with other "+
		"measurements of the SLO. Each pod is deleted %s after it was seen started; pods not started %s after the last create count as not started. "+
		"A stream stops creating pods early once more than 1 %% of its planned pods are not started %.0f s after their create call: its p99 is then "+
		"above %.0f s whatever follows, and its backlog would only delay the phases after it. "+
		"Shared placement only (every process on every CPU). Seconds; percentiles nearest-rank over the pods.\n\n",
		directNS, offloadNS, providerName, streamLinger, streamWait, targetStartupP99, targetStartupP99)
	p("| mode | pods created | asked /s | achieved /s | late creates | started | not started | p50 | p90 | p99 | max | p50 from creationTimestamp | p99 from creationTimestamp | most pods at once |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range r.Streams {
		p("| %s |\n", strings.Join(streamRow(s), " | "))
	}
	p("\n")
	for _, s := range r.Streams {
		if why := s.stopped(streamCount(s.Rate, time.Duration(r.Config.StreamDuration))); why != "" {
			p("The %s stream %s.\n\n", s.Mode, why)
		}
		if s.Error != "" {
			p("The %s stream reported: %s\n\n", s.Mode, cell(s.Error))
		}
	}
	for _, s := range r.Streams {
		if s.CPUSeconds > 0 {
			p("While the %s stream sent its create calls (%.0f s), the machine's CPUs were %.0f %% busy (%.1f CPU-seconds); CPU-seconds by process: %s.\n\n",
				s.Mode, s.DurationSeconds, 100*s.CPUBusy, s.CPUSeconds, processCPULine(s.ProcessCPUSeconds))
		}
	}
	var qrows []queueRow
	for _, s := range r.Streams {
		if len(s.Queues) > 0 {
			qrows = append(qrows, queueRow{s.Mode + " stream", s.Queues, s.Created})
		}
	}
	renderQueueTable(b, "Work queues while each stream sent its create calls. "+queueTableIntro, qrows)
	var rows []stageRow
	for _, s := range r.Streams {
		rows = append(rows, stageRow{s.Mode, s.Stages})
	}
	renderStageTable(b, "Where a stream's pod spends its time (p50, p99 and max over the pods, from the stage timestamps of the API servers' audit logs; "+
		"created = the create call's record, then as in *Where a pod's time goes*, the first write of each kind; running = kwok's status write (direct) "+
		"or the consumer's agent's (offloaded)):", rows)
}

// streamRow is the cells of one row of the stream table.
func streamRow(s StreamRun) []string {
	lat := func(v float64) string {
		if s.Started == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", v)
	}
	return []string{s.Mode, fmt.Sprint(s.Created), fmt.Sprintf("%.0f", s.Rate), fmt.Sprintf("%.2f", s.AchievedRate), fmt.Sprint(s.LateCreates),
		fmt.Sprint(s.Started), fmt.Sprint(s.NotStarted), lat(s.Startup.P50), lat(s.Startup.P90), lat(s.Startup.P99), lat(s.Startup.Max),
		lat(s.StartupFromCreation.P50), lat(s.StartupFromCreation.P99), fmt.Sprint(s.MaxAlive)}
}

type stageRow struct {
	label  string
	stages []StageDelay
}

// renderStageTable renders stage delays under an introduction.
func renderStageTable(b *strings.Builder, intro string, rows []stageRow) {
	n := 0
	for _, r := range rows {
		n += len(r.stages)
	}
	if n == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("%s\n\n| mode | stage | pods | p50 s | p99 s | max s |\n| --- | --- | ---: | ---: | ---: | ---: |\n", intro)
	for _, r := range rows {
		for _, d := range r.stages {
			p("| %s | %s → %s | %d | %.2f | %.2f | %.2f |\n", r.label, d.From, d.To, d.Pods, d.P50, d.P99, d.Max)
		}
	}
	p("\n")
}

func renderFresh(b *strings.Builder, r *Results) {
	stats := summarizeFresh(r.Fresh)
	if len(stats) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Burst into a fresh namespace\n\n")
	p("**Offloaded**: a new namespace is created on the consumer and its offload requested (a NamespaceOffloading, strategy Remote, as `annexctl offload "+
		"namespace` writes it, without waiting); %s after that request a Deployment of %d pods (the burst's) is created in it and timed from its create call "+
		"to its first and its last pod seen Ready on the virtual node through a watch of the consumer. **Direct**: a new namespace on the provider, the same "+
		"Deployment %s after its creation. Trials: %d per mode, interleaved; a trial whose pods are not all Ready within %s fails (where its pods were is "+
		"listed below). The offload's progress is polled every %s from the request: the namespace labelled for the admission policy, its remote namespace "+
		"on the provider, the namespace annotated with the provider (only pods admitted from then on may go to the virtual node). After each trial the "+
		"Deployment is deleted, the namespace unoffloaded and deleted, and the benchmark waits until it is gone on both clusters. Seconds, p50 over the "+
		"trials that did not fail.\n\n", freshDelay, r.Config.FreshPods, freshDelay, r.Config.FreshTrials, freshTimeout, freshPoll)
	p("| mode | trials | first Ready p50 | all Ready p50 | all Ready max | labelled p50 | remote namespace p50 | annotated p50 |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range stats {
		p("| %s |\n", strings.Join(freshRow(s), " | "))
	}
	p("\n")
	for _, t := range r.Fresh {
		if t.Error != "" {
			p("- Trial %d %s failed: %s", t.Trial, t.Mode, cell(t.Error))
			if len(t.PodStates) > 0 {
				p(" Pods: %s.", cell(podStatesLine(t.PodStates)))
			}
			p("\n")
		}
	}
	if slices.ContainsFunc(r.Fresh, func(t FreshTrial) bool { return t.Error != "" }) {
		p("\n")
	}
	last := map[string]FreshTrial{}
	for _, t := range r.Fresh {
		if len(t.Stages) > 0 {
			last[t.Mode] = t
		}
	}
	var rows []stageRow
	for _, m := range []string{modeOffloaded, modeDirect} {
		if t, ok := last[m]; ok {
			rows = append(rows, stageRow{fmt.Sprintf("%s (trial %d)", m, t.Trial), t.Stages})
		}
	}
	renderStageTable(b, "Where the pods' time went in the last trial of each mode (as in *Where a pod's time goes*; start = the Deployment's creation):", rows)
}

// freshRow is the cells of one row of the fresh table.
func freshRow(s freshStats) []string {
	f := func(x Summary, v float64) string {
		if x.N == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", v)
	}
	trials := fmt.Sprint(s.Trials)
	if s.Failed > 0 {
		trials += fmt.Sprintf(" (%d failed)", s.Failed)
	}
	return []string{s.Mode, trials, f(s.FirstReady, s.FirstReady.P50), f(s.AllReady, s.AllReady.P50), f(s.AllReady, s.AllReady.Max),
		f(s.Labelled, s.Labelled.P50), f(s.RemoteNamespace, s.RemoteNamespace.P50), f(s.OffloadReady, s.OffloadReady.P50)}
}

func renderFailures(b *strings.Builder, r *Results) {
	stats := summarizeFailures(r.Failures)
	if len(stats) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Failure reaction\n\n")
	p("A Service on the consumer selects %d offloaded pods, all on the provider. Each trial waits until all %d endpoints are ready and 3 s more, then "+
		"**dead**: kills the provider's API server (SIGKILL; connections refused) or **hung**: stops it (SIGSTOP; connections hang). "+
		"Detection is from the signal to the consumer's EndpointSlices of the Service having no ready endpoint left (as seen through a watch). "+
		"The provider is then resumed at once (dead: the API server restarted with the same flags; hung: SIGCONT). Recovery is until every "+
		"endpoint is ready again, from the resume, and from the provider's API server answering /readyz again (polled every 50 ms). "+
		"Dead and hung alternate. Seconds; p99 is nearest-rank (the max with fewer than 100 trials).", r.Config.FailurePods, r.Config.FailurePods)
	if pp := r.Environment.PeerProbe; pp.Interval > 0 {
		p(" The agents probe their peers every %s (timeout %s); %d failures in a row make a provider unreachable, %d successes reachable again.",
			pp.Interval, pp.Timeout, pp.FailureThreshold, pp.SuccessThreshold)
	}
	p("\n\n")
	p("| fault | trials | detection p50 | p99 | max | recovery from resume p50 | p99 | max | API server back after (p50) | recovery from API server back p50 | p99 | max |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range stats {
		trials := fmt.Sprint(s.Trials)
		if s.Failed > 0 {
			trials += fmt.Sprintf(" (%d failed)", s.Failed)
		}
		p("| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", s.Fault, trials,
			s.Detection.P50, s.Detection.P99, s.Detection.Max, s.Recovery.P50, s.Recovery.P99, s.Recovery.Max,
			s.APIServer.P50, s.RecoveryAfterAPI.P50, s.RecoveryAfterAPI.P99, s.RecoveryAfterAPI.Max)
	}
	p("\n")
}

func renderFailovers(b *strings.Builder, r *Results) {
	stats := summarizeFailovers(r.Failovers)
	if len(stats) == 0 {
		return
	}
	t0 := r.Failovers[0]
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Failover\n\n")
	p("Namespace `%s` of the consumer is offloaded with pod strategy LocalAndRemote and failover (fenceAfterSeconds F = %d, releaseAfterSeconds T = %d; "+
		"the consumer's agent renews its heartbeat every 2 s for this phase, `%s`). Each trial creates a StatefulSet of %d members (podManagementPolicy Parallel, "+
		"the bursts' pod template) with the consumer's own node cordoned, so that every member runs on %s, uncordons that node, waits %s and then "+
		"**killed**: kills %s's API server (SIGKILL) or **partitioned**: cuts the proxy (`internal/partition`) that is the consumer's only way to %s "+
		"(its ForeignCluster's spec.apiServerURL, the agent restarted so that no earlier connection goes around it; %s's agent never calls the consumer, "+
		"so its only news of it, the heartbeat, is cut too). Failover is from the fault to the last member seen Ready on the consumer's node (a watch of "+
		"the consumer's pods); released is until the first replacement appeared; the heartbeat's age at the fault is how old the consumer's Lease on %s was "+
		"(the release falls T after the last heartbeat sent). Partitioned: fenced is until the last sample in which %s listed a member Running and not being "+
		"deleted, stopped until the last in which it listed one Running. Killed: once every member ran elsewhere the API server is "+
		"restarted; stale is from its first answer until the last sample in which it listed one of its old members Running and not being deleted, and until "+
		"none was listed Running. Who stopped them: *Fenced Event* counts the trials in which the provider's agent recorded its Fenced Event (it fenced them "+
		"itself); otherwise the consumer's agent, reaching the provider again, deleted the orphaned ShadowPods and the provider's garbage collector their pods, "+
		"with the pods' own grace period. Overlaps: every %s, %s's pods in `%s` and the consumer's pods on its own node are listed, "+
		"from the StatefulSet's creation to its deletion; an overlap is a sample in which one member was Running (also while being deleted) in both. A "+
		"provider that does not answer runs nothing; the killed provider's stale copies after its restart are counted apart (samples with stale copies), "+
		"not as overlaps. After each trial %s is brought back (restarted, or healed and reached directly again) and the StatefulSet deleted. "+
		"Seconds, p50 over the trials that did not fail.\n\n",
		failoverNS, t0.FenceAfterSeconds, t0.ReleaseAfterSeconds, strings.Join(failoverConsumerArgs, " "), t0.Members, providerName, failoverQuiet,
		providerName, providerName, providerName, providerName, providerName, failoverSample, providerName, remoteNS(failoverNS), providerName)
	p("| fault | trials | failover p50 | failover max | released p50 | heartbeat age at the fault p50 | fenced on %s p50 | stopped on %s p50 | API server back after restart p50 | stale until being deleted p50 | stale until gone p50 | Fenced Event | samples | samples with stale copies | overlaps |\n",
		providerName, providerName)
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	f := func(x Summary, v float64) string {
		if x.N == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", v)
	}
	for _, s := range stats {
		trials := fmt.Sprint(s.Trials)
		if s.Failed > 0 {
			trials += fmt.Sprintf(" (%d failed)", s.Failed)
		}
		stale := "–"
		if s.Fault == faultKilled {
			stale = fmt.Sprint(s.StaleSamples)
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d of %d | %d | %s | %d |\n", s.Fault, trials, f(s.Failover, s.Failover.P50), f(s.Failover, s.Failover.Max),
			f(s.Released, s.Released.P50), f(s.HeartbeatAge, s.HeartbeatAge.P50), f(s.Fenced, s.Fenced.P50), f(s.Stopped, s.Stopped.P50),
			f(s.APIServerBack, s.APIServerBack.P50), f(s.StaleFenced, s.StaleFenced.P50), f(s.StaleRunning, s.StaleRunning.P50), s.ProviderFenced, s.Failover.N,
			s.Samples, stale, s.Overlaps)
	}
	p("\n")
	listed := false
	for _, t := range r.Failovers {
		if t.Error != "" {
			p("- Trial %d %s failed: %s\n", t.Trial, t.Fault, cell(t.Error))
			listed = true
		}
		if t.FirstOverlap != "" {
			p("- Trial %d %s: first overlap: %s\n", t.Trial, t.Fault, cell(t.FirstOverlap))
			listed = true
		}
	}
	if listed {
		p("\n")
	}
}

func renderUnpeers(b *strings.Builder, r *Results) {
	stats := summarizeUnpeers(r.Unpeers)
	if len(stats) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Forced unpeer\n\n")
	p("N pods are offloaded (a Deployment in a namespace of its own), the provider's API server is killed (SIGKILL) and, once the consumer's "+
		"ForeignCluster says the provider is unreachable, `annexctl unpeer --kubeconfig <consumer> %s --force` runs (default flags). Timed: the command, "+
		"and from its start until nothing of the peering is left on the consumer (Node, VirtualNode, ResourceSlices, RemoteNamespaces, "+
		"NetworkConfiguration, tenant namespace, ForeignCluster, pods bound to the virtual node; checked every 100 ms); "+
		"what is still there %s after the command returned counts as left behind, and \"nothing left\" is then when the last thing that did go went. "+
		"For this phase the agents "+
		"run with %s and the provider's also with %s, so that between trials the restarted "+
		"provider removes the orphaned tenant by itself within seconds and the clusters can peer again. Seconds.\n\n",
		providerName, leftoverGrace, "`"+strings.Join(unpeerConsumerArgs, " ")+"`", "`"+unpeerProviderArgs[len(unpeerProviderArgs)-1]+"`")
	p("| N | trials | command p50 | command max | nothing left p50 | nothing left max | left behind | unreachable after the kill (p50) |\n")
	p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range stats {
		trials := fmt.Sprint(s.Trials)
		if s.Failed > 0 {
			trials += fmt.Sprintf(" (%d failed)", s.Failed)
		}
		if s.Command.N == 0 {
			p("| %d | %s | – | – | – | – | – | – |\n", s.N, trials)
			continue
		}
		p("| %d | %s | %.2f | %.2f | %.2f | %.2f | %d of %d | %.2f |\n", s.N, trials, s.Command.P50, s.Command.Max, s.Clean.P50, s.Clean.Max, s.LeftBehind, s.Command.N, s.Unreach.P50)
	}
	p("\n")
}

func renderWindows(b *strings.Builder, r *Results) {
	if len(r.Windows) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Footprint\n\n")
	p("Idle windows of %s each after %s of quiet: once right after peering (0 offloaded pods) and once with %d offloaded pods Ready. "+
		"RSS is VmRSS from /proc/<pid>/status (the largest of one sample per second; file-backed: its RssFile, mostly the executable's pages), CPU is utime+stime from /proc/<pid>/stat "+
		"(clock ticks of 1/100 s) used during the window. The Go columns come from the agent's metrics endpoint at the end of the window: "+
		"heap objects (`go_memstats_alloc_bytes`: live objects and garbage not yet collected) and free heap the runtime has not returned to the OS "+
		"(`go_memstats_heap_idle_bytes` − `go_memstats_heap_released_bytes`). The agents' heap grows during the bursts between the two windows "+
		"and is not all returned to the OS at once, so the per-pod difference is an upper bound.\n\n", r.Config.Window, r.Config.Settle, r.Config.FootprintPods)
	p("| agent | offloaded pods | RSS (MiB) | of it file-backed (MiB) | CPU in the window (s) | CPU (ms per s) | Go heap objects (MiB) | free heap not returned to the OS (MiB) | goroutines |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, w := range r.Windows {
		for _, a := range w.Agents {
			m := a.GoMemory
			file := "–"
			if a.RSSFileBytes > 0 {
				file = fmt.Sprintf("%.1f", mib(a.RSSFileBytes))
			}
			p("| %s (%s) | %d | %.1f | %s | %.2f | %.1f | %.1f | %.1f | %.0f |\n", a.Role, a.Cluster, w.OffloadedPods, mib(a.RSSMaxBytes), file, a.CPUSeconds,
				1000*a.CPUSeconds/w.WindowSeconds, m.HeapAllocBytes/(1<<20), (m.HeapIdleBytes-m.HeapReleasedBytes)/(1<<20), m.Goroutines)
		}
	}
	p("\n")
	if idle, busy := idleWindow(r), footprintWindow(r); idle != nil && busy != nil && busy.OffloadedPods > 0 {
		p("Per offloaded pod (difference between the two windows, divided by %d):\n\n", busy.OffloadedPods)
		p("| agent | RSS per pod (KiB) | CPU per pod (µs per s) |\n| --- | ---: | ---: |\n")
		for i := range busy.Agents {
			if i >= len(idle.Agents) {
				break
			}
			a, z := busy.Agents[i], idle.Agents[i]
			n := float64(busy.OffloadedPods)
			cpu := "≈ 0 (below the 10 ms tick)"
			if math.Abs(a.CPUSeconds-z.CPUSeconds) > 2.0/clockTicks {
				cpu = fmt.Sprintf("%.2f", 1e6*(a.CPUSeconds/busy.WindowSeconds-z.CPUSeconds/idle.WindowSeconds)/n)
			}
			p("| %s (%s) | %.1f | %s |\n", a.Role, a.Cluster, float64(a.RSSMaxBytes-z.RSSMaxBytes)/1024/n, cpu)
		}
		p("\n")
	}

	p("## Status churn\n\n")
	p("Writes the agents sent during the same idle windows: the increase of client-go's `rest_client_requests_total` on each agent's metrics " +
		"endpoint (every REST client of the process counts there, by API server host and method), POST, PUT, PATCH and DELETE counted. " +
		"The breakdown below comes from the other end: watches on every resource of both API servers during the window, each change attributed " +
		"to the manager of the object's most recent managedFields entry (the program name of the client's user agent; deletions carry none).\n\n")
	p("Liveness writes are the ones the watches show as an agent renewing a Lease that only says it is alive (its leader-election Lease, "+
		"a virtual node's Lease, the consumer's heartbeat Lease on the provider) or writing a virtual node's status in which only lastHeartbeatTime "+
		"moved; the target is about the others. The agents renew their leader-election Lease every %s, the virtual node's Lease is renewed every "+
		"10 s (a kubelet's cadence; the node lifecycle controller marks a node NotReady after 40 s without), the consumer's heartbeat Lease every 30 s "+
		"(the provider removes a tenant whose consumer stopped renewing it for 15 minutes), the virtual node's status every 5 minutes (a kubelet's "+
		"nodeStatusReportFrequency).\n\n", agent.LeaderRetryPeriod)
	p("| agent | offloaded pods | writes/s | liveness writes/s | writes/s excluding liveness | writes in the window | by API server and method |\n| --- | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, w := range r.Windows {
		for _, a := range w.Agents {
			var parts []string
			for _, rc := range a.Requests {
				if isWrite(rc.Method) {
					parts = append(parts, fmt.Sprintf("%s on %s: %.0f", rc.Method, rc.Server, rc.Count))
				}
			}
			p("| %s (%s) | %d | %.2f | %.2f | %.2f | %.0f | %s |\n", a.Role, a.Cluster, w.OffloadedPods, a.WritesPerSecond,
				a.LivenessWrites/max(w.WindowSeconds, 1), a.OtherWritesPerSecond(w.WindowSeconds), a.Writes, orDash(strings.Join(parts, ", ")))
		}
	}
	p("\n")
	if w := footprintWindow(r); w != nil {
		p("Liveness writes in the window with %d offloaded pods: %s.\n\n", w.OffloadedPods, annexChangeSummary(w.Changes, 8, liveness))
	}
	for _, w := range r.Windows {
		p("Object changes during the window with %d offloaded pods (%.0f s), Annex's first:\n\n", w.OffloadedPods, w.WindowSeconds)
		p("| cluster | resource | what it is | event | writer | changes | objects |\n| --- | --- | --- | --- | --- | ---: | --- |\n")
		rows := 0
		for _, annex := range []bool{true, false} {
			for _, c := range w.Changes {
				if annexChange(c) != annex || rows >= 25 {
					continue
				}
				rows++
				p("| %s | %s | %s | %s | %s | %d | %s |\n", c.Cluster, c.Resource, orDash(c.Meaning), strings.ToLower(c.Event), orDash(c.Writer), c.Count, cell(c.objectsText()))
			}
		}
		if rows == 0 {
			p("| – | | | | | 0 | |\n")
		}
		p("\n")
	}
}

func renderTunnel(b *strings.Builder, r *Results) {
	t := r.Tunnel
	if t == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Pod-to-pod tunnel\n\n")
	if t.NotMeasured != "" {
		p("Not measured: %s.\n\n", t.NotMeasured)
		return
	}
	p("Two pod network namespaces, each behind a router namespace running `annex-gateway` (its userspace WireGuard device, routes and "+
		"nftables address translation: both pods have 10.200.0.5, a reaches b as 100.64.0.5), the routers joined by a veth; the same "+
		"tunnel from pod a2 (10.200.0.6) on node a1, a namespace standing for a node of cluster a other than the gateway node, joined to "+
		"router a by a node network, with the fabric's routes and masquerade exemption (`internal/fabric`) and a CNI's masquerading "+
		"(pod b sees pod a2 as 100.65.0.6, checked); and the same two pods a and b joined directly by a plain veth. Measured first, "+
		"before the clusters start, from a client in pod a (or a2) to a server in pod b "+
		"(goroutines of the benchmark, sockets opened inside the namespaces): **TCP bulk**, one connection sending for %.0f s, MB/s "+
		"(10^6 bytes) as received; **round trip**, %d messages of %d bytes sent one after the other on one connection and echoed "+
		"(after %d untimed ones), in µs. Everything, the encryption included, runs on this machine's %d CPUs.\n\n",
		t.BulkSeconds, t.RoundTrips, t.MessageBytes, tunnelWarmup, r.Environment.CPUs)
	if t.GatewayRestarts > 0 {
		p("The tunnel carried no connection within %s of the gateways' start (the WireGuard handshake done, no packet through); "+
			"both were restarted before the measurement (%d×): see the run's log.\n\n", tunnelReady, t.GatewayRestarts)
	}
	p("| path | TCP bulk (MB/s) | round trip p50 (µs) | p99 (µs) | max (µs) |\n| --- | ---: | ---: | ---: | ---: |\n")
	names := map[string]string{pathTunnel: "Annex tunnel (annex-gateway, WireGuard)",
		pathFabric: "fabric: non-gateway node → gateway node, then the tunnel", pathVeth: "plain veth"}
	var tun, fab, veth *TunnelPath
	for i := range t.Paths {
		pa := &t.Paths[i]
		switch pa.Name {
		case pathTunnel:
			tun = pa
		case pathFabric:
			fab = pa
		case pathVeth:
			veth = pa
		}
		p("| %s | %.1f | %.0f | %.0f | %.0f |\n", orDash(names[pa.Name]), pa.MBPerSecond, pa.RTTMicroseconds.P50, pa.RTTMicroseconds.P99, pa.RTTMicroseconds.Max)
	}
	// The round trips' ratio with prec decimals: fabric / tunnel is close
	// to 1.
	ratio := func(name string, x, y *TunnelPath, prec int) {
		if x != nil && y != nil && y.MBPerSecond > 0 && y.RTTMicroseconds.P50 > 0 {
			p("| **%s** | **%.2f** | **%.*f** | %.*f | |\n", name, x.MBPerSecond/y.MBPerSecond,
				prec, x.RTTMicroseconds.P50/y.RTTMicroseconds.P50, prec, x.RTTMicroseconds.P99/max(y.RTTMicroseconds.P99, 1))
		}
	}
	ratio("tunnel / veth", tun, veth, 1)
	ratio("fabric / tunnel", fab, tun, 2)
	p("\n")
}

// hotspotFuncs are the functions cpuHotspots names: Annex's and
// virtual-kubelet's.
var hotspotFuncs = regexp.MustCompile(`(github\.com/annexhq/annex/|github\.com/virtual-kubelet/virtual-kubelet/)(\S+)$`)

// cpuHotspots summarizes the cumulative section of a CPU .top.txt: the CPU
// time sampled and the first functions of Annex or virtual-kubelet by
// cumulative share (closures left out).
func cpuHotspots(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	section, total := 0, ""
	var hot []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "# go tool pprof") {
			section++
			continue
		}
		if section != 2 {
			continue
		}
		if strings.HasPrefix(l, "Duration:") {
			total = strings.TrimPrefix(l, "Duration: ")
		}
		f := strings.Fields(l)
		if len(f) < 6 || len(hot) == 4 {
			continue
		}
		m := hotspotFuncs.FindStringSubmatch(strings.Join(f[5:], " "))
		if m == nil || regexp.MustCompile(`\.func\d+$`).MatchString(m[2]) || strings.HasPrefix(m[2], "internal/queue.") {
			continue
		}
		hot = append(hot, fmt.Sprintf("`%s` %s", strings.TrimSuffix(m[2], " (inline)"), f[4]))
	}
	if len(hot) == 0 {
		return ""
	}
	if m := regexp.MustCompile(`^(\S+), Total samples = (\S+) \(\s*([\d.]+)%\)`).FindStringSubmatch(total); m != nil {
		total = fmt.Sprintf("%s of CPU in %s (%s%% of one core)", m[2], m[1], m[3])
	}
	return fmt.Sprintf("%s; most of it in (cumulative) %s.", total, strings.Join(hot, ", "))
}

// kindOrder puts the profiles that usually explain most first.
var kindOrder = map[string]int{"cpu": 0, "heap": 1, "goroutine": 2}

// topExcerpt returns n lines of the cumulative section of a .top.txt file
// (see saveProfile).
func topExcerpt(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error() + "\n"
	}
	const want = 2 // the cumulative section
	section := 0
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "# go tool pprof") {
			section++
			continue
		}
		if section != want || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") ||
			strings.HasPrefix(l, "Active filters:") || strings.HasPrefix(strings.TrimSpace(l), "hide=") || (len(out) == 0 && strings.TrimSpace(l) == "") {
			continue
		}
		out = append(out, l)
		if len(out) == n {
			break
		}
	}
	return strings.Join(out, "\n") + "\n"
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ")
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
