package ociimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// packerPackage is this package, relative to the module root: its sources
// decide how binaries are packed, so they are part of every source key.
const packerPackage = "./internal/ociimage"

// listedPackage is what `go list -json` says of one package.
type listedPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	Module     *struct {
		Path    string
		Version string
	}
	GoFiles    []string
	SFiles     []string
	EmbedFiles []string
}

// sourceKey is a digest of everything an image is made from: the spec, the
// Go toolchain and the settings it builds with, go.mod and go.sum, and the
// contents of every source file of the main module (and of local
// replacements) that the binaries or this package are built from. Modules
// from the module cache count by path and version only (go.sum pins their
// contents), the standard library by the Go version. Equal keys give equal
// images, so Build skips compiling when the tarball records the same key.
func (b *Builder) sourceKey(ctx context.Context, spec Spec) (string, error) {
	h := sha256.New()
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "ociimage source key v1\nspec %s\narch %s\n", specJSON, b.arch)

	goEnv, err := b.goOutput(ctx, "env", "GOVERSION", "GOEXPERIMENT", "GOAMD64", "GOARM64", "CGO_ENABLED")
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "go env %q\n", goEnv)
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := hashFile(h, b.moduleDir, f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}

	args := []string{"list", "-deps", "-json=ImportPath,Dir,Standard,Module,GoFiles,SFiles,EmbedFiles"}
	for _, bin := range spec.Binaries {
		args = append(args, bin.Package)
	}
	out, err := b.goOutput(ctx, append(args, packerPackage)...)
	if err != nil {
		return "", err
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("reading go list output: %w", err)
		}
		switch {
		case p.Standard:
			continue // the Go version covers it
		case p.Module != nil && p.Module.Version != "":
			fmt.Fprintf(h, "package %s from %s@%s\n", p.ImportPath, p.Module.Path, p.Module.Version)
			continue
		}
		fmt.Fprintf(h, "package %s\n", p.ImportPath)
		files := slices.Concat(p.GoFiles, p.SFiles, p.EmbedFiles)
		slices.Sort(files)
		for _, f := range files {
			if err := hashFile(h, p.Dir, f); err != nil {
				return "", err
			}
		}
	}
	return fmt.Sprintf("sha256:%x", h.Sum(nil)), nil
}

// hashFile adds a file's name, size and contents to h.
func hashFile(h io.Writer, dir, name string) error {
	data, err := os.ReadFile(filepath.Join(dir, name)) //nolint:gosec // source files go list named
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "file %s %d\n", filepath.ToSlash(name), len(data))
	_, err = h.Write(data)
	return err
}

// goOutput runs the go command in the module with the build environment.
func (b *Builder) goOutput(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, b.goCmd, args...) //nolint:gosec // the go command with fixed arguments
	cmd.Dir = b.moduleDir
	cmd.Env = b.buildEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
