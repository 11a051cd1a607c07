package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// QueueStats is what one work queue of an agent did over an interval (a
// burst trial, a stream), from the workqueue_* metrics controller-runtime
// serves on the agent's metrics endpoint: the virtual node's queues
// (pod-remote-<node>, pod-status-<node>) and every controller's
// (shadowpod on the provider). They say whether Annex's own queues were
// where the pods waited: a queue whose items wait while its workers are
// all busy is a bottleneck; one whose items are taken at once is not.
type QueueStats struct {
	// Seconds is the interval's length.
	Seconds float64 `json:"seconds"`
	// Adds is the increase of workqueue_adds_total, Retries that of
	// workqueue_retries_total (re-adds after a failed sync).
	Adds    float64 `json:"adds"`
	Retries float64 `json:"retries,omitempty"`
	// Waits is how many items a worker took (the count of
	// workqueue_queue_duration_seconds), WaitSeconds how long they had
	// waited in the queue, added up, and WaitsOver1s and WaitsOver10s how
	// many of them waited longer than that (its buckets).
	Waits        float64 `json:"waits"`
	WaitSeconds  float64 `json:"waitSeconds"`
	WaitsOver1s  float64 `json:"waitsOver1s,omitempty"`
	WaitsOver10s float64 `json:"waitsOver10s,omitempty"`
	// Works is how many items the workers finished (the count of
	// workqueue_work_duration_seconds), WorkSeconds how long the workers
	// spent on them, added up.
	Works       float64 `json:"works"`
	WorkSeconds float64 `json:"workSeconds"`
}

// MeanWait is how long an item waited for a worker, on average.
func (q QueueStats) MeanWait() float64 { return ratio(q.WaitSeconds, q.Waits) }

// MeanWork is how long a worker spent on an item, on average.
func (q QueueStats) MeanWork() float64 { return ratio(q.WorkSeconds, q.Works) }

// MeanDepth is about how many items waited in the queue at any time over
// the interval (Little's law: the waits added up over the interval's
// length).
func (q QueueStats) MeanDepth() float64 { return ratio(q.WaitSeconds, q.Seconds) }

// BusyWorkers is how many workers were busy at any time over the interval,
// on average: near the queue's worker count, every worker was busy all
// along.
func (q QueueStats) BusyWorkers() float64 { return ratio(q.WorkSeconds, q.Seconds) }

// plus is q + k·o, field by field: k = 1 adds o, k = -1 subtracts it.
func (q QueueStats) plus(o QueueStats, k float64) QueueStats {
	return QueueStats{
		Seconds: q.Seconds + k*o.Seconds, Adds: q.Adds + k*o.Adds, Retries: q.Retries + k*o.Retries,
		Waits: q.Waits + k*o.Waits, WaitSeconds: q.WaitSeconds + k*o.WaitSeconds,
		WaitsOver1s: q.WaitsOver1s + k*o.WaitsOver1s, WaitsOver10s: q.WaitsOver10s + k*o.WaitsOver10s,
		Works: q.Works + k*o.Works, WorkSeconds: q.WorkSeconds + k*o.WorkSeconds,
	}
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// queueMetrics are the metrics QueueStats is made of.
var queueMetrics = []string{
	"workqueue_adds_total", "workqueue_retries_total",
	"workqueue_queue_duration_seconds_count", "workqueue_queue_duration_seconds_sum", "workqueue_queue_duration_seconds_bucket",
	"workqueue_work_duration_seconds_count", "workqueue_work_duration_seconds_sum",
}

// queueCounters adds the queue metrics of one agent's samples to into, by
// "<cluster>/<queue name>", as running totals (Seconds left zero).
func queueCounters(cluster string, samples []sample, into map[string]QueueStats) {
	type bucket struct{ le, count float64 }
	buckets := map[string][]bucket{}
	for _, s := range samples {
		key := cluster + "/" + s.Labels["name"]
		q := into[key]
		switch s.Name {
		case "workqueue_adds_total":
			q.Adds += s.Value
		case "workqueue_retries_total":
			q.Retries += s.Value
		case "workqueue_queue_duration_seconds_count":
			q.Waits += s.Value
		case "workqueue_queue_duration_seconds_sum":
			q.WaitSeconds += s.Value
		case "workqueue_queue_duration_seconds_bucket":
			le, err := strconv.ParseFloat(s.Labels["le"], 64)
			if err == nil {
				buckets[key] = append(buckets[key], bucket{le, s.Value})
			}
		case "workqueue_work_duration_seconds_count":
			q.Works += s.Value
		case "workqueue_work_duration_seconds_sum":
			q.WorkSeconds += s.Value
		default:
			continue
		}
		into[key] = q
	}
	// The buckets are cumulative: the items that waited longer than a
	// bound are the count less the bucket at that bound.
	for key, bs := range buckets {
		q := into[key]
		for _, b := range bs {
			switch b.le {
			case 1:
				q.WaitsOver1s -= b.count
			case 10:
				q.WaitsOver10s -= b.count
			}
		}
		q.WaitsOver1s += q.Waits
		q.WaitsOver10s += q.Waits
		into[key] = q
	}
}

// queueMark is a reading of every agent's queue counters, the start of an
// interval queuesSince measures.
type queueMark struct {
	at       time.Time
	counters map[string]QueueStats
}

// markQueues reads every agent's queue counters; agents that cannot be
// scraped are left out.
func (e *env) markQueues(ctx context.Context) queueMark {
	m := queueMark{at: time.Now(), counters: map[string]QueueStats{}}
	for name, a := range e.agents {
		samples, err := scrape(ctx, a.MetricsAddr, queueMetrics...)
		if err != nil {
			continue
		}
		queueCounters(name, samples, m.counters)
	}
	return m
}

// queuesSince is what every queue did since m: nil when nothing was read.
func (e *env) queuesSince(ctx context.Context, m queueMark) map[string]QueueStats {
	return queueDelta(m, e.markQueues(ctx))
}

// queueDelta is what the queues read in both marks did between them; a
// queue that did nothing, or whose counters went back (its agent
// restarted), is left out.
func queueDelta(from, to queueMark) map[string]QueueStats {
	out := map[string]QueueStats{}
	secs := to.at.Sub(from.at).Seconds()
	for k, b := range to.counters {
		a, ok := from.counters[k]
		if !ok || b.Adds < a.Adds || b.Waits < a.Waits || b.Works < a.Works {
			continue
		}
		d := b.plus(a, -1)
		d.Seconds = secs
		if d.Adds > 0 || d.Works > 0 {
			out[k] = d
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// busyQueues are the queues of qs that handled at least one item for every
// ten pods, busiest (longest mean wait) first.
func busyQueues(qs map[string]QueueStats, pods int) []string {
	var keys []string
	for k, q := range qs {
		if pods > 0 && q.Adds*10 >= float64(pods) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(qs[b].MeanWait(), qs[a].MeanWait()); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return keys
}

// queuesShort is "alpha/pod-remote-annex-beta: mean wait 0.01 s, 0.2
// waiting, 3.1 workers busy; …" for the busy queues of qs.
func queuesShort(qs map[string]QueueStats, pods int) string {
	var parts []string
	for _, k := range busyQueues(qs, pods) {
		q := qs[k]
		parts = append(parts, fmt.Sprintf("%s mean wait %.2f s (%.0f%% over 1 s), %.1f waiting and %.1f workers busy on average",
			k, q.MeanWait(), 100*ratio(q.WaitsOver1s, q.Waits), q.MeanDepth(), q.BusyWorkers()))
	}
	return strings.Join(parts, "; ")
}

// addQueues adds qs to the running sums of sum.
func addQueues(sum map[string]QueueStats, qs map[string]QueueStats) {
	for k, q := range qs {
		sum[k] = sum[k].plus(q, 1)
	}
}

// renderQueueTable renders queue statistics of rows (label, queues, pods)
// under an introduction; nothing when no row has a busy queue.
func renderQueueTable(b *strings.Builder, intro string, rows []queueRow) {
	n := 0
	for _, r := range rows {
		n += len(busyQueues(r.queues, r.pods))
	}
	if n == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("%s\n\n", intro)
	p("| run | queue | adds / pod | retries / pod | mean wait s | waits over 1 s | over 10 s | mean waiting | mean work ms | workers busy |\n")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		for _, k := range busyQueues(r.queues, r.pods) {
			q := r.queues[k]
			pods := float64(r.pods)
			p("| %s | %s | %.2f | %.2f | %.3f | %.1f%% | %.1f%% | %.1f | %.1f | %.1f |\n", r.label, k,
				q.Adds/pods, q.Retries/pods, q.MeanWait(), 100*ratio(q.WaitsOver1s, q.Waits), 100*ratio(q.WaitsOver10s, q.Waits),
				q.MeanDepth(), 1000*q.MeanWork(), q.BusyWorkers())
		}
	}
	p("\n")
}

// queueRow is one run's queues in renderQueueTable.
type queueRow struct {
	label  string
	queues map[string]QueueStats
	pods   int
}

// queueTableIntro says what renderQueueTable's columns are.
const queueTableIntro = "From the agents' metrics endpoints (controller-runtime's `workqueue_*`), the queues that handled at least one item per ten pods, " +
	"the longest mean wait first: pod-remote-<node> and pod-status-<node> are the consumer's virtual node (16 workers each by default), " +
	"shadowpod the provider's ShadowPod controller (16 workers). A wait is from the item being due to a worker taking it; " +
	"mean waiting is the waits added up over the interval (about how many items waited at any time), workers busy the work time added up over it " +
	"(near the worker count: every worker was busy all along)."
