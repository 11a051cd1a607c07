// Package e2e holds Annex's end-to-end tests. They run real clusters from
// internal/localcluster (started once per package in TestMain to keep CI time
// down), real annexctl and annex-agent binaries built from this tree, and
// clean up every process they start, even on failure.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/annexhq/annex/internal/cli/sandbox"
	"github.com/annexhq/annex/internal/localcluster"
)

// env is what TestMain set up for every test.
var env struct {
	dir      string                  // root of everything this package writes
	bin      string                  // annexctl and annex-agent built from this tree
	clusters []*localcluster.Cluster // alpha, beta, gamma
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run sets up, runs the tests and tears down; a process left behind fails the run.
func run(m *testing.M) (code int) {
	// The test's clients log nothing (controller-runtime would print a stack
	// trace on first use without a logger).
	ctrllog.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "annex-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.dir = dir
	if os.Getenv("ANNEX_E2E_KEEP") == "" {
		defer func() { _ = os.RemoveAll(dir) }() // best-effort cleanup of the temporary directory
	} else {
		defer fmt.Fprintf(os.Stderr, "e2e: kept %s (ANNEX_E2E_KEEP is set)\n", dir)
	}
	if _, err := os.Stat(filepath.Join(localcluster.DefaultBinDir(), "kube-apiserver")); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: Kubernetes binaries missing in %s: run `make tools` (or `make test`, which builds them)\n", localcluster.DefaultBinDir())
		return 1
	}
	env.bin = filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", env.bin+"/", "github.com/annexhq/annex/cmd/annexctl", "github.com/annexhq/annex/cmd/annex-agent", "github.com/annexhq/annex/cmd/annex-gateway", "github.com/annexhq/annex/cmd/annex-fabric")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build binaries:", err)
		return 1
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The sandbox's topology: alpha (consumer), beta and gamma (providers);
	// alpha's and gamma's pod CIDRs overlap.
	var specs []localcluster.Options
	for _, c := range sandbox.Clusters {
		specs = append(specs, localcluster.Options{Name: c.Name, PodCIDR: c.PodCIDR, ServiceCIDR: c.ServiceCIDR, Nodes: 1})
	}
	env.clusters = make([]*localcluster.Cluster, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, o := range specs {
		o.Dir = filepath.Join(dir, o.Name)
		o.Progress = os.Stderr
		o.BeforeControllers = sandbox.ApplyCRDs
		wg.Add(1)
		go func() {
			defer wg.Done()
			env.clusters[i], errs[i] = localcluster.Start(ctx, o)
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range env.clusters {
			if c != nil {
				_ = c.Stop(context.Background())
			}
		}
		if left := processesUnder(dir); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "e2e: FAIL: processes left behind: %v\n", left)
			code = 1
		}
	}()
	for i, err := range errs {
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: start cluster %s: %v\n", specs[i].Name, err)
			return 1
		}
	}
	return m.Run()
}

// annexctl runs the annexctl built for this test run and returns its combined output.
func annexctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(env.bin, "annexctl"), args...)
	out, err := cmd.CombinedOutput()
	t.Logf("annexctl %s\n%s", strings.Join(args, " "), out)
	return string(out), err
}

// processesUnder lists the PIDs whose command line mentions dir.
func processesUnder(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(strings.TrimSpace(string(stat[i+1:])), "Z") {
			continue // exited, not yet reaped
		}
		if strings.Contains(string(cmdline), dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not true after %s: %v", what, timeout, err)
}
