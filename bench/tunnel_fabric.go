package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"

	"github.com/annexhq/annex/internal/fabric"
	"github.com/annexhq/annex/internal/netnsutil"
)

// The fabric path of the tunnel phase: node a1, a node of cluster a other
// than the gateway node (router a), and pod a2 on it (see the phase's doc
// comment in tunnel.go).

// tunnelMasqTable is node a1's stand-in for a CNI's masquerading (nftables
// table, family ip): postrouting at srcnat priority (100, iptables' nat
// table's), `ip saddr 10.200.0.0/24 ip daddr != 10.200.0.0/24 counter
// masquerade`.
const tunnelMasqTable = "bench-cni-masq"

// tunnelMasqChain is the chain of tunnelMasqTable.
const tunnelMasqChain = "postrouting"

// fabricNodeCmds are the ip commands that make node a1 and pod a2: the node
// network between node a1 and router a, pod a2's veth to node a1 (node a1
// has podGateway/32 on its end and a route to pod a2, as a CNI's host
// routes do), router a's route back to pod a2 via node a1, and node a1's
// forwarding.
func (tn *tunnelNet) fabricNodeCmds(podGateway netip.Addr) [][]string {
	ra, na1, pa2 := tn.ns("ra"), tn.ns("na1"), tn.ns("pa2")
	nodeBits := tunnelNodeNet.Bits()
	return [][]string{
		{"-n", na1, "link", "set", "lo", "up"}, {"-n", pa2, "link", "set", "lo", "up"},
		// The node network.
		{"link", "add", "node0", "netns", na1, "type", "veth", "peer", "name", "node0", "netns", ra},
		{"-n", na1, "addr", "add", netip.PrefixFrom(tunnelNodeA1, nodeBits).String(), "dev", "node0"},
		{"-n", ra, "addr", "add", netip.PrefixFrom(tunnelNodeRouter, nodeBits).String(), "dev", "node0"},
		{"-n", na1, "link", "set", "node0", "up"}, {"-n", ra, "link", "set", "node0", "up"},
		// Pod a2 on node a1.
		{"link", "add", "eth0", "netns", pa2, "type", "veth", "peer", "name", "pod0", "netns", na1},
		{"-n", pa2, "addr", "add", netip.PrefixFrom(tunnelPodA2, tunnelPodCIDR.Bits()).String(), "dev", "eth0"},
		{"-n", pa2, "link", "set", "eth0", "up"},
		{"-n", pa2, "route", "add", "default", "via", podGateway.String()},
		{"-n", na1, "addr", "add", netip.PrefixFrom(podGateway, 32).String(), "dev", "pod0"},
		{"-n", na1, "link", "set", "pod0", "up"},
		{"-n", na1, "route", "add", netip.PrefixFrom(tunnelPodA2, 32).String(), "dev", "pod0"},
		// The gateway node reaches pod a2 through node a1.
		{"-n", ra, "route", "add", netip.PrefixFrom(tunnelPodA2, 32).String(), "via", tunnelNodeA1.String()},
		{"netns", "exec", na1, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"},
	}
}

// tunnelFabricPlan is what the fabric agent would program on node a1.
func tunnelFabricPlan() fabric.Plan {
	return fabric.Plan{Gateway: tunnelNodeRouter, Destinations: []netip.Prefix{tunnelViewOfB}, Sources: []netip.Prefix{tunnelPodCIDR}}
}

// programNodeA1 adds node a1's masquerading and applies the fabric's plan
// there, then checks that the masquerading works: a connection from pod a2
// to router a's node address (outside the pod CIDR, not a destination of
// the fabric) arrives from node a1's address. Without that, the fabric
// path would not show that the exemption holds.
func (tn *tunnelNet) programNodeA1(ctx context.Context) error {
	na1 := tn.ns("na1")
	h, err := netns.GetFromName(na1)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", na1, err)
	}
	defer h.Close()
	if err := addTunnelMasquerade(h); err != nil {
		return err
	}
	if err := netnsutil.In(h, func() error { return fabric.New(logr.Discard()).Apply(tunnelFabricPlan()) }); err != nil {
		return fmt.Errorf("fabric: %w", err)
	}
	return tn.checkMasquerade(ctx)
}

// addTunnelMasquerade adds tunnelMasqTable to the namespace h.
func addTunnelMasquerade(h netns.NsHandle) error {
	n, err := nftables.New(nftables.WithNetNSFd(int(h)))
	if err != nil {
		return err
	}
	tbl := n.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: tunnelMasqTable})
	ch := n.AddChain(&nftables.Chain{Name: tunnelMasqChain, Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	mask := net.CIDRMask(tunnelPodCIDR.Bits(), 32)
	addr := tunnelPodCIDR.Masked().Addr().As4()
	match := func(off uint32, op expr.CmpOp) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
			&expr.Cmp{Op: op, Register: 1, Data: addr[:]},
		}
	}
	exprs := append(match(12, expr.CmpOpEq), match(16, expr.CmpOpNeq)...)
	n.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: append(exprs, &expr.Counter{}, &expr.Masq{})})
	if err := n.Flush(); err != nil {
		return fmt.Errorf("masquerading (nftables table %s): %w", tunnelMasqTable, err)
	}
	return nil
}

// checkMasquerade checks that node a1 masquerades pod a2's connection to
// router a's node address.
func (tn *tunnelNet) checkMasquerade(ctx context.Context) error {
	ln, err := listenIn(tn.ns("ra"), netip.AddrPortFrom(tunnelNodeRouter, tunnelPort))
	if err != nil {
		return err
	}
	defer ln.Close()
	from := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			from <- ""
			return
		}
		from <- remoteAddr(conn)
		conn.Close()
	}()
	conn, err := dialIn(tn.ns("pa2"), netip.AddrPortFrom(tunnelNodeRouter, tunnelPort), 5*time.Second)
	if err != nil {
		return fmt.Errorf("pod a2 to router a's node address %s: %w", tunnelNodeRouter, err)
	}
	defer conn.Close()
	var got string
	select {
	case got = <-from:
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	if got != tunnelNodeA1.String() {
		return fmt.Errorf("node a1 does not masquerade: pod a2's connection to %s arrived from %q, not from node a1's %s",
			tunnelNodeRouter, got, tunnelNodeA1)
	}
	return nil
}

// masqueraded returns how many packets node a1's masquerade rule matched
// so far (the first packet of each connection it masqueraded).
func (tn *tunnelNet) masqueraded() (uint64, error) {
	h, err := netns.GetFromName(tn.ns("na1"))
	if err != nil {
		return 0, err
	}
	defer h.Close()
	n, err := nftables.New(nftables.WithNetNSFd(int(h)))
	if err != nil {
		return 0, err
	}
	tbl := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: tunnelMasqTable}
	rules, err := n.GetRules(tbl, &nftables.Chain{Name: tunnelMasqChain, Table: tbl})
	if err != nil {
		return 0, err
	}
	var packets uint64
	for _, r := range rules {
		for _, e := range r.Exprs {
			if c, ok := e.(*expr.Counter); ok {
				packets += c.Packets
			}
		}
	}
	return packets, nil
}
