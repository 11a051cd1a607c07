// Command kube builds the real Kubernetes binaries Annex's local clusters run
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and
// kwok) into a versioned cache directory outside the repository, building only
// what is missing. It prints that directory on stdout.
//
//	go run . [-dir DIR] [-print-dir]
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Versions of what this module builds. The cache directory is named after
// them, so changing one builds into a fresh directory.
const (
	kubeVersion = "v1.37.2"
	kwokVersion = "v0.8.0"
)

// binary is one command to build: from this module's packages, or with
// `go install pkg@version` for modules that must keep their own dependencies.
type binary struct {
	name    string
	pkg     string
	install bool
}

var binaries = []binary{
	{name: "etcd", pkg: "./cmd/etcd"},
	{name: "kube-apiserver", pkg: "k8s.io/kubernetes/cmd/kube-apiserver"},
	{name: "kube-controller-manager", pkg: "k8s.io/kubernetes/cmd/kube-controller-manager"},
	{name: "kube-scheduler", pkg: "k8s.io/kubernetes/cmd/kube-scheduler"},
	{name: "kubectl", pkg: "k8s.io/kubernetes/cmd/kubectl"},
	{name: "kwok", pkg: "sigs.k8s.io/kwok/cmd/kwok@" + kwokVersion, install: true},
}

// kwokStages are the stage configurations kwok needs to act, copied from its
// module into <dir>/../kwok-stages.
var kwokStages = []string{
	"kustomize/stage/node/fast",
	"kustomize/stage/node/heartbeat-with-lease",
	"kustomize/stage/pod/fast",
}

func main() {
	dir := flag.String("dir", defaultDir(), "cache directory (the bin/ and kwok-stages/ directories are created in it); env ANNEX_KUBE_DIR overrides the default")
	printOnly := flag.Bool("print-dir", false, "print the cache directory and exit without building")
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
	for _, b := range binaries {
		dst := filepath.Join(bin, b.name)
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		start := time.Now()
		fmt.Fprintf(os.Stderr, "building %s (first build of each binary takes a few minutes)...\n", b.name)
		if err := build(b, dst); err != nil {
			return fmt.Errorf("build %s: %w", b.name, err)
		}
		fmt.Fprintf(os.Stderr, "built %s in %s\n", b.name, time.Since(start).Round(time.Second))
	}
	return copyStages(filepath.Join(dir, "kwok-stages"))
}

// build writes the binary to a temporary name and renames it into place, so an
// interrupted build never leaves a truncated binary that counts as present.
func build(b binary, dst string) error {
	tmp := dst + ".tmp"
	var cmd *exec.Cmd
	if b.install {
		gobin, err := os.MkdirTemp(filepath.Dir(dst), ".install-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(gobin) }() // best-effort cleanup of the temporary GOBIN
		cmd = exec.Command("go", "install", "-trimpath", b.pkg)
		cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-mod=mod", "GOWORK=off")
		cmd.Dir = os.TempDir()
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(gobin, b.name), tmp); err != nil {
			return err
		}
	} else {
		cmd = exec.Command("go", "build", "-trimpath", "-o", tmp, b.pkg)
		cmd.Env = append(os.Environ(), "GOWORK=off")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			_ = os.Remove(tmp) // best-effort cleanup; err is what counts
			return err
		}
	}
	return os.Rename(tmp, dst)
}

// copyStages copies kwok's stage configurations out of the module cache.
func copyStages(dst string) error {
	// The marker's name changes whenever the selection of stages does, so
	// that an older copy is replaced.
	marker := filepath.Join(dst, ".complete-v2")
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	out, err := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/kwok@"+kwokVersion).Output()
	if err != nil {
		return fmt.Errorf("download kwok module: %w", err)
	}
	modDir, err := jsonField(out, "Dir")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, s := range kwokStages {
		err := filepath.WalkDir(filepath.Join(modDir, s), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || filepath.Ext(p) != ".yaml" || d.Name() == "kustomization.yaml" {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(modDir, p)
			name := filepath.Join(dst, filepath.Base(filepath.Dir(rel))+"-"+filepath.Base(rel))
			return os.WriteFile(name, data, 0o644)
		})
		if err != nil {
			return fmt.Errorf("copy kwok stages %s: %w", s, err)
		}
	}
	return os.WriteFile(marker, nil, 0o644)
}
