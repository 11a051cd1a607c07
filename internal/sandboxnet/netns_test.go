package sandboxnet

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/types"

	"github.com/annexhq/annex/internal/netnsutil"
)

// testNaming gives a test namespaces of its own ("asbt<pid>-..."), so that it
// cannot touch a running sandbox; they are removed when the test ends.
func testNaming(t *testing.T) naming {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, veth devices)")
	}
	n := naming{prefix: fmt.Sprintf("asbt%d-", os.Getpid())}
	if n.prefix == prefix {
		t.Fatal("test prefix equals the sandbox's")
	}
	t.Cleanup(func() {
		if err := n.teardown(); err != nil {
			t.Errorf("teardown: %v", err)
		}
		if left, _ := listNetns(n.prefix); len(left) > 0 {
			t.Errorf("namespaces left after teardown: %v", left)
		}
	})
	return n
}

// handleIn returns a netlink handle inside the named namespace.
func handleIn(t *testing.T, name string) *netlink.Handle {
	t.Helper()
	ns, err := openNetns(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// routesTo lists the main-table routes of exactly dst in h's namespace.
func routesTo(t *testing.T, h *netlink.Handle, dst netip.Prefix) []netlink.Route {
	t.Helper()
	all, err := h.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []netlink.Route
	for _, r := range all {
		if r.Dst != nil && netnsutil.PrefixOf(r.Dst) == dst || r.Dst == nil && dst.Bits() == 0 {
			out = append(out, r)
		}
	}
	return out
}

func getEcho(ctx context.Context, t *testing.T, fromNetns string, to netip.Addr) (Echo, error) {
	t.Helper()
	url := "http://" + netip.AddrPortFrom(to, EchoPort).String() + "/"
	var e Echo
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		var body []byte
		body, err = Get(ctx, fromNetns, url, 2*time.Second)
		if err == nil {
			if err = json.Unmarshal(body, &e); err == nil {
				return e, nil
			}
		}
		if time.Now().After(deadline) {
			return e, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestPodsThroughRouters(t *testing.T) {
	n := testNaming(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clusters := []Cluster{{Name: "a", Index: 0}, {Name: "b", Index: 1}}
	if err := n.setup(ctx, clusters); err != nil {
		t.Fatal(err)
	}
	// Again: nothing to repair, nothing duplicated.
	if err := n.setup(ctx, clusters); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	ra, rb := handleIn(t, n.router("a")), handleIn(t, n.router("b"))
	for i, h := range []*netlink.Handle{ra, rb} {
		ul, err := h.LinkByName(routerUplink)
		if err != nil {
			t.Fatal(err)
		}
		addrs, err := h.AddrList(ul, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		if len(addrs) != 1 || netnsutil.PrefixOf(addrs[0].IPNet) != netip.PrefixFrom(UnderlayAddr(i), 24) {
			t.Errorf("router %d: ul0 addresses %v, want only %s/24", i, addrs, UnderlayAddr(i))
		}
	}
	// The routers reach each other over the underlay.
	if err := Do(n.router("a"), func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(UnderlayAddr(1), 9).String(), 2*time.Second)
		if err == nil {
			c.Close()
		}
		if err != nil && !strings.Contains(err.Error(), "refused") {
			return err
		}
		return nil
	}); err != nil {
		t.Fatalf("router a to router b's underlay address: %v (want connection refused: reachable, nothing listens)", err)
	}

	log := testr.New(t)
	ma, mb := newPodManager(n, "a", log), newPodManager(n, "b", log)
	t.Cleanup(ma.close)
	t.Cleanup(mb.close)
	pa := podInfo{Namespace: "ns", Name: "pa", UID: types.UID("aaaa1111-0000-4000-8000-000000000001"), IP: netip.MustParseAddr("10.200.0.11")}
	pb := podInfo{Namespace: "ns", Name: "pb", UID: types.UID("bbbb2222-0000-4000-8000-000000000002"), IP: netip.MustParseAddr("10.201.0.12")}
	for _, c := range []struct {
		m *podManager
		p podInfo
	}{{ma, pa}, {mb, pb}} {
		changed, err := c.m.ensure(c.p)
		if err != nil {
			t.Fatalf("ensure %s: %v", c.p.key(), err)
		}
		if !changed {
			t.Errorf("ensure %s: changed = false for a new pod", c.p.key())
		}
		changed, err = c.m.ensure(c.p)
		if err != nil || changed {
			t.Errorf("ensure %s again: changed %v, %v; want false, nil", c.p.key(), changed, err)
		}
	}
	netnsA, netnsB := n.pod("a", pa.UID), n.pod("b", pb.UID)

	// Each pod answers inside its own cluster (from its router).
	e, err := getEcho(ctx, t, n.router("a"), pa.IP)
	if err != nil {
		t.Fatalf("router a to pod a: %v", err)
	}
	if want := (Echo{Cluster: "a", Namespace: "ns", Pod: "pa", PodIP: "10.200.0.11", From: e.From}); e != want || !strings.HasPrefix(e.From, "169.254.1.1:") {
		t.Errorf("router a to pod a: %+v, want %+v from 169.254.1.1", e, want)
	}

	// A static route between the routers stands in for the gateways.
	via := func(h *netlink.Handle, dst netip.Addr, gw netip.Addr) {
		rt := &netlink.Route{Dst: netnsutil.IPNet(netip.PrefixFrom(dst, 32)), Gw: net.IP(gw.AsSlice())}
		if err := h.RouteReplace(rt); err != nil {
			t.Fatal(err)
		}
	}
	via(ra, pb.IP, UnderlayAddr(1))
	via(rb, pa.IP, UnderlayAddr(0))
	e, err = getEcho(ctx, t, netnsA, pb.IP)
	if err != nil {
		t.Fatalf("pod a to pod b: %v", err)
	}
	if want := (Echo{Cluster: "b", Namespace: "ns", Pod: "pb", PodIP: "10.201.0.12", From: e.From}); e != want {
		t.Errorf("pod a to pod b: %+v, want %+v", e, want)
	}
	if host, _, _ := net.SplitHostPort(e.From); host != pa.IP.String() {
		t.Errorf("pod b saw the request from %s, want pod a's address %s", e.From, pa.IP)
	}

	// StartInNetns: a child sees only the pod's devices.
	var out strings.Builder
	cmd := exec.Command("cat", "/proc/self/net/dev")
	cmd.Stdout = &out
	if err := StartInNetns(netnsA, cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "eth0:") || !strings.Contains(s, "lo:") || strings.Count(s, ":") != 2 {
		t.Errorf("devices seen by a child started in %s:\n%s", netnsA, s)
	}

	// Adoption: a new manager (as after a restart) keeps the devices,
	// restarts the echo server, duplicates no route, and repairs a
	// removed route.
	rIfA, err := ra.LinkByName(routerPodIface(pa.UID))
	if err != nil {
		t.Fatal(err)
	}
	ma.close()
	pah := handleIn(t, netnsA)
	if err := pah.RouteDel(&routesTo(t, pah, netip.MustParsePrefix("0.0.0.0/0"))[0]); err != nil {
		t.Fatal(err)
	}
	ma2 := newPodManager(n, "a", log)
	t.Cleanup(ma2.close)
	changed, err := ma2.ensure(pa)
	if err != nil || !changed {
		t.Fatalf("adopting ensure: changed %v, %v; want true (the echo server), nil", changed, err)
	}
	if _, err := ma2.ensure(pa); err != nil {
		t.Fatal(err)
	}
	if l, err := ra.LinkByName(routerPodIface(pa.UID)); err != nil || l.Attrs().Index != rIfA.Attrs().Index {
		t.Errorf("adoption remade the router's veth (%v)", err)
	}
	if rts := routesTo(t, ra, netip.PrefixFrom(pa.IP, 32)); len(rts) != 1 || rts[0].LinkIndex != rIfA.Attrs().Index {
		t.Errorf("routes to pod a in router a: %v, want one, via %s", rts, rIfA.Attrs().Name)
	}
	if rts := routesTo(t, pah, netip.MustParsePrefix("0.0.0.0/0")); len(rts) != 1 {
		t.Errorf("default routes in pod a: %v, want one (repaired)", rts)
	}
	if _, err := getEcho(ctx, t, netnsB, pa.IP); err != nil {
		t.Errorf("pod b to pod a after adoption: %v", err)
	}

	// gc removes what is not kept; remove removes one pod.
	pc := podInfo{Namespace: "ns", Name: "pc", UID: types.UID("cccc3333-0000-4000-8000-000000000003"), IP: netip.MustParseAddr("10.200.0.13")}
	if _, err := ma2.ensure(pc); err != nil {
		t.Fatal(err)
	}
	// Within a cluster, through its router.
	if e, err := getEcho(ctx, t, netnsA, pc.IP); err != nil || e.Pod != "pc" || !strings.HasPrefix(e.From, pa.IP.String()+":") {
		t.Errorf("pod a to pod c (same cluster): %+v, %v", e, err)
	}
	removed, err := ma2.gc(map[string]bool{netnsA: true})
	if err != nil || len(removed) != 1 || removed[0] != n.pod("a", pc.UID) {
		t.Errorf("gc = %v, %v; want [%s]", removed, err, n.pod("a", pc.UID))
	}
	if rts := routesTo(t, ra, netip.PrefixFrom(pc.IP, 32)); len(rts) != 0 {
		t.Errorf("routes to the removed pod c: %v", rts)
	}
	if err := mb.remove(pb.UID); err != nil {
		t.Fatal(err)
	}
	if NetnsExists(netnsB) {
		t.Errorf("%s still exists after remove", netnsB)
	}
	if _, err := rb.LinkByName(routerPodIface(pb.UID)); !netnsutil.IsNotFound(err) {
		t.Errorf("router b still has %s (%v)", routerPodIface(pb.UID), err)
	}
	if rts := routesTo(t, rb, netip.PrefixFrom(pb.IP, 32)); len(rts) != 0 {
		t.Errorf("routes to the removed pod b: %v", rts)
	}
	if err := mb.remove(pb.UID); err != nil {
		t.Errorf("remove again: %v", err)
	}
	if _, err := Get(ctx, netnsB, "http://10.201.0.12:8080/", time.Second); err == nil {
		t.Error("Get from a removed namespace succeeded")
	}

	// A pod whose IP changes: the old address and route go, the echo
	// server moves.
	moved := pa
	moved.IP = netip.MustParseAddr("10.200.0.21")
	if _, err := ma2.ensure(moved); err != nil {
		t.Fatal(err)
	}
	if rts := routesTo(t, ra, netip.PrefixFrom(pa.IP, 32)); len(rts) != 0 {
		t.Errorf("routes to pod a's old IP: %v", rts)
	}
	if e, err := getEcho(ctx, t, n.router("a"), moved.IP); err != nil || e.PodIP != moved.IP.String() {
		t.Errorf("echo at pod a's new IP: %+v, %v", e, err)
	}
}

func TestSetupRepairs(t *testing.T) {
	n := testNaming(t)
	ctx := context.Background()
	clusters := []Cluster{{Name: "a", Index: 0}}
	if err := n.setup(ctx, clusters); err != nil {
		t.Fatal(err)
	}
	ra := handleIn(t, n.router("a"))
	// Break it: a stray address, the uplink down, the bridge port deleted.
	ul, err := ra.LinkByName(routerUplink)
	if err != nil {
		t.Fatal(err)
	}
	if err := ra.AddrAdd(ul, &netlink.Addr{IPNet: netnsutil.IPNet(netip.MustParsePrefix("192.168.77.99/24"))}); err != nil {
		t.Fatal(err)
	}
	if err := ra.LinkSetDown(ul); err != nil {
		t.Fatal(err)
	}
	if err := n.setup(ctx, clusters); err != nil {
		t.Fatal(err)
	}
	ul, _ = ra.LinkByName(routerUplink)
	addrs, _ := ra.AddrList(ul, netlink.FAMILY_V4)
	if len(addrs) != 1 || ul.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("after repair: ul0 %v, addresses %v", ul.Attrs().Flags, addrs)
	}
	ulh := handleIn(t, n.underlay())
	port, err := ulh.LinkByName(bridgePort(clusters[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := ulh.LinkDel(port); err != nil {
		t.Fatal(err)
	}
	// The index changed too: the address follows.
	clusters[0].Index = 5
	if err := n.setup(ctx, clusters); err != nil {
		t.Fatal(err)
	}
	ul, err = ra.LinkByName(routerUplink)
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ = ra.AddrList(ul, netlink.FAMILY_V4)
	if len(addrs) != 1 || netnsutil.PrefixOf(addrs[0].IPNet) != netip.MustParsePrefix("192.168.77.6/24") {
		t.Errorf("after the index changed: addresses %v", addrs)
	}
	port, err = ulh.LinkByName(bridgePort(clusters[0]))
	if err != nil || port.Attrs().MasterIndex == 0 || port.Attrs().ParentIndex != ul.Attrs().Index {
		t.Errorf("bridge port after repair: %v, %v", port, err)
	}
	// A file in /run/netns that is not a namespace is replaced.
	stale := n.prefix + "stale"
	if err := os.WriteFile(netnsDir+"/"+stale, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if NetnsExists(stale) {
		t.Error("a plain file counts as a namespace")
	}
	h, created, err := ensureNetns(stale)
	if err != nil || !created {
		t.Fatalf("ensureNetns over a stale file: created %v, %v", created, err)
	}
	h.Close()
	if !NetnsExists(stale) {
		t.Error("the stale file was not replaced by a namespace")
	}
}

func TestDoUnknownNetns(t *testing.T) {
	err := Do("annex-sbx-does-not-exist-"+fmt.Sprint(os.Getpid()), func() error { return nil })
	if err == nil || !strings.Contains(err.Error(), "no such network namespace") {
		t.Errorf("Do in a missing namespace: %v", err)
	}
}
