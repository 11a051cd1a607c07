package network

import (
	"fmt"
	"net/netip"
	"strings"
)

// The rules a peer's CIDR claims are checked by (CheckPeerCIDR); refusals
// name them.
const (
	// RulePrivateRange: a peer's pod or external CIDR lies inside one of
	// PrivateRanges. Anything else is someone else's address space (the
	// Internet, a cloud's metadata service), which this cluster would route
	// into the peer.
	RulePrivateRange = "annex-network-private-range"
	// RuleServiceCIDR: a peer's CIDR does not overlap this cluster's
	// service CIDR (its pods' traffic to Services would be captured).
	RuleServiceCIDR = "annex-network-service-cidr"
	// RuleNodeAddress: a peer's CIDR holds no address of this cluster's
	// nodes (its pods' traffic to nodes, kubelets and the API server would
	// be captured).
	RuleNodeAddress = "annex-network-node-address"
)

// PrivateRanges are the ranges a peer may claim its pod and external
// CIDRs in: RFC 1918, the shared address space of RFC 6598 (the default
// remap pool) and the locally assigned half of IPv6 unique local addresses
// (RFC 4193). The gateway carries IPv4 only; an IPv6 claim passes this
// check but no gateway programs it.
var PrivateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("fd00::/8"),
}

// NodeAddress is an address of one of this cluster's nodes.
type NodeAddress struct {
	Node string
	Addr netip.Addr
}

// LocalRanges is what a peer's CIDR claims must keep clear of in this
// cluster.
type LocalRanges struct {
	// ServiceCIDR is this cluster's service CIDR (invalid: unknown, not
	// checked).
	ServiceCIDR netip.Prefix
	// Nodes are the addresses of this cluster's nodes.
	Nodes []NodeAddress
}

// ClaimError is a refused CIDR: Rule says which rule refused it.
type ClaimError struct {
	Rule  string
	Field string // where the CIDR was found, e.g. spec.remote.podCIDR
	CIDR  netip.Prefix
	What  string // what is wrong
}

func (e *ClaimError) Error() string {
	return fmt.Sprintf("%s: %s %s %s", e.Rule, e.Field, e.CIDR, e.What)
}

// CheckPeerCIDR checks one CIDR that a peer claims (its pod or external
// CIDR, as it published it; field names it in the error): it must lie
// inside PrivateRanges, not overlap local.ServiceCIDR and hold none of
// local.Nodes. The error is a *ClaimError.
func CheckPeerCIDR(field string, p netip.Prefix, local LocalRanges) error {
	if !p.IsValid() {
		return &ClaimError{Rule: RulePrivateRange, Field: field, CIDR: p, What: "is not a CIDR"}
	}
	private := false
	for _, r := range PrivateRanges {
		if r.Addr().Is4() == p.Addr().Is4() && r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			private = true
			break
		}
	}
	if !private {
		names := make([]string, len(PrivateRanges))
		for i, r := range PrivateRanges {
			names[i] = r.String()
		}
		return &ClaimError{Rule: RulePrivateRange, Field: field, CIDR: p,
			What: "is not inside a private range (" + strings.Join(names, ", ") + ")"}
	}
	return CheckView(field, p, local)
}

// CheckView checks a CIDR as this cluster routes it (a peer's claim, or
// the range this cluster remapped it to): it must not overlap
// local.ServiceCIDR nor hold an address of local.Nodes. The error is a
// *ClaimError.
func CheckView(field string, p netip.Prefix, local LocalRanges) error {
	if local.ServiceCIDR.IsValid() && p.Overlaps(local.ServiceCIDR) {
		return &ClaimError{Rule: RuleServiceCIDR, Field: field, CIDR: p,
			What: "overlaps this cluster's service CIDR " + local.ServiceCIDR.String()}
	}
	for _, n := range local.Nodes {
		if p.Contains(n.Addr) {
			return &ClaimError{Rule: RuleNodeAddress, Field: field, CIDR: p,
				What: fmt.Sprintf("holds the address %s of this cluster's node %s", n.Addr, n.Node)}
		}
	}
	return nil
}
