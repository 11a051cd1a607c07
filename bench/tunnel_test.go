package main

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/annexhq/annex/internal/gateway"
)

func TestTunnelConfigs(t *testing.T) {
	a, b, err := tunnelConfigs()
	if err != nil {
		t.Fatal(err)
	}
	la, lb := a.Links[0], b.Links[0]
	if la.PeerPublicKey == lb.PeerPublicKey || la.PrivateKey == lb.PrivateKey {
		t.Error("both sides have the same keys")
	}
	if pub, _ := lb.PrivateKey.Public(); la.PeerPublicKey != pub {
		t.Error("a does not know b's public key")
	}
	if !la.Routes[0].Contains(tunnelBFromA) || la.PeerEndpoint.Addr() != tunnelUnderlayB {
		t.Errorf("a's link %+v does not lead to b's pod at %s", la, tunnelBFromA)
	}
}

// The client and server halves of the measurements, over loopback.
func TestBulkAndRoundTrips(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type bulk struct {
		n   int64
		err error
	}
	served := make(chan bulk, 1)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serveTunnelConn(conn, func(n int64, _ time.Duration, err error) { served <- bulk{n, err} })
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := sendBulk(context.Background(), conn, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if b := <-served; b.err != nil || b.n < 128<<10 {
		t.Errorf("bulk: the server counted %d bytes, %v", b.n, b.err)
	}
	conn.Close()
	conn, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rtts, err := roundTrips(conn, 2, 20, 64)
	if err != nil || len(rtts) != 20 || rtts[0] <= 0 {
		t.Errorf("round trips: %v, %v", rtts, err)
	}
}

// Pod a2 (the fabric path) is one of cluster a's pods to both gateways: a
// translates it into b's view, b takes it as a source from a, and b's
// view of it is what the phase expects pod b's server to see.
func TestTunnelFabricAddresses(t *testing.T) {
	a, b, err := tunnelConfigs()
	if err != nil {
		t.Fatal(err)
	}
	netmap := func(ms []gateway.Netmap, addr netip.Addr) netip.Addr {
		for _, m := range ms {
			if m.From.Contains(addr) {
				from, to, out := m.From.Masked().Addr().As4(), m.To.Masked().Addr().As4(), addr.As4()
				for i := range out {
					out[i] = to[i] | (out[i] &^ from[i])
				}
				return netip.AddrFrom4(out)
			}
		}
		return addr
	}
	la, lb := a.Links[0], b.Links[0]
	for _, c := range []struct{ pod, view netip.Addr }{{tunnelPodAddr, tunnelAFromB}, {tunnelPodA2, tunnelA2FromB}} {
		if got := netmap(la.SNAT, c.pod); got != c.view {
			t.Errorf("a translates %s into %s, want %s", c.pod, got, c.view)
		}
		if !slices.ContainsFunc(lb.AllowedSources, func(p netip.Prefix) bool { return p.Contains(c.view) }) {
			t.Errorf("b does not take %s from a: allowedSources %v", c.view, lb.AllowedSources)
		}
	}
	if !slices.ContainsFunc(lb.Accept, func(p netip.Prefix) bool { return p.Contains(tunnelPodAddr) }) {
		t.Errorf("b does not accept connections to pod b %s: %v", tunnelPodAddr, lb.Accept)
	}
	plan := tunnelFabricPlan()
	if !tunnelNodeNet.Contains(plan.Gateway) || !tunnelNodeNet.Contains(tunnelNodeA1) || plan.Gateway == tunnelNodeA1 {
		t.Errorf("node a1 %s and the gateway node %s are not two addresses of the node network %s", tunnelNodeA1, plan.Gateway, tunnelNodeNet)
	}
	if !tunnelPodCIDR.Contains(tunnelPodA2) || tunnelPodA2 == tunnelPodAddr || !plan.Destinations[0].Contains(tunnelBFromA) {
		t.Errorf("pod a2 %s is not another pod of %s, or the plan %+v does not route b's pod %s", tunnelPodA2, tunnelPodCIDR, plan, tunnelBFromA)
	}
}
