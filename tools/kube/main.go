// Command kube builds the real Kubernetes binaries Annex's local clusters run
// into a versioned cache directory outside the repository, building only
// what is missing, and prints that directory on stdout.
//
// <dir>/bin holds one multi-call binary, kube (cmd/kube: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet,
// kube-proxy and localcluster-proxy), a symlink to it named after each of
// those commands, and
// kwok, metrics-server and kube-router (each built with `go install`: they
// keep their own dependencies).
// <dir>/kwok-stages holds the kwok stage configurations.
//
//	go run . [-dir DIR] [-print-dir]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
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
	// metricsServerVersion is the newest v0.8 release the module proxy
	// serves (v0.9.0 is served but is not an approved release).
	metricsServerVersion = "v0.8.0"
	// kubeRouterVersion is the only kube-router release the module proxy
	// serves here. Real nodes run only its NetworkPolicy firewall
	// (internal/localcluster/networkpolicy.go); the advisories against
	// this version concern its service proxy and its BGP router, which
	// stay off (docs/decisions.md).
	kubeRouterVersion = "v2.1.0"
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
symlink per command), etcd %s, kwok %s, metrics-server %s and
kube-router %s into DIR/bin, only what is missing or was built by an older
recipe, and prints DIR. Progress goes to stderr.

`, kubeVersion, strings.Join(multicall.Commands, ", "), multiCallName, etcdVersion, kwokVersion, metricsServerVersion, kubeRouterVersion)
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
	for _, t := range installedTools {
		if err := ensureInstalled(bin, t); err != nil {
			return err
		}
	}
	return copyStages(filepath.Join(dir, "kwok-stages"))
}

// installedTool is a program built with `go install pkg@version` outside
// this module, so that it keeps its own dependency versions.
type installedTool struct {
	name    string // its file in bin/ (the last element of pkg)
	pkg     string // the package of its main
	version string // the module version to install
	// versionVar is the package variable (-X) that holds the version the
	// program reports, "" if `go install` gets it right by itself.
	versionVar string
	about      string // how long the first build takes, for the progress line
}

// ldflags are the linker flags t is built with.
func (t installedTool) ldflags() string {
	f := "-s -w"
	if t.versionVar != "" {
		f += " -X " + t.versionVar + "=" + t.version
	}
	return f
}

// recipe says how t is built; a binary built by another recipe is rebuilt.
func (t installedTool) recipe() string {
	return fmt.Sprintf("go install -trimpath -ldflags=%q %s@%s\n", t.ldflags(), t.pkg, t.version)
}

// installedTools are the programs ensureInstalled builds, in order.
var installedTools = []installedTool{
	{name: "kwok", pkg: "sigs.k8s.io/kwok/cmd/kwok", version: kwokVersion, about: "about 2 min"},
	{
		name: "metrics-server", pkg: "sigs.k8s.io/metrics-server/cmd/metrics-server", version: metricsServerVersion,
		// Its Makefile stamps client-go's version package; without it the
		// binary reports v0.0.0-master+$Format:%H$.
		versionVar: "k8s.io/client-go/pkg/version.gitVersion",
		about:      "2 to 8 min",
	},
	{
		// Its Makefile stamps the version (and a build date, left out:
		// the build is reproducible without it).
		name: "kube-router", pkg: "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router", version: kubeRouterVersion,
		versionVar: "github.com/cloudnativelabs/kube-router/v2/pkg/version.Version",
		about:      "about 4 min",
	},
}

// ensureInstalled installs t into bin unless it is there (a regular file: a
// symlink is another build's link into a multi-call binary that this one
// does not hold; it is replaced) and was built by t's recipe, recorded in
// bin/.<name>-recipe. A binary without a recorded recipe, from before
// recipes were recorded, is kept and the recipe recorded.
func ensureInstalled(bin string, t installedTool) error {
	dst := filepath.Join(bin, t.name)
	recipePath := filepath.Join(bin, "."+t.name+"-recipe")
	if fi, err := os.Lstat(dst); err == nil && fi.Mode().IsRegular() {
		got, err := os.ReadFile(recipePath)
		if errors.Is(err, fs.ErrNotExist) {
			return writeFileAtomic(recipePath, []byte(t.recipe()), 0o644)
		}
		if err == nil && string(got) == t.recipe() {
			return nil
		}
	}
	start := time.Now()
	fmt.Fprintf(os.Stderr, "building %s %s (its own dependencies; %s the first time)...\n", t.name, t.version, t.about)
	if err := goInstall(t, dst); err != nil {
		return fmt.Errorf("build %s: %w", t.name, err)
	}
	if err := writeFileAtomic(recipePath, []byte(t.recipe()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "built %s in %s\n", t.name, time.Since(start).Round(time.Second))
	return nil
}
