package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// IdleWindow is what the agents did while nothing happened: their memory and
// CPU time (footprint) and the writes they sent (status churn).
type IdleWindow struct {
	Name          string        `json:"name"`
	OffloadedPods int           `json:"offloadedPods"`
	WindowSeconds float64       `json:"windowSeconds"`
	Agents        []AgentWindow `json:"agents"`
	// Changes are the object changes the API servers reported during the
	// window, by resource and writer (every writer, not only Annex's).
	Changes      []ObjectChanges `json:"changes"`
	ChangeErrors []string        `json:"changeErrors,omitempty"`
}

// AgentWindow is one agent over an idle window.
type AgentWindow struct {
	Cluster string `json:"cluster"`
	Role    string `json:"role"`
	PID     int    `json:"pid"`
	// RSS from VmRSS at the start and end of the window, and the largest
	// of the samples taken every second.
	RSSStartBytes int64 `json:"rssStartBytes"`
	RSSEndBytes   int64 `json:"rssEndBytes"`
	RSSMaxBytes   int64 `json:"rssMaxBytes"`
	// RSSFileBytes is the RssFile part of the RSS at the end (the
	// executable's pages, not the Go heap).
	RSSFileBytes int64 `json:"rssFileBytes"`
	// CPUSeconds is utime+stime used during the window.
	CPUSeconds float64 `json:"cpuSeconds"`
	// Requests are rest_client_requests_total's increase over the window,
	// by API server and method.
	Requests []RequestCount `json:"requests"`
	// Writes is the sum of the requests with POST, PUT, PATCH or DELETE.
	Writes          float64 `json:"writes"`
	WritesPerSecond float64 `json:"writesPerSecond"`
	// LivenessWrites are the writes among them that the API servers'
	// watches show as this agent's liveness writes (see liveness): Lease
	// renewals and heartbeat-only node status writes.
	LivenessWrites float64 `json:"livenessWrites"`
	// GoMemory is the Go runtime's view at the end of the window (the
	// go_memstats_* gauges and go_goroutines of the metrics endpoint).
	GoMemory GoMemory `json:"goMemory"`
}

// GoMemory splits an agent's memory as the Go runtime sees it.
type GoMemory struct {
	// HeapAllocBytes are the heap objects allocated and not yet freed
	// (live, or garbage not yet collected).
	HeapAllocBytes float64 `json:"heapAllocBytes"`
	// HeapInuseBytes are the heap spans in use; HeapIdleBytes the spans
	// free, of which HeapReleasedBytes are returned to the OS.
	HeapInuseBytes    float64 `json:"heapInuseBytes"`
	HeapIdleBytes     float64 `json:"heapIdleBytes"`
	HeapReleasedBytes float64 `json:"heapReleasedBytes"`
	// SysBytes is everything the runtime obtained from the OS.
	SysBytes   float64 `json:"sysBytes"`
	Goroutines float64 `json:"goroutines"`
}

// goMemoryMetrics are the gauges GoMemory is read from.
var goMemoryMetrics = []string{"go_memstats_alloc_bytes", "go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes",
	"go_memstats_heap_released_bytes", "go_memstats_sys_bytes", "go_goroutines"}

func goMemory(samples []sample) GoMemory {
	var m GoMemory
	for _, s := range samples {
		switch s.Name {
		case "go_memstats_alloc_bytes":
			m.HeapAllocBytes = s.Value
		case "go_memstats_heap_inuse_bytes":
			m.HeapInuseBytes = s.Value
		case "go_memstats_heap_idle_bytes":
			m.HeapIdleBytes = s.Value
		case "go_memstats_heap_released_bytes":
			m.HeapReleasedBytes = s.Value
		case "go_memstats_sys_bytes":
			m.SysBytes = s.Value
		case "go_goroutines":
			m.Goroutines = s.Value
		}
	}
	return m
}

// RequestCount is the increase of one host and method's requests.
type RequestCount struct {
	Host   string  `json:"host"`
	Server string  `json:"server"` // which cluster's API server that is
	Method string  `json:"method"`
	Count  float64 `json:"count"`
}

// measureWindow waits cfg.Settle, then watches the agents and the API
// servers for cfg.Window.
func measureWindow(ctx context.Context, e *env, cfg Config, name string, pods int) (IdleWindow, error) {
	w := IdleWindow{Name: name, OffloadedPods: pods}
	e.log.printf("idle window %q: settling %s, then measuring %s", name, cfg.Settle, cfg.Window)
	select {
	case <-time.After(time.Duration(cfg.Settle)):
	case <-ctx.Done():
		return w, ctx.Err()
	}
	var watches []*changeWatch
	for _, k := range []*kube{e.consumer, e.provider} {
		cw, err := watchChanges(ctx, k)
		if err != nil {
			return w, fmt.Errorf("watch %s: %w", k.Name(), err)
		}
		watches = append(watches, cw)
	}
	agents := []*agentProc{e.agents[consumerName], e.agents[providerName]}
	roles := []string{"consumer", "provider"}
	start := make([]ProcSample, len(agents))
	before := make([]map[hostMethod]float64, len(agents))
	w.Agents = make([]AgentWindow, len(agents))
	for _, cw := range watches {
		cw.count()
	}
	for i, a := range agents {
		s, err := scrape(ctx, a.MetricsAddr, requestMetric)
		if err != nil {
			return w, fmt.Errorf("metrics of %s: %w", a.cluster.Name(), err)
		}
		before[i] = requestCounts(s)
		if start[i], err = readProc(a.PID); err != nil {
			return w, err
		}
		w.Agents[i] = AgentWindow{Cluster: a.cluster.Name(), Role: roles[i], PID: a.PID, RSSStartBytes: start[i].RSSBytes, RSSMaxBytes: start[i].RSSBytes}
	}
	t0 := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Since(t0) < time.Duration(cfg.Window) {
		select {
		case <-ctx.Done():
			return w, ctx.Err()
		case <-tick.C:
		}
		for i, a := range agents {
			if s, err := readProc(a.PID); err == nil {
				w.Agents[i].RSSMaxBytes = max(w.Agents[i].RSSMaxBytes, s.RSSBytes)
			}
		}
	}
	for i, a := range agents {
		end, err := readProc(a.PID)
		if err != nil {
			return w, err
		}
		s, err := scrape(ctx, a.MetricsAddr, append([]string{requestMetric}, goMemoryMetrics...)...)
		if err != nil {
			return w, fmt.Errorf("metrics of %s: %w", a.cluster.Name(), err)
		}
		secs := end.At.Sub(start[i].At).Seconds()
		aw := &w.Agents[i]
		aw.RSSEndBytes = end.RSSBytes
		aw.RSSFileBytes = end.RSSFileBytes
		aw.RSSMaxBytes = max(aw.RSSMaxBytes, end.RSSBytes)
		aw.CPUSeconds = end.CPUSeconds - start[i].CPUSeconds
		aw.Requests = requestDelta(before[i], requestCounts(s), e.serverOf)
		for _, r := range aw.Requests {
			if isWrite(r.Method) {
				aw.Writes += r.Count
			}
		}
		aw.WritesPerSecond = aw.Writes / secs
		aw.GoMemory = goMemory(s)
		w.WindowSeconds = secs
	}
	for _, cw := range watches {
		cw.hold()
	}
	for _, cw := range watches {
		ch, errs := cw.stop()
		w.Changes = append(w.Changes, ch...)
		w.ChangeErrors = append(w.ChangeErrors, errs...)
	}
	sortChanges(w.Changes)
	w.countLiveness()
	for _, a := range w.Agents {
		e.log.printf("idle window %q: %s agent RSS %.1f MiB, CPU %.2fs in %.0fs, %.0f writes (%.2f/s), %.0f of them liveness",
			name, a.Cluster, mib(a.RSSEndBytes), a.CPUSeconds, w.WindowSeconds, a.Writes, a.WritesPerSecond, a.LivenessWrites)
	}
	return w, nil
}

// countLiveness sets each agent's LivenessWrites from the window's changes.
func (w *IdleWindow) countLiveness() {
	for i := range w.Agents {
		w.Agents[i].LivenessWrites = 0
		for _, c := range w.Changes {
			if liveness(c) && writerCluster(c) == w.Agents[i].Cluster {
				w.Agents[i].LivenessWrites += float64(c.Count)
			}
		}
	}
}

// OtherWritesPerSecond are the agent's writes per second but its liveness
// writes (never below 0: a liveness write seen through a watch is one of
// the agent's requests).
func (a AgentWindow) OtherWritesPerSecond(windowSeconds float64) float64 {
	if windowSeconds <= 0 {
		return 0
	}
	return max(a.Writes-a.LivenessWrites, 0) / windowSeconds
}

// requestDelta is after − before for every host and method that changed.
func requestDelta(before, after map[hostMethod]float64, serverOf func(host string) string) []RequestCount {
	var out []RequestCount
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out = append(out, RequestCount{Host: k.Host, Server: serverOf(k.Host), Method: k.Method, Count: d})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Host != out[j].Host {
			return out[i].Host < out[j].Host
		}
		return out[i].Method < out[j].Method
	})
	return out
}

// serverOf names the cluster whose API server listens at host (host:port).
func (e *env) serverOf(host string) string {
	for _, k := range []*kube{e.consumer, e.provider} {
		if strings.TrimPrefix(k.APIServerURL(), "https://") == host {
			return k.Name()
		}
	}
	return "other"
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
