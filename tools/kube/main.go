// Command kube builds the real Kubernetes binaries Annex's local clusters run
// into a versioned cache directory outside the repository, building only
// what is missing, and prints that directory on stdout.
//
// <dir>/bin holds one multi-call binary, kube (cmd/kube: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet,
// kube-proxy and localcluster-proxy), a symlink to it named after each of
// those commands, and
// kwok (built with `go install`: it keeps its own dependencies).
// <dir>/kwok-stages holds the kwok stage configurations.
//
//	go run . [-dir DIR] [-print-dir]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/annexhq/annex/tools/kube/internal/multicall"
)

// Versions of what this module builds. The cache directory is named after
// kubeVersion, so changing it builds into a fresh directory. etcdVersion is
// the version go.mod's go.etcd.io/etcd/server/v3 reports; the build checks it.
const (
	kubeVersion = "v1.37.2"
	etcdVersion = "3.7.0"
	kwokVersion = "v0.8.0"
)

// multiCallName is the multi-call binary's name in <dir>/bin.
const multiCallName = "kube"

// kwokStages are the stage configurations kwok needs to act, copied from its
// module into <dir>/kwok-stages.
var kwokStages = []string{
	"kustomize/stage/node/fast",
	"kustomize/stage/node/heartbeat-with-lease",
	"kustomize/stage/pod/fast",
}

func main() {
	dir := flag.String("dir", defaultDir(), "cache directory (the bin/ and kwok-stages/ directories are created in it); env ANNEX_KUBE_DIR overrides the default")
	printOnly := flag.Bool("print-dir", false, "print the cache directory and exit without building")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: go run . [-dir DIR] [-print-dir]

Builds Kubernetes %s (%s, as one multi-call binary %q with a
symlink per command), etcd %s and kwok %s into DIR/bin, only what is missing
or was built by an older recipe, and prints DIR. Progress goes to stderr.

`, kubeVersion, strings.Join(multicall.Commands, ", "), multiCallName, etcdVersion, kwokVersion)
		flag.PrintDefaults()
	}
	flag.Parse()
	if *printOnly {
		fmt.Println(*dir)
		return
	}
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "tools/kube:", err)
		os.Exit(1)
	}
	fmt.Println(*dir)
}

// defaultDir is ${ANNEX_KUBE_DIR} or ${XDG_CACHE_HOME:-$HOME/.cache}/annex/kube-<version>.
// internal/localcluster computes the same path.
func defaultDir() string {
	if d := os.Getenv("ANNEX_KUBE_DIR"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "annex", "kube-"+kubeVersion)
}

func run(dir string) error {
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	if err := ensureMultiCall(bin); err != nil {
		return err
	}
	if err := ensureKwok(bin); err != nil {
		return err
	}
	return copyStages(filepath.Join(dir, "kwok-stages"))
}

// ensureKwok installs kwok into bin unless it is there: a regular file (a
// symlink is another build's link into a multi-call binary that this one
// does not hold; it is replaced).
func ensureKwok(bin string) error {
	dst := filepath.Join(bin, "kwok")
	if fi, err := os.Lstat(dst); err == nil && fi.Mode().IsRegular() {
		return nil
	}
	start := time.Now()
	fmt.Fprintf(os.Stderr, "building kwok %s (its own dependencies; about 2 min the first time)...\n", kwokVersion)
	if err := installKwok(dst); err != nil {
		return fmt.Errorf("build kwok: %w", err)
	}
	fmt.Fprintf(os.Stderr, "built kwok in %s\n", time.Since(start).Round(time.Second))
	return nil
}
