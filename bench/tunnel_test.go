package main

import (
	"context"
	"net"
	"testing"
	"time"
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
