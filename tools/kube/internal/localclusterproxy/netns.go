package localclusterproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// dialTimeout bounds every dial of the proxies.
const dialTimeout = 10 * time.Second

// netnsDialer dials TCP from inside one network namespace.
type netnsDialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// hereDialer dials from the process's own network namespace.
type hereDialer struct{}

func (hereDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	return d.DialContext(ctx, network, addr)
}

// nsDialer dials from the network namespace behind fd: the socket is made
// on an OS thread switched there, and keeps that namespace for its life.
type nsDialer struct {
	target *os.File // the namespace dialled from
	self   *os.File // the process's own namespace, to switch back to
}

// newNSDialer returns a dialer for the namespace the inherited descriptor
// fd refers to.
func newNSDialer(fd int) (*nsDialer, error) {
	target := os.NewFile(uintptr(fd), fmt.Sprintf("netns-fd-%d", fd))
	if target == nil {
		return nil, fmt.Errorf("descriptor %d is not open", fd)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil || st.Type != unix.NSFS_MAGIC {
		return nil, fmt.Errorf("descriptor %d is not a namespace (did the parent pass the host's /proc/self/ns/net?)", fd)
	}
	self, err := os.Open("/proc/self/ns/net")
	if err != nil {
		return nil, err
	}
	return &nsDialer{target: target, self: self}, nil
}

func (d *nsDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := inNetns(d.target, d.self, func() error {
		var err error
		nd := net.Dialer{Timeout: dialTimeout}
		conn, err = nd.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// inNetns runs f on a goroutine locked to an OS thread switched into
// target, then switches it back to self. A thread that cannot be switched
// back stays locked, so the runtime discards it.
func inNetns(target, self *os.File, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to own network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// splice copies between a and b both ways until both directions ended,
// passing a half-close on, then closes both.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go half(a, b)
	go half(b, a)
	wg.Wait()
	_ = a.Close()
	_ = b.Close()
}
