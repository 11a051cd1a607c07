package fabric

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/annexhq/annex/internal/netnsutil"
)

// The addresses of the test's network: a pod (10.244.1.5) behind its node,
// whose own address is 172.31.9.2 on the network it shares with the
// gateway node (172.31.9.3). The gateway node holds addresses of a peer's
// range (10.201.2.4) and of another destination (100.64.0.9), and
// 172.31.9.3 itself is in no destination.
const (
	podAddr  = "10.244.1.5"
	nodeAddr = "172.31.9.2"
	gwAddr   = "172.31.9.3"
	peerAddr = "10.201.2.4"
	extAddr  = "100.64.0.9"
	port     = "7000"
)

var fullPlan = Plan{
	Gateway:      netip.MustParseAddr(gwAddr),
	Destinations: prefixes("10.201.0.0/16", "100.64.0.0/16"),
	Sources:      prefixes("10.244.0.0/16"),
}

// testNet is the node, pod and gateway-node namespaces of one test; the
// node masquerades what its pods send out of their subnet, as the bridge
// CNI with ipMasq does, with an iptables rule (iptables-nft here).
type testNet struct {
	t               *testing.T
	prefix          string
	node, pod, gate netns.NsHandle
}

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, routes, nftables)")
	}
	for _, tool := range []string{"ip", "iptables", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	tn := &testNet{t: t, prefix: fmt.Sprintf("annex-fab-test-%d-", os.Getpid())}
	tn.node, tn.pod, tn.gate = tn.addNS("node"), tn.addNS("pod"), tn.addNS("gw")
	node, pod, gate := tn.ns("node"), tn.ns("pod"), tn.ns("gw")

	tn.ip("link", "add", "eth0", "netns", pod, "type", "veth", "peer", "name", "veth-pod", "netns", node)
	tn.ip("-n", pod, "addr", "add", podAddr+"/24", "dev", "eth0")
	tn.ip("-n", pod, "link", "set", "eth0", "up")
	tn.ip("-n", pod, "route", "add", "default", "via", "10.244.1.1")
	tn.ip("-n", node, "addr", "add", "10.244.1.1/24", "dev", "veth-pod")
	tn.ip("-n", node, "link", "set", "veth-pod", "up")

	tn.ip("link", "add", "eth0", "netns", node, "type", "veth", "peer", "name", "eth0", "netns", gate)
	tn.ip("-n", node, "addr", "add", nodeAddr+"/24", "dev", "eth0")
	tn.ip("-n", node, "link", "set", "eth0", "up")
	tn.ip("-n", gate, "addr", "add", gwAddr+"/24", "dev", "eth0")
	tn.ip("-n", gate, "link", "set", "eth0", "up")
	tn.ip("-n", gate, "addr", "add", peerAddr+"/32", "dev", "lo")
	tn.ip("-n", gate, "addr", "add", extAddr+"/32", "dev", "lo")
	tn.ip("-n", gate, "route", "add", "10.244.0.0/16", "via", nodeAddr)

	tn.exec("node", "sysctl", "-qw", "net.ipv4.ip_forward=1")
	tn.exec("node", "iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "10.244.1.0/24", "!", "-d", "10.244.1.0/24", "-j", "MASQUERADE")

	// The gateway node answers each connection with the address it
	// comes from.
	var ln net.Listener
	if err := netnsutil.In(tn.gate, func() (err error) {
		ln, err = net.Listen("tcp", ":"+port)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			_, _ = fmt.Fprintln(c, host)
			_ = c.Close()
		}
	}()
	return tn
}

func (tn *testNet) ns(name string) string { return tn.prefix + name }

// addNS adds namespace name (with lo up) until the test ends and returns
// a handle of it.
func (tn *testNet) addNS(name string) netns.NsHandle {
	tn.t.Helper()
	tn.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", tn.ns(name)).Run() })
	tn.ip("netns", "add", tn.ns(name))
	tn.ip("-n", tn.ns(name), "link", "set", "lo", "up")
	// No IPv6: its link-local routes come some time after a device
	// does, and would make snapshots differ.
	tn.exec(name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	h, err := netns.GetFromName(tn.ns(name))
	if err != nil {
		tn.t.Fatal(err)
	}
	tn.t.Cleanup(func() { _ = h.Close() })
	return h
}

func (tn *testNet) ip(args ...string) {
	tn.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		tn.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// exec runs a command in namespace ns and returns its output.
func (tn *testNet) exec(ns string, args ...string) string {
	tn.t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", tn.ns(ns)}, args...)...).CombinedOutput()
	if err != nil {
		tn.t.Fatalf("%s in %s: %v\n%s", strings.Join(args, " "), ns, err, out)
	}
	return string(out)
}

// snapshot is what the node's routing and nftables look like (nft -s:
// without the counters, which traffic changes).
func (tn *testNet) snapshot() string {
	tn.t.Helper()
	return tn.exec("node", "ip", "route", "show", "table", "all") + "\n" + tn.exec("node", "nft", "-s", "list", "ruleset")
}

// fabricRoutes lists the routes of the node's main table with
// RouteProtocol.
func (tn *testNet) fabricRoutes() string {
	tn.t.Helper()
	var out []string
	for _, line := range strings.Split(tn.exec("node", "ip", "route", "show"), "\n") {
		if strings.Contains(line, fmt.Sprintf(" proto %d ", RouteProtocol)) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// apply runs d.Apply(p) in the node's namespace.
func (tn *testNet) apply(d *Dataplane, p Plan) error {
	return netnsutil.In(tn.node, func() error { return d.Apply(p) })
}

func (tn *testNet) mustApply(d *Dataplane, p Plan) {
	tn.t.Helper()
	if err := tn.apply(d, p); err != nil {
		tn.t.Fatalf("Apply(%+v): %v", p, err)
	}
}

func (tn *testNet) state(d *Dataplane) (routes int, table bool) {
	tn.t.Helper()
	if err := netnsutil.In(tn.node, func() (err error) {
		routes, table, err = d.State()
		return err
	}); err != nil {
		tn.t.Fatal(err)
	}
	return routes, table
}

// source connects from the pod (or the node) to addr:port and returns the
// address the gateway node saw the connection come from.
func (tn *testNet) source(from netns.NsHandle, addr string) (string, error) {
	var c net.Conn
	if err := netnsutil.In(from, func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(addr, port), 2*time.Second)
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func (tn *testNet) wantSource(addr, want string) {
	tn.t.Helper()
	if got, err := tn.source(tn.pod, addr); err != nil || got != want {
		tn.t.Errorf("pod -> %s arrived from %q (%v), want %q", addr, got, err, want)
	}
}

func TestExemptionKeepsPodAddress(t *testing.T) {
	tn := newTestNet(t)
	d := New(logr.Discard())

	// Without the fabric the node has no route to the peer.
	if got, err := tn.source(tn.pod, peerAddr); err == nil {
		t.Errorf("pod -> %s arrived from %q without any route", peerAddr, got)
	} else {
		t.Logf("without the fabric: %v", err)
	}
	// A route alone (not the fabric's): the CNI's MASQUERADE hides the
	// pod behind the node.
	tn.ip("-n", tn.ns("node"), "route", "add", "10.201.0.0/16", "via", gwAddr)
	tn.wantSource(peerAddr, nodeAddr)
	// Nor does an accept in a NAT chain before the CNI's keep the pod's
	// address: the kernel goes on to the next NAT chain (what the
	// fabric's chain does instead is in applyTable's comment).
	nft := exec.Command("ip", "netns", "exec", tn.ns("node"), "nft", "-f", "-")
	nft.Stdin = strings.NewReader(`table ip test-accept {
	chain exempt {
		type nat hook postrouting priority srcnat - 1; policy accept;
		ip saddr 10.244.0.0/16 ip daddr 10.201.0.0/16 accept
	}
}`)
	if out, err := nft.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
	tn.wantSource(peerAddr, nodeAddr)
	tn.exec("node", "nft", "delete", "table", "ip", "test-accept")
	tn.ip("-n", tn.ns("node"), "route", "del", "10.201.0.0/16", "via", gwAddr)

	// The fabric: routed, and the pod's own address arrives.
	tn.mustApply(d, fullPlan)
	tn.wantSource(peerAddr, podAddr)
	tn.wantSource(extAddr, podAddr)
	// Anything else is still masqueraded: the exemption is Sources to
	// Destinations only.
	tn.wantSource(gwAddr, nodeAddr)
	if routes, table := tn.state(d); routes != 2 || !table {
		t.Errorf("State() = %d routes, table %v; want 2, true", routes, table)
	}
	if out := tn.exec("node", "iptables", "-t", "nat", "-S", "POSTROUTING"); !strings.Contains(out, "-A POSTROUTING -s 10.244.1.0/24 ! -d 10.244.1.0/24 -j MASQUERADE") {
		t.Errorf("the CNI's rule changed:\n%s", out)
	}
	t.Logf("node's routes of the fabric:\n%s\ntable:\n%s", tn.fabricRoutes(), tn.exec("node", "nft", "list", "table", "ip", TableName))
}

func TestNoGatewayRefuses(t *testing.T) {
	tn := newTestNet(t)
	d := New(logr.Discard())
	// Even with a default route to the gateway node, which would carry
	// the traffic (masqueraded), no gateway means refused.
	tn.ip("-n", tn.ns("node"), "route", "add", "default", "via", gwAddr)
	tn.wantSource(peerAddr, nodeAddr)

	tn.mustApply(d, Plan{Destinations: fullPlan.Destinations, Sources: fullPlan.Sources})
	want := "unreachable 10.201.0.0/16 proto 97 \nunreachable 100.64.0.0/16 proto 97"
	if diff := cmp.Diff(strings.Fields(want), strings.Fields(tn.fabricRoutes())); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	for _, from := range []struct {
		name string
		ns   netns.NsHandle
	}{{"pod", tn.pod}, {"node", tn.node}} {
		start := time.Now()
		got, err := tn.source(from.ns, peerAddr)
		if err == nil || !errors.Is(err, unix.EHOSTUNREACH) {
			t.Errorf("%s -> %s: %q, %v; want no route to host", from.name, peerAddr, got, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s -> %s took %s to fail", from.name, peerAddr, took)
		}
	}

	// The gateway comes: the same destinations are routed through it.
	tn.mustApply(d, fullPlan)
	tn.wantSource(peerAddr, podAddr)
	// And goes again.
	tn.mustApply(d, Plan{Destinations: fullPlan.Destinations, Sources: fullPlan.Sources})
	if got, err := tn.source(tn.pod, peerAddr); err == nil {
		t.Errorf("pod -> %s arrived from %q with no gateway", peerAddr, got)
	}
}

func TestIdempotentAndRestart(t *testing.T) {
	tn := newTestNet(t)
	// A foreign route and one that a killed predecessor left.
	tn.ip("-n", tn.ns("node"), "route", "add", "10.98.0.0/16", "via", gwAddr, "proto", "static")
	tn.ip("-n", tn.ns("node"), "route", "add", "unreachable", "10.99.0.0/16", "proto", fmt.Sprint(RouteProtocol))

	d := New(logr.Discard())
	tn.mustApply(d, fullPlan)
	first := tn.snapshot()
	for range 2 {
		tn.mustApply(d, fullPlan)
		if diff := cmp.Diff(first, tn.snapshot()); diff != "" {
			t.Fatalf("Apply of the same plan changed the node (-first +again):\n%s", diff)
		}
	}
	want := fmt.Sprintf("10.201.0.0/16 via %s dev eth0 proto 97\n100.64.0.0/16 via %[1]s dev eth0 proto 97", gwAddr)
	if diff := cmp.Diff(strings.Fields(want), strings.Fields(tn.fabricRoutes())); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}

	// A restarted agent with another plan.
	d2 := New(logr.Discard())
	next := Plan{Gateway: fullPlan.Gateway, Destinations: prefixes("10.202.0.0/16"), Sources: prefixes("10.244.0.0/16", "10.245.0.0/16")}
	tn.mustApply(d2, next)
	want = fmt.Sprintf("10.202.0.0/16 via %s dev eth0 proto 97", gwAddr)
	if diff := cmp.Diff(strings.Fields(want), strings.Fields(tn.fabricRoutes())); diff != "" {
		t.Errorf("routes after the restart (-want +got):\n%s", diff)
	}
	if out := tn.exec("node", "ip", "route", "show", "10.98.0.0/16"); !strings.Contains(out, "proto static") {
		t.Errorf("the foreign route is gone: %q", out)
	}
	table := tn.exec("node", "nft", "list", "table", "ip", TableName)
	for _, s := range []string{"10.202.0.0/16", "10.244.0.0/15"} {
		if !strings.Contains(table, s) {
			t.Errorf("table without %s:\n%s", s, table)
		}
	}
	if strings.Contains(table, "10.201.0.0") {
		t.Errorf("table still has the old plan's destinations:\n%s", table)
	}
	if routes, table := tn.state(d2); routes != 1 || !table {
		t.Errorf("State() = %d routes, table %v; want 1, true", routes, table)
	}

	// A destination that a foreign route has already: reported, the
	// foreign route left alone, the rest applied.
	err := tn.apply(d2, Plan{Gateway: fullPlan.Gateway, Destinations: prefixes("10.98.0.0/16", "10.202.0.0/16"), Sources: fullPlan.Sources})
	if err == nil || !strings.Contains(err.Error(), "10.98.0.0/16") {
		t.Errorf("Apply over a foreign route: %v, want an error naming it", err)
	}
	if out := tn.exec("node", "ip", "route", "show", "10.98.0.0/16"); !strings.Contains(out, "proto static") {
		t.Errorf("the foreign route was replaced: %q", out)
	}
}

func TestCleanRestoresNode(t *testing.T) {
	tn := newTestNet(t)
	before := tn.snapshot()
	d := New(logr.Discard())
	for _, clean := range []struct {
		name string
		f    func() error
	}{
		{"Clean", d.Clean},
		{"Apply(Plan{})", func() error { return d.Apply(Plan{}) }},
		{"Clean by a new Dataplane", New(logr.Discard()).Clean},
	} {
		tn.mustApply(d, fullPlan)
		tn.wantSource(peerAddr, podAddr)
		tn.mustApply(d, Plan{Destinations: fullPlan.Destinations, Sources: fullPlan.Sources})
		tn.mustApply(d, fullPlan)
		if err := netnsutil.In(tn.node, clean.f); err != nil {
			t.Fatalf("%s: %v", clean.name, err)
		}
		if diff := cmp.Diff(before, tn.snapshot()); diff != "" {
			t.Errorf("after %s (-before +after):\n%s", clean.name, diff)
		}
		if routes, table := tn.state(d); routes != 0 || table {
			t.Errorf("State() after %s = %d routes, table %v", clean.name, routes, table)
		}
	}
	// Cleaning a clean node is fine.
	if err := netnsutil.In(tn.node, d.Clean); err != nil {
		t.Errorf("Clean of a clean node: %v", err)
	}
	if out := tn.exec("node", "iptables", "-t", "nat", "-S", "POSTROUTING"); !strings.Contains(out, "-A POSTROUTING -s 10.244.1.0/24 ! -d 10.244.1.0/24 -j MASQUERADE") {
		t.Errorf("the CNI's rule changed:\n%s", out)
	}
}

func TestGatewayNotOnLink(t *testing.T) {
	tn := newTestNet(t)
	d := New(logr.Discard())
	// 192.0.2.77 is on no network of the node's; 192.0.2.78 is reachable,
	// but only through another router (not on link either).
	tn.ip("-n", tn.ns("node"), "route", "add", "192.0.2.78/32", "via", gwAddr)
	for _, gw := range []string{"192.0.2.77", "192.0.2.78"} {
		p := fullPlan
		p.Gateway = netip.MustParseAddr(gw)
		err := tn.apply(d, p)
		if !errors.Is(err, ErrGatewayNotOnLink) || !strings.Contains(err.Error(), gw) {
			t.Errorf("Apply with gateway %s: %v; want an error wrapping ErrGatewayNotOnLink that names it", gw, err)
		}
		// The destinations are refused meanwhile.
		want := "unreachable 10.201.0.0/16 proto 97 \nunreachable 100.64.0.0/16 proto 97"
		if diff := cmp.Diff(strings.Fields(want), strings.Fields(tn.fabricRoutes())); diff != "" {
			t.Errorf("routes with gateway %s (-want +got):\n%s", gw, diff)
		}
		t.Logf("gateway %s: %v", gw, err)
	}
	// The right gateway repairs it.
	tn.mustApply(d, fullPlan)
	tn.wantSource(peerAddr, podAddr)
}
