package sandboxnet

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/annexhq/annex/internal/netnsutil"
)

// TestSetupNodes: stand-ins for real nodes (namespaces; each cluster's node
// 0 holds its API address on loopback), cluster one with two nodes, put on
// the underlay: every node reaches the other cluster's API address through
// its node 0, each has its own underlay address and bridge port, and a
// second setup changes nothing.
func TestSetupNodes(t *testing.T) {
	n := testNaming(t)
	ctx := context.Background()
	type stand struct {
		ns   string // netns name, under the test's prefix
		node Node
	}
	var stands []stand
	for i, name := range []string{"one", "two"} {
		api := netip.AddrFrom4([4]byte{172, 31, byte(i + 1), 254})
		ns := n.router(name) // any name under the test's prefix
		h, _, err := ensureNetns(ns)
		if err != nil {
			t.Fatal(err)
		}
		nh := handleIn(t, ns)
		lo, err := nh.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if err := nh.AddrAdd(lo, &netlink.Addr{IPNet: netnsutil.IPNet(netip.PrefixFrom(api, 32)), Scope: int(netlink.SCOPE_HOST)}); err != nil {
			t.Fatal(err)
		}
		var ln net.Listener
		if err := netnsutil.In(h, func() error {
			var err error
			ln, err = net.Listen("tcp4", netip.AddrPortFrom(api, 6443).String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		h.Close()
		t.Cleanup(func() { ln.Close() })
		go func(name string) {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = io.WriteString(c, name)
				c.Close()
			}
		}(name)
		c := Cluster{Name: name, Index: i}
		stands = append(stands, stand{ns: ns, node: Node{Cluster: c, Netns: "/run/netns/" + ns, API: api}})
		if name == "one" {
			// A second node of one: the same API address (not held here).
			ns1 := n.router(name + "-n1")
			h1, _, err := ensureNetns(ns1)
			if err != nil {
				t.Fatal(err)
			}
			h1.Close()
			stands = append(stands, stand{ns: ns1, node: Node{Cluster: c, Index: 1, Netns: "/run/netns/" + ns1, API: api}})
		}
	}
	nodes := make([]Node, len(stands))
	for i, s := range stands {
		nodes[i] = s.node
	}
	for range 2 {
		if err := n.setupNodes(ctx, nodes); err != nil {
			t.Fatal(err)
		}
	}
	node0 := map[string]Node{}
	for _, nd := range nodes {
		if nd.Index == 0 {
			node0[nd.Cluster.Name] = nd
		}
	}
	ulh := handleIn(t, n.underlay())
	for _, from := range stands {
		fn := from.node
		h := handleIn(t, from.ns)
		up, err := h.LinkByName(routerUplink)
		if err != nil {
			t.Fatalf("%s node %d: %v", fn.Cluster.Name, fn.Index, err)
		}
		addrs, err := h.AddrList(up, netlink.FAMILY_V4)
		if err != nil || len(addrs) != 1 || netnsutil.PrefixOf(addrs[0].IPNet) != netip.PrefixFrom(fn.Underlay(), underlayBits) {
			t.Errorf("%s node %d: %s holds %v (%v), want only %s/%d", fn.Cluster.Name, fn.Index, routerUplink, addrs, err, fn.Underlay(), underlayBits)
		}
		if port, err := ulh.LinkByName(nodeBridgePort(fn.Cluster, fn.Index)); err != nil || port.Attrs().MasterIndex == 0 {
			t.Errorf("%s node %d: bridge port %s: %v", fn.Cluster.Name, fn.Index, nodeBridgePort(fn.Cluster, fn.Index), err)
		}
		for name, to := range node0 {
			rs := routesTo(t, h, netip.PrefixFrom(to.API, 32))
			if name == fn.Cluster.Name {
				if len(rs) != 0 {
					t.Errorf("%s node %d: routes to its own API address: %+v", fn.Cluster.Name, fn.Index, rs)
				}
				continue
			}
			if len(rs) != 1 || !rs[0].Gw.Equal(net.IP(to.Underlay().AsSlice())) {
				t.Errorf("%s node %d: routes to %s: %+v, want one via %s", fn.Cluster.Name, fn.Index, to.API, rs, to.Underlay())
			}
			ns, err := openNetns(from.ns)
			if err != nil {
				t.Fatal(err)
			}
			dial := netnsutil.Dialer(ns)
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c, err := dial(dctx, "tcp4", netip.AddrPortFrom(to.API, 6443).String())
			cancel()
			ns.Close()
			if err != nil {
				t.Fatalf("%s node %d to %s's API address %s: %v", fn.Cluster.Name, fn.Index, name, to.API, err)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(c)
			c.Close()
			if err != nil || string(got) != name {
				t.Errorf("%s node %d to %s's API address: read %q, %v", fn.Cluster.Name, fn.Index, name, got, err)
			}
		}
	}
	if err := n.setupNodes(ctx, []Node{{Cluster: Cluster{Name: "x"}, Netns: "/nonexistent", API: netip.MustParseAddr("::1")}}); err == nil {
		t.Error("an IPv6 API address was accepted")
	}
}
