package sandboxnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/types"

	"github.com/annexhq/annex/internal/netnsutil"
)

// podMTU is the MTU of both ends of a pod's veth: the gateway's WireGuard
// devices have 1420, so pods never send what a tunnel would have to refuse.
const podMTU = 1420

// operUpWait bounds the wait for a new veth to come up.
const operUpWait = 2 * time.Second

// podInfo is what a pod's namespace is made from.
type podInfo struct {
	Namespace string
	Name      string
	UID       types.UID
	IP        netip.Addr
}

func (p podInfo) key() string { return p.Namespace + "/" + p.Name }

// podManager makes and removes the namespaces of one cluster's pods and runs
// their echo servers. Its methods may be called from several goroutines,
// but RunPods calls them from one worker per cluster.
type podManager struct {
	naming  naming
	cluster string
	log     logr.Logger

	mu      sync.Mutex
	servers map[types.UID]*echoServer
}

func newPodManager(n naming, cluster string, log logr.Logger) *podManager {
	return &podManager{naming: n, cluster: cluster, log: log, servers: map[types.UID]*echoServer{}}
}

// echoServer is a pod's echo server, listening inside the pod's namespace.
type echoServer struct {
	pod     podInfo
	netnsID string // netns.NsHandle.UniqueId of the namespace it listens in
	srv     *http.Server
	done    chan struct{}
}

func (e *echoServer) running() bool {
	select {
	case <-e.done:
		return false
	default:
		return true
	}
}

func (e *echoServer) stop() {
	_ = e.srv.Close()
	<-e.done
}

// ensure makes pod p's namespace, veth, addresses and routes what they
// should be, and its echo server run; it keeps what is already right, so
// it also adopts what an earlier process made. changed says whether
// anything had to be made.
func (m *podManager) ensure(p podInfo) (changed bool, err error) {
	if !p.IP.Is4() {
		return false, fmt.Errorf("pod %s: IP %s is not IPv4", p.key(), p.IP)
	}
	routerName := m.naming.router(m.cluster)
	r, err := openNetns(routerName)
	if err != nil {
		if errors.Is(err, ErrNoNetns) {
			return false, fmt.Errorf("router namespace %s is missing (sandboxnet.Setup makes it): %w", routerName, err)
		}
		return false, err
	}
	defer r.Close()
	podName := m.naming.pod(m.cluster, p.UID)
	ph, created, err := ensureNetns(podName)
	if err != nil {
		return false, err
	}
	defer ph.Close()
	rh, err := netlink.NewHandleAt(r)
	if err != nil {
		return created, fmt.Errorf("netlink in %s: %w", routerName, err)
	}
	defer rh.Close()
	pnh, err := netlink.NewHandleAt(ph)
	if err != nil {
		return created, fmt.Errorf("netlink in %s: %w", podName, err)
	}
	defer pnh.Close()
	if err := netnsutil.LinkUp(pnh, "lo"); err != nil {
		return created, fmt.Errorf("%s: %w", podName, err)
	}
	rIfName := routerPodIface(p.UID)
	rIf, pIf, made, err := netnsutil.EnsureVethPair(rh, rIfName, pnh, podIface, ph)
	if err != nil {
		return created, err
	}
	changed = created || made

	// The pod's side: eth0 with the pod IP, the gateway on the link, the
	// default route through it.
	if err := configurePodSide(pnh, pIf, p.IP); err != nil {
		return changed, fmt.Errorf("%s: %w", podName, err)
	}
	// The router's side: the gateway address, proxy ARP, the route to the pod.
	if err := netnsutil.In(r, func() error {
		return netnsutil.WriteSysctls(map[string]string{
			"net/ipv4/conf/" + rIfName + "/proxy_arp": "1",
			"net/ipv4/conf/" + rIfName + "/rp_filter": "0",
		})
	}); err != nil {
		return changed, fmt.Errorf("%s: %w", routerName, err)
	}
	if err := configureRouterSide(rh, rIf, p.IP); err != nil {
		return changed, fmt.Errorf("%s: %w", routerName, err)
	}

	if made {
		// A new veth drops what is sent before the kernel has activated
		// it (its operational state turns up then); wait for that.
		netnsutil.WaitOperUp(pnh, pIf.Attrs().Name, operUpWait)
		netnsutil.WaitOperUp(rh, rIfName, operUpWait)
	}

	started, err := m.ensureServer(p, ph)
	return changed || started, err
}

func configurePodSide(h *netlink.Handle, l netlink.Link, ip netip.Addr) error {
	if l.Attrs().MTU != podMTU {
		if err := h.LinkSetMTU(l, podMTU); err != nil {
			return fmt.Errorf("set the MTU of %s: %w", podIface, err)
		}
	}
	if err := netnsutil.SetOnlyAddr(h, l, netip.PrefixFrom(ip, 32), netlink.SCOPE_UNIVERSE); err != nil {
		return err
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", podIface, err)
	}
	gw := net.IP(PodGateway.AsSlice())
	routes := []netlink.Route{
		{LinkIndex: l.Attrs().Index, Dst: netnsutil.IPNet(netip.PrefixFrom(PodGateway, 32)), Scope: netlink.SCOPE_LINK},
		{LinkIndex: l.Attrs().Index, Dst: netnsutil.IPNet(netip.MustParsePrefix("0.0.0.0/0")), Gw: gw},
	}
	for _, rt := range routes {
		if err := h.RouteReplace(&rt); err != nil {
			return fmt.Errorf("route %s: %w", rt, err)
		}
	}
	return nil
}

func configureRouterSide(h *netlink.Handle, l netlink.Link, ip netip.Addr) error {
	if l.Attrs().MTU != podMTU {
		if err := h.LinkSetMTU(l, podMTU); err != nil {
			return fmt.Errorf("set the MTU of %s: %w", l.Attrs().Name, err)
		}
	}
	if err := netnsutil.SetOnlyAddr(h, l, netip.PrefixFrom(PodGateway, 32), netlink.SCOPE_UNIVERSE); err != nil {
		return err
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", l.Attrs().Name, err)
	}
	// Replace: one route per pod IP, even if another device had it.
	want := netip.PrefixFrom(ip, 32)
	rt := netlink.Route{LinkIndex: l.Attrs().Index, Dst: netnsutil.IPNet(want), Scope: netlink.SCOPE_LINK}
	if err := h.RouteReplace(&rt); err != nil {
		return fmt.Errorf("route %s dev %s: %w", want, l.Attrs().Name, err)
	}
	// No other route through this pod's veth (an IP it no longer has).
	routes, err := h.RouteList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("routes of %s: %w", l.Attrs().Name, err)
	}
	for _, r := range routes {
		if r.Dst != nil && netnsutil.PrefixOf(r.Dst) == want {
			continue
		}
		if err := h.RouteDel(&r); err != nil {
			return fmt.Errorf("remove route %s: %w", r, err)
		}
	}
	return nil
}

// ensureServer runs p's echo server in namespace ph unless it already runs
// there for the same address; started says whether it had to be started.
func (m *podManager) ensureServer(p podInfo, ph netns.NsHandle) (started bool, err error) {
	id := ph.UniqueId()
	m.mu.Lock()
	old := m.servers[p.UID]
	m.mu.Unlock()
	if old != nil && old.running() && old.netnsID == id && old.pod == p {
		return false, nil
	}
	if old != nil {
		old.stop()
	}
	var ln net.Listener
	addr := netip.AddrPortFrom(p.IP, EchoPort).String()
	if err := netnsutil.In(ph, func() error {
		var err error
		ln, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		m.mu.Lock()
		delete(m.servers, p.UID)
		m.mu.Unlock()
		return false, fmt.Errorf("echo server on %s in %s: %w", addr, m.naming.pod(m.cluster, p.UID), err)
	}
	e := &echoServer{pod: p, netnsID: id, done: make(chan struct{})}
	cluster := m.cluster
	e.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(Echo{Cluster: cluster, Namespace: p.Namespace, Pod: p.Name, PodIP: p.IP.String(), From: r.RemoteAddr})
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       30 * time.Second,
	}
	go func() {
		defer close(e.done)
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.Error(err, "Echo server stopped", "cluster", cluster, "pod", p.key())
		}
	}()
	m.mu.Lock()
	m.servers[p.UID] = e
	m.mu.Unlock()
	return true, nil
}

// remove stops the echo server of the pod with uid and deletes its
// namespace and veth (the route to it goes with the veth). Nothing there is
// not an error.
func (m *podManager) remove(uid types.UID) error {
	m.mu.Lock()
	e := m.servers[uid]
	delete(m.servers, uid)
	m.mu.Unlock()
	if e != nil {
		e.stop()
	}
	return m.removeNetns(m.naming.pod(m.cluster, uid))
}

// removeNetns deletes a pod namespace by name, and the router's end of its
// veth (named after the same UID characters).
func (m *podManager) removeNetns(name string) error {
	suffix := strings.TrimPrefix(name, m.naming.podPrefix(m.cluster))
	var errs []error
	if r, err := openNetns(m.naming.router(m.cluster)); err == nil {
		if rh, err := netlink.NewHandleAt(r); err == nil {
			if l, err := rh.LinkByName("p" + suffix); err == nil {
				if err := rh.LinkDel(l); err != nil && !netnsutil.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("delete %s: %w", "p"+suffix, err))
				}
			}
			rh.Close()
		}
		r.Close()
	}
	if err := deleteNetns(name); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// gc removes the namespaces of this cluster's pods whose names are not in
// keep, with their echo servers and veths, and router-side pod veths whose
// pod is not kept. It returns the namespaces removed.
func (m *podManager) gc(keep map[string]bool) ([]string, error) {
	names, err := listNetns(m.naming.podPrefix(m.cluster))
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	var stale []*echoServer
	for uid, e := range m.servers {
		if !keep[m.naming.pod(m.cluster, uid)] {
			stale = append(stale, e)
			delete(m.servers, uid)
		}
	}
	m.mu.Unlock()
	for _, e := range stale {
		e.stop()
	}
	var removed []string
	var errs []error
	for _, name := range names {
		if !m.naming.isPodNetns(m.cluster, name) || keep[name] {
			continue
		}
		if err := m.removeNetns(name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	// Router-side veths of pods whose namespace is gone but still held.
	if r, err := openNetns(m.naming.router(m.cluster)); err == nil {
		if rh, err := netlink.NewHandleAt(r); err == nil {
			if links, err := rh.LinkList(); err == nil {
				for _, l := range links {
					name := l.Attrs().Name
					if l.Type() != "veth" || !strings.HasPrefix(name, "p") || !m.naming.isPodNetns(m.cluster, m.naming.podPrefix(m.cluster)+name[1:]) {
						continue
					}
					if !keep[m.naming.podPrefix(m.cluster)+name[1:]] {
						if err := rh.LinkDel(l); err != nil && !netnsutil.IsNotFound(err) {
							errs = append(errs, fmt.Errorf("delete %s: %w", name, err))
						}
					}
				}
			}
			rh.Close()
		}
		r.Close()
	}
	return removed, errors.Join(errs...)
}

// close stops every echo server; the namespaces stay (a later RunPods
// adopts them, Teardown removes them).
func (m *podManager) close() {
	m.mu.Lock()
	servers := m.servers
	m.servers = map[types.UID]*echoServer{}
	m.mu.Unlock()
	for _, e := range servers {
		e.stop()
	}
}
