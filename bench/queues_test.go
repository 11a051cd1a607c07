package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// queueText is an agent's metrics endpoint with one queue, as
// controller-runtime writes it (bounds as Go prints 10^-5 and 10^-4).
func queueText(adds, retries, waits, waitSum, le1, le10, works, workSum float64) string {
	var b strings.Builder
	w := func(format string, args ...any) {
		b.WriteString(strings.TrimSpace(fmt.Sprintf(format, args...)) + "\n")
	}
	w(`workqueue_adds_total{controller="pod-remote-n",name="pod-remote-n"} %g`, adds)
	w(`workqueue_retries_total{controller="pod-remote-n",name="pod-remote-n"} %g`, retries)
	w(`workqueue_depth{controller="pod-remote-n",name="pod-remote-n",priority="0"} 7`)
	w(`workqueue_queue_duration_seconds_bucket{controller="pod-remote-n",name="pod-remote-n",le="9.999999999999999e-05"} 0`)
	w(`workqueue_queue_duration_seconds_bucket{controller="pod-remote-n",name="pod-remote-n",le="1"} %g`, le1)
	w(`workqueue_queue_duration_seconds_bucket{controller="pod-remote-n",name="pod-remote-n",le="10"} %g`, le10)
	w(`workqueue_queue_duration_seconds_bucket{controller="pod-remote-n",name="pod-remote-n",le="+Inf"} %g`, waits)
	w(`workqueue_queue_duration_seconds_sum{controller="pod-remote-n",name="pod-remote-n"} %g`, waitSum)
	w(`workqueue_queue_duration_seconds_count{controller="pod-remote-n",name="pod-remote-n"} %g`, waits)
	w(`workqueue_work_duration_seconds_sum{controller="pod-remote-n",name="pod-remote-n"} %g`, workSum)
	w(`workqueue_work_duration_seconds_count{controller="pod-remote-n",name="pod-remote-n"} %g`, works)
	w(`workqueue_adds_total{controller="idle",name="idle"} 3`)
	return b.String()
}

func mark(t *testing.T, at time.Time, text string) queueMark {
	t.Helper()
	samples, err := parseMetrics(strings.NewReader(text), queueMetrics...)
	if err != nil {
		t.Fatal(err)
	}
	m := queueMark{at: at, counters: map[string]QueueStats{}}
	queueCounters("alpha", samples, m.counters)
	return m
}

func TestQueueDelta(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC)
	from := mark(t, t0, queueText(10, 0, 10, 0.5, 10, 10, 10, 1))
	to := mark(t, t0.Add(20*time.Second), queueText(1010, 4, 1010, 400.5, 610, 1000, 1005, 301))
	got := queueDelta(from, to)
	want := map[string]QueueStats{
		"alpha/pod-remote-n": {Seconds: 20, Adds: 1000, Retries: 4, Waits: 1000, WaitSeconds: 400, WaitsOver1s: 400, WaitsOver10s: 10,
			Works: 995, WorkSeconds: 300},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("queueDelta (-want +got):\n%s", diff)
	}
	q := got["alpha/pod-remote-n"]
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"MeanWait", q.MeanWait(), 0.4},
		{"MeanDepth", q.MeanDepth(), 20},
		{"BusyWorkers", q.BusyWorkers(), 15},
		{"MeanWork", q.MeanWork(), 300.0 / 995},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	// An agent that restarted in between (counters back to less) and
	// a queue that did nothing are left out.
	if got := queueDelta(to, from); got != nil {
		t.Errorf("counters that went back: got %+v, want nil", got)
	}
}

func TestRenderQueueTable(t *testing.T) {
	qs := map[string]QueueStats{
		"alpha/pod-remote-n": {Seconds: 20, Adds: 1000, Waits: 1000, WaitSeconds: 400, WaitsOver1s: 400, Works: 1000, WorkSeconds: 300},
		"beta/shadowpod":     {Seconds: 20, Adds: 3000, Waits: 3000, WaitSeconds: 3, Works: 3000, WorkSeconds: 60},
		"alpha/heartbeat":    {Seconds: 20, Adds: 2, Waits: 2, Works: 2, WorkSeconds: 0.01},
	}
	var b strings.Builder
	renderQueueTable(&b, "Intro.", []queueRow{{"N=1000 pinned", qs, 1000}})
	got := b.String()
	for _, want := range []string{
		"| N=1000 pinned | alpha/pod-remote-n | 1.00 | 0.00 | 0.400 | 40.0% | 0.0% | 20.0 | 300.0 | 15.0 |",
		"| N=1000 pinned | beta/shadowpod | 3.00 | 0.00 | 0.001 | 0.0% | 0.0% | 0.1 | 20.0 | 3.0 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "heartbeat") || strings.Index(got, "pod-remote") > strings.Index(got, "shadowpod") {
		t.Errorf("want only the busy queues, the longest wait first:\n%s", got)
	}
	if got := queuesShort(qs, 1000); !strings.HasPrefix(got, "alpha/pod-remote-n mean wait 0.40 s (40% over 1 s), 20.0 waiting and 15.0 workers busy on average; beta/shadowpod") {
		t.Errorf("queuesShort = %q", got)
	}
	b.Reset()
	renderQueueTable(&b, "Intro.", []queueRow{{"idle", map[string]QueueStats{"alpha/heartbeat": qs["alpha/heartbeat"]}, 1000}})
	if b.Len() != 0 {
		t.Errorf("no busy queue: want nothing, got %q", b.String())
	}
}
