package fabric

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/go-logr/logr"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Dataplane programs the network namespace of the calling thread (the
// process's, unless the caller switched its locked thread into another):
// every call opens its netlink and nftables sockets anew, where it runs.
// It keeps no state of its own, so a new Dataplane (a restarted agent)
// takes over what an earlier one left.
type Dataplane struct {
	log logr.Logger
	mu  sync.Mutex // one Apply at a time
}

// New returns a Dataplane.
func New(log logr.Logger) *Dataplane { return &Dataplane{log: log} }

// Apply makes the node's routes with RouteProtocol and the table TableName
// exactly what p says. It is idempotent and converges from any prior state,
// also what a killed predecessor left: it adds or replaces the routes p
// needs, removes every other route of the main table with RouteProtocol,
// and replaces the table in one transaction (or deletes it when p has no
// Sources or no Destinations). A plan that does not check out (non-IPv4 or
// /0 prefixes, a destination overlapping a source) changes nothing.
//
// A route whose destination another protocol's route already has (same
// destination, metric 0) is not replaced: Apply reports it and goes on. A
// route via the gateway that the kernel refuses is made unreachable
// instead, so that the destination is refused rather than sent out of the
// node's default route; when the gateway is not on link the error wraps
// ErrGatewayNotOnLink.
func (d *Dataplane) Apply(p Plan) error {
	n, err := check(p)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return errors.Join(d.applyRoutes(n), d.applyTable(n))
}

// Clean removes every route of the main table with RouteProtocol and the
// table TableName, also when this process did not add them. It is
// Apply(Plan{}).
func (d *Dataplane) Clean() error { return d.Apply(Plan{}) }

// State reports what is programmed now: the number of routes of the main
// table with RouteProtocol and whether the table TableName exists.
func (d *Dataplane) State() (routes int, table bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	have, err := listRoutes()
	if err != nil {
		return 0, false, err
	}
	for _, r := range have {
		if r.Ours {
			routes++
		}
	}
	table, err = tableExists()
	return routes, table, err
}

func (d *Dataplane) applyRoutes(n normalized) error {
	have, err := listRoutes()
	if err != nil {
		return err
	}
	set, remove, conflicts := diffRoutes(have, wantRoutes(n))
	var errs []error
	for _, c := range conflicts {
		errs = append(errs, fmt.Errorf("route to %s: the main table has one of another protocol; not replaced", c.Dst))
	}
	for _, r := range set {
		err := netlink.RouteReplace(toNetlink(r))
		if err != nil && r.Via.IsValid() {
			if errors.Is(err, unix.ENETUNREACH) {
				errs = append(errs, fmt.Errorf("route to %s via %s: %w (%w)", r.Dst, r.Via, ErrGatewayNotOnLink, err))
			} else {
				errs = append(errs, fmt.Errorf("route to %s via %s: %w", r.Dst, r.Via, err))
			}
			// Refuse the destination rather than leave it to whatever
			// route the node has for it otherwise.
			r = route{Dst: r.Dst, Unreachable: true, Ours: true}
			err = netlink.RouteReplace(toNetlink(r))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("route to %s: %w", r.Dst, err))
			continue
		}
		d.log.V(1).Info("Set route", "destination", r.Dst, "via", r.Via, "unreachable", r.Unreachable)
	}
	for _, r := range remove {
		if err := netlink.RouteDel(toNetlink(r)); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("remove route to %s: %w", r.Dst, err))
			continue
		}
		d.log.V(1).Info("Removed route", "destination", r.Dst)
	}
	return errors.Join(errs...)
}

// listRoutes returns the IPv4 routes of the main table.
func listRoutes() ([]route, error) {
	var nl []netlink.Route
	var err error
	// A dump that a concurrent change interrupted may be incomplete.
	for range 3 {
		nl, err = netlink.RouteListFiltered(netlink.FAMILY_V4,
			&netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	out := make([]route, 0, len(nl))
	for _, r := range nl {
		out = append(out, fromNetlink(r))
	}
	return out, nil
}

func fromNetlink(r netlink.Route) route {
	out := route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Metric: r.Priority, TOS: r.Tos,
		Ours: r.Protocol == RouteProtocol, Unreachable: r.Type == unix.RTN_UNREACHABLE}
	if r.Dst != nil {
		if a, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			ones, _ := r.Dst.Mask.Size()
			out.Dst = netip.PrefixFrom(a.Unmap(), ones)
		}
	}
	if gw, ok := netip.AddrFromSlice(r.Gw); ok && r.Type == unix.RTN_UNICAST && len(r.MultiPath) == 0 {
		out.Via = gw.Unmap()
	}
	return out
}

func toNetlink(r route) *netlink.Route {
	out := &netlink.Route{
		Dst:      &net.IPNet{IP: net.IP(r.Dst.Addr().AsSlice()), Mask: net.CIDRMask(r.Dst.Bits(), 32)},
		Table:    unix.RT_TABLE_MAIN,
		Protocol: RouteProtocol,
		Priority: r.Metric,
		Tos:      r.TOS,
		Family:   netlink.FAMILY_V4,
		Type:     unix.RTN_UNICAST,
	}
	switch {
	case r.Unreachable:
		out.Type = unix.RTN_UNREACHABLE
	case r.Via.IsValid():
		out.Gw = net.IP(r.Via.AsSlice())
	}
	return out
}

// Names in the table.
const (
	chainExempt    = "exempt"
	setSources     = "sources"
	setDestination = "destinations"
)

// applyTable replaces the table TableName in one transaction: creating it
// (a no-op when it exists), deleting it and, when n has sources and
// destinations, adding it again with its contents. No packet sees the
// table half made, and no listing of what exists is needed first.
//
// The table holds the masquerade exemption: a NAT chain at postrouting,
// priority srcnat - 1 (99), whose only rule translates the source of a
// connection from a source to a destination into the address it already
// has. An accept verdict would not do: the kernel (nf_nat_inet_fn) runs the
// NAT chains of a hook in priority order until one of them sets up a
// binding, whatever the earlier ones returned, so the CNI's MASQUERADE
// (iptables' nat POSTROUTING, priority 100, legacy or nft) would still run.
// A binding that changes nothing ends that walk: the later chains are not
// consulted for the connection, which keeps the pod's address. Connections
// that a chain bound before the table existed keep their binding.
func (d *Dataplane) applyTable(n normalized) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	tbl := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
	c.AddTable(tbl)
	c.DelTable(tbl)
	keep := len(n.sources) > 0 && len(n.destinations) > 0
	if keep {
		c.AddTable(tbl)
		src := &nftables.Set{Table: tbl, Name: setSources, KeyType: nftables.TypeIPAddr, Interval: true}
		dst := &nftables.Set{Table: tbl, Name: setDestination, KeyType: nftables.TypeIPAddr, Interval: true}
		if err := c.AddSet(src, setElements(n.sources)); err != nil {
			return fmt.Errorf("nftables set %s: %w", src.Name, err)
		}
		if err := c.AddSet(dst, setElements(n.destinations)); err != nil {
			return fmt.Errorf("nftables set %s: %w", dst.Name, err)
		}
		ch := c.AddChain(&nftables.Chain{Name: chainExempt, Table: tbl, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATSource - 1)})
		ipv4 := uint32(nftables.TableFamilyIPv4)
		c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: []expr.Any{
			// ip saddr @sources ip daddr @destinations counter snat ip to ip saddr
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Lookup{SourceRegister: 1, SetName: src.Name, SetID: src.ID},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Lookup{SourceRegister: 1, SetName: dst.Name, SetID: dst.ID},
			&expr.Counter{},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: ipv4, RegAddrMin: 1},
		}})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables table %s: %w", TableName, err)
	}
	d.log.V(1).Info("Replaced nftables table", "table", TableName, "present", keep)
	return nil
}

// setElements are the elements of an interval set that holds the
// normalized prefixes ps: each merged range's first address and, flagged as
// the interval's end, the address after its last (none when that is
// 255.255.255.255).
func setElements(ps []netip.Prefix) []nftables.SetElement {
	rs := mergeAdjacent(ps)
	out := make([]nftables.SetElement, 0, 2*len(rs))
	for _, r := range rs {
		out = append(out, nftables.SetElement{Key: r.first.AsSlice()})
		if end := r.last.Next(); end.IsValid() {
			out = append(out, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		}
	}
	return out
}

func tableExists() (bool, error) {
	c, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return false, fmt.Errorf("list nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == TableName {
			return true, nil
		}
	}
	return false, nil
}
