package localcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The cgroups of real nodes. The host's cgroup mounts are never changed:
// the nodes' cgroups are directories made in each mounted hierarchy and
// removed again.

// cgroupMount is one mounted cgroup hierarchy.
type cgroupMount struct {
	Path   string // mount point, e.g. /sys/fs/cgroup/cpuset
	V2     bool   // the unified hierarchy
	Cpuset bool   // a v1 hierarchy with the cpuset controller
}

// cgroupMounts lists the cgroup hierarchies mounted in this process's mount
// namespace.
func cgroupMounts() ([]cgroupMount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseCgroupMounts(string(data)), nil
}

// parseCgroupMounts picks the cgroup and cgroup2 mounts of a mountinfo
// file, each mount point once.
func parseCgroupMounts(mountinfo string) []cgroupMount {
	var out []cgroupMount
	seen := map[string]bool{}
	for line := range strings.SplitSeq(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if seen[mp] {
			continue
		}
		seen[mp] = true
		out = append(out, cgroupMount{
			Path:   mp,
			V2:     g[0] == "cgroup2",
			Cpuset: g[0] == "cgroup" && slices.Contains(strings.Split(g[2], ","), "cpuset"),
		})
	}
	return out
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// createCgroup makes the cgroup rel (e.g. "/annex-lc-x/alpha-node-0") and
// its missing parents in every hierarchy. A new cpuset cgroup gets its
// parent's CPUs and memory nodes (it could hold no task otherwise); a new
// v2 cgroup gets the controllers its parent offers enabled for its
// children.
func createCgroup(mounts []cgroupMount, rel string) error {
	parts := strings.Split(strings.Trim(rel, "/"), "/")
	for _, m := range mounts {
		dir := m.Path
		for _, p := range parts {
			parent := dir
			dir = filepath.Join(dir, p)
			err := os.Mkdir(dir, 0o755)
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("create cgroup %s: %w", dir, err)
			}
			if m.Cpuset {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					if err := copyCgroupFile(parent, dir, f); err != nil {
						return err
					}
				}
			}
			if m.V2 {
				if err := enableControllers(dir); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func copyCgroupFile(from, to, name string) error {
	data, err := os.ReadFile(filepath.Join(from, name))
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", from, err)
	}
	if err := os.WriteFile(filepath.Join(to, name), data, 0o644); err != nil {
		return fmt.Errorf("cgroup %s: %w", to, err)
	}
	return nil
}

// enableControllers enables, for the children of the v2 cgroup dir, every
// controller dir has.
func enableControllers(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	var enable []string
	for c := range strings.FieldsSeq(string(data)) {
		enable = append(enable, "+"+c)
	}
	if len(enable) == 0 {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644); err != nil {
		return fmt.Errorf("cgroup %s: enable controllers %v: %w", dir, enable, err)
	}
	return nil
}

// cgroupRemoveWait bounds how long removeCgroupTree retries a cgroup whose
// last tasks are still exiting.
const cgroupRemoveWait = 10 * time.Second

// removeCgroupTree removes the cgroup rel and everything below it in every
// hierarchy, deepest first. Processes still in them (a node's containers
// whose node is gone: nothing else is ever put there) are killed first. A
// missing cgroup is not an error.
func removeCgroupTree(mounts []cgroupMount, rel string) error {
	var errs []error
	for _, m := range mounts {
		root := filepath.Join(m.Path, rel)
		var dirs []string
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		slices.Reverse(dirs) // children before parents
		for _, d := range dirs {
			if err := removeCgroup(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroup removes one cgroup directory, killing what is left in it
// and retrying while its tasks exit.
func removeCgroup(dir string) error {
	deadline := time.Now().Add(cgroupRemoveWait)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w (tasks left: %v)", dir, err, cgroupProcs(dir))
		}
		for _, pid := range cgroupProcs(dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cgroupProcs lists the processes in the cgroup dir.
func cgroupProcs(dir string) []int {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for f := range strings.FieldsSeq(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}
