package sandboxnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/annexhq/annex/internal/netnsutil"
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
	return n.onUnderlay(ctx, clusters, func(i int, ul netns.NsHandle, ulh *netlink.Handle, br netlink.Link) error {
		c := clusters[i]
		if err := n.setupRouter(c, ul, ulh, br); err != nil {
			return fmt.Errorf("router of %s (%s): %w", c.Name, n.router(c.Name), err)
		}
		return nil
	})
}

// onUnderlay checks the clusters, makes the underlay and calls f for each
// cluster in turn, with the underlay's namespace, netlink handle and bridge.
func (n naming) onUnderlay(ctx context.Context, clusters []Cluster, f func(i int, ul netns.NsHandle, ulh *netlink.Handle, br netlink.Link) error) error {
	if err := requireRoot(); err != nil {
		return err
	}
	if err := validateClusters(clusters); err != nil {
		return err
	}
	ul, ulh, br, err := n.ensureUnderlay()
	if err != nil {
		return err
	}
	defer ul.Close()
	defer ulh.Close()
	for i := range clusters {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := f(i, ul, ulh, br); err != nil {
			return err
		}
	}
	return nil
}

// ensureUnderlay makes the underlay namespace and its bridge; the caller
// closes the handles.
func (n naming) ensureUnderlay() (netns.NsHandle, *netlink.Handle, netlink.Link, error) {
	ul, _, err := ensureNetns(n.underlay())
	if err != nil {
		return netns.None(), nil, nil, err
	}
	ulh, err := netlink.NewHandleAt(ul)
	if err != nil {
		ul.Close()
		return netns.None(), nil, nil, fmt.Errorf("netlink in %s: %w", n.underlay(), err)
	}
	fail := func(err error) (netns.NsHandle, *netlink.Handle, netlink.Link, error) {
		ulh.Close()
		ul.Close()
		return netns.None(), nil, nil, fmt.Errorf("%s: %w", n.underlay(), err)
	}
	if err := netnsutil.LinkUp(ulh, "lo"); err != nil {
		return fail(err)
	}
	br, err := netnsutil.EnsureBridge(ulh, bridgeName)
	if err != nil {
		return fail(err)
	}
	return ul, ulh, br, nil
}

// setupRouter makes cluster c's router namespace and its uplink.
func (n naming) setupRouter(c Cluster, ul netns.NsHandle, ulh *netlink.Handle, br netlink.Link) error {
	r, _, err := ensureNetns(n.router(c.Name))
	if err != nil {
		return err
	}
	defer r.Close()
	// Before any device is made, so new devices inherit rp_filter 0.
	if err := netnsutil.In(r, func() error {
		return netnsutil.WriteSysctls(map[string]string{
			"net/ipv4/ip_forward":             "1",
			"net/ipv4/conf/all/rp_filter":     "0",
			"net/ipv4/conf/default/rp_filter": "0",
		})
	}); err != nil {
		return err
	}
	return n.attach(bridgePort(c), UnderlayAddr(c.Index), r, ul, ulh, br)
}

// attach puts the namespace r on the underlay: loopback up, the veth "ul0"
// holding addr/24 whose other end, port, is on the bridge, reverse-path
// filtering off on it.
func (n naming) attach(port string, addr netip.Addr, r netns.NsHandle, ul netns.NsHandle, ulh *netlink.Handle, br netlink.Link) error {
	rh, err := netlink.NewHandleAt(r)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer rh.Close()
	if err := netnsutil.LinkUp(rh, "lo"); err != nil {
		return err
	}
	up, pl, made, err := netnsutil.EnsureVethPair(rh, routerUplink, ulh, port, ul)
	if err != nil {
		return err
	}
	if pl.Attrs().MasterIndex != br.Attrs().Index {
		if err := ulh.LinkSetMaster(pl, br); err != nil {
			return fmt.Errorf("attach %s to %s: %w", port, bridgeName, err)
		}
	}
	if err := ulh.LinkSetUp(pl); err != nil {
		return fmt.Errorf("set %s up: %w", port, err)
	}
	if err := netnsutil.SetOnlyAddr(rh, up, netip.PrefixFrom(addr, underlayBits), netlink.SCOPE_UNIVERSE); err != nil {
		return err
	}
	if err := rh.LinkSetUp(up); err != nil {
		return fmt.Errorf("set %s up: %w", routerUplink, err)
	}
	if made {
		netnsutil.WaitOperUp(rh, routerUplink, operUpWait)
	}
	return netnsutil.In(r, func() error {
		return netnsutil.WriteSysctls(map[string]string{"net/ipv4/conf/" + routerUplink + "/rp_filter": "0"})
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
