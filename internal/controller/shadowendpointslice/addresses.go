package shadowendpointslice

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/identity"
	"github.com/annexhq/annex/internal/network"
)

// Bounds of a published EndpointSlice, as Kubernetes validates one (the
// ShadowEndpointSlice CRD bounds endpoints and ports the same way).
const (
	MaxEndpoints            = 1000
	MaxPorts                = 100
	MaxAddressesPerEndpoint = 100
)

// Range is a named address range, for messages.
type Range struct {
	Prefix netip.Prefix
	// Name says what the range is ("the pod CIDR of this cluster").
	Name string
	// Cluster is the linked cluster the range belongs to, "" for this
	// cluster's own ranges and addresses.
	Cluster string
}

// specialRanges are never a tenant's, whatever its ranges say.
var specialRanges = []Range{
	{Prefix: netip.MustParsePrefix("0.0.0.0/8"), Name: "the unspecified/this-network range 0.0.0.0/8"},
	{Prefix: netip.MustParsePrefix("127.0.0.0/8"), Name: "loopback"},
	{Prefix: netip.MustParsePrefix("169.254.0.0/16"), Name: "link-local 169.254.0.0/16 (cloud metadata services)"},
	{Prefix: netip.MustParsePrefix("224.0.0.0/4"), Name: "multicast"},
	{Prefix: netip.MustParsePrefix("240.0.0.0/4"), Name: "the reserved range 240.0.0.0/4 (broadcast included)"},
	{Prefix: netip.MustParsePrefix("::/128"), Name: "the unspecified address"},
	{Prefix: netip.MustParsePrefix("::1/128"), Name: "loopback"},
	{Prefix: netip.MustParsePrefix("::ffff:0:0/96"), Name: "IPv4-mapped IPv6"},
	{Prefix: netip.MustParsePrefix("fe80::/10"), Name: "link-local fe80::/10"},
	{Prefix: netip.MustParsePrefix("ff00::/8"), Name: "multicast"},
	{Prefix: netip.MustParsePrefix("fd00:ec2::254/128"), Name: "a cloud metadata service"},
}

// Tenant holds the address ranges that belong to one consumer in this
// provider's view: what its ShadowEndpointSlices may point at.
type Tenant struct {
	// Consumer is the consumer's cluster ID.
	Consumer string
	// PodCIDR is the consumer's pod CIDR as this cluster sees it (its
	// NetworkConfiguration's spec.remote.podCIDR, remapped by
	// status.remappedRemote.podCIDR).
	PodCIDR netip.Prefix
	// ExternalCIDR is the consumer's external CIDR as this cluster sees it,
	// where its transit addresses live (invalid when it has none).
	ExternalCIDR netip.Prefix
	// Reserved are never the consumer's, even inside its ranges: this
	// cluster's own ranges and node addresses, other linked clusters' ranges.
	Reserved []Range
}

// NewTenant returns the ranges of consumer from this cluster's
// NetworkConfigurations, own (this cluster's own ranges, from its identity)
// and nodes (whose addresses are reserved). It returns nil and why when this
// cluster has no usable network link with consumer: then nothing of the
// consumer's is published.
func NewTenant(consumer string, links []networkingv1alpha1.NetworkConfiguration, own []Range, nodes []corev1.Node) (*Tenant, string) {
	t := &Tenant{Consumer: consumer}
	var link *networkingv1alpha1.NetworkConfiguration
	for i := range links {
		nc := &links[i]
		if !nc.DeletionTimestamp.IsZero() {
			continue
		}
		if nc.Spec.RemoteClusterID == consumer && link == nil {
			link = nc
			continue
		}
		if nc.Status.RemappedRemote == nil {
			// Not mapped yet: its view is not known, and its CIDRs as the
			// other cluster writes them may overlap the consumer's view.
			continue
		}
		other := nc.Spec.RemoteClusterID
		for _, r := range []struct{ what, original, remapped string }{
			{"pod", nc.Spec.Remote.PodCIDR, nc.Status.RemappedRemote.PodCIDR},
			{"external", nc.Spec.Remote.ExternalCIDR, nc.Status.RemappedRemote.ExternalCIDR},
		} {
			if m, err := network.ParseMapping(r.original, r.remapped); err == nil {
				t.Reserved = append(t.Reserved, Range{Prefix: m.View(), Name: fmt.Sprintf("the %s CIDR of cluster %s", r.what, other), Cluster: other})
			}
		}
	}
	if link == nil {
		return nil, fmt.Sprintf("no network link with consumer %s (no NetworkConfiguration for it in this cluster)", consumer)
	}
	if link.Status.RemappedRemote == nil {
		return nil, fmt.Sprintf("the network link with consumer %s does not say yet how this cluster maps its CIDRs (NetworkConfiguration %s has no status.remappedRemote)", consumer, link.Name)
	}
	pod, err := network.ParseMapping(link.Spec.Remote.PodCIDR, link.Status.RemappedRemote.PodCIDR)
	if err != nil {
		return nil, fmt.Sprintf("the network link with consumer %s has an unusable pod CIDR: %v", consumer, err)
	}
	t.PodCIDR = pod.View()
	if ext, err := network.ParseMapping(link.Spec.Remote.ExternalCIDR, link.Status.RemappedRemote.ExternalCIDR); err == nil {
		t.ExternalCIDR = ext.View()
	}
	for _, r := range []struct{ cidr, name string }{
		{link.Spec.Local.PodCIDR, "the pod CIDR of this cluster"},
		{link.Spec.Local.ExternalCIDR, "the external CIDR of this cluster"},
	} {
		if p, err := network.ParseCIDR(r.cidr); err == nil {
			t.Reserved = append(t.Reserved, Range{Prefix: p, Name: r.name})
		}
	}
	t.Reserved = append(t.Reserved, own...)
	for i := range nodes {
		node := &nodes[i]
		for _, a := range node.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if addr, err := netip.ParseAddr(a.Address); err == nil && addr.Zone() == "" {
				t.Reserved = append(t.Reserved, Range{Prefix: netip.PrefixFrom(addr, addr.BitLen()), Name: "an address of node " + node.Name})
			}
		}
	}
	return t, ""
}

// IdentityRanges returns this cluster's own ranges from its identity (pod,
// service and external CIDR; those it does not have are left out), for
// Options.LocalCIDRs.
func IdentityRanges(id identity.Identity) []Range {
	var out []Range
	for _, r := range []struct{ cidr, what string }{{id.PodCIDR, "pod"}, {id.ServiceCIDR, "service"}, {id.ExternalCIDR, "external"}} {
		if p, err := network.ParseCIDR(r.cidr); err == nil {
			out = append(out, Range{Prefix: p, Name: "the " + r.what + " CIDR of this cluster"})
		}
	}
	return out
}

// Ranges describes the consumer's ranges for messages.
func (t *Tenant) Ranges() string {
	s := "pod CIDR " + t.PodCIDR.String()
	if t.ExternalCIDR.IsValid() {
		s += ", external CIDR " + t.ExternalCIDR.String()
	}
	return s
}

// Check returns the canonical form of address a, written in a slice of
// type addressType, when it belongs to the consumer; otherwise why not.
func (t *Tenant) Check(addressType discoveryv1.AddressType, a string) (string, string) {
	if addressType != discoveryv1.AddressTypeIPv4 && addressType != discoveryv1.AddressTypeIPv6 {
		return "", fmt.Sprintf("addressType %s: only IP addresses in the consumer's ranges are published", quoteish(string(addressType)))
	}
	addr, err := netip.ParseAddr(a)
	if err != nil || addr.Zone() != "" {
		return "", "not an IP address"
	}
	if (addressType == discoveryv1.AddressTypeIPv4) != addr.Is4() {
		return "", "not an " + string(addressType) + " address"
	}
	if r, ok := NeverAllowed(addr, t.Reserved, ""); ok {
		return "", "in " + r.Name
	}
	if !t.PodCIDR.Contains(addr) && !(t.ExternalCIDR.IsValid() && t.ExternalCIDR.Contains(addr)) {
		return "", "outside the consumer's ranges"
	}
	if !private(addr) {
		return "", "a public address: a consumer's ranges are private"
	}
	return addr.String(), ""
}

// privateRanges are where a consumer's addresses may be (RFC 1918, the
// shared address space where remapped CIDRs are allocated, IPv6 unique
// local addresses), whatever its claimed CIDRs cover.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix(network.DefaultPool),
	netip.MustParsePrefix("fc00::/7"),
}

func private(addr netip.Addr) bool {
	for _, p := range privateRanges {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// NeverAllowed returns the special or reserved range addr lies in, if any;
// reserved ranges of cluster except are not considered (a direct connection
// to that cluster's pods).
func NeverAllowed(addr netip.Addr, reserved []Range, except string) (Range, bool) {
	for _, r := range specialRanges {
		if r.Prefix.Contains(addr) {
			return r, true
		}
	}
	for _, r := range reserved {
		if (except == "" || r.Cluster != except) && r.Prefix.Contains(addr) {
			return r, true
		}
	}
	return Range{}, false
}

// Refusal is an address left out of the EndpointSlice, and why.
type Refusal struct {
	Address string
	Why     string
}

// Filter returns the endpoints of eps whose every address belongs to t, with
// their addresses in canonical form, and the refused addresses. An endpoint
// with a refused address, with no address or with more than
// MaxAddressesPerEndpoint is left out whole; dropped counts those. eps is
// not modified.
func (t *Tenant) Filter(addressType discoveryv1.AddressType, eps []discoveryv1.Endpoint) (kept []discoveryv1.Endpoint, refused []Refusal, dropped int) {
	kept = make([]discoveryv1.Endpoint, 0, len(eps))
	for i := range eps {
		ep := eps[i]
		switch n := len(ep.Addresses); {
		case n == 0:
			refused = append(refused, Refusal{Why: "an endpoint without addresses"})
			dropped++
			continue
		case n > MaxAddressesPerEndpoint:
			refused = append(refused, Refusal{Address: ep.Addresses[0], Why: fmt.Sprintf("an endpoint with %d addresses (at most %d)", n, MaxAddressesPerEndpoint)})
			dropped++
			continue
		}
		addrs := make([]string, 0, len(ep.Addresses))
		ok := true
		for _, a := range ep.Addresses {
			c, why := t.Check(addressType, a)
			if why != "" {
				refused = append(refused, Refusal{Address: a, Why: why})
				ok = false
				continue
			}
			addrs = append(addrs, c)
		}
		if !ok {
			dropped++
			continue
		}
		ep.Addresses = addrs
		kept = append(kept, ep)
	}
	return kept, refused, dropped
}

// refusalsShown is how many refused addresses a message names.
const refusalsShown = 5

// RefusalSummary is the bounded message for endpoints dropped because of
// refused addresses: how many, the consumer's ranges, and the first
// refusals.
func (t *Tenant) RefusalSummary(refused []Refusal, dropped int) string {
	parts := make([]string, 0, refusalsShown)
	for _, r := range refused[:min(len(refused), refusalsShown)] {
		parts = append(parts, fmt.Sprintf("%s (%s)", quoteish(r.Address), r.Why))
	}
	more := ""
	if n := len(refused) - refusalsShown; n > 0 {
		more = fmt.Sprintf("; and %d more", n)
	}
	return fmt.Sprintf("%d endpoints dropped: their addresses are not consumer %s's (%s in this cluster's view): %s%s",
		dropped, t.Consumer, t.Ranges(), strings.Join(parts, "; "), more)
}

// quoteish quotes s for a message, bounded so a hostile value cannot flood
// an Event.
func quoteish(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return fmt.Sprintf("%q", s)
}
