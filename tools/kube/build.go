package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/annexhq/annex/tools/kube/internal/multicall"
)

// recipeFile, in bin/, records how bin/kube was built (see recipe). A kube
// binary without it (interrupted run) or with another recipe is rebuilt.
const recipeFile = ".kube-recipe"

// ensureMultiCall builds bin/kube unless the one there was built by the
// current recipe, then makes bin/<command> a symlink to it for every
// command it holds, replacing what was there (the separate binaries of older
// cache directories).
func ensureMultiCall(bin string) error {
	want, err := recipe()
	if err != nil {
		return err
	}
	kube := filepath.Join(bin, multiCallName)
	got, err := os.ReadFile(filepath.Join(bin, recipeFile))
	if _, statErr := os.Stat(kube); statErr != nil || err != nil || string(got) != want {
		start := time.Now()
		fmt.Fprintf(os.Stderr, "building %s (%s, one binary); the first build takes 6 to 11 min on 2 idle CPUs, a relink about 1 min...\n",
			multiCallName, strings.Join(multicall.Commands, ", "))
		if err := buildMultiCall(kube); err != nil {
			return fmt.Errorf("build %s: %w", multiCallName, err)
		}
		if err := writeFileAtomic(filepath.Join(bin, recipeFile), []byte(want), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "built %s in %s\n", multiCallName, time.Since(start).Round(time.Second))
	}
	for _, name := range multicall.Commands {
		if err := symlinkAtomic(multiCallName, filepath.Join(bin, name)); err != nil {
			return err
		}
	}
	return nil
}

// buildArgs are the `go build` arguments that build the multi-call binary
// into out. buildDate is Kubernetes's release time, so that the build is
// reproducible.
func buildArgs(out, buildDate string) []string {
	const v = "k8s.io/component-base/version."
	major, minor, _ := strings.Cut(strings.TrimPrefix(kubeVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	ldflags := []string{
		"-s", "-w", // no symbol table or DWARF: smaller, and links faster (as Kubernetes's own release builds)
		"-X", v + "gitVersion=" + kubeVersion,
		"-X", v + "gitMajor=" + major,
		"-X", v + "gitMinor=" + minor,
		"-X", v + "gitTreeState=clean", // the released source, unmodified
		"-X", v + "gitCommit=", // unknown from the module proxy; empty reads as "unknown" rather than "$Format:%H$"
		"-X", v + "buildDate=" + buildDate,
		"-X", "go.etcd.io/etcd/api/v3/version.GitSHA=unknown",
	}
	return []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", strings.Join(ldflags, " "), "-o", out, "./cmd/kube"}
}

// recipe describes what bin/kube is built from: the build arguments, the
// commands it holds, the module's dependencies (go.sum) and its own code
// (cmd/kube and internal/: localcluster-proxy lives there).
func recipe() (string, error) {
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		return "", fmt.Errorf("read tools/kube's go.sum (run this from tools/kube, as `make tools` does): %w", err)
	}
	h := sha256.Sum256(sum)
	src, err := sourcesHash("cmd", "internal")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("go %s\ncommands %s\ngo.sum %s\nsources %s\n",
		strings.Join(buildArgs("<out>", "<release time of k8s.io/kubernetes@"+kubeVersion+">"), " "),
		strings.Join(multicall.Commands, " "), hex.EncodeToString(h[:]), src), nil
}

// sourcesHash hashes the names and contents of the Go files (tests
// excepted) below dirs, in a stable order.
func sourcesHash(dirs ...string) (string, error) {
	h := sha256.New()
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(path string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(path), len(data))
			h.Write(data)
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("hash tools/kube's sources: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// buildMultiCall builds cmd/kube to a temporary name, checks that every
// command in it runs and reports its version, and renames it to dst: an
// interrupted or broken build never replaces a working binary.
func buildMultiCall(dst string) error {
	list := exec.Command("go", "list", "-m", "-json", "k8s.io/kubernetes")
	list.Env = append(os.Environ(), "GOWORK=off")
	info, err := list.Output()
	if err != nil {
		return fmt.Errorf("look up k8s.io/kubernetes@%s: %w", kubeVersion, err)
	}
	released, err := jsonField(info, "Time")
	if err != nil {
		return err
	}
	tmp := dst + ".tmp"
	cmd := exec.Command("go", buildArgs(tmp, released)...)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		_ = os.Remove(tmp) // best-effort cleanup; err is what counts
		return err
	}
	if err := checkVersions(tmp); err != nil {
		_ = os.Remove(tmp) // best-effort cleanup; err is what counts
		return err
	}
	return os.Rename(tmp, dst)
}

// checkVersions runs each command of the multi-call binary kube with its
// version flag and checks what it reports: every command is wired and
// starts (no init-time conflicts between them), and the versions are stamped.
func checkVersions(kube string) error {
	for _, name := range multicall.Commands {
		args, want := []string{name, "--version"}, "Kubernetes "+kubeVersion
		switch name {
		case "etcd":
			want = "etcd Version: " + etcdVersion
		case "kubectl":
			args, want = []string{name, "version", "--client"}, "Client Version: "+kubeVersion
		case "localcluster-proxy":
			// Not a Kubernetes command: it has no version to report.
			args, want = []string{name, "help"}, "Usage: localcluster-proxy"
		}
		out, err := exec.Command(kube, args...).CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte(want)) {
			return fmt.Errorf("%s %s: want output containing %q, got %q (%v)", kube, strings.Join(args, " "), want, out, err)
		}
	}
	return nil
}

// symlinkAtomic makes path a symlink to target unless it already is one,
// replacing whatever path was (a file, another symlink) in one rename.
func symlinkAtomic(target, path string) error {
	if got, err := os.Readlink(path); err == nil && got == target {
		return nil
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp) // a leftover of an interrupted run, if any
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// writeFileAtomic writes data to path through a temporary file and a rename.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// goInstall installs t with `go install` (outside this module, so that it
// keeps its own dependency versions) and renames it to dst.
func goInstall(t installedTool, dst string) error {
	gobin, err := os.MkdirTemp(filepath.Dir(dst), ".install-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(gobin) }() // best-effort cleanup of the temporary GOBIN
	cmd := exec.Command("go", "install", "-trimpath", "-ldflags="+t.ldflags(), t.pkg+"@"+t.version)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-mod=mod", "GOWORK=off")
	cmd.Dir = os.TempDir()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return err
	}
	return os.Rename(filepath.Join(gobin, t.name), dst)
}
