package main

import (
	"os"
	"path/filepath"
	"strings"
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

// TestInstalledToolsRecipes: metrics-server and kube-router are stamped with
// their versions (as their own Makefiles do), and a change of version
// changes the recipe, so the binary is rebuilt.
func TestInstalledToolsRecipes(t *testing.T) {
	names := map[string]installedTool{}
	for _, tool := range installedTools {
		names[tool.name] = tool
	}
	ms, ok := names["metrics-server"]
	if !ok {
		t.Fatalf("installedTools %v lack metrics-server", installedTools)
	}
	if _, ok := names["kwok"]; !ok {
		t.Errorf("installedTools %v lack kwok", installedTools)
	}
	kr, ok := names["kube-router"]
	if !ok {
		t.Errorf("installedTools %v lack kube-router", installedTools)
	} else if want := "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=" + kubeRouterVersion; !strings.Contains(kr.recipe(), want) {
		t.Errorf("kube-router's recipe %q lacks %q", kr.recipe(), want)
	}
	if want := "-X k8s.io/client-go/pkg/version.gitVersion=" + metricsServerVersion; !strings.Contains(ms.recipe(), want) {
		t.Errorf("metrics-server's recipe %q lacks %q", ms.recipe(), want)
	}
	other := ms
	other.version = "v0.0.1"
	if other.recipe() == ms.recipe() {
		t.Error("another version kept the recipe")
	}
}
