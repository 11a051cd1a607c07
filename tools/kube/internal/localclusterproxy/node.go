package localclusterproxy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// nodeConfig is what `node` is told on its command line.
type nodeConfig struct {
	hostFD    int
	apiListen netip.AddrPort
	apiTarget netip.AddrPort
	tmpfs     []string
	sysctls   []sysctlFile
	readyFile string
}

// sysctlFile is a file whose content the node sees, read-only, in place
// of a host-wide /proc/sys entry.
type sysctlFile struct {
	key  string // e.g. "vm/overcommit_memory"
	file string
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func parseNode(args []string, stderr io.Writer) (nodeConfig, error) {
	fs := flag.NewFlagSet(Name+" node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c nodeConfig
	var listen, target string
	var tmpfs, sysctls listFlag
	fs.IntVar(&c.hostFD, "host-netns-fd", -1, "inherited descriptor of the host's network namespace, where --api-target is dialled")
	fs.StringVar(&listen, "api-listen", "", "IP:port to accept the node's API server connections on, inside the node's network namespace (the cluster's API address; it need not be assigned yet)")
	fs.StringVar(&target, "api-target", "", "the API server's IP:port in the host's network namespace (loopback)")
	fs.Var(&tmpfs, "tmpfs", "directory to cover with an empty tmpfs in the node's mount namespace (repeatable): paths containerd and the kubelet hard-code, private to the node")
	fs.Var(&sysctls, "sysctl-file", "KEY=FILE: bind FILE read-only over /proc/sys/KEY in the node's mount namespace (repeatable); /proc/sys is read-only there except net/, which is per network namespace")
	fs.StringVar(&c.readyFile, "ready-file", "", "file written once the mounts are made and the API address is served")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s node --host-netns-fd=N --api-listen=IP:PORT --api-target=127.0.0.1:PORT [--tmpfs=DIR]... [--sysctl-file=KEY=FILE]... [--ready-file=PATH]\n\n"+
			"PID 1 of a real node: start it with new PID, mount and network namespaces.\n"+
			"Every process of the node dies with it.\n\n", Name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.hostFD < 0 {
		return c, errors.New("--host-netns-fd is required")
	}
	var err error
	if c.apiListen, err = netip.ParseAddrPort(listen); err != nil {
		return c, fmt.Errorf("--api-listen: %w", err)
	}
	if c.apiTarget, err = netip.ParseAddrPort(target); err != nil {
		return c, fmt.Errorf("--api-target: %w", err)
	}
	if !c.apiTarget.Addr().IsLoopback() {
		return c, fmt.Errorf("--api-target %s: must be a loopback address", c.apiTarget)
	}
	for _, d := range tmpfs {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/" {
			return c, fmt.Errorf("--tmpfs %q: must be a clean absolute path other than /", d)
		}
		c.tmpfs = append(c.tmpfs, d)
	}
	for _, s := range sysctls {
		key, file, ok := strings.Cut(s, "=")
		key = strings.Trim(key, "/")
		if !ok || key == "" || file == "" || strings.Contains(key, "..") || strings.HasPrefix(key, "net/") {
			return c, fmt.Errorf("--sysctl-file %q: want KEY=FILE with KEY outside net/, e.g. vm/overcommit_memory=/path/file", s)
		}
		c.sysctls = append(c.sysctls, sysctlFile{key: key, file: file})
	}
	return c, nil
}

func runNode(args []string, stderr io.Writer, log *slog.Logger) error {
	c, err := parseNode(args, stderr)
	if err != nil {
		return err
	}
	if os.Getpid() != 1 {
		return fmt.Errorf("must run as PID 1 of new PID, mount and network namespaces (started with CLONE_NEWPID|CLONE_NEWNS|CLONE_NEWNET), not as PID %d", os.Getpid())
	}
	host, err := newNSDialer(c.hostFD)
	if err != nil {
		return fmt.Errorf("--host-netns-fd: %w", err)
	}
	// Reap from the start: orphans of the node become children of PID 1.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)

	if err := makeNodeMounts(c); err != nil {
		return err
	}
	ln, err := listenFreebind(c.apiListen.String())
	if err != nil {
		return fmt.Errorf("listen on the API address %s: %w", c.apiListen, err)
	}
	go forwardAll(ln, host, c.apiTarget.String(), log)
	if c.readyFile != "" {
		if err := os.WriteFile(c.readyFile, []byte("ready\n"), 0o644); err != nil {
			return err
		}
	}
	log.Info("Node namespaces ready", "apiAddress", c.apiListen, "apiServer", c.apiTarget, "tmpfs", c.tmpfs, "sysctlFiles", len(c.sysctls))
	for s := range sigs {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		// Exiting is the stop: the kernel kills every other process of
		// the PID namespace.
		log.Info("Stopping the node", "signal", s.String())
		return nil
	}
	return nil
}

// makeNodeMounts makes the node's mount namespace private and prepares it.
func makeNodeMounts(c nodeConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mount namespace private: %w", err)
	}
	// A /proc of the node's PID namespace.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, d := range c.tmpfs {
		if err := unix.Mount("tmpfs", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
			return fmt.Errorf("mount a tmpfs on %s: %w", d, err)
		}
	}
	// Host-wide sysctls read-only; the per-namespace net/ ones writable
	// (bound before the remount, which does not reach submounts).
	if err := unix.Mount("/proc/sys", "/proc/sys", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind /proc/sys: %w", err)
	}
	if err := unix.Mount("/proc/sys/net", "/proc/sys/net", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind /proc/sys/net: %w", err)
	}
	for _, s := range c.sysctls {
		if err := bindReadOnly(s.file, filepath.Join("/proc/sys", s.key)); err != nil {
			return err
		}
	}
	if err := unix.Mount("", "/proc/sys", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make /proc/sys read-only: %w", err)
	}
	return nil
}

func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over %s: %w", src, dst, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", dst, err)
	}
	return nil
}

// listenFreebind listens on addr even before the address is assigned to a
// device of the namespace (IP_FREEBIND).
func listenFreebind(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_FREEBIND, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), "tcp4", addr)
}

// forwardAll forwards every connection accepted on ln to target, dialled
// with d.
func forwardAll(ln net.Listener, d netnsDialer, target string, log *slog.Logger) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			log.Error("API address listener failed", "err", err)
			return
		}
		go func() {
			up, err := d.DialContext(context.Background(), "tcp", target)
			if err != nil {
				log.Info("Cannot reach the API server", "target", target, "err", err.Error())
				_ = conn.Close()
				return
			}
			splice(conn, up)
		}()
	}
}

// reap collects every exited child.
func reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
