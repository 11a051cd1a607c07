package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexhq/annex/internal/localcluster"
)

// Placements of a burst trial: where the clusters' processes may run.
const (
	// placementShared leaves every process on every CPU (the scheduler
	// spreads both clusters over the machine).
	placementShared = "shared"
	// placementPinned runs every thread of the consumer's processes on one
	// CPU and every thread of the provider's on another: two one-CPU
	// machines, emulated.
	placementPinned = "pinned"
)

var allPlacements = []string{placementShared, placementPinned}

// placementOf is a trial's placement; trials of runs from before placements
// existed ran shared.
func placementOf(t BurstTrial) string {
	if t.Placement == "" {
		return placementShared
	}
	return t.Placement
}

// repinDelay is how long after a pinned trial's Deployment is created the
// affinity is set once more, for threads the processes started meanwhile
// (they inherit their creator's affinity, so this should change nothing).
const repinDelay = time.Second

// pinSettle is how long a pinned trial waits between pinning and creating
// its Deployment: Go programs (every process of the clusters) adjust
// GOMAXPROCS to a changed affinity once a second at most.
const pinSettle = 1500 * time.Millisecond

// PinCheck is what a pinned trial checked of its threads' affinity.
type PinCheck struct {
	// CPUs is the CPU list each cluster's processes were pinned to.
	CPUs map[string]string `json:"cpus"`
	// Pinned is the check right after pinning (a mismatch fails the trial),
	// Ready the one once every pod was Ready (after the processes ran the
	// burst's work, with the new threads it made them start).
	Pinned ThreadCheck `json:"pinned"`
	Ready  ThreadCheck `json:"ready"`
	// Repinned is how many threads the second setting, repinDelay after the
	// Deployment's creation, found (0: every pod was Ready before).
	Repinned int `json:"repinned,omitempty"`
}

// ThreadCheck is one reading of Cpus_allowed_list of every thread of the
// clusters' processes against the CPUs they were pinned to.
type ThreadCheck struct {
	Processes  int `json:"processes"`
	Threads    int `json:"threads"`
	Mismatches int `json:"mismatches"`
	// Examples name the first mismatched threads.
	Examples []string `json:"examples,omitempty"`
}

func (c ThreadCheck) String() string {
	s := fmt.Sprintf("%d threads of %d processes checked, %d mismatched", c.Threads, c.Processes, c.Mismatches)
	if len(c.Examples) > 0 {
		s += " (" + strings.Join(c.Examples, "; ") + ")"
	}
	return s
}

// maxExamples bounds ThreadCheck.Examples.
const maxExamples = 5

// clusterProc is one process of a cluster: a component, its agent, or a
// process one of those started.
type clusterProc struct {
	cluster string
	name    string
	pid     int
}

// clusterProcs lists the processes of every cluster: the components
// localcluster started (Status), the agent, and their descendants (found
// by their parent PID in /proc). Dead components are left out.
func (e *env) clusterProcs() []clusterProc {
	var roots []clusterProc
	for _, k := range []*kube{e.consumer, e.provider} {
		if k == nil {
			continue
		}
		for _, s := range k.Status() {
			if s.State != localcluster.Dead {
				roots = append(roots, clusterProc{cluster: k.Name(), name: s.Name, pid: s.PID})
			}
		}
		if a := e.agents[k.Name()]; a != nil && a.Running() {
			roots = append(roots, clusterProc{cluster: k.Name(), name: "annex-agent", pid: a.PID})
		}
	}
	return withDescendants("/proc", roots)
}

// withDescendants adds to procs every process below them (by PPid in
// procRoot/<pid>/stat), named by their comm and counted to their
// ancestor's cluster.
func withDescendants(procRoot string, procs []clusterProc) []clusterProc {
	type entry struct {
		ppid int
		comm string
	}
	all := map[int]entry{}
	for _, pid := range procPIDs(procRoot) {
		stat, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
		if err != nil {
			continue
		}
		comm, ppid, err := parseStatParent(stat)
		if err != nil {
			continue
		}
		all[pid] = entry{ppid: ppid, comm: comm}
	}
	out := slices.Clone(procs)
	known := map[int]int{} // pid → index in out
	for i, p := range out {
		known[p.pid] = i
	}
	pids := make([]int, 0, len(all))
	for pid := range all {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	for added := true; added; {
		added = false
		for _, pid := range pids {
			if _, ok := known[pid]; ok {
				continue
			}
			if i, ok := known[all[pid].ppid]; ok {
				out = append(out, clusterProc{cluster: out[i].cluster, name: all[pid].comm, pid: pid})
				known[pid] = len(out) - 1
				added = true
			}
		}
	}
	return out
}

// parseStatParent returns the command name (field 2) and the parent PID
// (field 4) of /proc/<pid>/stat.
func parseStatParent(stat []byte) (comm string, ppid int, err error) {
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", 0, errors.New("no command name")
	}
	f := strings.Fields(string(stat[end+1:]))
	if len(f) < 2 {
		return "", 0, errors.New("no parent PID")
	}
	ppid, err = strconv.Atoi(f[1])
	return string(stat[open+1 : end]), ppid, err
}

// parseCPUList parses a CPU list as the kernel writes it (Cpus_allowed_list,
// cpuset.cpus): "0-3,8,10-11". The result is sorted, without duplicates.
func parseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("empty CPU list")
	}
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("CPU list %q: bad CPU %q", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("CPU list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// formatCPUList writes cpus (sorted) as the kernel does: ranges of
// consecutive CPUs joined by commas.
func formatCPUList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// statusCPUList returns the Cpus_allowed_list of a /proc/<pid>/status (or
// task/<tid>/status).
func statusCPUList(status []byte) (string, error) {
	for line := range bytes.SplitSeq(status, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("Cpus_allowed_list:")); ok {
			return strings.TrimSpace(string(rest)), nil
		}
	}
	return "", errors.New("no Cpus_allowed_list line")
}

// procTIDs lists the threads of process pid (procRoot/<pid>/task).
func procTIDs(procRoot string, pid int) ([]int, error) {
	entries, err := os.ReadDir(filepath.Join(procRoot, strconv.Itoa(pid), "task"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}

// gone reports whether err says a process or thread exited (its /proc
// entry is gone, or the kernel no longer knows its ID).
func gone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// checkAffinity reads Cpus_allowed_list of every thread of procs under
// procRoot and compares it with the CPUs of the process's cluster in want.
// Threads (and processes) that exit while it reads are not counted.
func checkAffinity(procRoot string, procs []clusterProc, want map[string][]int) (ThreadCheck, error) {
	var c ThreadCheck
	for _, p := range procs {
		tids, err := procTIDs(procRoot, p.pid)
		if gone(err) {
			continue
		}
		if err != nil {
			return c, fmt.Errorf("%s/%s (pid %d): %w", p.cluster, p.name, p.pid, err)
		}
		wantList := formatCPUList(want[p.cluster])
		counted := false
		for _, tid := range tids {
			status, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(p.pid), "task", strconv.Itoa(tid), "status"))
			if gone(err) {
				continue
			}
			if err != nil {
				return c, err
			}
			got, err := statusCPUList(status)
			if err != nil {
				return c, fmt.Errorf("%s/%s (pid %d) thread %d: %w", p.cluster, p.name, p.pid, tid, err)
			}
			counted = true
			c.Threads++
			if cpus, err := parseCPUList(got); err != nil || !slices.Equal(cpus, want[p.cluster]) {
				c.Mismatches++
				if len(c.Examples) < maxExamples {
					c.Examples = append(c.Examples, fmt.Sprintf("%s/%s pid %d thread %d: Cpus_allowed_list %s, want %s", p.cluster, p.name, p.pid, tid, got, wantList))
				}
			}
		}
		if counted {
			c.Processes++
		}
	}
	return c, nil
}

// setAffinity sets the affinity of every thread of procs to the CPUs of
// its cluster in cpus (sched_setaffinity on each thread ID), and returns
// how many threads it set. Threads that exit meanwhile are skipped.
func setAffinity(procRoot string, procs []clusterProc, cpus map[string][]int) (int, error) {
	n := 0
	for _, p := range procs {
		list, ok := cpus[p.cluster]
		if !ok {
			continue
		}
		var set unix.CPUSet
		for _, c := range list {
			set.Set(c)
		}
		tids, err := procTIDs(procRoot, p.pid)
		if gone(err) {
			continue
		}
		if err != nil {
			return n, err
		}
		for _, tid := range tids {
			err := unix.SchedSetaffinity(tid, &set)
			if gone(err) {
				continue
			}
			if err != nil {
				return n, fmt.Errorf("sched_setaffinity %s/%s pid %d thread %d to CPUs %s: %w", p.cluster, p.name, p.pid, tid, formatCPUList(list), err)
			}
			n++
		}
	}
	return n, nil
}

// ownCPUs is the CPUs this process may run on (the processes it starts
// inherit them): what a pinned trial's processes are given back.
func ownCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var out []int
	for c := range 1024 { // unix.CPUSet's size
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// pinPlan decides the CPUs of a pinned trial from the CPUs this process may
// use: the first for the consumer, the second for the provider. It returns
// why not when there are fewer than two.
func pinPlan(allowed []int) (map[string][]int, error) {
	if len(allowed) < 2 {
		return nil, fmt.Errorf("only %d CPU (%s) available: pinning needs 2", len(allowed), formatCPUList(allowed))
	}
	return map[string][]int{consumerName: {allowed[0]}, providerName: {allowed[1]}}, nil
}

// pinning is one pinned trial's affinity: set by pin, undone by unpin.
type pinning struct {
	e       *env
	cpus    map[string][]int // by cluster
	allowed []int            // what unpin gives back
	check   *PinCheck
	stop    chan struct{}
	done    chan struct{}
}

// pin sets the affinity of every thread of both clusters' processes and
// checks it. On error (a mismatch included), the affinity is given back.
func (e *env) pin(cpus map[string][]int, allowed []int) (*pinning, error) {
	p := &pinning{e: e, cpus: cpus, allowed: allowed, check: &PinCheck{CPUs: map[string]string{}}}
	for name, list := range cpus {
		p.check.CPUs[name] = formatCPUList(list)
	}
	procs := e.clusterProcs()
	if _, err := setAffinity("/proc", procs, cpus); err != nil {
		p.unpin()
		return p, fmt.Errorf("pinning: %w", err)
	}
	c, err := checkAffinity("/proc", procs, cpus)
	p.check.Pinned = c
	if err == nil && c.Mismatches > 0 {
		err = fmt.Errorf("%d of %d threads not on their cluster's CPU right after pinning: %s", c.Mismatches, c.Threads, strings.Join(c.Examples, "; "))
	}
	if err == nil && c.Threads == 0 {
		err = errors.New("no thread of the clusters' processes found")
	}
	if err != nil {
		p.unpin()
		return p, fmt.Errorf("pin check: %w", err)
	}
	return p, nil
}

// started sets the affinity once more repinDelay from now, unless ready is
// called first.
func (p *pinning) started() {
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		select {
		case <-p.stop:
			return
		case <-time.After(repinDelay):
		}
		n, err := setAffinity("/proc", p.e.clusterProcs(), p.cpus)
		p.check.Repinned = n
		if err != nil {
			p.e.log.printf("pinning again after %s: %v", repinDelay, err)
		}
	}()
}

// ready checks the affinity once every pod is Ready; a mismatch is an
// error (the trial did not run pinned all along).
func (p *pinning) ready() error {
	p.wait()
	c, err := checkAffinity("/proc", p.e.clusterProcs(), p.cpus)
	p.check.Ready = c
	if err != nil {
		return fmt.Errorf("pin check once all pods were Ready: %w", err)
	}
	if c.Mismatches > 0 {
		return fmt.Errorf("pin check once all pods were Ready: %d of %d threads not on their cluster's CPU: %s", c.Mismatches, c.Threads, strings.Join(c.Examples, "; "))
	}
	return nil
}

// wait stops the second setting if it has not run yet and waits for it.
func (p *pinning) wait() {
	if p.stop == nil {
		return
	}
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// unpin gives every thread of both clusters' processes the CPUs this
// process may use again, and checks that they have them.
func (p *pinning) unpin() {
	p.wait()
	all := map[string][]int{}
	for name := range p.cpus {
		all[name] = p.allowed
	}
	procs := p.e.clusterProcs()
	if _, err := setAffinity("/proc", procs, all); err != nil {
		p.e.log.printf("WARNING: giving the clusters' processes every CPU back: %v", err)
		return
	}
	if c, err := checkAffinity("/proc", procs, all); err != nil || c.Mismatches > 0 {
		p.e.log.printf("WARNING: the clusters' processes did not get every CPU (%s) back: %s %v", formatCPUList(p.allowed), c, err)
	}
}
