package main

import (
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
)

func TestSaveProfile(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, "heap.pb.gz")
	f, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	p := Profile{Target: keyRSS, Agent: "alpha", Kind: "heap", When: "now", tmp: tmp}
	out := filepath.Join(dir, "results")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := saveProfile(&p, out, "2026-01-02T0304Z"); err != nil {
		t.Fatal(err)
	}
	if p.File != "2026-01-02T0304Z-consumer-rss-alpha-heap.pb.gz" || p.Top != "2026-01-02T0304Z-consumer-rss-alpha-heap.top.txt" {
		t.Errorf("names %q, %q", p.File, p.Top)
	}
	top, err := os.ReadFile(filepath.Join(out, p.Top))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(top), "# go tool pprof"); n != 2 {
		t.Errorf("%d sections in:\n%s", n, top)
	}
	if ex := topExcerpt(filepath.Join(out, p.Top), 6); !strings.Contains(ex, "flat") || strings.Contains(ex, "Build ID") {
		t.Errorf("excerpt:\n%s", ex)
	}
}

func TestCPUHotspots(t *testing.T) {
	top := `# cpu profile of the beta agent (x), for target "burst-ratio"
# go tool pprof -top x.pb.gz

      flat  flat%   sum%        cum   cum%
     1.56s  5.86%  5.86%      3.32s 12.48%  github.com/annexhq/annex/internal/controller/shadowpod.(*Reconciler).used

# go tool pprof -top -cum -hide=^runtime x.pb.gz

Duration: 91s, Total samples = 29.84s (32.79%)
      flat  flat%   sum%        cum   cum%
         0     0%     0%     17.00s 57.00%  sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller[...]).Reconcile
     0.01s 0.034% 0.067%     16.96s 56.84%  github.com/annexhq/annex/internal/controller/shadowpod.(*Reconciler).Reconcile
         0     0% 0.067%     16.36s 54.83%  github.com/annexhq/annex/internal/controller/shadowpod.(*Reconciler).create.func1
     0.09s   0.3%  0.37%     15.45s 51.78%  github.com/annexhq/annex/internal/controller/shadowpod.(*Reconciler).used
         0     0%  1.59%      1.70s 15.87%  github.com/virtual-kubelet/virtual-kubelet/node.podsEffectivelyEqual
`
	path := filepath.Join(t.TempDir(), "cpu.top.txt")
	if err := os.WriteFile(path, []byte(top), 0o644); err != nil {
		t.Fatal(err)
	}
	want := "29.84s of CPU in 91s (32.79% of one core); most of it in (cumulative) " +
		"`internal/controller/shadowpod.(*Reconciler).Reconcile` 56.84%, `internal/controller/shadowpod.(*Reconciler).used` 51.78%, `node.podsEffectivelyEqual` 15.87%."
	if got := cpuHotspots(path); got != want {
		t.Errorf("cpuHotspots:\n got %s\nwant %s", got, want)
	}
	// pprof pads a share below 10% with a space.
	top = strings.Replace(top, "Total samples = 29.84s (32.79%)", "Total samples = 2.59s ( 6.02%)", 1)
	if err := os.WriteFile(path, []byte(top), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := cpuHotspots(path); !strings.HasPrefix(got, "2.59s of CPU in 91s (6.02% of one core);") {
		t.Errorf("cpuHotspots with a padded share: %s", got)
	}
}
