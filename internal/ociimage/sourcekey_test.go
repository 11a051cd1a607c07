package ociimage

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// fakeModule writes a tiny copy of the module's shape: a main package
// depending on lib, a package nothing depends on, and the packer package.
func fakeModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":                        "module " + ModulePath + "\n\ngo 1.26\n",
		"go.sum":                        "",
		"cmd/x/main.go":                 "package main\n\nimport \"" + ModulePath + "/lib\"\n\nfunc main() { lib.Hello() }\n",
		"lib/lib.go":                    "package lib\n\nfunc Hello() {}\n",
		"lib/lib_test.go":               "package lib\n",
		"other/other.go":                "package other\n",
		"internal/ociimage/ociimage.go": "package ociimage\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSourceKey(t *testing.T) {
	ctx := context.Background()
	spec := Spec{Repository: "annex.dev/x", Tag: "v1", Version: "v1", Binaries: []Binary{{Package: "./cmd/x", Name: "x"}}}
	write := func(name, content string) func(t *testing.T, dir string, s *Spec, o *Options) {
		return func(t *testing.T, dir string, _ *Spec, _ *Options) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		change  func(t *testing.T, dir string, s *Spec, o *Options)
		changes bool
	}{
		{"nothing", func(*testing.T, string, *Spec, *Options) {}, false},
		{"a file of the main package", write("cmd/x/main.go", "package main\n\nimport \""+ModulePath+"/lib\"\n\nfunc main() { lib.Hello(); lib.Hello() }\n"), true},
		{"a file of a dependency", write("lib/lib.go", "package lib\n\nfunc Hello() { println() }\n"), true},
		{"a new file in a dependency", write("lib/more.go", "package lib\n"), true},
		{"a test file of a dependency", write("lib/lib_test.go", "package lib\n\n// changed\n"), false},
		{"a package no binary imports", write("other/other.go", "package other\n\n// changed\n"), false},
		{"the packer's sources", write("internal/ociimage/ociimage.go", "package ociimage\n\n// changed\n"), true},
		{"go.sum", write("go.sum", "example.com/m v1.0.0 h1:abc=\n"), true},
		{"the version", func(_ *testing.T, _ string, s *Spec, _ *Options) { s.Version = "v2" }, true},
		{"the user", func(_ *testing.T, _ string, s *Spec, _ *Options) { s.User = "1:1" }, true},
		{"the architecture", func(_ *testing.T, _ string, _ *Spec, o *Options) { o.GOARCH = "arm64" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := fakeModule(t)
			key := func(s Spec, o Options) string {
				t.Helper()
				o.ModuleDir = dir
				b, err := NewBuilder(o)
				if err != nil {
					t.Fatal(err)
				}
				k, err := b.sourceKey(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				return k
			}
			before := key(spec, Options{GOARCH: "amd64"})
			s, o := spec, Options{GOARCH: "amd64"}
			tc.change(t, dir, &s, &o)
			after := key(s, o)
			if changed := after != before; changed != tc.changes {
				t.Fatalf("key changed = %v, want %v (%s → %s)", changed, tc.changes, before, after)
			}
		})
	}
}

func TestNewBuilderOutsideModule(t *testing.T) {
	if _, err := NewBuilder(Options{ModuleDir: t.TempDir()}); err == nil {
		t.Fatal("NewBuilder accepted a directory without the Annex go.mod")
	}
	dir := fakeModule(t)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewBuilder(Options{ModuleDir: dir}); err == nil {
		t.Fatal("NewBuilder accepted another module")
	}
	mod := fakeModule(t)
	t.Chdir(filepath.Join(mod, "lib"))
	b, err := NewBuilder(Options{})
	if err != nil {
		t.Fatalf("NewBuilder from a subdirectory of the module: %v", err)
	}
	if b.moduleDir != mod {
		t.Fatalf("found the module at %s, want %s", b.moduleDir, mod)
	}
}
