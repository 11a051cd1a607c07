package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "0", want: []int{0}},
		{in: "1\n", want: []int{1}},
		{in: "0-3", want: []int{0, 1, 2, 3}},
		{in: "0-1,3,5-6", want: []int{0, 1, 3, 5, 6}},
		{in: "4,2,2-3", want: []int{2, 3, 4}},
		{in: "7-7", want: []int{7}},
		{in: "", wantErr: true},
		{in: "a", wantErr: true},
		{in: "3-1", wantErr: true},
		{in: "1-", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "0,,1", wantErr: true},
	} {
		got, err := parseCPUList(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseCPUList(%q) error %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("parseCPUList(%q) (-want +got):\n%s", tc.in, diff)
		}
		if err == nil {
			// What the kernel writes reads back the same.
			if back, _ := parseCPUList(formatCPUList(got)); !cmp.Equal(back, got) {
				t.Errorf("formatCPUList(%v) = %q reads back as %v", got, formatCPUList(got), back)
			}
		}
	}
}

func TestFormatCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{1}, "1"},
		{[]int{0, 1}, "0-1"},
		{[]int{0, 1, 2, 3}, "0-3"},
		{[]int{0, 2, 3, 4, 7, 9, 10}, "0,2-4,7,9-10"},
	} {
		if got := formatCPUList(tc.in); got != tc.want {
			t.Errorf("formatCPUList(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestStatusCPUList(t *testing.T) {
	status := []byte("Name:\tetcd\nThreads:\t12\nCpus_allowed:\t2\nCpus_allowed_list:\t1\nMems_allowed_list:\t0\n")
	if got, err := statusCPUList(status); err != nil || got != "1" {
		t.Errorf("statusCPUList = %q, %v; want \"1\"", got, err)
	}
	if _, err := statusCPUList([]byte("Name:\tx\n")); err == nil {
		t.Error("statusCPUList without the line: want an error")
	}
}

func TestPinPlan(t *testing.T) {
	for _, tc := range []struct {
		allowed []int
		want    map[string][]int
	}{
		{[]int{0, 1}, map[string][]int{consumerName: {0}, providerName: {1}}},
		{[]int{2, 5, 7}, map[string][]int{consumerName: {2}, providerName: {5}}},
		{[]int{0}, nil},
		{nil, nil},
	} {
		got, err := pinPlan(tc.allowed)
		if (err != nil) != (tc.want == nil) {
			t.Errorf("pinPlan(%v) error %v", tc.allowed, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("pinPlan(%v) (-want +got):\n%s", tc.allowed, diff)
		}
	}
}

// fakeProc writes a /proc of processes, each with threads and their
// Cpus_allowed_list, and a stat line naming its parent.
type fakeThread struct {
	tid  int
	cpus string
}

func fakeProc(t *testing.T, procs map[int]struct {
	comm    string
	ppid    int
	threads []fakeThread
}) string {
	t.Helper()
	root := t.TempDir()
	for pid, p := range procs {
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(filepath.Join(dir, "task"), 0o755); err != nil {
			t.Fatal(err)
		}
		stat := fmt.Sprintf("%d (%s) S %d %d %d 0 -1\n", pid, p.comm, p.ppid, pid, pid)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, th := range p.threads {
			tdir := filepath.Join(dir, "task", fmt.Sprint(th.tid))
			if err := os.MkdirAll(tdir, 0o755); err != nil {
				t.Fatal(err)
			}
			status := fmt.Sprintf("Name:\t%s\nPid:\t%d\nCpus_allowed_list:\t%s\n", p.comm, th.tid, th.cpus)
			if err := os.WriteFile(filepath.Join(tdir, "status"), []byte(status), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func TestCheckAffinity(t *testing.T) {
	root := fakeProc(t, map[int]struct {
		comm    string
		ppid    int
		threads []fakeThread
	}{
		10: {"etcd", 1, []fakeThread{{10, "0"}, {11, "0"}}},
		20: {"kube-apiserver", 1, []fakeThread{{20, "1"}, {21, "0-1"}, {22, "1"}}},
		30: {"kwok", 1, []fakeThread{{30, "0"}}},
	})
	want := map[string][]int{consumerName: {0}, providerName: {1}}
	for _, tc := range []struct {
		name  string
		procs []clusterProc
		want  ThreadCheck
	}{
		{
			name:  "all on their CPU",
			procs: []clusterProc{{consumerName, "etcd", 10}},
			want:  ThreadCheck{Processes: 1, Threads: 2},
		},
		{
			name:  "one thread left on every CPU",
			procs: []clusterProc{{consumerName, "etcd", 10}, {providerName, "kube-apiserver", 20}},
			want: ThreadCheck{Processes: 2, Threads: 5, Mismatches: 1,
				Examples: []string{"beta/kube-apiserver pid 20 thread 21: Cpus_allowed_list 0-1, want 1"}},
		},
		{
			name:  "a whole process on the other cluster's CPU",
			procs: []clusterProc{{providerName, "kwok", 30}},
			want: ThreadCheck{Processes: 1, Threads: 1, Mismatches: 1,
				Examples: []string{"beta/kwok pid 30 thread 30: Cpus_allowed_list 0, want 1"}},
		},
		{
			name:  "a process that exited is not counted",
			procs: []clusterProc{{consumerName, "etcd", 10}, {consumerName, "gone", 99}},
			want:  ThreadCheck{Processes: 1, Threads: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkAffinity(root, tc.procs, want)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("checkAffinity (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithDescendants(t *testing.T) {
	root := fakeProc(t, map[int]struct {
		comm    string
		ppid    int
		threads []fakeThread
	}{
		1:  {"init", 0, nil},
		10: {"etcd", 1, nil},
		20: {"kwok", 1, nil},
		40: {"sh", 20, nil},
		41: {"sleep x)", 40, nil}, // a parenthesis in the name
		50: {"unrelated", 1, nil},
	})
	got := withDescendants(root, []clusterProc{{consumerName, "etcd", 10}, {providerName, "kwok", 20}})
	want := []clusterProc{{consumerName, "etcd", 10}, {providerName, "kwok", 20}, {providerName, "sh", 40}, {providerName, "sleep x)", 41}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(clusterProc{}), cmpopts.SortSlices(func(a, b clusterProc) bool { return a.pid < b.pid })); diff != "" {
		t.Errorf("withDescendants (-want +got):\n%s", diff)
	}
}

func TestParseStatParent(t *testing.T) {
	comm, ppid, err := parseStatParent([]byte("4242 (annex agent)) S 17 4242 4242 0 -1"))
	if err != nil || comm != "annex agent)" || ppid != 17 {
		t.Errorf("parseStatParent = %q, %d, %v; want \"annex agent)\", 17", comm, ppid, err)
	}
	if _, _, err := parseStatParent([]byte("1 (x)")); err == nil {
		t.Error("parseStatParent without a parent: want an error")
	}
}

// TestSetAffinity pins a real process (a sleep this test starts) to one
// CPU, checks it as a pinned trial does and gives it every CPU back.
func TestSetAffinity(t *testing.T) {
	allowed, err := ownCPUs()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep:", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	procs := []clusterProc{{consumerName, "sleep", cmd.Process.Pid}}
	one := map[string][]int{consumerName: {allowed[len(allowed)-1]}}
	n, err := setAffinity("/proc", procs, one)
	if err != nil || n < 1 {
		t.Fatalf("setAffinity: %d threads, %v", n, err)
	}
	if c, err := checkAffinity("/proc", procs, one); err != nil || c.Threads != n || c.Mismatches != 0 {
		t.Errorf("after pinning: %s, %v", c, err)
	}
	all := map[string][]int{consumerName: allowed}
	if _, err := setAffinity("/proc", procs, all); err != nil {
		t.Fatal(err)
	}
	if c, err := checkAffinity("/proc", procs, all); err != nil || c.Mismatches != 0 {
		t.Errorf("after giving every CPU back: %s, %v", c, err)
	}
	if len(allowed) > 1 {
		if c, _ := checkAffinity("/proc", procs, one); c.Mismatches != c.Threads {
			t.Errorf("checked against one CPU while on all: %s, want every thread mismatched", c)
		}
	}
}
