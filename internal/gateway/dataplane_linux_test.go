package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
// each has a router namespace (its gateway) and one pod namespace at
// 10.200.0.5; the routers share an underlay veth (192.0.2.0/30). a sees b's
// pods as 100.64.0.0/24, b sees a's as 100.65.0.0/24.
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
	t.Cleanup(func() {
		for _, n := range []string{"ra", "rb", "pa", "pb"} {
			_ = exec.Command("ip", "netns", "del", tp.ns(n)).Run()
		}
	})
	for _, n := range []string{"ra", "rb", "pa", "pb"} {
		tp.ip("netns", "add", tp.ns(n))
		tp.ip("-n", tp.ns(n), "link", "set", "lo", "up")
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
		self, _ := os.Executable()
		srv := tp.in("p"+s, self)
		srv.Env = append(os.Environ(), helperEnv+"=serve=10.200.0.5:8080|pod "+s)
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	}
	return tp
}

// get fetches url from inside pod namespace ns.
func (tp *topology) get(ns, url string) (string, error) {
	self, _ := os.Executable()
	cmd := tp.in(ns, self)
	cmd.Env = append(os.Environ(), helperEnv+"=get="+url)
	out, err := cmd.Output()
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
	tp.t.Fatalf("GET %s from %s: %q, %v; want %q", url, ns, got, err, want)
}

// gateway runs annex-gateway in router namespace r with cfg.
type gatewayProc struct {
	cmd    *exec.Cmd
	status string
}

func (tp *topology) startGateway(r string, cfg Config) *gatewayProc {
	tp.t.Helper()
	data, err := json.Marshal(cfg)
	if err != nil {
		tp.t.Fatal(err)
	}
	conf := filepath.Join(tp.dir, r+".json")
	if err := os.WriteFile(conf, data, 0o600); err != nil {
		tp.t.Fatal(err)
	}
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

func mustKey(t *testing.T) (Key, Key) {
	t.Helper()
	priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := priv.Public()
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

func TestTunnelWithOverlappingCIDRs(t *testing.T) {
	tp := newTopology(t)
	p := netip.MustParsePrefix
	aPriv, aPub := mustKey(t)
	bPriv, bPub := mustKey(t)
	// Both sides remap the other to the same range, as alpha and gamma do
	// in the sandbox: replies must not be sent back into the tunnel.
	own, aView, bView := p("10.200.0.0/24"), p("100.64.0.0/24"), p("100.64.0.0/24")
	cfgA := Config{Links: []Link{{Peer: "b", ListenPort: 51820, PrivateKey: aPriv, PeerPublicKey: bPub,
		PeerEndpoint: netip.MustParseAddrPort("192.0.2.2:51820"), Routes: []netip.Prefix{aView},
		DNAT: []Netmap{{From: aView, To: own}}, SNAT: []Netmap{{From: own, To: bView}},
		AllowedSources: []netip.Prefix{own, aView}}}}
	cfgB := Config{Links: []Link{{Peer: "a", ListenPort: 51820, PrivateKey: bPriv, PeerPublicKey: aPub,
		PeerEndpoint: netip.MustParseAddrPort("192.0.2.1:51820"), Routes: []netip.Prefix{bView},
		DNAT: []Netmap{{From: bView, To: own}}, SNAT: []Netmap{{From: own, To: aView}},
		AllowedSources: []netip.Prefix{own, bView}}}}
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

	// A gateway that dies leaves its rules; the restarted one replaces them
	// without duplicates and the traffic flows again.
	ga.stop(syscall.SIGKILL)
	if _, err := tp.get("pa", "http://100.64.0.5:8080/"); err == nil {
		t.Error("traffic flowed with a's gateway dead")
	}
	tp.startGateway("ra", cfgA)
	tp.eventuallyGet("pa", "http://100.64.0.5:8080/", "pod b")
	out, err := tp.in("ra", "ip", "rule").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), fmt.Sprintf("fwmark %#x", markBase+linkID("b"))); n != 1 {
		t.Errorf("%d policy rules for the link after the restart, want 1:\n%s", n, out)
	}

	// A clean stop removes the device and the policy rule.
	gb.stop(syscall.SIGTERM)
	if out, err := tp.in("rb", "ip", "link", "show", DeviceName("a")).CombinedOutput(); err == nil {
		t.Errorf("device %s still there after the gateway stopped:\n%s", DeviceName("a"), out)
	}
	if out, _ := tp.in("rb", "ip", "rule").CombinedOutput(); strings.Contains(string(out), fmt.Sprintf("fwmark %#x", markBase+linkID("a"))) {
		t.Errorf("policy rule still there after the gateway stopped:\n%s", out)
	}
}
