package sandboxnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/annexhq/annex/internal/netnsutil"
)

// netnsDir is where named network namespaces are bind-mounted (as by
// `ip netns add`).
const netnsDir = "/run/netns"

// maxBody bounds what Get reads.
const maxBody = 10 << 20

// ErrNoNetns is wrapped by the errors of Do, StartInNetns and Get when the
// named namespace does not exist.
var ErrNoNetns = errors.New("no such network namespace")

// requireRoot fails unless the process runs as root.
func requireRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("the sandbox network needs root (network namespaces, veth devices, /run/netns bind mounts): run as root")
	}
	return nil
}

// openNetns opens the named namespace, refusing a file in /run/netns that is
// not a namespace (a leftover of an interrupted creation).
func openNetns(name string) (netns.NsHandle, error) {
	h, err := netns.GetFromPath(filepath.Join(netnsDir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return netns.None(), fmt.Errorf("network namespace %s: %w", name, ErrNoNetns)
	}
	if err != nil {
		return netns.None(), fmt.Errorf("network namespace %s: %w", name, err)
	}
	if !isNetns(h) {
		h.Close()
		return netns.None(), fmt.Errorf("network namespace %s: %s is not a namespace: %w", name, filepath.Join(netnsDir, name), ErrNoNetns)
	}
	return h, nil
}

// isNetns reports whether h is a namespace (nsfs), not a plain file.
func isNetns(h netns.NsHandle) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(int(h), &st) == nil && st.Type == unix.NSFS_MAGIC
}

// Do runs f on an OS thread switched into the named namespace: sockets f
// creates live there. Goroutines f starts run elsewhere, in the process's
// own namespace.
func Do(netnsName string, f func() error) error {
	h, err := openNetns(netnsName)
	if err != nil {
		return err
	}
	defer h.Close()
	return netnsutil.In(h, f)
}

// StartInNetns starts cmd in the named namespace: the thread that forks it
// is switched there for the call to cmd.Start and back, and the child
// inherits the thread's namespace. (With SysProcAttr.Pdeathsig the child
// would be signalled when that thread exits; use a detached child instead.)
func StartInNetns(netnsName string, cmd *exec.Cmd) error {
	return Do(netnsName, cmd.Start)
}

// Get performs an HTTP GET of url from inside the named namespace (the
// connection's socket is made there) within timeout and returns the body.
// Use an IP address in url: a host name would be resolved outside the
// namespace. A status other than 2xx returns the body and an error naming
// the status. Proxy settings of the environment are ignored.
func Get(ctx context.Context, netnsName, url string, timeout time.Duration) ([]byte, error) {
	h, err := openNetns(netnsName)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	tr := &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext:       netnsutil.Dialer(h),
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: timeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("from network namespace %s: %w", netnsName, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return body, fmt.Errorf("GET %s from network namespace %s: read the body: %w", url, netnsName, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return body, fmt.Errorf("GET %s from network namespace %s: %s", url, netnsName, resp.Status)
	}
	return body, nil
}

// NetnsExists reports whether the named namespace exists.
func NetnsExists(name string) bool {
	h, err := openNetns(name)
	if err != nil {
		return false
	}
	h.Close()
	return true
}

// ensureNetns opens the named namespace, creating it (and replacing a stale
// file of that name) if needed; created says whether it is new.
func ensureNetns(name string) (h netns.NsHandle, created bool, err error) {
	h, err = openNetns(name)
	if err == nil {
		return h, false, nil
	}
	if !errors.Is(err, ErrNoNetns) {
		return netns.None(), false, err
	}
	path := filepath.Join(netnsDir, name)
	if _, serr := os.Lstat(path); serr == nil {
		// A file that is not a namespace: an interrupted creation.
		_ = unix.Unmount(path, unix.MNT_DETACH)
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return netns.None(), false, fmt.Errorf("remove stale %s: %w", path, err)
		}
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		// NewNamed unshares this thread into the new namespace.
		nh, nerr := netns.NewNamed(name)
		if err := netns.Set(orig); err != nil {
			if nerr == nil {
				nh.Close()
			}
			errc <- fmt.Errorf("return to the original network namespace: %w", err) // the thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		if nerr != nil {
			errc <- nerr
			return
		}
		h = nh
		errc <- nil
	}()
	if err := <-errc; err != nil {
		if _, serr := os.Lstat(path); serr == nil && !NetnsExists(name) {
			_ = os.Remove(path)
		}
		return netns.None(), false, fmt.Errorf("create network namespace %s: %w", name, err)
	}
	return h, true, nil
}

// deleteNetns removes the named namespace's bind mount (the namespace goes
// away, with its devices, once nothing else holds it). A missing one is not
// an error.
func deleteNetns(name string) error {
	path := filepath.Join(netnsDir, name)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete network namespace %s: %w", name, err)
	}
	return nil
}

// listNetns returns the names in /run/netns that start with prefix, sorted.
func listNetns(prefix string) ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}
