package clustertest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// HelmVersion is the helm CLI the tests install charts with (the Makefile's
// chart-lint runs the same).
const HelmVersion = "v4.3.2"

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// Helm returns a helm CLI for the test: $ANNEX_HELM, else helm HelmVersion
// installed with `go install` into ${XDG_CACHE_HOME:-~/.cache}/annex/helm-<version>
// (built on first use, a few minutes; cached after).
func Helm(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if p := os.Getenv("ANNEX_HELM"); p != "" {
			helmPath = p
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			helmErr = err
			return
		}
		dir := filepath.Join(cache, "annex", "helm-"+HelmVersion)
		helmPath = filepath.Join(dir, "helm")
		if _, err := os.Stat(helmPath); err == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "install", "helm.sh/helm/v4/cmd/helm@"+HelmVersion) //nolint:gosec // fixed arguments
		// Outside this module: its go.mod has no say.
		cmd.Dir = os.TempDir()
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			helmErr = &helmBuildError{err: err, out: strings.TrimSpace(out.String())}
		}
	})
	if helmErr != nil {
		t.Fatalf("build helm %s (or set ANNEX_HELM to a helm binary): %v", HelmVersion, helmErr)
	}
	return helmPath
}

type helmBuildError struct {
	err error
	out string
}

func (e *helmBuildError) Error() string { return e.err.Error() + ": " + e.out }

// RunHelm runs helm with args against the cluster of kubeconfig, with
// Helm's own config, cache and data in a directory of the test, and returns
// its combined output.
func RunHelm(ctx context.Context, t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	home := filepath.Join(t.TempDir(), "helm")
	cmd := exec.CommandContext(ctx, Helm(t), append(args, "--kubeconfig", kubeconfig)...) //nolint:gosec // a test's own arguments
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache", "HELM_DATA_HOME="+home+"/data")
	out, err := cmd.CombinedOutput()
	return string(out), err
}
