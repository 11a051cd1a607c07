package ociimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// throwawayContainerd starts a containerd of its own (root, state, sockets
// and opt dir under a temp dir; CRI off) and returns a function running ctr
// against it. The test's cleanup stops it and removes its files. Skips when
// not root or containerd/ctr is missing.
func throwawayContainerd(t *testing.T) func(args ...string) (string, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("importing into containerd needs root (containerd runs as root); run the test as root")
	}
	for _, bin := range []string{"containerd", "ctr"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed: apt-get install -y containerd", bin)
		}
	}
	// A short path: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "ctd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "containerd.sock")
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc", filepath.Join(dir, "opt"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("containerd log:\n%s", logs.String())
		}
	})
	ctr := func(args ...string) (string, error) {
		out, err := exec.Command("ctr", append([]string{"--address", sock}, args...)...).CombinedOutput() //nolint:gosec // test
		return string(out), err
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := ctr("version"); err == nil {
			return ctr
		}
		select {
		case <-exited:
			t.Fatalf("containerd exited at start:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer in 20 s:\n%s", logs.String())
		}
	}
}

// TestContainerdImport imports the pause and echo images into a throwaway
// containerd, as a real node's images are loaded, and checks that they are
// listed under their names with the digests the builder reported.
func TestContainerdImport(t *testing.T) {
	ctr := throwawayContainerd(t)
	ctx := context.Background()
	dir := t.TempDir()
	for _, build := range []func(context.Context, string) (Image, error){Pause, Echo} {
		img, err := build(ctx, filepath.Join(dir, "image.tar"))
		if err != nil {
			t.Fatal(err)
		}
		if out, err := ctr("-n", "k8s.io", "images", "import", img.Path); err != nil {
			t.Fatalf("ctr images import %s: %v\n%s", img.Path, err, out)
		}
		out, err := ctr("-n", "k8s.io", "images", "ls")
		if err != nil {
			t.Fatalf("ctr images ls: %v\n%s", err, out)
		}
		listed := false
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == img.Ref {
				listed = true
				if f[2] != img.Digest {
					t.Errorf("%s is listed with digest %s, want %s", img.Ref, f[2], img.Digest)
				}
			}
		}
		if !listed {
			t.Fatalf("%s is not listed after the import:\n%s", img.Ref, out)
		}
		// Complete and unpacked into a snapshot, as the kubelet needs it:
		// REF TYPE DIGEST STATUS SIZE UNPACKED.
		out, err = ctr("-n", "k8s.io", "images", "check", "name=="+img.Ref)
		if err != nil {
			t.Fatalf("ctr images check: %v\n%s", err, out)
		}
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
			!strings.Contains(lines[1], " complete ") || !strings.HasSuffix(lines[1], "true") {
			t.Fatalf("%s is not complete and unpacked:\n%s", img.Ref, out)
		}
	}
}

// TestContainerdRun runs the echo image's commands (found through PATH=/,
// as the image's user) in containers of a throwaway containerd: the binary
// is static and runnable as packed. The containers' cgroups live under a
// parent of the test's own, removed afterwards.
func TestContainerdRun(t *testing.T) {
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed: apt-get install -y runc")
	}
	ctr := throwawayContainerd(t)
	ctx := context.Background()
	parent := fmt.Sprintf("annex-ociimage-test-%d", os.Getpid())
	t.Cleanup(func() { removeCgroups(t, parent) })
	echo, err := Echo(ctx, filepath.Join(t.TempDir(), "echo.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ctr("-n", "k8s.io", "images", "import", echo.Path); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"say", []string{"echo-server", "say", "hello", "from", "a", "container"}, "hello from a container\n"},
		{"get", []string{"echo-server", "get", "-timeout", "1s", "http://127.0.0.1:1/"}, "connect: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-n", "k8s.io", "run", "--rm", "--cgroup", "/" + parent + "/" + tc.name,
				echo.Ref, "ociimage-test-" + tc.name}, tc.args...)
			out, _ := ctr(args...)
			if !strings.Contains(out, tc.want) {
				t.Fatalf("ctr run %s: output %q, want it to contain %q", strings.Join(tc.args, " "), out, tc.want)
			}
		})
	}
}

// removeCgroups removes the cgroup directory parent (and its children) from
// every cgroup v1 hierarchy and from the v2 tree.
func removeCgroups(t *testing.T, parent string) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", parent))
	if d := filepath.Join("/sys/fs/cgroup", parent); dirExists(d) {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		children, _ := filepath.Glob(filepath.Join(d, "*", "cgroup.procs"))
		for _, c := range children {
			if err := os.Remove(filepath.Dir(c)); err != nil {
				t.Errorf("removing cgroup %s: %v", filepath.Dir(c), err)
			}
		}
		if err := os.Remove(d); err != nil {
			t.Errorf("removing cgroup %s: %v", d, err)
		}
	}
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
