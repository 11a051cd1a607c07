package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is sysconf(_SC_CLK_TCK), the unit of utime and stime in
// /proc/<pid>/stat: 100 on Linux for every architecture Go supports.
const clockTicks = 100

// ProcSample is one reading of a process's memory and CPU time.
type ProcSample struct {
	At time.Time `json:"at"`
	// RSSBytes is VmRSS from /proc/<pid>/status; RSSFileBytes its
	// RssFile part (pages of the executable and other mapped files).
	RSSBytes     int64 `json:"rssBytes"`
	RSSFileBytes int64 `json:"rssFileBytes"`
	// CPUSeconds is utime+stime from /proc/<pid>/stat.
	CPUSeconds float64 `json:"cpuSeconds"`
}

// readProc samples process pid.
func readProc(pid int) (ProcSample, error) {
	s := ProcSample{At: time.Now()}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	if s.RSSBytes, err = statusKB(status, "VmRSS"); err != nil {
		return s, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	if s.RSSFileBytes, err = statusKB(status, "RssFile"); err != nil {
		return s, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	ticks, err := parseCPUTicks(stat)
	if err != nil {
		return s, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	s.CPUSeconds = float64(ticks) / clockTicks
	return s, nil
}

// statusKB returns a "<field>: <n> kB" line of /proc/<pid>/status in bytes.
func statusKB(status []byte, field string) (int64, error) {
	for line := range bytes.SplitSeq(status, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte(field+":"))
		if !ok {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected %s line %q", field, line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, err
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no %s line", field)
}

// parseCPUTicks returns utime+stime (fields 14 and 15) of /proc/<pid>/stat.
// The command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseCPUTicks(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no command name")
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state), so field k is f[k-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("only %d fields after the command name", len(f))
	}
	utime, err := strconv.ParseUint(f[14-3], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	stime, err := strconv.ParseUint(f[15-3], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return utime + stime, nil
}

// otherAPIServers counts the kube-apiserver processes on this machine whose
// command line does not mention dir (clusters of other people or runs).
func otherAPIServers(dir string) int {
	n := 0
	for _, pid := range procPIDs("/proc") {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "kube-apiserver" {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if dir != "" && bytes.Contains(cmdline, []byte(dir)) {
			continue
		}
		n++
	}
	return n
}

// procPIDs lists the processes in procRoot (/proc, or a copy in tests).
func procPIDs(procRoot string) []int {
	entries, _ := os.ReadDir(procRoot)
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// loadAverage is the first field of /proc/loadavg.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// MachineCPU is a reading of the cpu lines of /proc/stat: CPU time of the
// whole machine, every process of every cluster, the benchmark and the
// agents included.
type MachineCPU struct {
	At time.Time
	// Busy and Total are clock ticks summed over every CPU: Total counts
	// every state, Busy all but idle and iowait.
	Busy, Total uint64
	// CPUs are the same for each CPU (cpu0, cpu1, ...), by number.
	CPUs []CPUTicks
}

// CPUTicks are one CPU's clock ticks: busy and in all.
type CPUTicks struct {
	Busy, Total uint64
}

// readMachineCPU reads /proc/stat.
func readMachineCPU() (MachineCPU, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}, err
	}
	m, err := parseMachineCPU(data)
	m.At = time.Now()
	return m, err
}

// parseMachineCPU parses the "cpu" line of /proc/stat and the "cpuN" lines
// after it: user nice system idle iowait irq softirq steal (guest time is
// part of user already).
func parseMachineCPU(stat []byte) (MachineCPU, error) {
	var m MachineCPU
	for i, line := range bytes.Split(stat, []byte("\n")) {
		f := strings.Fields(string(line))
		if i == 0 && (len(f) == 0 || f[0] != "cpu") {
			return MachineCPU{}, fmt.Errorf("unexpected first line of /proc/stat %q", line)
		}
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			break // the cpu lines come first
		}
		t, err := parseCPUTicksLine(f)
		if err != nil {
			return MachineCPU{}, err
		}
		if i == 0 {
			m.Busy, m.Total = t.Busy, t.Total
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(f[0], "cpu"))
		if err != nil || n < 0 || n > 4095 {
			return MachineCPU{}, fmt.Errorf("/proc/stat: unexpected line %q", line)
		}
		for len(m.CPUs) <= n {
			m.CPUs = append(m.CPUs, CPUTicks{})
		}
		m.CPUs[n] = t
	}
	return m, nil
}

// parseCPUTicksLine adds up the fields of one cpu line of /proc/stat.
func parseCPUTicksLine(f []string) (CPUTicks, error) {
	if len(f) < 9 {
		return CPUTicks{}, fmt.Errorf("/proc/stat: %s has %d fields", f[0], len(f)-1)
	}
	var t CPUTicks
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return CPUTicks{}, fmt.Errorf("/proc/stat %s field %d: %w", f[0], i+1, err)
		}
		t.Total += v
		if i != 3 && i != 4 { // idle, iowait
			t.Busy += v
		}
	}
	return t, nil
}

// cpuUse is what the machine's CPUs did between two readings: the CPU
// seconds used (all CPUs together) and the share of the available time they
// were busy.
func cpuUse(from, to MachineCPU) (seconds, busy float64) {
	if to.Total <= from.Total {
		return 0, 0
	}
	b := float64(to.Busy - from.Busy)
	return b / clockTicks, b / float64(to.Total-from.Total)
}

// perCPUBusy is the share of the time between two readings each CPU was
// busy, by CPU number (nil when the readings do not list the same CPUs).
func perCPUBusy(from, to MachineCPU) []float64 {
	if len(from.CPUs) != len(to.CPUs) || len(to.CPUs) == 0 {
		return nil
	}
	out := make([]float64, len(to.CPUs))
	for i, t := range to.CPUs {
		f := from.CPUs[i]
		if t.Total > f.Total {
			out[i] = float64(t.Busy-f.Busy) / float64(t.Total-f.Total)
		}
	}
	return out
}

// procCPU reads the CPU-seconds of every process of procs, by
// "<cluster>/<name>" (a second process of the same name gets its PID
// added); processes that cannot be read are left out.
func procCPU(procs []clusterProc) map[string]float64 {
	out := map[string]float64{}
	for _, p := range procs {
		s, err := readProc(p.pid)
		if err != nil {
			continue
		}
		key := p.cluster + "/" + p.name
		if _, dup := out[key]; dup {
			key = fmt.Sprintf("%s/%s[%d]", p.cluster, p.name, p.pid)
		}
		out[key] = s.CPUSeconds
	}
	return out
}

// What a quiet machine is before a burst trial: its CPUs together at most
// quietBusy busy over quietFor, waited for at most quietMax. A trial that
// follows another's clean-up otherwise starts while kwok still works off
// the deletions of the last trial's pods (seen: the first offloaded pod's
// running status 5 s late, behind 1000 deletions of direct pods).
const (
	quietBusy = 0.30
	quietFor  = time.Second
	quietMax  = time.Minute
	// phaseQuietMax bounds the wait before a phase: a phase that overran
	// the machine (the stream, seen) can leave minutes of deletions behind,
	// which spoiled the next phases' numbers.
	phaseQuietMax = 5 * time.Minute
)

// waitQuiet waits until the machine's CPUs were at most busy busy over one
// interval of length every, or until limit passed (then it goes on: a machine
// that never quiets down is reported by the trials' CPU use). It returns
// how long it waited.
func waitQuiet(ctx context.Context, busy float64, every, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	prev, err := readMachineCPU()
	if err != nil {
		return 0, nil // no /proc/stat: nothing to wait for
	}
	for time.Since(start) < limit {
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(every):
		}
		cur, err := readMachineCPU()
		if err != nil {
			return time.Since(start), nil
		}
		if _, b := cpuUse(prev, cur); b <= busy {
			return time.Since(start), nil
		}
		prev = cur
	}
	return time.Since(start), nil
}
