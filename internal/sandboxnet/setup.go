package sandboxnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Setup creates the underlay namespace with its bridge and, for every
// cluster, the router namespace: loopback up, IPv4 forwarding on,
// reverse-path filtering off, and the veth "ul0" on the bridge holding
// UnderlayAddr(Index)/24. It is idempotent: what exists is kept when right
// and repaired when not (a veth whose peer is not where it belongs is made
// again, stray underlay addresses removed). It needs root.
func Setup(ctx context.Context, clusters []Cluster) error {
	return defaultNaming.setup(ctx, clusters)
}

// Teardown deletes every namespace whose name starts with "annex-sbx-"
// (routers, underlay, pods) and with them their devices and routes. It is
// idempotent. Processes still running in a namespace keep it (and its
// devices) alive until they exit: stop gateways and RunPods first.
func Teardown() error { return defaultNaming.teardown() }

func (n naming) setup(ctx context.Context, clusters []Cluster) error {
	if err := requireRoot(); err != nil {
		return err
	}
	if err := validateClusters(clusters); err != nil {
		return err
	}
	ul, _, err := ensureNetns(n.underlay())
	if err != nil {
		return err
	}
	defer ul.Close()
	ulh, err := netlink.NewHandleAt(ul)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", n.underlay(), err)
	}
	defer ulh.Close()
	if err := linkUp(ulh, "lo"); err != nil {
		return fmt.Errorf("%s: %w", n.underlay(), err)
	}
	br, err := ensureBridge(ulh, bridgeName)
	if err != nil {
		return fmt.Errorf("%s: %w", n.underlay(), err)
	}
	for _, c := range clusters {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := n.setupRouter(c, ul, ulh, br); err != nil {
			return fmt.Errorf("router of %s (%s): %w", c.Name, n.router(c.Name), err)
		}
	}
	return nil
}

// setupRouter makes cluster c's router namespace and its uplink.
func (n naming) setupRouter(c Cluster, ul netns.NsHandle, ulh *netlink.Handle, br netlink.Link) error {
	r, _, err := ensureNetns(n.router(c.Name))
	if err != nil {
		return err
	}
	defer r.Close()
	// Before any device is made, so new devices inherit rp_filter 0.
	if err := inNetns(r, func() error {
		return writeSysctls(map[string]string{
			"net/ipv4/ip_forward":             "1",
			"net/ipv4/conf/all/rp_filter":     "0",
			"net/ipv4/conf/default/rp_filter": "0",
		})
	}); err != nil {
		return err
	}
	rh, err := netlink.NewHandleAt(r)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer rh.Close()
	if err := linkUp(rh, "lo"); err != nil {
		return err
	}
	up, port, made, err := ensureVethPair(rh, routerUplink, ulh, bridgePort(c), ul)
	if err != nil {
		return err
	}
	if port.Attrs().MasterIndex != br.Attrs().Index {
		if err := ulh.LinkSetMaster(port, br); err != nil {
			return fmt.Errorf("attach %s to %s: %w", bridgePort(c), bridgeName, err)
		}
	}
	if err := ulh.LinkSetUp(port); err != nil {
		return fmt.Errorf("set %s up: %w", bridgePort(c), err)
	}
	addr := netip.PrefixFrom(UnderlayAddr(c.Index), underlayBits)
	if err := setOnlyAddr(rh, up, addr, netlink.SCOPE_UNIVERSE); err != nil {
		return err
	}
	if err := rh.LinkSetUp(up); err != nil {
		return fmt.Errorf("set %s up: %w", routerUplink, err)
	}
	if made {
		waitOperUp(rh, routerUplink)
	}
	return inNetns(r, func() error {
		return writeSysctls(map[string]string{"net/ipv4/conf/" + routerUplink + "/rp_filter": "0"})
	})
}

func (n naming) teardown() error {
	names, err := listNetns(n.prefix)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return nil
	}
	if err := requireRoot(); err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if err := deleteNetns(name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeSysctls writes /proc/sys entries; call it inside the namespace they
// are meant for (the net/ entries are per namespace).
func writeSysctls(kv map[string]string) error {
	for k, v := range kv {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", strings.ReplaceAll(k, "/", "."), v, err)
		}
	}
	return nil
}

// linkUp sets the named device up.
func linkUp(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("device %s: %w", name, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}

// isNotFound reports whether err says a device does not exist.
func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

// ensureBridge returns the bridge name, made (or remade, if a device of
// another type has the name) and up.
func ensureBridge(h *netlink.Handle, name string) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	switch {
	case err == nil && l.Type() == "bridge":
	case err == nil || isNotFound(err):
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

// ensureVethPair returns the veth aName (through ah) whose peer is bName in
// namespace bns (through bh). If they exist and are each other's peers they
// are kept; otherwise whatever has those names is deleted and the pair made
// again, the a end in ah's namespace and the b end straight in bns (neither
// ever exists in the namespace of the calling process); made says whether
// the pair was made.
func ensureVethPair(ah *netlink.Handle, aName string, bh *netlink.Handle, bName string, bns netns.NsHandle) (a, b netlink.Link, made bool, err error) {
	a, aErr := ah.LinkByName(aName)
	if aErr != nil && !isNotFound(aErr) {
		return nil, nil, false, fmt.Errorf("device %s: %w", aName, aErr)
	}
	b, bErr := bh.LinkByName(bName)
	if bErr != nil && !isNotFound(bErr) {
		return nil, nil, false, fmt.Errorf("device %s: %w", bName, bErr)
	}
	if aErr == nil && bErr == nil && a.Type() == "veth" && b.Type() == "veth" &&
		a.Attrs().ParentIndex == b.Attrs().Index && b.Attrs().ParentIndex == a.Attrs().Index {
		return a, b, false, nil
	}
	if aErr == nil {
		if err := ah.LinkDel(a); err != nil && !isNotFound(err) {
			return nil, nil, false, fmt.Errorf("delete stale %s: %w", aName, err)
		}
	}
	if bErr == nil {
		// Gone already if it was a's peer.
		if b, err := bh.LinkByName(bName); err == nil {
			if err := bh.LinkDel(b); err != nil && !isNotFound(err) {
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

// setOnlyAddr makes p the only IPv4 address of l.
func setOnlyAddr(h *netlink.Handle, l netlink.Link, p netip.Prefix, scope netlink.Scope) error {
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", l.Attrs().Name, err)
	}
	have := false
	for _, a := range addrs {
		if a.IPNet != nil && prefixOf(a.IPNet) == p {
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
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipNet(p), Scope: int(scope)}); err != nil {
		return fmt.Errorf("add %s to %s: %w", p, l.Attrs().Name, err)
	}
	return nil
}

// ipNet converts p to a *net.IPNet.
func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// prefixOf converts n to a netip.Prefix (the zero one if n is invalid).
func prefixOf(n *net.IPNet) netip.Prefix {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones)
}
