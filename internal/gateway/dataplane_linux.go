package gateway

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
)

// TableName is the nftables table the gateway owns (family ip).
const TableName = "annex"

// mtu leaves room for WireGuard's 80 bytes of overhead on a 1500 underlay.
const mtu = 1420

// ctDirReply is the kernel's IP_CT_DIR_REPLY (ct direction reply).
const ctDirReply = 1

// markBase and tableBase place each link's firewall mark and routing table
// (base + the link's ID) away from values others use.
const (
	markBase  = 0x4e580000
	tableBase = 0x4e580000
	rulePrio  = 1000
)

// maxLinkID is the largest link ID. IDs stay clear of mark bits 0x4000 and
// 0x8000: kube-proxy, in the same namespace when the gateway runs on a
// node's host network, masquerades packets with 0x4000 set, drops those
// with 0x8000 set, and ORs 0x4000 into the marks of packets it wants
// masqueraded.
const maxLinkID = 0x2000

// linkID is the stable number of the link with peer, 1 to maxLinkID (a
// 13-bit hash of the peer, plus 1).
func linkID(peer string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(peer))
	return h.Sum32()&(maxLinkID-1) + 1
}

// Dataplane programs the network namespace it was created in.
type Dataplane struct {
	log logr.Logger

	mu      sync.Mutex
	devices map[string]*wgDevice // by device name
	// programmed is the Config whose nftables table is in place, nil
	// when there is none (or its state is unknown after an error).
	programmed *Config
}

type wgDevice struct {
	dev  *device.Device
	link Link
	// uapi is the configuration the device was last given (uapiConfig):
	// a change of anything else (accept lists, transit addresses,
	// translations) leaves the device, and its WireGuard session, alone.
	uapi string
}

// New returns a Dataplane for the current network namespace.
func New(log logr.Logger) *Dataplane {
	return &Dataplane{log: log, devices: map[string]*wgDevice{}}
}

// Apply makes the namespace match c.
func (d *Dataplane) Apply(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	ids := map[uint32]string{}
	for _, l := range c.Links {
		if other, dup := ids[linkID(l.Peer)]; dup {
			return fmt.Errorf("links %q and %q hash to the same mark; rename one", other, l.Peer)
		}
		ids[linkID(l.Peer)] = l.Peer
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	rules, err := netlink.RuleList(unix.AF_INET)
	if err != nil {
		return fmt.Errorf("list policy rules: %w", err)
	}
	want := map[string]bool{}
	var errs []error
	for _, l := range c.Links {
		name := DeviceName(l.Peer)
		want[name] = true
		if err := d.ensureDevice(name, l); err != nil {
			errs = append(errs, fmt.Errorf("link %s: %w", l.Peer, err))
			continue
		}
		if err := ensureRouting(name, l, rules); err != nil {
			errs = append(errs, fmt.Errorf("link %s: %w", l.Peer, err))
		}
	}
	for name, w := range d.devices {
		if !want[name] {
			d.removeLink(name, w.link)
		}
	}
	// The rules and tables of links that are gone, also those whose device
	// this process never had: a predecessor's, killed before it could
	// remove them.
	if err := pruneRouting(rules, ids); err != nil {
		errs = append(errs, err)
	}
	if err := d.program(c); err != nil {
		errs = append(errs, fmt.Errorf("nftables: %w", err))
	}
	return errors.Join(errs...)
}

// program brings the nftables table to c. When c differs from the Config
// last programmed in the accept lists only, it replaces the contents of the
// changed links' sets in one transaction and leaves the chains as they are
// (the agent rewrites accept lists as tenant pods come and go); otherwise,
// also when c is the same (a periodic repair of whatever else changed the
// table), it rebuilds the whole table in one transaction.
func (d *Dataplane) program(c Config) error {
	if prev := d.programmed; prev != nil && !reflect.DeepEqual(*prev, c) && reflect.DeepEqual(withoutAccept(*prev), withoutAccept(c)) {
		err := updateAccept(*prev, c)
		if err == nil {
			d.programmed = cloneConfig(c)
			return nil
		}
		d.log.Error(err, "Cannot update the accept sets; rebuilding the table")
	}
	d.programmed = nil
	if err := programNAT(c); err != nil {
		return err
	}
	d.programmed = cloneConfig(c)
	return nil
}

// withoutAccept is c with every link's accept list, and its own pods, left
// out.
func withoutAccept(c Config) Config {
	out := Config{Links: make([]Link, len(c.Links)), PodCIDR: c.PodCIDR}
	for i, l := range c.Links {
		l.Accept = nil
		out.Links[i] = l
	}
	return out
}

// cloneConfig copies c deeply enough that later changes of the caller's
// slices do not reach it.
func cloneConfig(c Config) *Config {
	out := &Config{Links: make([]Link, len(c.Links)), PodCIDR: c.PodCIDR, OwnPods: slices.Clone(c.OwnPods)}
	for i, l := range c.Links {
		l.Routes, l.DNAT, l.SNAT = slices.Clone(l.Routes), slices.Clone(l.DNAT), slices.Clone(l.SNAT)
		l.AllowedSources, l.Transit, l.Accept = slices.Clone(l.AllowedSources), slices.Clone(l.Transit), slices.Clone(l.Accept)
		out.Links[i] = l
	}
	return out
}

// Close removes everything the Dataplane programmed.
func (d *Dataplane) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, w := range d.devices {
		d.removeLink(name, w.link)
	}
	d.programmed = nil
	rules, err := netlink.RuleList(unix.AF_INET)
	if err != nil {
		return errors.Join(fmt.Errorf("list policy rules: %w", err), deleteTable())
	}
	return errors.Join(pruneRouting(rules, nil), deleteTable())
}

// Stats returns the state of the link with peer, false when it has none.
func (d *Dataplane) Stats(peer string) (Stats, bool) {
	d.mu.Lock()
	w := d.devices[DeviceName(peer)]
	d.mu.Unlock()
	if w == nil {
		return Stats{}, false
	}
	uapi, err := w.dev.IpcGet()
	if err != nil {
		return Stats{}, false
	}
	var s Stats
	for _, line := range strings.Split(uapi, "\n") {
		k, v, _ := strings.Cut(line, "=")
		var n int64
		_, _ = fmt.Sscan(v, &n)
		switch k {
		case "last_handshake_time_sec":
			s.LastHandshakeUnix = n
		case "rx_bytes":
			s.RxBytes = n
		case "tx_bytes":
			s.TxBytes = n
		}
	}
	return s, true
}

// ensureDevice creates or reconfigures the WireGuard device of l.
func (d *Dataplane) ensureDevice(name string, l Link) error {
	w := d.devices[name]
	if w != nil && w.link.ListenPort != l.ListenPort {
		d.removeLink(name, w.link)
		w = nil
	}
	if w == nil {
		t, err := tun.CreateTUN(name, mtu)
		if err != nil {
			return fmt.Errorf("create TUN %s: %w", name, err)
		}
		dev := device.NewDevice(t, conn.NewDefaultBind(), device.NewLogger(device.LogLevelError, name+": "))
		w = &wgDevice{dev: dev}
		d.devices[name] = w
		d.log.Info("Created WireGuard device", "device", name, "peer", l.Peer)
	}
	// Reconfiguring replaces the peer, and with it the session: only when
	// the tunnel's settings changed (nothing else can change a device
	// without a UAPI socket, which this one does not open).
	if uapi := uapiConfig(l); uapi != w.uapi {
		if err := w.dev.IpcSet(uapi); err != nil {
			w.uapi = ""
			return fmt.Errorf("configure %s: %w", name, err)
		}
		w.uapi = uapi
	}
	if err := w.dev.Up(); err != nil {
		return fmt.Errorf("bring %s up: %w", name, err)
	}
	w.link = l
	nl, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(nl)
}

// uapiConfig is l in WireGuard's configuration protocol; replace_peers and
// replace_allowed_ips make it a full replacement.
func uapiConfig(l Link) string {
	pub := l.PeerPublicKey
	var b strings.Builder
	fmt.Fprintf(&b, "private_key=%s\nlisten_port=%d\nreplace_peers=true\n", hex.EncodeToString(l.PrivateKey[:]), l.ListenPort)
	fmt.Fprintf(&b, "public_key=%s\nendpoint=%s\npersistent_keepalive_interval=10\nreplace_allowed_ips=true\n", hex.EncodeToString(pub[:]), l.PeerEndpoint)
	for _, p := range append(slices.Clone(l.AllowedSources), destinations(l)...) {
		fmt.Fprintf(&b, "allowed_ip=%s\n", p)
	}
	return b.String()
}

// destinations are where packets to the peer go after the DNAT: the
// peer's own ranges, or the routes themselves where they are not mapped.
func destinations(l Link) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range l.Routes {
		to := r
		for _, m := range l.DNAT {
			if m.From == r {
				to = m.To
			}
		}
		out = append(out, to)
	}
	return out
}

// ensureRouting installs the link's policy routing: packets marked for the
// link look up its table, whose routes are the device and, behind it, an
// unreachable route. The device goes with the process that holds it (a
// killed gateway); the rule, the table and the translation stay, and
// without the unreachable route a packet translated into the peer's own
// addresses would fall through to the main table and reach whatever this
// cluster has at that address (with overlapping pod CIDRs, one of its own
// pods).
func ensureRouting(name string, l Link, rules []netlink.Rule) error {
	nl, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	id := linkID(l.Peer)
	route := &netlink.Route{LinkIndex: nl.Attrs().Index, Dst: defaultDst(),
		Table: int(tableBase + id), Scope: netlink.SCOPE_LINK}
	if err := netlink.RouteReplace(route); err != nil {
		return fmt.Errorf("route in table %d: %w", tableBase+id, err)
	}
	if err := netlink.RouteReplace(unreachableRoute(id)); err != nil {
		return fmt.Errorf("unreachable route in table %d: %w", tableBase+id, err)
	}
	rule := markRule(id)
	for _, r := range rules {
		if r.Mark == rule.Mark && r.Table == rule.Table && r.Priority == rule.Priority {
			return nil
		}
	}
	return netlink.RuleAdd(rule)
}

func defaultDst() *net.IPNet { return &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)} }

// unreachableMetric puts a link table's unreachable route behind its
// device's route (metric 0).
const unreachableMetric = 4096

func unreachableRoute(id uint32) *netlink.Route {
	return &netlink.Route{Dst: defaultDst(), Table: int(tableBase + id), Type: unix.RTN_UNREACHABLE,
		Priority: unreachableMetric, Family: unix.AF_INET}
}

// pruneRouting removes the policy rules and routing tables of links whose
// ID is not in keep: every rule of rules with the gateway's priority and a
// mark in its range, and the unreachable route of the table it points to
// (the device's route went with the device). The range goes up to 0x8000,
// beyond maxLinkID: link IDs were 15-bit hashes before, and the rules of a
// gateway from then are removed too.
func pruneRouting(rules []netlink.Rule, keep map[uint32]string) error {
	var errs []error
	for _, r := range rules {
		id := r.Mark - markBase
		if r.Priority != rulePrio || r.Mark>>16 != markBase>>16 || id == 0 || id > 0x8000 {
			continue
		}
		if _, ok := keep[id]; ok {
			continue
		}
		if err := netlink.RuleDel(markRule(id)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete policy rule of mark %#x: %w", r.Mark, err))
		}
		if err := netlink.RouteDel(unreachableRoute(id)); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete unreachable route of table %d: %w", tableBase+id, err))
		}
	}
	return errors.Join(errs...)
}

func markRule(id uint32) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = unix.AF_INET
	r.Mark = markBase + id
	r.Table = int(tableBase + id)
	r.Priority = rulePrio
	return r
}

// removeLink closes the device of a link; pruneRouting removes its
// routing.
func (d *Dataplane) removeLink(name string, l Link) {
	if w := d.devices[name]; w != nil {
		w.dev.Close()
		delete(d.devices, name)
	}
	d.log.Info("Removed link", "device", name, "peer", l.Peer)
}

// programNAT rebuilds the table in one transaction:
//
//   - chain "mark" (prerouting, before destination NAT) first drops, by
//     chain "inbound", what arrives from a link to open a connection to
//     anything but that link's accept set (replies pass); then it
//     chooses the link a packet leaves by. A reply takes the link its connection came in
//     from (remembered in the connection's mark), or none: a reply to a
//     connection this cluster started is translated back into this
//     cluster's own addresses and routed normally. Any other packet takes
//     the link whose routes or transit addresses hold its destination, as
//     seen before the translation (after it, the destination may lie in
//     this cluster's own pod CIDR).
//   - chain "mark-after-dnat" (prerouting, just after destination NAT)
//     marks what "mark" could not: packets that another table's DNAT
//     (kube-proxy's, from a Service's ClusterIP) sent into a link's
//     routes. Packets that are no replies, still unmarked and not from a
//     link take the link whose routes hold their translated destination.
//     A ClusterIP whose endpoint is in a remapped route is not translated
//     into the peer's view as well (a connection gets one DNAT per hook):
//     its packets reach the peer untranslated, and the peer's accept set
//     drops them.
//   - chain "dnat": transit addresses to the pods' addresses in their
//     cluster's view, then each link's netmap from this cluster's view of
//     the peer to the peer's own.
//   - chain "snat" (postrouting, priority 99: before iptables' and the
//     CNIs' srcnat at 100): relayed packets (in from one link, out through
//     another) take the link's masquerade address; then each link's netmap
//     from this cluster's own ranges to the peer's view of them; then
//     every other packet into a link is bound to its own source address,
//     which exempts it from the CNI's or kube-proxy's masquerading (the
//     kernel runs NAT chains in priority order until one binds).
func programNAT(c Config) error {
	n, err := nftables.New()
	if err != nil {
		return err
	}
	tbl := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
	if tables, err := n.ListTablesOfFamily(nftables.TableFamilyIPv4); err == nil {
		for _, t := range tables {
			if t.Name == TableName {
				n.DelTable(tbl) // replaced below, in the same transaction
			}
		}
	}
	n.AddTable(tbl)
	mark := n.AddChain(&nftables.Chain{Name: "mark", Table: tbl, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle})
	dnat := n.AddChain(&nftables.Chain{Name: "dnat", Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	// Before the srcnat priority (100) of iptables' nat table and of CNIs:
	// the first NAT chain that binds a connection is the last one that
	// runs, so a packet into a link is never masqueraded by anyone else.
	snat := n.AddChain(&nftables.Chain{Name: "snat", Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATSource - 1)})
	markDNAT := n.AddChain(&nftables.Chain{Name: "mark-after-dnat", Table: tbl, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATDest + 1)})
	inbound := n.AddChain(&nftables.Chain{Name: "inbound", Table: tbl})
	add := func(ch *nftables.Chain, exprs ...expr.Any) {
		n.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: exprs})
	}
	// Replies: meta mark = ct mark, and nothing else in this chain.
	add(mark,
		&expr.Ct{Key: expr.CtKeyDIRECTION, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{ctDirReply}},
		&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
		&expr.Verdict{Kind: expr.VerdictAccept})
	// The rest of a connection that came in through a link: only the
	// destinations it may reach.
	add(mark,
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(devicePrefix)}, // any link's device
		&expr.Verdict{Kind: expr.VerdictJump, Chain: inbound.Name})
	// Per link: its accept set (contents replaced by updateAccept).
	sets := map[string]*nftables.Set{}
	for _, l := range c.Links {
		set := acceptSet(tbl, l.Peer)
		if err := n.AddSet(set, acceptElements(l.Accept)); err != nil {
			return fmt.Errorf("set %s: %w", set.Name, err)
		}
		sets[l.Peer] = set
		add(inbound,
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(DeviceName(l.Peer))},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
			&expr.Verdict{Kind: expr.VerdictReturn})
	}
	add(inbound, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
	if c.PodCIDR.IsValid() {
		if err := addOutbound(n, tbl, c, sets); err != nil {
			return err
		}
	}
	// After DNAT, only what "mark" left alone: no replies, no marked
	// packets, nothing from a link.
	add(markDNAT,
		&expr.Ct{Key: expr.CtKeyDIRECTION, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{ctDirReply}},
		&expr.Verdict{Kind: expr.VerdictAccept})
	add(markDNAT,
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
		&expr.Verdict{Kind: expr.VerdictAccept})
	add(markDNAT,
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(devicePrefix)}, // any link's device
		&expr.Verdict{Kind: expr.VerdictAccept})
	for _, l := range c.Links {
		id := markBase + linkID(l.Peer)
		dev := DeviceName(l.Peer)
		setMark := func(key expr.CtKey, meta bool) []expr.Any {
			out := []expr.Any{&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint32(id)}}
			if meta {
				return append(out, &expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1})
			}
			return append(out, &expr.Ct{Key: key, SourceRegister: true, Register: 1})
		}
		// Connections that come in through the link: replies go back there.
		add(mark, append([]expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(dev)},
		}, setMark(expr.CtKeyMARK, false)...)...)
		for _, r := range l.Routes {
			add(mark, append(matchPrefix(16, r), setMark(0, true)...)...)
			add(markDNAT, append(matchPrefix(16, r), setMark(0, true)...)...)
		}
		for _, t := range l.Transit {
			add(mark, append(matchPrefix(16, netip.PrefixFrom(t.Address, 32)), setMark(0, true)...)...)
			to := t.To.As4()
			add(dnat, append(matchPrefix(16, netip.PrefixFrom(t.Address, 32)),
				&expr.Immediate{Register: 1, Data: to[:]},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(nftables.TableFamilyIPv4), RegAddrMin: 1})...)
		}
		outDev := []expr.Any{
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(dev)},
		}
		if l.Masquerade.Is4() {
			from := l.Masquerade.As4()
			add(snat, append(slices.Clone(outDev),
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(devicePrefix)}, // any link's device
				&expr.Immediate{Register: 1, Data: from[:]},
				&expr.NAT{Type: expr.NATTypeSourceNAT, Family: uint32(nftables.TableFamilyIPv4), RegAddrMin: 1})...)
		}
		for _, m := range l.DNAT {
			add(dnat, append(matchPrefix(16, m.From), netmap(expr.NATTypeDestNAT, m.To)...)...)
		}
		for _, m := range l.SNAT {
			add(snat, append(append(slices.Clone(outDev), matchPrefix(12, m.From)...), netmap(expr.NATTypeSourceNAT, m.To)...)...)
		}
	}
	// Anything else into a link keeps its source: a binding to its own
	// address, so that a CNI's or kube-proxy's masquerading (later
	// chains) does not hide the pod behind the node's address.
	add(snat,
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(devicePrefix)}, // any link's device
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: uint32(nftables.TableFamilyIPv4), RegAddrMin: 1})
	return n.Flush()
}

// ownPodsSet is the interval set of Config.OwnPods.
const ownPodsSet = "own-pods"

// addOutbound adds chain "outbound" (forward, filter priority), which keeps
// pods of c.PodCIDR to the links they may use (Config.OwnPods): what is not
// a reply, did not come in through a link, comes from the pod CIDR and is
// not one of this cluster's own pods leaves through a link only when the
// link's accept set holds its source; the rest into any link is dropped
// (with a counter). accept are the links' accept sets, by peer.
func addOutbound(n *nftables.Conn, tbl *nftables.Table, c Config, accept map[string]*nftables.Set) error {
	out := n.AddChain(&nftables.Chain{Name: "outbound", Table: tbl, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	add := func(exprs ...expr.Any) {
		n.AddRule(&nftables.Rule{Table: tbl, Chain: out, Exprs: exprs})
	}
	own := &nftables.Set{Table: tbl, Name: ownPodsSet, KeyType: nftables.TypeIPAddr, Interval: true}
	if err := n.AddSet(own, acceptElements(c.OwnPods)); err != nil {
		return fmt.Errorf("set %s: %w", own.Name, err)
	}
	source := func() expr.Any {
		return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}
	}
	add(&expr.Ct{Key: expr.CtKeyDIRECTION, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{ctDirReply}},
		&expr.Verdict{Kind: expr.VerdictReturn})
	add(&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(devicePrefix)}, // relayed
		&expr.Verdict{Kind: expr.VerdictReturn})
	// Not from the pod CIDR: return.
	add(append(comparePrefix(12, c.PodCIDR, expr.CmpOpNeq), &expr.Verdict{Kind: expr.VerdictReturn})...)
	add(source(), &expr.Lookup{SourceRegister: 1, SetName: own.Name, SetID: own.ID}, &expr.Verdict{Kind: expr.VerdictReturn})
	for _, l := range c.Links {
		set := accept[l.Peer]
		add(&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(DeviceName(l.Peer))},
			source(),
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
			&expr.Verdict{Kind: expr.VerdictReturn})
	}
	add(&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(devicePrefix)}, // any link's device
		&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
	return nil
}

// acceptSetPrefix starts the name of every link's accept set.
const acceptSetPrefix = "accept-"

// acceptSet is the interval set of the destinations the link with peer
// accepts.
func acceptSet(tbl *nftables.Table, peer string) *nftables.Set {
	return &nftables.Set{Table: tbl, Name: acceptSetPrefix + peer, KeyType: nftables.TypeIPAddr, Interval: true}
}

// acceptElements are the elements of an interval set holding ps: each
// merged range is its first address and, flagged as the interval's end,
// the address after its last (none when it ends at 255.255.255.255).
func acceptElements(ps []netip.Prefix) []nftables.SetElement {
	rs := ranges(ps)
	out := make([]nftables.SetElement, 0, 2*len(rs))
	for _, r := range rs {
		first := addr4(r.first).As4()
		out = append(out, nftables.SetElement{Key: first[:]})
		if r.last != ^uint32(0) {
			end := addr4(r.last + 1).As4()
			out = append(out, nftables.SetElement{Key: end[:], IntervalEnd: true})
		}
	}
	return out
}

// updateAccept replaces, in one transaction, the contents of the accept
// sets of the links whose accept list differs between prev and next, and
// of the own-pods set (the two are the same otherwise). A packet sees either the old or the
// new contents, never an empty set; the chains, and the connections they
// track, are not touched.
func updateAccept(prev, next Config) error {
	n, err := nftables.New()
	if err != nil {
		return err
	}
	tbl := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
	changed := 0
	if next.PodCIDR.IsValid() && !slices.Equal(prev.OwnPods, next.OwnPods) {
		set, err := n.GetSetByName(tbl, ownPodsSet)
		if err != nil {
			return fmt.Errorf("set %s: %w", ownPodsSet, err)
		}
		n.FlushSet(set)
		if elems := acceptElements(next.OwnPods); len(elems) > 0 {
			if err := n.SetAddElements(set, elems); err != nil {
				return fmt.Errorf("set %s: %w", set.Name, err)
			}
		}
		changed++
	}
	for i, l := range next.Links {
		if slices.Equal(prev.Links[i].Accept, l.Accept) {
			continue
		}
		set, err := n.GetSetByName(tbl, acceptSetPrefix+l.Peer)
		if err != nil {
			return fmt.Errorf("set %s%s: %w", acceptSetPrefix, l.Peer, err)
		}
		n.FlushSet(set)
		if elems := acceptElements(l.Accept); len(elems) > 0 {
			if err := n.SetAddElements(set, elems); err != nil {
				return fmt.Errorf("set %s: %w", set.Name, err)
			}
		}
		changed++
	}
	if changed == 0 {
		return nil
	}
	return n.Flush()
}

func deleteTable() error {
	n, err := nftables.New()
	if err != nil {
		return err
	}
	n.DelTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName})
	if err := n.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// matchPrefix matches the IPv4 address at offset off (12 source, 16
// destination) against p.
func matchPrefix(off uint32, p netip.Prefix) []expr.Any {
	return comparePrefix(off, p, expr.CmpOpEq)
}

// comparePrefix compares the address at offset off with prefix p by op:
// CmpOpEq matches addresses inside p, CmpOpNeq those outside.
func comparePrefix(off uint32, p netip.Prefix, op expr.CmpOp) []expr.Any {
	mask := net.CIDRMask(p.Bits(), 32)
	addr := p.Masked().Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: op, Register: 1, Data: addr[:]},
	}
}

// netmap translates to prefix to, keeping host bits (NF_NAT_RANGE_NETMAP).
func netmap(t expr.NATType, to netip.Prefix) []expr.Any {
	first := to.Masked().Addr().As4()
	last := first
	mask := net.CIDRMask(to.Bits(), 32)
	for i := range last {
		last[i] |= ^mask[i]
	}
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: first[:]},
		&expr.Immediate{Register: 2, Data: last[:]},
		&expr.NAT{Type: t, Family: uint32(nftables.TableFamilyIPv4), RegAddrMin: 1, RegAddrMax: 2, Prefix: true},
	}
}

func ifname(s string) []byte {
	b := make([]byte, 16)
	copy(b, s)
	return b
}
