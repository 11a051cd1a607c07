// Package fabric owns the node side of Annex's fabric: what one node's kernel
// needs so that its pods reach the peer clusters through the gateway node
// (the one that runs annex-gateway, see docs/network.md "How the gateway does
// it"). On the node it programs, it owns exactly two things:
//
//   - the routes of the main table marked with RouteProtocol: one per
//     destination, via the gateway node, or of type unreachable while no
//     gateway runs, so that traffic to a peer is refused rather than sent
//     out of the node's default route;
//   - the nftables table TableName (family ip), which exempts packets from
//     this cluster's pods to the peers from whatever masquerading the CNI or
//     kube-proxy does on the node, so that the gateway (and the peer) sees
//     the pod's own address.
//
// It changes nothing else: routes of other protocols, other tables and
// iptables rules stay as they are. The node agent decides the Plan; this
// package makes the kernel match it (Dataplane, Linux only).
package fabric

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Plan is what one node needs so that its pods reach the peers through the
// gateway node. The zero Plan means nothing: Apply(Plan{}) removes
// everything the package programmed.
type Plan struct {
	// Gateway is the gateway node's address on this node's network.
	// Invalid (zero) when no gateway runs: then Destinations get routes of
	// type unreachable (traffic to peers is refused, never sent out of the
	// node's default route).
	Gateway netip.Addr
	// Destinations are the peers' CIDRs in this cluster's view (and this
	// cluster's external CIDR).
	Destinations []netip.Prefix
	// Sources are this cluster's pod CIDR(s): a packet from Sources to
	// Destinations is exempt from any masquerading (the CNI's,
	// kube-proxy's) on this node.
	Sources []netip.Prefix
}

// RouteProtocol marks every route the fabric adds (the rtnetlink protocol
// number, shown as "proto 97" by ip route), so that it finds exactly its
// own routes again after a restart. 97 is assigned to nobody (rtnetlink.h
// and iproute2's rt_protos use 0-4, 8-18, 42, 99 and 186-192).
const RouteProtocol = 0x61

// TableName is the nftables table (family ip) the fabric owns. Its one
// chain, at NAT postrouting priority srcnat - 1 (99), gives every new
// connection from Sources to Destinations a source NAT to its own source
// address: a binding that changes nothing but ends the kernel's walk
// through the hook's NAT chains, so that the CNI's or kube-proxy's
// MASQUERADE (priority 100, iptables legacy or nft) never sees it. An
// accept verdict would not do that: the kernel runs NAT chains until one
// binds, whatever the earlier ones returned (the root tests show both).
// Connections bound before the table existed keep their binding, and
// masquerading outside netfilter (an eBPF data path) is not affected.
const TableName = "annex-fabric"

// ErrGatewayNotOnLink is wrapped by Apply's error when the kernel refuses a
// route via Plan.Gateway because the gateway is not on a network this node
// is attached to.
var ErrGatewayNotOnLink = errors.New("gateway is not on a network this node is attached to")

// normalize returns the prefixes of ps masked, sorted and without those
// that another prefix of ps covers (the result's prefixes are disjoint); it
// refuses invalid, non-IPv4 and /0 prefixes (a route to 0.0.0.0/0 would take
// all of the node's traffic).
func normalize(what string, ps []netip.Prefix) ([]netip.Prefix, error) {
	all := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		switch {
		case !p.IsValid():
			return nil, fmt.Errorf("%s: invalid prefix %q", what, p)
		case !p.Addr().Is4():
			return nil, fmt.Errorf("%s: %s is not IPv4 (the fabric routes IPv4 only)", what, p)
		case p.Bits() == 0:
			return nil, fmt.Errorf("%s: %s would take every address", what, p)
		}
		all = append(all, p.Masked())
	}
	slices.SortFunc(all, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	// Sorted so, a prefix that covers another comes before it, and a
	// prefix is covered by anything kept only if by the last one kept.
	out := all[:0]
	for _, p := range all {
		if n := len(out); n > 0 && out[n-1].Overlaps(p) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// normalized is a Plan that has been checked, with its prefixes normalized.
type normalized struct {
	gateway      netip.Addr
	destinations []netip.Prefix
	sources      []netip.Prefix
}

// check validates p and normalizes its prefixes. A destination may not
// overlap a source: the node would send its own pods' traffic to the
// gateway.
func check(p Plan) (normalized, error) {
	if p.Gateway.IsValid() && (!p.Gateway.Is4() || p.Gateway.IsUnspecified()) {
		return normalized{}, fmt.Errorf("gateway %s: want an IPv4 unicast address", p.Gateway)
	}
	dst, err := normalize("destinations", p.Destinations)
	if err != nil {
		return normalized{}, err
	}
	src, err := normalize("sources", p.Sources)
	if err != nil {
		return normalized{}, err
	}
	for _, d := range dst {
		for _, s := range src {
			if d.Overlaps(s) {
				return normalized{}, fmt.Errorf("destination %s overlaps source %s", d, s)
			}
		}
	}
	return normalized{gateway: p.Gateway, destinations: dst, sources: src}, nil
}

// addrRange is an inclusive range of addresses.
type addrRange struct{ first, last netip.Addr }

// mergeAdjacent turns normalized (sorted, disjoint) IPv4 prefixes into the
// ranges they cover, adjacent ones merged: what an nftables interval set
// takes (it refuses an interval that starts where the previous one ends).
func mergeAdjacent(ps []netip.Prefix) []addrRange {
	var out []addrRange
	for _, p := range ps {
		r := addrRange{p.Addr(), lastAddr(p)}
		if n := len(out); n > 0 && out[n-1].last.Next() == r.first {
			out[n-1].last = r.last
			continue
		}
		out = append(out, r)
	}
	return out
}

// lastAddr is the last address of the masked prefix p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	for i := range b {
		host := max(0, min(8, 8*(i+1)-p.Bits())) // host bits in byte i
		b[i] |= byte(1<<host - 1)
	}
	return netip.AddrFrom4(b)
}

// route is what the fabric tells its routes apart by: a route of the main
// table, IPv4.
type route struct {
	Dst netip.Prefix
	// Via is the next hop of a unicast route; invalid for other types.
	Via netip.Addr
	// Unreachable is a route of type unreachable.
	Unreachable bool
	Metric      int
	TOS         int
	// Ours is a route with RouteProtocol.
	Ours bool
}

// key is what the kernel replaces a route by (NLM_F_REPLACE): a second
// route with the same key replaces the first.
type routeKey struct {
	dst         netip.Prefix
	metric, tos int
}

func (r route) key() routeKey { return routeKey{r.Dst, r.Metric, r.TOS} }

// wantRoutes are the routes n needs: one per destination, via the gateway
// or unreachable.
func wantRoutes(n normalized) []route {
	out := make([]route, 0, len(n.destinations))
	for _, d := range n.destinations {
		r := route{Dst: d, Ours: true}
		if n.gateway.IsValid() {
			r.Via = n.gateway
		} else {
			r.Unreachable = true
		}
		out = append(out, r)
	}
	return out
}

// diffRoutes decides, from the main table's routes have (all of them, the
// fabric's and others'), what makes the fabric's routes want: set are the
// routes of want to add or replace (those not in have as they are), remove
// the routes of the fabric's in have that no route of want replaces, and
// conflicts the routes of want that would replace a route that is not the
// fabric's (those are left alone and not set).
func diffRoutes(have, want []route) (set, remove, conflicts []route) {
	byKey := make(map[routeKey]route, len(have))
	for _, h := range have {
		byKey[h.key()] = h
	}
	wanted := make(map[routeKey]bool, len(want))
	for _, w := range want {
		wanted[w.key()] = true
		h, ok := byKey[w.key()]
		switch {
		case ok && !h.Ours:
			conflicts = append(conflicts, w)
		case !ok || h != w:
			set = append(set, w)
		}
	}
	for _, h := range have {
		if h.Ours && !wanted[h.key()] {
			remove = append(remove, h)
		}
	}
	return set, remove, conflicts
}
