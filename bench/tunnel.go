package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/annexhq/annex/internal/fabric"
	"github.com/annexhq/annex/internal/gateway"
	"github.com/annexhq/annex/internal/netnsutil"
)

// The tunnel phase measures pod-to-pod traffic across an Annex network link
// (two annex-gateway processes and their userspace WireGuard tunnel) against
// the same two pods joined by a plain veth, on network namespaces of its own
// (no cluster is involved; it runs before the clusters start, so that
// nothing else competes for the CPUs):
//
//	tunnel: pod a (10.200.0.5) ─veth─ router a ═══ WireGuard over veth ═══ router b ─veth─ pod b (10.200.0.5)
//	fabric: pod a2 (10.200.0.6) ─veth─ node a1 ─veth (node network)─ router a ═══ … ═══ router b ─veth─ pod b
//	veth:   pod a (172.31.255.1) ──────────────── plain veth ──────────────────────── pod b (172.31.255.2)
//
// Both clusters use the pod CIDR 10.200.0.0/24, as overlapping clusters do:
// a sees b's pods as 100.64.0.0/24, b sees a's as 100.65.0.0/24, and the
// gateways translate (see internal/gateway). Router a stands for the gateway
// node of cluster a, whose pod a runs on it; node a1 for another node of
// cluster a (IP forwarding on), with pod a2 on it. Node a1 and router a share
// the node network 172.30.0.0/24 (node a1 .2, router a .1). Node a1 runs
// what the fabric agent programs on such a node (internal/fabric, the plan
// Gateway 172.30.0.1, Destinations [100.64.0.0/24], Sources [10.200.0.0/24]:
// a route to b's pods via router a, protocol 97, and the table annex-fabric),
// and, like a CNI, masquerades what its pods send outside the pod CIDR to
// its own address (an nftables NAT chain at srcnat priority); the fabric's
// exemption is what keeps pod a2's address. Router a routes 10.200.0.6/32
// back via node a1; the gateways' lists (SNAT, allowedSources, accept) cover
// the whole pod CIDR, so b sees pod a2 as 100.65.0.6. The fabric path is the
// tunnel path plus one forwarding hop and node a1's route and nftables
// lookups; the phase checks once per run that node a1's masquerading works
// (a connection from pod a2 to router a's node address arrives from node
// a1's address) and that pod b's server sees pod a2's own address, in b's
// view, on the fabric path (it fails otherwise).
//
// The client and the servers are goroutines of the benchmark whose sockets
// were opened inside the pods' namespaces; the servers listen on the pods'
// addresses only, inside their namespaces.

// TunnelResult is what the tunnel phase measured.
type TunnelResult struct {
	// NotMeasured says why nothing was measured (not root, ...).
	NotMeasured string `json:"notMeasured,omitempty"`
	// BulkSeconds is how long the client sent for the throughput test;
	// RoundTrips how many request/response exchanges of MessageBytes each
	// the latency test timed.
	BulkSeconds  float64      `json:"bulkSeconds,omitempty"`
	RoundTrips   int          `json:"roundTrips,omitempty"`
	MessageBytes int          `json:"messageBytes,omitempty"`
	Paths        []TunnelPath `json:"paths,omitempty"`
	// GatewayRestarts counts the restarts of both gateways because the
	// tunnel carried no connection within 20 s of their start.
	GatewayRestarts int `json:"gatewayRestarts,omitempty"`
}

// TunnelPath is one way from pod a to pod b.
type TunnelPath struct {
	Name string `json:"name"` // pathTunnel, pathFabric or pathVeth
	// Source is the client's address as pod b's server saw it on the bulk
	// connection (in b's view: 100.65.0.5 for pod a, 100.65.0.6 for pod
	// a2 across the fabric).
	Source string `json:"source,omitempty"`
	// Bytes is what the server received during the bulk test, in Seconds
	// (its first byte to the end of the stream); MBPerSecond their ratio
	// in 10^6 bytes per second.
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	MBPerSecond float64 `json:"mbPerSecond"`
	// RTTMicroseconds summarizes the round trips, in microseconds.
	RTTMicroseconds Summary `json:"rttMicroseconds"`
}

// Paths of the tunnel phase.
const (
	pathTunnel = "tunnel"
	pathFabric = "fabric"
	pathVeth   = "veth"
)

// Parameters of the tunnel phase.
const (
	tunnelBulk       = 5 * time.Second
	tunnelRoundTrips = 1000
	tunnelMessage    = 64
	tunnelWarmup     = 50
	tunnelPort       = 5201
)

// Addresses of the tunnel topology (documentation ranges and private ones,
// inside namespaces of their own).
var (
	tunnelPodCIDR   = netip.MustParsePrefix("10.200.0.0/24")
	tunnelPodAddr   = netip.MustParseAddr("10.200.0.5")
	tunnelViewOfB   = netip.MustParsePrefix("100.64.0.0/24") // a's view of b's pods
	tunnelViewOfA   = netip.MustParsePrefix("100.65.0.0/24") // b's view of a's pods
	tunnelBFromA    = netip.MustParseAddr("100.64.0.5")
	tunnelVethA     = netip.MustParseAddr("172.31.255.1")
	tunnelVethB     = netip.MustParseAddr("172.31.255.2")
	tunnelUnderlayA = netip.MustParseAddr("192.0.2.1")
	tunnelUnderlayB = netip.MustParseAddr("192.0.2.2")
	tunnelAFromB    = netip.MustParseAddr("100.65.0.5") // pod a, as b sees it
	// The fabric path: pod a2 on node a1, a non-gateway node of cluster a,
	// on the node network with router a (the gateway node).
	tunnelPodA2      = netip.MustParseAddr("10.200.0.6")
	tunnelA2FromB    = netip.MustParseAddr("100.65.0.6") // pod a2, as b sees it
	tunnelNodeNet    = netip.MustParsePrefix("172.30.0.0/24")
	tunnelNodeRouter = netip.MustParseAddr("172.30.0.1") // router a, the gateway node
	tunnelNodeA1     = netip.MustParseAddr("172.30.0.2")
)

// tunnelPrereq returns why the phase cannot run here, "" when it can.
func tunnelPrereq(bin string) string {
	switch {
	case os.Geteuid() != 0:
		return "needs root (CAP_NET_ADMIN)"
	case runtime.GOOS != "linux":
		return "needs Linux network namespaces"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "needs iproute2's ip"
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return "needs /dev/net/tun"
	}
	if _, err := os.Stat(filepath.Join(bin, "annex-gateway")); err != nil {
		return "annex-gateway missing in " + bin + ": run make build"
	}
	return ""
}

// runTunnel measures the tunnel and the veth path. Whatever it creates
// (namespaces with their devices, gateway processes) is removed before it
// returns, also on failure or when ctx ends.
func runTunnel(ctx context.Context, l *logger, dir, bin string) (*TunnelResult, error) {
	res := &TunnelResult{BulkSeconds: tunnelBulk.Seconds(), RoundTrips: tunnelRoundTrips, MessageBytes: tunnelMessage}
	if why := tunnelPrereq(bin); why != "" {
		l.printf("tunnel: not measured: %s", why)
		return &TunnelResult{NotMeasured: why}, nil
	}
	tn := &tunnelNet{prefix: fmt.Sprintf("abt%d-", os.Getpid()%100000), dir: filepath.Join(dir, "tunnel"), bin: bin, log: l}
	defer tn.cleanup()
	err := tn.setUp(ctx)
	res.GatewayRestarts = tn.restarts
	if err != nil {
		return res, fmt.Errorf("set up the namespaces and gateways: %w", err)
	}
	l.printf("tunnel: namespaces and gateways up (%s*); measuring %s of bulk TCP and %d round trips per path", tn.prefix, tunnelBulk, tunnelRoundTrips)
	for _, p := range []struct {
		name         string
		client       string     // the client pod's namespace
		listen, dial netip.Addr // pod b's address, and what the client dials
		source       netip.Addr // the client's address as pod b sees it
	}{
		{pathTunnel, tn.ns("pa"), tunnelPodAddr, tunnelBFromA, tunnelAFromB},
		{pathFabric, tn.ns("pa2"), tunnelPodAddr, tunnelBFromA, tunnelA2FromB},
		{pathVeth, tn.ns("pa"), tunnelVethB, tunnelVethB, tunnelVethA},
	} {
		path := TunnelPath{Name: p.name}
		masqBefore, _ := tn.masqueraded()
		err := tn.measure(ctx, &path, p.client, p.listen, p.dial)
		if p.name == pathFabric {
			// Whatever went wrong, say so if node a1 masqueraded pod a2.
			if n, cerr := tn.masqueraded(); cerr == nil && n > masqBefore {
				err = errors.Join(err, fmt.Errorf("node a1 masqueraded pod a2's connections to b (%s; %d matched its masquerade rule): the fabric's exemption (table %s) did not hold",
					tunnelBFromA, n-masqBefore, fabric.TableName))
			}
		}
		if err == nil && path.Source != p.source.String() {
			err = fmt.Errorf("pod b's server saw the client as %s, not as %s (its own address in b's view): masqueraded on the way", path.Source, p.source)
		}
		if err != nil {
			return res, fmt.Errorf("%s path: %w", p.name, err)
		}
		res.Paths = append(res.Paths, path)
		l.printf("tunnel: %-6s %8.1f MB/s, round trip p50 %.0f µs, p99 %.0f µs (pod b saw the client as %s)",
			p.name, path.MBPerSecond, path.RTTMicroseconds.P50, path.RTTMicroseconds.P99, path.Source)
	}
	return res, nil
}

// tunnelNet is the topology: namespaces <prefix>ra, rb (routers), pa, pb
// (pods), na1 (node a1) and pa2 (pod a2), and the gateways running in the
// routers.
type tunnelNet struct {
	prefix, dir, bin string
	log              *logger
	created          []string // namespaces
	gateways         []*exec.Cmd
	restarts         int // of the gateways, when the tunnel did not carry traffic
}

func (tn *tunnelNet) ns(name string) string { return tn.prefix + name }

// ip runs ip with args.
func (tn *tunnelNet) ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (tn *tunnelNet) setUp(ctx context.Context) error {
	if err := os.MkdirAll(tn.dir, 0o755); err != nil {
		return err
	}
	for _, n := range []string{"ra", "rb", "pa", "pb", "na1", "pa2"} {
		if err := tn.ip(ctx, "netns", "add", tn.ns(n)); err != nil {
			return err
		}
		tn.created = append(tn.created, tn.ns(n))
	}
	ra, rb, pa, pb := tn.ns("ra"), tn.ns("rb"), tn.ns("pa"), tn.ns("pb")
	cmds := [][]string{
		{"-n", ra, "link", "set", "lo", "up"}, {"-n", rb, "link", "set", "lo", "up"},
		{"-n", pa, "link", "set", "lo", "up"}, {"-n", pb, "link", "set", "lo", "up"},
		// The underlay between the routers, and the plain veth between the pods.
		{"link", "add", "u0", "netns", ra, "type", "veth", "peer", "name", "u0", "netns", rb},
		{"-n", ra, "addr", "add", tunnelUnderlayA.String() + "/30", "dev", "u0"},
		{"-n", rb, "addr", "add", tunnelUnderlayB.String() + "/30", "dev", "u0"},
		{"-n", ra, "link", "set", "u0", "up"}, {"-n", rb, "link", "set", "u0", "up"},
		{"link", "add", "eth1", "netns", pa, "type", "veth", "peer", "name", "eth1", "netns", pb},
		{"-n", pa, "addr", "add", tunnelVethA.String() + "/30", "dev", "eth1"},
		{"-n", pb, "addr", "add", tunnelVethB.String() + "/30", "dev", "eth1"},
		{"-n", pa, "link", "set", "eth1", "up"}, {"-n", pb, "link", "set", "eth1", "up"},
	}
	gw := netip.PrefixFrom(tunnelPodCIDR.Addr().Next(), tunnelPodCIDR.Bits()) // 10.200.0.1/24
	for _, s := range []string{"a", "b"} {
		r, p := tn.ns("r"+s), tn.ns("p"+s)
		cmds = append(cmds,
			[]string{"link", "add", "eth0", "netns", p, "type", "veth", "peer", "name", "pod0", "netns", r},
			[]string{"-n", p, "addr", "add", netip.PrefixFrom(tunnelPodAddr, tunnelPodCIDR.Bits()).String(), "dev", "eth0"},
			[]string{"-n", p, "link", "set", "eth0", "up"},
			[]string{"-n", p, "route", "add", "default", "via", gw.Addr().String()},
			[]string{"-n", r, "addr", "add", gw.String(), "dev", "pod0"},
			[]string{"-n", r, "link", "set", "pod0", "up"},
			[]string{"netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"},
		)
	}
	cmds = append(cmds, tn.fabricNodeCmds(gw.Addr())...)
	for _, c := range cmds {
		if err := tn.ip(ctx, c...); err != nil {
			return err
		}
	}
	if err := tn.programNodeA1(ctx); err != nil {
		return fmt.Errorf("node a1: %w", err)
	}
	cfgA, cfgB, err := tunnelConfigs()
	if err != nil {
		return err
	}
	for _, g := range []struct {
		router string
		cfg    gateway.Config
	}{{ra, cfgA}, {rb, cfgB}} {
		if err := tn.startGateway(g.router, g.cfg); err != nil {
			return err
		}
	}
	// The tunnel carries traffic once both gateways programmed their side
	// and the WireGuard handshake is done (WireGuard retries a lost
	// handshake after 5 s). If it does not within tunnelReady, the gateways
	// are restarted once, fresh (counted in the results: it happened, rarely,
	// with a handshake done and no packet passing).
	for attempt := 0; ; attempt++ {
		err := tn.waitTunnel(ctx, pa, pb)
		if err == nil || ctx.Err() != nil {
			return err
		}
		tn.dumpState(fmt.Sprintf("attempt%d", attempt+1))
		if attempt == 1 {
			return fmt.Errorf("no connection through the tunnel after %s, twice (gateway logs and the routers' state in %s): %w", tunnelReady, tn.dir, err)
		}
		tn.log.printf("tunnel: no connection through the tunnel after %s (state in %s); restarting both gateways once", tunnelReady, tn.dir)
		tn.restarts++
		tn.stopGateways()
		for _, g := range []struct {
			router string
			cfg    gateway.Config
		}{{ra, cfgA}, {rb, cfgB}} {
			if err := tn.startGateway(g.router, g.cfg); err != nil {
				return err
			}
		}
	}
}

// tunnelReady bounds the wait for the first connection through the tunnel.
const tunnelReady = 20 * time.Second

// waitTunnel waits until a TCP connection from pod a reaches pod b through
// the tunnel.
func (tn *tunnelNet) waitTunnel(ctx context.Context, pa, pb string) error {
	deadline := time.Now().Add(tunnelReady)
	for {
		ln, err := listenIn(pb, netip.AddrPortFrom(tunnelPodAddr, tunnelPort))
		if err != nil {
			return err
		}
		conn, err := dialIn(pa, netip.AddrPortFrom(tunnelBFromA, tunnelPort), time.Second)
		ln.Close()
		if err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// dumpState writes the routers' addresses, rules and routes, and the
// gateways' status files so far, to <dir>/<name>-state.txt, for whoever
// looks into a tunnel that carried nothing.
func (tn *tunnelNet) dumpState(name string) {
	var b strings.Builder
	for _, r := range []string{"ra", "rb"} {
		for _, args := range [][]string{{"addr"}, {"rule"}, {"route", "show", "table", "all"}, {"-s", "link"}} {
			out, _ := exec.Command("ip", append([]string{"-n", tn.ns(r)}, args...)...).CombinedOutput()
			fmt.Fprintf(&b, "### ip -n %s %s\n%s\n", tn.ns(r), strings.Join(args, " "), out)
		}
		status, _ := os.ReadFile(filepath.Join(tn.dir, tn.ns(r)+"-status.json"))
		fmt.Fprintf(&b, "### status of the gateway in %s\n%s\n\n", tn.ns(r), status)
	}
	_ = os.WriteFile(filepath.Join(tn.dir, name+"-state.txt"), []byte(b.String()), 0o644)
}

// tunnelConfigs are the two gateways' configurations: one link each, with
// the address translations of overlapping pod CIDRs.
func tunnelConfigs() (a, b gateway.Config, err error) {
	keys := make([]gateway.Key, 4) // a's private, a's public, b's private, b's public
	for i := 0; i < 4; i += 2 {
		if keys[i], err = gateway.GenerateKey(); err != nil {
			return a, b, err
		}
		if keys[i+1], err = keys[i].Public(); err != nil { //nolint:gosec // G602: i+1 <= 3 < len(keys)
			return a, b, err
		}
	}
	link := func(peer string, priv, peerPub gateway.Key, endpoint netip.Addr, viewOfPeer, peerViewOfUs netip.Prefix) gateway.Link {
		return gateway.Link{Peer: peer, ListenPort: 51820, PrivateKey: priv, PeerPublicKey: peerPub,
			PeerEndpoint: netip.AddrPortFrom(endpoint, 51820), Routes: []netip.Prefix{viewOfPeer},
			DNAT:           []gateway.Netmap{{From: viewOfPeer, To: tunnelPodCIDR}},
			SNAT:           []gateway.Netmap{{From: tunnelPodCIDR, To: peerViewOfUs}},
			AllowedSources: []netip.Prefix{tunnelPodCIDR, viewOfPeer},
			Accept:         []netip.Prefix{tunnelPodCIDR}}
	}
	a = gateway.Config{Links: []gateway.Link{link("b", keys[0], keys[3], tunnelUnderlayB, tunnelViewOfB, tunnelViewOfA)}}
	b = gateway.Config{Links: []gateway.Link{link("a", keys[2], keys[1], tunnelUnderlayA, tunnelViewOfA, tunnelViewOfB)}}
	if err := a.Validate(); err != nil {
		return a, b, err
	}
	return a, b, b.Validate()
}

// startGateway runs annex-gateway in router namespace r; its log goes to
// the phase's directory.
func (tn *tunnelNet) startGateway(r string, cfg gateway.Config) error {
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	conf := filepath.Join(tn.dir, r+".json")
	if err := os.WriteFile(conf, data, 0o600); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(tn.dir, r+".log"))
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }() // the child has its own descriptor
	cmd := exec.Command("ip", "netns", "exec", r, filepath.Join(tn.bin, "annex-gateway"),
		"--config", conf, "--status", filepath.Join(tn.dir, r+"-status.json"), "--interval", "1s")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start annex-gateway in %s: %w", r, err)
	}
	tn.gateways = append(tn.gateways, cmd)
	return nil
}

// stopGateways stops the gateways (SIGTERM: each removes what it
// programmed; SIGKILL after 10 s).
func (tn *tunnelNet) stopGateways() {
	for _, g := range tn.gateways {
		_ = g.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = g.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = g.Process.Kill()
			<-done
		}
	}
	tn.gateways = nil
}

// cleanup stops the gateways and deletes the namespaces, which takes their
// devices with them.
func (tn *tunnelNet) cleanup() {
	tn.stopGateways()
	for _, n := range tn.created {
		if err := tn.ip(context.Background(), "netns", "del", n); err != nil {
			tn.log.printf("tunnel: clean-up: %v", err)
		}
	}
}

// measure runs the bulk and the round-trip tests from a client pod to pod
// b: the server listens on listen in pb, the client dials target from
// namespace client. path.Source is the client's address as the server saw
// it on the bulk connection.
func (tn *tunnelNet) measure(ctx context.Context, path *TunnelPath, client string, listen, target netip.Addr) error {
	ln, err := listenIn(tn.ns("pb"), netip.AddrPortFrom(listen, tunnelPort))
	if err != nil {
		return err
	}
	defer ln.Close()
	type bulk struct {
		n       int64
		elapsed time.Duration
		err     error
		from    string // the client's address
	}
	served := make(chan bulk, 1)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			from := remoteAddr(conn)
			go serveTunnelConn(conn, func(n int64, d time.Duration, err error) { served <- bulk{n, d, err, from} })
		}
	}()
	dst := netip.AddrPortFrom(target, tunnelPort)

	// Bulk: send for tunnelBulk, then close; the server counts.
	conn, err := dialIn(client, dst, 5*time.Second)
	if err != nil {
		return err
	}
	if err := sendBulk(ctx, conn, tunnelBulk); err != nil {
		conn.Close()
		return fmt.Errorf("bulk: %w", err)
	}
	var b bulk
	select {
	case b = <-served:
	case <-time.After(30 * time.Second):
		b.err = errors.New("the server did not see the end of the stream within 30s")
	}
	conn.Close()
	if b.err != nil {
		return fmt.Errorf("bulk: %w", b.err)
	}
	path.Bytes, path.Seconds, path.Source = b.n, b.elapsed.Seconds(), b.from
	if path.Seconds > 0 {
		path.MBPerSecond = float64(b.n) / path.Seconds / 1e6
	}

	// Round trips: small messages echoed one at a time.
	conn, err = dialIn(client, dst, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	rtts, err := roundTrips(conn, tunnelWarmup, tunnelRoundTrips, tunnelMessage)
	if err != nil {
		return fmt.Errorf("round trips: %w", err)
	}
	path.RTTMicroseconds = summarize(rtts)
	return nil
}

// remoteAddr is the address (without the port) conn comes from.
func remoteAddr(conn net.Conn) string {
	if ap, err := netip.ParseAddrPort(conn.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap().String()
	}
	return conn.RemoteAddr().String()
}

// Kinds of connection to the server: the first byte the client sends.
const (
	connBulk = 'b'
	connEcho = 'e'
)

// serveTunnelConn serves one connection: bulk (count everything until the
// end of the stream, then report) or echo (send every message back).
func serveTunnelConn(conn net.Conn, report func(n int64, elapsed time.Duration, err error)) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	mode := make([]byte, 1)
	if _, err := io.ReadFull(conn, mode); err != nil {
		return
	}
	switch mode[0] {
	case connBulk:
		buf := make([]byte, 256<<10)
		var n int64
		var start time.Time
		for {
			m, err := conn.Read(buf)
			if m > 0 && start.IsZero() {
				start = time.Now()
			}
			n += int64(m)
			if errors.Is(err, io.EOF) {
				report(n, time.Since(start), nil)
				return
			}
			if err != nil {
				report(n, time.Since(start), err)
				return
			}
		}
	case connEcho:
		_, _ = io.Copy(conn, conn)
	}
}

// sendBulk writes as fast as it can for d, then closes its side.
func sendBulk(ctx context.Context, conn net.Conn, d time.Duration) error {
	if _, err := conn.Write([]byte{connBulk}); err != nil {
		return err
	}
	buf := make([]byte, 128<<10)
	end := time.Now().Add(d)
	_ = conn.SetWriteDeadline(end.Add(10 * time.Second))
	for time.Now().Before(end) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, err := conn.Write(buf); err != nil {
			return err
		}
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return nil
}

// roundTrips sends n messages of size bytes one after the other, each once
// the previous one came back, after warmup untimed ones, and returns each
// round trip in microseconds.
func roundTrips(conn net.Conn, warmup, n, size int) ([]float64, error) {
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	if _, err := conn.Write([]byte{connEcho}); err != nil {
		return nil, err
	}
	msg, back := make([]byte, size), make([]byte, size)
	out := make([]float64, 0, n)
	for i := range warmup + n {
		start := time.Now()
		if _, err := conn.Write(msg); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(conn, back); err != nil {
			return nil, err
		}
		if i >= warmup {
			out = append(out, float64(time.Since(start).Nanoseconds())/1e3)
		}
	}
	return out, nil
}

// listenIn opens a TCP listener on addr inside network namespace ns.
func listenIn(ns string, addr netip.AddrPort) (net.Listener, error) {
	var ln net.Listener
	err := inNetns(ns, func() (err error) {
		ln, err = net.Listen("tcp", addr.String())
		return err
	})
	return ln, err
}

// dialIn connects to addr from inside network namespace ns.
func dialIn(ns string, addr netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	var conn net.Conn
	err := inNetns(ns, func() (err error) {
		conn, err = net.DialTimeout("tcp", addr.String(), timeout)
		return err
	})
	return conn, err
}

// inNetns runs fn with its thread in network namespace ns (netnsutil.In):
// a socket belongs to the namespace of the thread that opened it.
func inNetns(ns string, fn func() error) error {
	target, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", ns, err)
	}
	defer target.Close()
	return netnsutil.In(target, fn)
}
