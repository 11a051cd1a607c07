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

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
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
	// podBridge is the pods' bridge on a node (the CNI's, made with the
	// node: see ensurePodBridge).
	podBridge = "cni0"
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
	if err := ensurePodBridge(nl, n.PodCIDR); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
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

// ensurePodBridge makes the CNI's bridge with its gateway address (the
// first of the node's pod CIDR) when the node starts, as the bridge plugin
// would at the node's first pod (it adopts a bridge that exists with that
// address): a node's routes are the same before and after pods have run on
// it, so that what others add or leave shows.
func ensurePodBridge(nl *netlink.Handle, podCIDR string) error {
	cidr, err := netip.ParsePrefix(podCIDR)
	if err != nil || !cidr.Addr().Is4() {
		return fmt.Errorf("pod bridge: pod CIDR %q is not an IPv4 CIDR", podCIDR)
	}
	br, err := nl.LinkByName(podBridge)
	if err != nil {
		la := netlink.NewLinkAttrs()
		la.Name, la.MTU = podBridge, nodePodMTU
		if err := nl.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil {
			return fmt.Errorf("add bridge %s: %w", podBridge, err)
		}
		if br, err = nl.LinkByName(podBridge); err != nil {
			return err
		}
	}
	gw := netip.PrefixFrom(cidr.Masked().Addr().Next(), cidr.Bits())
	if err := nl.AddrReplace(br, &netlink.Addr{IPNet: netnsutil.IPNet(gw)}); err != nil {
		return fmt.Errorf("bridge %s: address %s: %w", podBridge, gw, err)
	}
	if err := nl.LinkSetUp(br); err != nil {
		return fmt.Errorf("set %s up: %w", podBridge, err)
	}
	return nil
}

// MasqueradeTable is the nftables table (family ip) in which a real node
// masquerades its pods' traffic to anything outside the cluster's pod CIDR
// to the node's address, as most CNIs do (flannel's, the bridge plugin's
// ipMasq): what leaves the cluster carries a node's address, and what
// Annex's fabric must exempt (docs/network.md, "The fabric").
const MasqueradeTable = "localcluster-masq"

// masqueradeOutside adds MasqueradeTable to the node whose namespaces
// process pid holds: postrouting at srcnat priority (100, iptables' nat
// table's), `ip saddr podCIDR ip daddr != podCIDR masquerade`.
func masqueradeOutside(pid int, podCIDR string) error {
	cidr, err := netip.ParsePrefix(podCIDR)
	if err != nil || !cidr.Addr().Is4() {
		return fmt.Errorf("masquerading: pod CIDR %q is not an IPv4 CIDR", podCIDR)
	}
	h, err := netnsOfPID(pid)
	if err != nil {
		return err
	}
	defer h.Close()
	n, err := nftables.New(nftables.WithNetNSFd(int(h)))
	if err != nil {
		return err
	}
	tbl := n.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: MasqueradeTable})
	ch := n.AddChain(&nftables.Chain{Name: "postrouting", Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	n.FlushChain(ch)
	mask := net.CIDRMask(cidr.Bits(), 32)
	addr := cidr.Masked().Addr().As4()
	match := func(off uint32, op expr.CmpOp) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
			&expr.Cmp{Op: op, Register: 1, Data: addr[:]},
		}
	}
	n.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: append(append(match(12, expr.CmpOpEq), match(16, expr.CmpOpNeq)...), &expr.Masq{})})
	if err := n.Flush(); err != nil {
		return fmt.Errorf("masquerading (nftables table %s): %w", MasqueradeTable, err)
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
