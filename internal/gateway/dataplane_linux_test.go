package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The test binary doubles as the pods' HTTP server and client, run inside
// their network namespaces with `ip netns exec`.
const helperEnv = "ANNEX_GATEWAY_TEST_HELPER"

func TestMain(m *testing.M) {
	switch mode, arg, _ := strings.Cut(os.Getenv(helperEnv), "="); mode {
	case "serve": // arg: "<listen address>|<answer>"
		addr, answer, _ := strings.Cut(arg, "|")
		err := http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, answer)
		}))
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	case "echo": // arg: listen address; echoes every TCP connection
		ln, err := net.Listen("tcp", arg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	case "get": // arg: URL
		c := &http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get(arg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		body, _ := io.ReadAll(resp.Body)
		fmt.Print(string(body))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// topology is two clusters, a and b, with the same pod CIDR 10.200.0.0/24:
// each has a router namespace (its gateway) and a pod namespace at
// 10.200.0.5, and a has a second pod at 10.200.0.6 (pa2: an address b does
// not have, so a packet that a's router translates into b's addresses but
// then delivers locally is answered by it); the routers share an underlay
// veth (192.0.2.0/30).
type topology struct {
	t      *testing.T
	prefix string
	dir    string
	gwBin  string
}

func (tp *topology) ns(name string) string { return tp.prefix + name }

func (tp *topology) ip(args ...string) {
	tp.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		tp.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (tp *topology) in(ns string, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", tp.ns(ns), name}, args...)...)
}

func newTopology(t *testing.T) *topology {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TUN devices, nftables)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun")
	}
	tp := &topology{t: t, prefix: fmt.Sprintf("agw%d-", os.Getpid()%100000), dir: t.TempDir()}
	tp.gwBin = filepath.Join(tp.dir, "annex-gateway")
	if out, err := exec.Command("go", "build", "-o", tp.gwBin, "github.com/annexhq/annex/cmd/annex-gateway").CombinedOutput(); err != nil {
		t.Fatalf("build annex-gateway: %v\n%s", err, out)
	}
	for _, n := range []string{"ra", "rb", "pa", "pb"} {
		tp.addNS(n)
	}
	tp.ip("link", "add", "u0", "netns", tp.ns("ra"), "type", "veth", "peer", "name", "u0", "netns", tp.ns("rb"))
	tp.ip("-n", tp.ns("ra"), "addr", "add", "192.0.2.1/30", "dev", "u0")
	tp.ip("-n", tp.ns("rb"), "addr", "add", "192.0.2.2/30", "dev", "u0")
	for _, s := range []string{"a", "b"} {
		r, p := tp.ns("r"+s), tp.ns("p"+s)
		tp.ip("-n", r, "link", "set", "u0", "up")
		tp.ip("link", "add", "eth0", "netns", p, "type", "veth", "peer", "name", "pod0", "netns", r)
		tp.ip("-n", p, "addr", "add", "10.200.0.5/24", "dev", "eth0")
		tp.ip("-n", p, "link", "set", "eth0", "up")
		tp.ip("-n", p, "route", "add", "default", "via", "10.200.0.1")
		tp.ip("-n", r, "addr", "add", "10.200.0.1/24", "dev", "pod0")
		tp.ip("-n", r, "link", "set", "pod0", "up")
		if out, err := tp.in("r"+s, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0").CombinedOutput(); err != nil {
			t.Fatalf("sysctl: %v\n%s", err, out)
		}
		tp.serve("p"+s, "10.200.0.5:8080", "pod "+s)
	}
	tp.addPod("ra", "pa2", "10.200.0.6", "pod a2")
	return tp
}

// addNS adds namespace name (with lo up) until the test ends.
func (tp *topology) addNS(name string) {
	tp.t.Helper()
	tp.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", tp.ns(name)).Run() })
	tp.ip("netns", "add", tp.ns(name))
	tp.ip("-n", tp.ns(name), "link", "set", "lo", "up")
}

// addPod adds pod namespace p with address addr, on router r by its own
// veth (pod1 on the router's side) and a host route, serving answer on
// addr:8080.
func (tp *topology) addPod(r, p, addr, answer string) {
	tp.t.Helper()
	tp.addNS(p)
	rn, pn := tp.ns(r), tp.ns(p)
	tp.ip("link", "add", "eth0", "netns", pn, "type", "veth", "peer", "name", "pod1", "netns", rn)
	tp.ip("-n", pn, "addr", "add", addr+"/32", "dev", "eth0")
	tp.ip("-n", pn, "link", "set", "eth0", "up")
	tp.ip("-n", pn, "route", "add", "10.200.0.1/32", "dev", "eth0")
	tp.ip("-n", pn, "route", "add", "default", "via", "10.200.0.1")
	tp.ip("-n", rn, "link", "set", "pod1", "up")
	tp.ip("-n", rn, "route", "add", addr+"/32", "dev", "pod1")
	tp.serve(p, addr+":8080", answer)
}

// serve runs an HTTP server answering answer on addr in namespace ns until
// the test ends.
func (tp *topology) serve(ns, addr, answer string) {
	tp.helper(ns, "serve="+addr+"|"+answer)
}

// helper runs the test binary in namespace ns in mode (see TestMain) until
// the test ends.
func (tp *topology) helper(ns, mode string) {
	tp.t.Helper()
	self, _ := os.Executable()
	srv := tp.in(ns, self)
	srv.Env = append(os.Environ(), helperEnv+"="+mode)
	if err := srv.Start(); err != nil {
		tp.t.Fatal(err)
	}
	tp.t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
}

// dial opens a TCP connection to addr from inside namespace ns (the
// socket is made there and stays there). The goroutine that switches its
// thread into ns keeps the thread locked, so the thread ends with it.
func (tp *topology) dial(ns, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes when this goroutine ends
		h, err := netns.GetFromName(tp.ns(ns))
		if err != nil {
			done <- result{nil, err}
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			done <- result{nil, err}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}

// echo sends a line on c and checks that it comes back within 2 s.
func echo(c net.Conn, line string) error {
	if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return fmt.Errorf("echoed %q, want %q", got, line)
	}
	return nil
}

// nftHandles lists the handles of the rules of the gateway's table in
// namespace ns, by chain: equal lists mean the chains were not rebuilt.
func (tp *topology) nftHandles(ns string) map[string][]uint64 {
	tp.t.Helper()
	n := tp.nftConn(ns)
	chains, err := n.ListChains()
	if err != nil {
		tp.t.Fatal(err)
	}
	out := map[string][]uint64{}
	for _, c := range chains {
		if c.Table.Name != TableName || c.Table.Family != nftables.TableFamilyIPv4 {
			continue
		}
		rules, err := n.GetRules(c.Table, c)
		if err != nil {
			tp.t.Fatal(err)
		}
		for _, r := range rules {
			out[c.Name] = append(out[c.Name], r.Handle)
		}
	}
	return out
}

// nftConn is an nftables connection to namespace ns.
func (tp *topology) nftConn(ns string) *nftables.Conn {
	tp.t.Helper()
	f, err := os.Open(filepath.Join("/run/netns", tp.ns(ns)))
	if err != nil {
		tp.t.Fatal(err)
	}
	tp.t.Cleanup(func() { _ = f.Close() }) // read only
	n, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		tp.t.Fatal(err)
	}
	return n
}

// lastHandshake is the last handshake of the link with peer in the status
// file at path (zero when there is none).
func lastHandshake(path, peer string) time.Time {
	var st []LinkStatus
	if data, err := os.ReadFile(path); err == nil && json.Unmarshal(data, &st) == nil {
		for _, l := range st {
			if l.Peer == peer {
				return l.LastHandshake
			}
		}
	}
	return time.Time{}
}

// nftRules counts the rules of the gateway's table in namespace ns, by
// chain (nil when there is no table).
func (tp *topology) nftRules(ns string) map[string]int {
	tp.t.Helper()
	f, err := os.Open(filepath.Join("/run/netns", tp.ns(ns)))
	if err != nil {
		tp.t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read only
	n, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		tp.t.Fatal(err)
	}
	chains, err := n.ListChains()
	if err != nil {
		tp.t.Fatal(err)
	}
	var out map[string]int
	for _, c := range chains {
		if c.Table.Name != TableName || c.Table.Family != nftables.TableFamilyIPv4 {
			continue
		}
		rules, err := n.GetRules(c.Table, c)
		if err != nil {
			tp.t.Fatal(err)
		}
		if out == nil {
			out = map[string]int{}
		}
		out[c.Name] = len(rules)
	}
	return out
}

// routing is what namespace ns has of the link with peer: its policy
// rules and the routes of its table.
func (tp *topology) routing(ns, peer string) (rules int, routes string) {
	tp.t.Helper()
	out, err := tp.in(ns, "ip", "rule").CombinedOutput()
	if err != nil {
		tp.t.Fatalf("ip rule: %v\n%s", err, out)
	}
	rules = strings.Count(string(out), fmt.Sprintf("fwmark %#x", markBase+linkID(peer)))
	out, _ = tp.in(ns, "ip", "route", "show", "table", fmt.Sprint(tableBase+linkID(peer))).CombinedOutput()
	return rules, strings.TrimSpace(string(out))
}

// writeConfig replaces the configuration file of router r (the running
// gateway applies it within its interval).
func (tp *topology) writeConfig(r string, cfg Config) string {
	tp.t.Helper()
	data, err := json.Marshal(cfg)
	if err != nil {
		tp.t.Fatal(err)
	}
	conf := filepath.Join(tp.dir, r+".json")
	if err := os.WriteFile(conf+".tmp", data, 0o600); err != nil {
		tp.t.Fatal(err)
	}
	if err := os.Rename(conf+".tmp", conf); err != nil {
		tp.t.Fatal(err)
	}
	return conf
}

// eventually polls cond for up to 30 s.
func (tp *topology) eventually(what string, cond func() error) {
	tp.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tp.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// get fetches url from inside pod namespace ns.
func (tp *topology) get(ns, url string) (string, error) {
	self, _ := os.Executable()
	cmd := tp.in(ns, self)
	cmd.Env = append(os.Environ(), helperEnv+"=get="+url)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(exit.Stderr))
	}
	return string(out), err
}

func (tp *topology) eventuallyGet(ns, url, want string) {
	tp.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got string
	var err error
	for time.Now().Before(deadline) {
		if got, err = tp.get(ns, url); err == nil && got == want {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	tp.dumpRouters()
	tp.t.Fatalf("GET %s from %s: %q, %v; want %q", url, ns, got, err, want)
}

// dumpRouters logs what each router namespace has (the gateways' status,
// addresses, policy rules, routes, nftables and conntrack), so that a
// failure can be read from the test's output alone.
func (tp *topology) dumpRouters() {
	tp.t.Helper()
	for _, r := range []string{"ra", "rb"} {
		status, _ := os.ReadFile(filepath.Join(tp.dir, r+"-status.json"))
		tp.t.Logf("%s status file: %s", r, status)
		for _, args := range [][]string{
			{"ip", "-4", "addr"}, {"ip", "rule"}, {"ip", "route", "show", "table", "all"},
			{"nft", "list", "ruleset"}, {"cat", "/proc/net/nf_conntrack"}, {"ip", "-s", "link"},
		} {
			out, err := tp.in(r, args[0], args[1:]...).CombinedOutput()
			tp.t.Logf("%s: %s (%v)\n%s", r, strings.Join(args, " "), err, out)
		}
	}
}

// gateway runs annex-gateway in router namespace r with cfg.
type gatewayProc struct {
	cmd    *exec.Cmd
	status string
}

func (tp *topology) startGateway(r string, cfg Config) *gatewayProc {
	tp.t.Helper()
	conf := tp.writeConfig(r, cfg)
	g := &gatewayProc{status: filepath.Join(tp.dir, r+"-status.json")}
	g.cmd = tp.in(r, tp.gwBin, "--config", conf, "--status", g.status, "--interval", "500ms")
	g.cmd.Stderr = os.Stderr
	if err := g.cmd.Start(); err != nil {
		tp.t.Fatal(err)
	}
	tp.t.Cleanup(func() { g.stop(syscall.SIGTERM) })
	return g
}

func (g *gatewayProc) stop(sig syscall.Signal) {
	if g.cmd.ProcessState != nil {
		return
	}
	_ = g.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-done
	}
}

func TestTunnelWithOverlappingCIDRs(t *testing.T) {
	tp := newTopology(t)
	p := netip.MustParsePrefix
	aPriv, aPub := mustKey(t)
	bPriv, bPub := mustKey(t)
	// Both sides remap the other to the same range, as alpha and gamma do
	// in the sandbox: replies must not be sent back into the tunnel. a
	// lets b reach its pod 10.200.0.5 only, at first (as a provider lets a
	// tenant reach the tenant's pods only), b lets a reach its whole pod
	// CIDR (--gateway-peer-access=all).
	own, aView, bView := p("10.200.0.0/24"), p("100.64.0.0/24"), p("100.64.0.0/24")
	cfgA := Config{Links: []Link{{Peer: "b", ListenPort: 51820, PrivateKey: aPriv, PeerPublicKey: bPub,
		PeerEndpoint: netip.MustParseAddrPort("192.0.2.2:51820"), Routes: []netip.Prefix{aView},
		DNAT: []Netmap{{From: aView, To: own}}, SNAT: []Netmap{{From: own, To: bView}},
		AllowedSources: []netip.Prefix{own, aView}, Accept: []netip.Prefix{p("10.200.0.5/32")}}}}
	cfgB := Config{Links: []Link{{Peer: "a", ListenPort: 51820, PrivateKey: bPriv, PeerPublicKey: aPub,
		PeerEndpoint: netip.MustParseAddrPort("192.0.2.1:51820"), Routes: []netip.Prefix{bView},
		DNAT: []Netmap{{From: bView, To: own}}, SNAT: []Netmap{{From: own, To: aView}},
		AllowedSources: []netip.Prefix{own, bView}, Accept: []netip.Prefix{own}}}}
	tp.helper("pa", "echo=10.200.0.5:7000")
	tp.serve("ra", "10.200.0.1:8080", "router a")
	ga := tp.startGateway("ra", cfgA)
	gb := tp.startGateway("rb", cfgB)

	// Each pod reaches the other at its own view of it.
	tp.eventuallyGet("pa", "http://100.64.0.5:8080/", "pod b")
	tp.eventuallyGet("pb", "http://100.64.0.5:8080/", "pod a")

	// The status file (written every 500ms) shows the handshake and traffic.
	var data []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var st []LinkStatus
		var err error
		if data, err = os.ReadFile(ga.status); err == nil {
			err = json.Unmarshal(data, &st)
		}
		if err == nil && len(st) == 1 && st[0].RxBytes > 0 && !st[0].LastHandshake.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("status of a's gateway: %s (%v)", data, err)
			break
		}
	}

	// b reaches the address a accepts but not another of a's pod CIDR
	// (pa2), nor a's router.
	if got, err := tp.get("pb", "http://100.64.0.6:8080/"); err == nil {
		t.Errorf("b reached a's pod 10.200.0.6, which a does not accept: %q", got)
	}
	if got, err := tp.get("pb", "http://100.64.0.1:8080/"); err == nil {
		t.Errorf("b reached a's router 10.200.0.1, which a does not accept: %q", got)
	}
	held, err := tp.dial("pb", "100.64.0.5:7000")
	if err != nil {
		t.Fatalf("b's connection to a's accepted pod: %v", err)
	}
	defer held.Close()
	if err := echo(held, "before"); err != nil {
		t.Fatalf("b's connection to a's accepted pod: %v", err)
	}

	// Accepting pa2 too only refills the link's set: the chains stay (same
	// rule handles), the WireGuard session stays (same handshake), the
	// connection b holds goes on, and b reaches pa2.
	chains, handshake := tp.nftHandles("ra"), lastHandshake(ga.status, "b")
	cfgA.Links[0].Accept = []netip.Prefix{p("10.200.0.6/32"), p("10.200.0.5/32")}
	tp.writeConfig("ra", cfgA)
	tp.eventuallyGet("pb", "http://100.64.0.6:8080/", "pod a2")
	if err := echo(held, "after adding pa2"); err != nil {
		t.Errorf("b's established connection after a's accept set grew: %v", err)
	}
	if diff := cmp.Diff(chains, tp.nftHandles("ra")); diff != "" {
		t.Errorf("a's chains were rebuilt for an accept change (-before +after):\n%s", diff)
	}
	if got := lastHandshake(ga.status, "b"); handshake.IsZero() || !got.Equal(handshake) {
		t.Errorf("a's WireGuard session with b changed with its accept set: handshake %s, then %s", handshake, got)
	}
	// Taking pa2 out again: b's new connections to it are dropped, the
	// held connection to pa is not.
	cfgA.Links[0].Accept = []netip.Prefix{p("10.200.0.5/32")}
	tp.writeConfig("ra", cfgA)
	tp.eventually("b refused pa2 again", func() error {
		if got, err := tp.get("pb", "http://100.64.0.6:8080/"); err == nil {
			return fmt.Errorf("b still reaches pa2: %q", got)
		}
		return nil
	})
	if err := echo(held, "after removing pa2"); err != nil {
		t.Errorf("b's established connection after a's accept set shrank: %v", err)
	}
	if diff := cmp.Diff(chains, tp.nftHandles("ra")); diff != "" {
		t.Errorf("a's chains were rebuilt for an accept change (-before +after):\n%s", diff)
	}

	// Sources bound: pa is in b's accept set (b's tenant pod, say), pa2 is
	// in none and not one of a's own pods (another tenant's, or one the
	// agent has not classified yet): pa2 opens no connection into the
	// link, pa does, and pa2 does once it counts as a's own pod, which
	// only refills a set.
	cfgA.PodCIDR = own
	tp.writeConfig("ra", cfgA)
	tp.eventually("pa2 kept out of the link to b", func() error {
		if got, err := tp.get("pa2", "http://100.64.0.5:8080/"); err == nil {
			return fmt.Errorf("pa2 reached b: %q", got)
		}
		return nil
	})
	tp.eventuallyGet("pa", "http://100.64.0.5:8080/", "pod b")
	if err := echo(held, "after binding a's sources"); err != nil {
		t.Errorf("b's established connection after a bound its sources: %v", err)
	}
	chains = tp.nftHandles("ra")
	cfgA.OwnPods = []netip.Prefix{p("10.200.0.6/32")}
	tp.writeConfig("ra", cfgA)
	tp.eventuallyGet("pa2", "http://100.64.0.5:8080/", "pod b")
	if diff := cmp.Diff(chains, tp.nftHandles("ra")); diff != "" {
		t.Errorf("a's chains were rebuilt for a change of its own pods (-before +after):\n%s", diff)
	}
	cfgA.OwnPods = nil
	tp.writeConfig("ra", cfgA)
	tp.eventually("pa2 kept out again", func() error {
		if got, err := tp.get("pa2", "http://100.64.0.5:8080/"); err == nil {
			return fmt.Errorf("pa2 reached b: %q", got)
		}
		return nil
	})

	// Once a accepts its whole pod CIDR, the running gateway lets b in.
	cfgA.Links[0].Accept = []netip.Prefix{own}
	tp.writeConfig("ra", cfgA)
	tp.eventuallyGet("pb", "http://100.64.0.6:8080/", "pod a2")
	before := tp.nftRules("ra")

	// A gateway that dies leaves its rules; nothing it translated into b's
	// addresses is delivered here meanwhile (pa2 has the address pa asks
	// b for); the restarted one replaces them without duplicates and the
	// traffic flows again.
	ga.stop(syscall.SIGKILL)
	if got, err := tp.get("pa", "http://100.64.0.5:8080/"); err == nil {
		t.Errorf("traffic flowed with a's gateway dead: %q", got)
	}
	if got, err := tp.get("pa", "http://100.64.0.6:8080/"); err == nil {
		t.Errorf("with a's gateway dead, a packet for b's 10.200.0.6 was delivered to a's own pod: %q", got)
	}
	ga = tp.startGateway("ra", cfgA)
	tp.eventuallyGet("pa", "http://100.64.0.5:8080/", "pod b")
	if rules, _ := tp.routing("ra", "b"); rules != 1 {
		t.Errorf("%d policy rules for the link after the restart, want 1", rules)
	}
	if diff := cmp.Diff(before, tp.nftRules("ra")); diff != "" {
		t.Errorf("nftables rules after the restart (-before +after):\n%s", diff)
	}

	// A link removed while its gateway was down: the next gateway removes
	// the rule and the table its predecessor left.
	ga.stop(syscall.SIGKILL)
	tp.startGateway("ra", Config{Links: []Link{}}) // stopped by the test's cleanup
	tp.eventually("a's routing of the removed link gone", func() error {
		if rules, routes := tp.routing("ra", "b"); rules != 0 || routes != "" {
			return fmt.Errorf("%d rules, routes %q", rules, routes)
		}
		return nil
	})
	if got, err := tp.get("pa", "http://100.64.0.5:8080/"); err == nil {
		t.Errorf("a reached b after the link was removed: %q", got)
	}

	// A link removed while the gateway runs: its device and routing go.
	if rules, routes := tp.routing("rb", "a"); rules != 1 || !strings.Contains(routes, "unreachable default") {
		t.Errorf("b's routing of the link: %d rules, routes %q; want 1 rule and an unreachable fallback", rules, routes)
	}
	tp.writeConfig("rb", Config{Links: []Link{}})
	tp.eventually("b's link removed", func() error {
		if out, err := tp.in("rb", "ip", "link", "show", DeviceName("a")).CombinedOutput(); err == nil {
			return fmt.Errorf("device still there:\n%s", out)
		}
		if rules, routes := tp.routing("rb", "a"); rules != 0 || routes != "" {
			return fmt.Errorf("%d rules, routes %q", rules, routes)
		}
		return nil
	})

	// A clean stop removes the table.
	tp.writeConfig("rb", cfgB)
	tp.eventually("b's link back", func() error {
		if rules, _ := tp.routing("rb", "a"); rules != 1 {
			return fmt.Errorf("%d rules", rules)
		}
		return nil
	})
	gb.stop(syscall.SIGTERM)
	if out, err := tp.in("rb", "ip", "link", "show", DeviceName("a")).CombinedOutput(); err == nil {
		t.Errorf("device %s still there after the gateway stopped:\n%s", DeviceName("a"), out)
	}
	if rules, routes := tp.routing("rb", "a"); rules != 0 || routes != "" {
		t.Errorf("after the gateway stopped: %d policy rules, routes %q", rules, routes)
	}
	if got := tp.nftRules("rb"); got != nil {
		t.Errorf("nftables table still there after the gateway stopped: %v", got)
	}
}

// TestServiceToRemotePod is a pod asking a Service whose endpoint is a
// remote pod, on a gateway that shares its namespace with kube-proxy (the
// host network of a node): kube-proxy translates the ClusterIP after the
// gateway's "mark" chain has looked at the destination, and the packet
// must still take the link.
func TestServiceToRemotePod(t *testing.T) {
	tp := newTopology(t)
	p := netip.MustParsePrefix
	aPriv, aPub := mustKey(t)
	bPriv, bPub := mustKey(t)
	// The pod CIDRs overlap and are remapped as in
	// TestTunnelWithOverlappingCIDRs; b's external CIDR, where pb2 is, is
	// routed by a as it is.
	own, view, bExternal := p("10.200.0.0/24"), p("100.64.0.0/24"), p("10.201.0.0/24")
	tp.addPod("rb", "pb2", "10.201.0.7", "pod b2")
	cfgA := Config{Links: []Link{{Peer: "b", ListenPort: 51820, PrivateKey: aPriv, PeerPublicKey: bPub,
		PeerEndpoint: netip.MustParseAddrPort("192.0.2.2:51820"), Routes: []netip.Prefix{view, bExternal},
		DNAT: []Netmap{{From: view, To: own}}, SNAT: []Netmap{{From: own, To: view}},
		AllowedSources: []netip.Prefix{own, view, bExternal}}}}
	cfgB := Config{Links: []Link{{Peer: "a", ListenPort: 51820, PrivateKey: bPriv, PeerPublicKey: aPub,
		PeerEndpoint: netip.MustParseAddrPort("192.0.2.1:51820"), Routes: []netip.Prefix{view},
		DNAT: []Netmap{{From: view, To: own}}, SNAT: []Netmap{{From: own, To: view}},
		AllowedSources: []netip.Prefix{own, view}, Accept: []netip.Prefix{own, bExternal}}}}
	tp.dnatService("ra", netip.MustParseAddrPort("10.96.0.10:80"), netip.MustParseAddrPort("10.201.0.7:8080"))
	tp.startGateway("ra", cfgA)
	tp.startGateway("rb", cfgB)

	tp.eventuallyGet("pa", "http://10.201.0.7:8080/", "pod b2") // the link, without the Service
	if got, err := tp.get("pa", "http://10.96.0.10/"); err != nil || got != "pod b2" {
		t.Errorf("GET the Service from a's pod: %q, %v; want %q", got, err, "pod b2")
	}
}

// dnatService adds to namespace ns what kube-proxy's iptables-nft rules
// amount to for a Service: in a table of the test's own, a NAT chain at
// prerouting, priority -100, that translates TCP to svc into endpoint.
func (tp *topology) dnatService(ns string, svc, endpoint netip.AddrPort) {
	tp.t.Helper()
	n := tp.nftConn(ns)
	tbl := n.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "test-kube-proxy"})
	ch := n.AddChain(&nftables.Chain{Name: "services", Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	dst, to := svc.Addr().As4(), endpoint.Addr().As4()
	n.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: dst[:]},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(svc.Port())},
		&expr.Immediate{Register: 1, Data: to[:]},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(endpoint.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(nftables.TableFamilyIPv4), RegAddrMin: 1, RegProtoMin: 2},
	}})
	if err := n.Flush(); err != nil {
		tp.t.Fatalf("kube-proxy's rule in %s: %v", ns, err)
	}
}

// TestLinkIDClearOfKubeProxyMarks checks that no link's mark or table has
// kube-proxy's bits 0x4000 or 0x8000, and that many peers' IDs spread
// over the whole range, 1 to maxLinkID.
func TestLinkIDClearOfKubeProxyMarks(t *testing.T) {
	names := func(format string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf(format, i)
		}
		return out
	}
	type span struct{ Min, Max uint32 }
	for _, tc := range []struct {
		name  string
		peers []string
		want  span
	}{
		{"numbered", names("cluster-%d", 100000), span{1, maxLinkID}},
		{"hex", names("%x", 100000), span{1, maxLinkID}},
		{"letters", strings.Split("abcdefghijklmnopqrstuvwxyz", ""), span{}},
		{"sandbox", []string{"alpha", "beta", "gamma"}, span{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := span{Min: ^uint32(0)}
			for _, peer := range tc.peers {
				id := linkID(peer)
				if id == 0 || id > maxLinkID || (markBase+id)&0xc000 != 0 || (tableBase+id)&0xc000 != 0 {
					t.Fatalf("link %q: ID %#x, mark %#x, table %#x", peer, id, markBase+id, tableBase+id)
				}
				got.Min, got.Max = min(got.Min, id), max(got.Max, id)
			}
			if tc.want == (span{}) {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("range of the IDs (-want +got):\n%s", diff)
			}
		})
	}
}
