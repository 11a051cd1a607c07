package main

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStatusKB(t *testing.T) {
	status := []byte("Name:\tannex-agent\nVmPeak:\t 2000 kB\nVmRSS:\t   51200 kB\nRssAnon:\t   40960 kB\nRssFile:\t   10240 kB\nThreads:\t12\n")
	for field, want := range map[string]int64{"VmRSS": 51200 * 1024, "RssFile": 10240 * 1024} {
		if got, err := statusKB(status, field); err != nil || got != want {
			t.Errorf("statusKB(%s) = %d, %v; want %d", field, got, err, want)
		}
	}
	if _, err := statusKB([]byte("Name:\tx\n"), "VmRSS"); err == nil {
		t.Error("statusKB without a VmRSS line: want an error")
	}
}

func TestParseCPUTicks(t *testing.T) {
	// A command name with a space and a parenthesis; utime 250, stime 50.
	stat := []byte("4242 (annex agent)) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 50 0 0 20 0 12 0 100 0 0")
	got, err := parseCPUTicks(stat)
	if err != nil || got != 300 {
		t.Errorf("parseCPUTicks = %d, %v; want 300", got, err)
	}
	if _, err := parseCPUTicks([]byte("1 (x) S 1 2")); err == nil {
		t.Error("parseCPUTicks of a short line: want an error")
	}
}

func TestReadProcSelf(t *testing.T) {
	s, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSSBytes <= 0 || s.CPUSeconds < 0 {
		t.Errorf("readProc(self) = %+v", s)
	}
}

func TestParseMachineCPU(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	m, err := parseMachineCPU([]byte("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n"))
	if err != nil || m.Busy != 150 || m.Total != 1000 {
		t.Errorf("parseMachineCPU = %+v, %v; want busy 150 of 1000", m, err)
	}
	secs, busy := cpuUse(MachineCPU{Busy: 100, Total: 1000}, MachineCPU{Busy: 400, Total: 1400})
	if secs != 3 || busy != 0.75 {
		t.Errorf("cpuUse = %v s, %v busy; want 3 s, 0.75", secs, busy)
	}
	if _, err := parseMachineCPU([]byte("intr 1 2 3\n")); err == nil {
		t.Error("parseMachineCPU without a cpu line: want an error")
	}
}

func TestPerCPUBusy(t *testing.T) {
	from, err := parseMachineCPU([]byte("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\ncpu1 50 0 25 400 25 0 0 0 0 0\nintr 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]CPUTicks{{Busy: 75, Total: 500}, {Busy: 75, Total: 500}}, from.CPUs); diff != "" {
		t.Errorf("per-CPU ticks (-want +got):\n%s", diff)
	}
	// cpu0 busy 90 of the next 100 ticks, cpu1 10 of 100.
	to, err := parseMachineCPU([]byte("cpu  200 0 50 900 50 0 0 0 0 0\ncpu0 140 0 25 410 25 0 0 0 0 0\ncpu1 60 0 25 490 25 0 0 0 0 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		from, to MachineCPU
		want     []float64
	}{
		{"two CPUs", from, to, []float64{0.9, 0.1}},
		{"no time passed", from, from, []float64{0, 0}},
		{"CPU lists differ", from, MachineCPU{CPUs: to.CPUs[:1]}, nil},
	} {
		if diff := cmp.Diff(tc.want, perCPUBusy(tc.from, tc.to)); diff != "" {
			t.Errorf("%s: perCPUBusy (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestCPUDelta(t *testing.T) {
	from := map[string]float64{"alpha/etcd": 1.0, "beta/kube-apiserver": 2.5, "beta/kwok": 9}
	to := map[string]float64{"alpha/etcd": 1.3, "beta/kube-apiserver": 4.0, "beta/kwok": 0.1, "beta/new": 1}
	// kwok restarted (less than before) and a new process: left out.
	want := map[string]float64{"alpha/etcd": 0.3, "beta/kube-apiserver": 1.5}
	if diff := cmp.Diff(want, cpuDelta(from, to)); diff != "" {
		t.Errorf("cpuDelta (-want +got):\n%s", diff)
	}
	if got := cpuDelta(nil, to); got != nil {
		t.Errorf("cpuDelta without a first reading = %v, want nil", got)
	}
}
