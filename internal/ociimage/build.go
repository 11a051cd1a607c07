package ociimage

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/go-logr/logr"
)

// ModulePath is the module whose main packages the images are built from.
const ModulePath = "github.com/annexhq/annex"

// versionVar is the variable -ldflags -X sets to the image's version.
const versionVar = ModulePath + "/internal/version.Version"

// Options configure a Builder. The zero value builds for the host's
// architecture from the module around the working directory with the `go`
// on PATH.
type Options struct {
	// ModuleDir is the root of the Annex source tree (the directory of the
	// go.mod of ModulePath). Empty: found from the working directory upward.
	ModuleDir string
	// GOARCH is the architecture to build for; empty is the host's
	// (runtime.GOARCH). The OS is always linux.
	GOARCH string
	// Go is the go command; empty is "go" on PATH.
	Go string
	// Log receives one line per binary built and image written.
	Log logr.Logger
}

// Builder builds images from this module's sources.
type Builder struct {
	moduleDir string
	arch      string
	goCmd     string
	log       logr.Logger
}

// NewBuilder checks that the source tree and a Go toolchain are there.
func NewBuilder(opts Options) (*Builder, error) {
	b := &Builder{moduleDir: opts.ModuleDir, arch: opts.GOARCH, goCmd: opts.Go, log: opts.Log}
	if b.log.GetSink() == nil {
		b.log = logr.Discard()
	}
	if b.arch == "" {
		b.arch = runtime.GOARCH
	}
	if b.goCmd == "" {
		p, err := exec.LookPath("go")
		if err != nil {
			return nil, errors.New("building images needs the Go toolchain, and there is no `go` on PATH: install Go (https://go.dev/doc/install) or put it on PATH")
		}
		b.goCmd = p
	}
	if b.moduleDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		dir, err := findModule(wd)
		if err != nil {
			return nil, err
		}
		b.moduleDir = dir
	} else if err := checkModule(b.moduleDir); err != nil {
		return nil, err
	}
	return b, nil
}

// findModule walks up from dir to the root of ModulePath's source tree.
func findModule(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if checkModule(d) == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("building images needs the Annex source tree (module %s), and %s is not inside one: run from a clone of the repository", ModulePath, dir)
		}
	}
}

// checkModule says whether dir holds go.mod of ModulePath.
func checkModule(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod")) //nolint:gosec // reading a go.mod is the point
	if err != nil {
		return fmt.Errorf("%s is not the root of the Annex source tree: %w", dir, err)
	}
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		if f := strings.Fields(s.Text()); len(f) == 2 && f[0] == "module" && f[1] == ModulePath {
			return nil
		}
	}
	return fmt.Errorf("%s/go.mod is not module %s", dir, ModulePath)
}

// Arch is the architecture the builder builds for.
func (b *Builder) Arch() string { return b.arch }

// compile builds spec's binaries into dir and returns their paths by name.
func (b *Builder) compile(ctx context.Context, spec Spec, dir string) (map[string]string, error) {
	out := make(map[string]string, len(spec.Binaries))
	for _, bin := range spec.Binaries {
		p := filepath.Join(dir, bin.Name)
		start := time.Now()
		// -s -w: no symbol table and DWARF (smaller; stack traces stay).
		// -buildvcs=false: the commit is not in the binary, so an unchanged
		// binary (and image) stays the same across commits.
		args := []string{"build", "-trimpath", "-buildvcs=false",
			"-ldflags", "-s -w -X " + versionVar + "=" + spec.Version,
			"-o", p, bin.Package}
		cmd := exec.CommandContext(ctx, b.goCmd, args...) //nolint:gosec // the go command with fixed flags
		cmd.Dir = b.moduleDir
		cmd.Env = b.buildEnv()
		var stderr bytes.Buffer
		cmd.Stdout = &stderr
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("image %s: go build %s for linux/%s failed: %w\n%s", spec.Ref(), bin.Package, b.arch, err, strings.TrimSpace(stderr.String()))
		}
		b.log.V(1).Info("built binary", "image", spec.Ref(), "package", bin.Package, "arch", b.arch, "took", time.Since(start).Round(time.Millisecond))
		out[bin.Name] = p
	}
	return out, nil
}

// buildEnv is the environment of `go build`: the caller's (GOPATH, caches,
// proxy), minus what changes the output, plus a static cross-build.
func (b *Builder) buildEnv() []string {
	drop := map[string]bool{"GOFLAGS": true, "CGO_ENABLED": true, "GOOS": true, "GOARCH": true,
		"GOAMD64": true, "GOARM": true, "GOARM64": true, "GO386": true, "GOEXPERIMENT": true}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			env = append(env, kv)
		}
	}
	env = append(env, "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+b.arch, "GOFLAGS=")
	switch b.arch {
	case "amd64":
		env = append(env, "GOAMD64=v1")
	case "arm64":
		env = append(env, "GOARM64=v8.0")
	}
	return env
}
