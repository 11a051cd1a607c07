package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSourcesHash shows that the recipe follows the module's own code (a
// change to localcluster-proxy rebuilds bin/kube) but not its tests.
func TestSourcesHash(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hash := func() string {
		t.Helper()
		h, err := sourcesHash(filepath.Join(dir, "cmd"), filepath.Join(dir, "internal"))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	write("cmd/kube/main.go", "package main\n")
	write("internal/p/p.go", "package p\n")
	first := hash()
	if hash() != first {
		t.Fatal("sourcesHash is not stable")
	}
	write("internal/p/p_test.go", "package p\n")
	write("internal/p/README.md", "text\n")
	if hash() != first {
		t.Error("a test or a non-Go file changed the hash")
	}
	write("internal/p/p.go", "package p // changed\n")
	if hash() == first {
		t.Error("a changed source kept the hash")
	}
	write("internal/p/p.go", "package p\n")
	write("internal/q/q.go", "package q\n")
	if hash() == first {
		t.Error("a new source kept the hash")
	}
}
