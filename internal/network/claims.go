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
	// RuleOwnRange: a range this cluster routes into a peer (the peer's
	// CIDR as this cluster sees it) does not overlap this cluster's own
	// pod or external CIDR (its pods' traffic to each other, or to
	// transit addresses, would be captured).
	RuleOwnRange = "annex-network-own-range"
	// RuleAgreedRange: a peer's CIDR is the one agreed when the link was
	// made (AgreedCIDRs, recorded by `annexctl network connect`); a claim
	// that changed afterwards is not the peering's.
	RuleAgreedRange = "annex-network-agreed-range"
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
	// Own are this cluster's own pod and external CIDRs (CheckOwn): what it
	// routes into a peer must not overlap them. Empty: not checked.
	Own []netip.Prefix
}

// ClaimError is a refused CIDR: Rule says which rule refused it.
type ClaimError struct {
	Rule  string
	Field string // where the CIDR was found, e.g. spec.remote.podCIDR
	CIDR  netip.Prefix
	What  string // what is wrong
}

func (e *ClaimError) Error() string {
	if !e.CIDR.IsValid() {
		return fmt.Sprintf("%s: %s %s", e.Rule, e.Field, e.What)
	}
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

// CheckOwn checks a range this cluster routes into a peer, in its own view
// (the peer's CIDR, or the range this cluster remapped it to): it must not
// overlap local.Own. A peer's original CIDR may overlap them when it is
// remapped; the range routed may not. The error is a *ClaimError.
func CheckOwn(field string, p netip.Prefix, local LocalRanges) error {
	for _, own := range local.Own {
		if own.IsValid() && p.Overlaps(own) {
			return &ClaimError{Rule: RuleOwnRange, Field: field, CIDR: p,
				What: "overlaps this cluster's own range " + own.String() + " (it would route it into the peer)"}
		}
	}
	return nil
}

// CheckAgreed checks a peer's CIDR claim against the one agreed when the
// link was made: they must be the same CIDR. An invalid agreed prefix means
// nothing was agreed for this field and passes. The error is a
// *ClaimError.
func CheckAgreed(field string, claimed, agreed netip.Prefix) error {
	if !agreed.IsValid() || claimed.Masked() == agreed.Masked() {
		return nil
	}
	return &ClaimError{Rule: RuleAgreedRange, Field: field, CIDR: claimed,
		What: "is not the " + agreed.String() + " agreed when the link was made (run `annexctl network disconnect` and connect again to agree on new ranges)"}
}
