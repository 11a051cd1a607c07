package localcluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/annexhq/annex/internal/netnsutil"
)

// Devices of the node network.
const (
	// nodeBridge joins the nodes in the cluster's network namespace.
	nodeBridge = "br0"
	// nodeUplink is a node's end of its veth to the bridge.
	nodeUplink = "eth0"
	// operUpWait bounds the wait for a new veth to come up.
	operUpWait = 2 * time.Second
)

// bridgePortName is the bridge's end of node index's veth.
func bridgePortName(index int) string { return "n" + strconv.Itoa(index) }

// netnsOfPID opens the network namespace of process pid.
func netnsOfPID(pid int) (netns.NsHandle, error) {
	h, err := netns.GetFromPid(pid)
	if err != nil {
		return netns.None(), fmt.Errorf("network namespace of pid %d: %w", pid, err)
	}
	return h, nil
}

// setupNetworkNamespace prepares the cluster's network namespace (held by
// process pid): loopback up, the bridge holding the node network's first
// address. It forwards nothing: nodes talk to each other over the bridge,
// and the network process dials from here.
func setupNetworkNamespace(pid int, nn nodeNetwork) error {
	h, err := netnsOfPID(pid)
	if err != nil {
		return err
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return fmt.Errorf("netlink in the node network namespace: %w", err)
	}
	defer nh.Close()
	if err := netnsutil.In(h, func() error {
		return netnsutil.WriteSysctls(map[string]string{"net/ipv4/ip_forward": "0"})
	}); err != nil {
		return err
	}
	if err := netnsutil.LinkUp(nh, "lo"); err != nil {
		return err
	}
	br, err := netnsutil.EnsureBridge(nh, nodeBridge)
	if err != nil {
		return err
	}
	return netnsutil.SetOnlyAddr(nh, br, netip.PrefixFrom(nn.Bridge, nn.Prefix.Bits()), netlink.SCOPE_UNIVERSE)
}

// wireNode connects node n (its namespaces held by process nodePID) to the
// bridge in the cluster's network namespace (held by netPID): a veth, the
// node's address, its API address on loopback, routes to the other nodes'
// pod CIDRs (all) and a default route to the bridge's address (where
// nothing is forwarded further), and in the cluster's namespace the route
// to n's pod CIDR.
func wireNode(netPID, nodePID int, nn nodeNetwork, n realNode, all []realNode) error {
	ch, err := netnsOfPID(netPID)
	if err != nil {
		return err
	}
	defer ch.Close()
	nh, err := netnsOfPID(nodePID)
	if err != nil {
		return err
	}
	defer nh.Close()
	cl, err := netlink.NewHandleAt(ch)
	if err != nil {
		return fmt.Errorf("netlink in the node network namespace: %w", err)
	}
	defer cl.Close()
	nl, err := netlink.NewHandleAt(nh)
	if err != nil {
		return fmt.Errorf("netlink in node %s: %w", n.Name, err)
	}
	defer nl.Close()

	// Before any device is made, so new devices inherit these.
	if err := netnsutil.In(nh, func() error {
		return netnsutil.WriteSysctls(map[string]string{
			"net/ipv4/ip_forward":             "1",
			"net/ipv4/conf/all/rp_filter":     "0",
			"net/ipv4/conf/default/rp_filter": "0",
		})
	}); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	lo, err := nl.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if err := nl.LinkSetUp(lo); err != nil {
		return fmt.Errorf("node %s: set lo up: %w", n.Name, err)
	}
	if err := nl.AddrReplace(lo, &netlink.Addr{IPNet: netnsutil.IPNet(netip.PrefixFrom(nn.API, 32)), Scope: int(netlink.SCOPE_HOST)}); err != nil {
		return fmt.Errorf("node %s: add the API address %s to lo: %w", n.Name, nn.API, err)
	}

	port, up, made, err := netnsutil.EnsureVethPair(cl, bridgePortName(n.Index), nl, nodeUplink, nh)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	br, err := cl.LinkByName(nodeBridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", nodeBridge, err)
	}
	if port.Attrs().MasterIndex != br.Attrs().Index {
		if err := cl.LinkSetMaster(port, br); err != nil {
			return fmt.Errorf("attach %s to %s: %w", port.Attrs().Name, nodeBridge, err)
		}
	}
	if err := cl.LinkSetUp(port); err != nil {
		return fmt.Errorf("set %s up: %w", port.Attrs().Name, err)
	}
	if err := netnsutil.SetOnlyAddr(nl, up, netip.PrefixFrom(n.IP, nn.Prefix.Bits()), netlink.SCOPE_UNIVERSE); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if err := nl.LinkSetUp(up); err != nil {
		return fmt.Errorf("node %s: set %s up: %w", n.Name, nodeUplink, err)
	}
	if made {
		netnsutil.WaitOperUp(nl, nodeUplink, operUpWait)
		netnsutil.WaitOperUp(cl, port.Attrs().Name, operUpWait)
	}

	routes := []netlink.Route{{LinkIndex: up.Attrs().Index, Dst: netnsutil.IPNet(netip.MustParsePrefix("0.0.0.0/0")), Gw: net.IP(nn.Bridge.AsSlice())}}
	for _, o := range all {
		if o.Name == n.Name {
			continue
		}
		dst, err := netip.ParsePrefix(o.PodCIDR)
		if err != nil {
			return err
		}
		routes = append(routes, netlink.Route{LinkIndex: up.Attrs().Index, Dst: netnsutil.IPNet(dst), Gw: net.IP(o.IP.AsSlice())})
	}
	for _, rt := range routes {
		if err := nl.RouteReplace(&rt); err != nil {
			return fmt.Errorf("node %s: route %s: %w", n.Name, rt, err)
		}
	}
	dst, err := netip.ParsePrefix(n.PodCIDR)
	if err != nil {
		return err
	}
	rt := netlink.Route{LinkIndex: br.Attrs().Index, Dst: netnsutil.IPNet(dst), Gw: net.IP(n.IP.AsSlice())}
	if err := cl.RouteReplace(&rt); err != nil {
		return fmt.Errorf("node network: route %s: %w", rt, err)
	}
	return nil
}

// getInNetns GETs url with a connection made inside the network namespace
// at path (e.g. /proc/<pid>/ns/net) and returns the body; a status other
// than 200 is an error.
func getInNetns(ctx context.Context, path, url string) ([]byte, error) {
	h, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", path, err)
	}
	defer h.Close()
	tr := &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext:       netnsutil.Dialer(h),
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr, Timeout: checkTimeout}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return body, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return body, nil
}
