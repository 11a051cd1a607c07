// Package netnsutil owns the small network-namespace mechanics the packages
// that build local test networks share (internal/sandboxnet for the
// sandbox's pod and router namespaces, internal/localcluster for real
// nodes): running code on an OS thread switched into a namespace, and making
// bridges, veth pairs, addresses and sysctls exactly what they should be
// through netlink handles of the namespaces involved, so that no device is
// ever made in the calling process's own namespace. Linux only; root.
package netnsutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// In runs f on a fresh goroutine locked to its OS thread, with the thread
// switched into target: sockets f creates live there. Goroutines f starts
// run elsewhere, in the process's own namespace. If the thread cannot be
// switched back it stays locked, so the runtime discards it when the
// goroutine ends and no other goroutine ever runs in the wrong namespace.
func In(target netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			// Keep the thread locked: it dies with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("return to the original network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Dialer returns a DialContext (for an http.Transport) that opens each
// connection from inside the network namespace target; target must stay
// open while it is used.
func Dialer(target netns.NsHandle) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := In(target, func() error {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			conn = c
			return err
		})
		return conn, err
	}
}

// WriteSysctls writes /proc/sys entries (keys like "net/ipv4/ip_forward");
// call it inside the namespace they are meant for (see In): the net/
// entries are per namespace.
func WriteSysctls(kv map[string]string) error {
	for k, v := range kv {
		//nolint:gosec // G306: a /proc/sys entry exists already; the mode is never used
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", strings.ReplaceAll(k, "/", "."), v, err)
		}
	}
	return nil
}

// LinkUp sets the named device up.
func LinkUp(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("device %s: %w", name, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}

// IsNotFound reports whether err says a device does not exist.
func IsNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

// EnsureBridge returns the bridge name, made (or remade, if a device of
// another type has the name) and up.
func EnsureBridge(h *netlink.Handle, name string) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	switch {
	case err == nil && l.Type() == "bridge":
	case err == nil || IsNotFound(err):
		if err == nil {
			if err := h.LinkDel(l); err != nil {
				return nil, fmt.Errorf("delete %s (a %s, not a bridge): %w", name, l.Type(), err)
			}
		}
		if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
			return nil, fmt.Errorf("create bridge %s: %w", name, err)
		}
		if l, err = h.LinkByName(name); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("device %s: %w", name, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return nil, fmt.Errorf("set %s up: %w", name, err)
	}
	return l, nil
}

// EnsureVethPair returns the veth aName (through ah) whose peer is bName in
// namespace bns (through bh). If they exist and are each other's peers they
// are kept; otherwise whatever has those names is deleted and the pair made
// again, the a end in ah's namespace and the b end straight in bns (neither
// ever exists in the namespace of the calling process); made says whether
// the pair was made.
func EnsureVethPair(ah *netlink.Handle, aName string, bh *netlink.Handle, bName string, bns netns.NsHandle) (a, b netlink.Link, made bool, err error) {
	a, aErr := ah.LinkByName(aName)
	if aErr != nil && !IsNotFound(aErr) {
		return nil, nil, false, fmt.Errorf("device %s: %w", aName, aErr)
	}
	b, bErr := bh.LinkByName(bName)
	if bErr != nil && !IsNotFound(bErr) {
		return nil, nil, false, fmt.Errorf("device %s: %w", bName, bErr)
	}
	if aErr == nil && bErr == nil && a.Type() == "veth" && b.Type() == "veth" &&
		a.Attrs().ParentIndex == b.Attrs().Index && b.Attrs().ParentIndex == a.Attrs().Index {
		return a, b, false, nil
	}
	if aErr == nil {
		if err := ah.LinkDel(a); err != nil && !IsNotFound(err) {
			return nil, nil, false, fmt.Errorf("delete stale %s: %w", aName, err)
		}
	}
	if bErr == nil {
		// Gone already if it was a's peer.
		if b, err := bh.LinkByName(bName); err == nil {
			if err := bh.LinkDel(b); err != nil && !IsNotFound(err) {
				return nil, nil, false, fmt.Errorf("delete stale %s: %w", bName, err)
			}
		}
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: aName}, PeerName: bName, PeerNamespace: netlink.NsFd(int(bns))}
	if err := ah.LinkAdd(veth); err != nil {
		return nil, nil, false, fmt.Errorf("create veth %s/%s: %w", aName, bName, err)
	}
	if a, err = ah.LinkByName(aName); err != nil {
		return nil, nil, false, err
	}
	if b, err = bh.LinkByName(bName); err != nil {
		return nil, nil, false, err
	}
	return a, b, true, nil
}

// SetOnlyAddr makes p the only IPv4 address of l.
func SetOnlyAddr(h *netlink.Handle, l netlink.Link, p netip.Prefix, scope netlink.Scope) error {
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", l.Attrs().Name, err)
	}
	have := false
	for _, a := range addrs {
		if a.IPNet != nil && PrefixOf(a.IPNet) == p {
			have = true
			continue
		}
		if err := h.AddrDel(l, &a); err != nil {
			return fmt.Errorf("remove %s from %s: %w", a.IPNet, l.Attrs().Name, err)
		}
	}
	if have {
		return nil
	}
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: IPNet(p), Scope: int(scope)}); err != nil {
		return fmt.Errorf("add %s to %s: %w", p, l.Attrs().Name, err)
	}
	return nil
}

// WaitOperUp waits up to timeout for device name to be operationally up: a
// new veth drops what is sent before the kernel has activated it.
func WaitOperUp(h *netlink.Handle, name string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		l, err := h.LinkByName(name)
		if err != nil || l.Attrs().OperState == netlink.OperUp || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// IPNet converts p to a *net.IPNet.
func IPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// PrefixOf converts n to a netip.Prefix (the zero one if n is invalid).
func PrefixOf(n *net.IPNet) netip.Prefix {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones)
}
