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

// TestSetupNodes: two stand-ins for real nodes (namespaces holding their
// cluster's API address on loopback) put on the underlay reach each
// other's API address, and a second setup changes nothing.
func TestSetupNodes(t *testing.T) {
	n := testNaming(t)
	ctx := context.Background()
	var nodes []Node
	for i, name := range []string{"one", "two"} {
		ns := n.router(name) // any name under the test's prefix
		h, _, err := ensureNetns(ns)
		if err != nil {
			t.Fatal(err)
		}
		api := netip.AddrFrom4([4]byte{172, 31, byte(i + 1), 254})
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
		nodes = append(nodes, Node{Cluster: Cluster{Name: name, Index: i}, Netns: "/run/netns/" + ns, API: api})
	}
	for range 2 {
		if err := n.setupNodes(ctx, nodes); err != nil {
			t.Fatal(err)
		}
	}
	for i, from := range nodes {
		to := nodes[1-i]
		h, err := openNetns(n.router(from.Cluster.Name))
		if err != nil {
			t.Fatal(err)
		}
		dial := netnsutil.Dialer(h)
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := dial(dctx, "tcp4", netip.AddrPortFrom(to.API, 6443).String())
		cancel()
		h.Close()
		if err != nil {
			t.Fatalf("%s to %s's API address %s: %v", from.Cluster.Name, to.Cluster.Name, to.API, err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != to.Cluster.Name {
			t.Errorf("%s to %s's API address: read %q, %v", from.Cluster.Name, to.Cluster.Name, got, err)
		}
		if rs := routesTo(t, handleIn(t, n.router(from.Cluster.Name)), netip.PrefixFrom(to.API, 32)); len(rs) != 1 || !rs[0].Gw.Equal(net.IP(UnderlayAddr(to.Cluster.Index).AsSlice())) {
			t.Errorf("%s: routes to %s: %+v, want one via %s", from.Cluster.Name, to.API, rs, UnderlayAddr(to.Cluster.Index))
		}
	}
	if err := n.setupNodes(ctx, []Node{{Cluster: Cluster{Name: "x"}, Netns: "/nonexistent", API: netip.MustParseAddr("::1")}}); err == nil {
		t.Error("an IPv6 API address was accepted")
	}
}
