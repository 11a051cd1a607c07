package shadowendpointslice

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/identity"
)

// testTenant is consumer alpha on a provider whose pod CIDR is 10.1.0.0/16,
// service CIDR 10.96.0.0/12, external CIDR 10.71.0.0/16, with one node
// 192.168.1.10 and another tenant delta (10.5.0.0/16, external
// 10.6.0.0/16). Alpha's pod CIDR is 10.2.0.0/16 (used as it is), its
// external CIDR 10.70.0.0/16 is mapped to 100.66.0.0/16, and
// fd00:2::/64 would be an IPv6 consumer.
func testTenant(t testing.TB, podCIDR string) *Tenant {
	t.Helper()
	links := []networkingv1alpha1.NetworkConfiguration{
		*link("delta", "10.5.0.0/16", "10.6.0.0/16", &networkingv1alpha1.RemappedCIDRs{}),
		*link("alpha", podCIDR, "10.70.0.0/16", &networkingv1alpha1.RemappedCIDRs{ExternalCIDR: "100.66.0.0/16"}),
	}
	own := []Range{{Prefix: netip.MustParsePrefix("10.96.0.0/12"), Name: "the service CIDR of this cluster"}}
	tn, why := NewTenant("alpha", links, own, []corev1.Node{*node("node-1", "192.168.1.10")})
	if tn == nil {
		t.Fatalf("NewTenant() = nil, %q", why)
	}
	return tn
}

func TestCheck(t *testing.T) {
	v4 := testTenant(t, "10.2.0.0/16")
	v6 := testTenant(t, "fd00:2::/64")
	// A consumer whose claimed pod CIDR covers the provider's node and the
	// metadata service: those stay refused.
	wide := testTenant(t, "0.0.0.0/0")
	tests := []struct {
		name    string
		tenant  *Tenant
		typ     discoveryv1.AddressType
		addr    string
		want    string
		wantWhy string
	}{
		{"consumer pod", v4, discoveryv1.AddressTypeIPv4, "10.2.3.4", "10.2.3.4", ""},
		{"consumer transit address, mapped external CIDR", v4, discoveryv1.AddressTypeIPv4, "100.66.0.9", "100.66.0.9", ""},
		{"consumer external CIDR unmapped: not this cluster's view", v4, discoveryv1.AddressTypeIPv4, "10.70.0.9", "", "outside the consumer's ranges"},
		{"provider pod", v4, discoveryv1.AddressTypeIPv4, "10.1.0.8", "", "in the pod CIDR of this cluster"},
		{"provider external CIDR", v4, discoveryv1.AddressTypeIPv4, "10.71.0.1", "", "in the external CIDR of this cluster"},
		{"provider service IP", v4, discoveryv1.AddressTypeIPv4, "10.96.0.1", "", "in the service CIDR of this cluster"},
		{"provider node", v4, discoveryv1.AddressTypeIPv4, "192.168.1.10", "", "in an address of node node-1"},
		{"another tenant's pod", v4, discoveryv1.AddressTypeIPv4, "10.5.0.4", "", "in the pod CIDR of cluster delta"},
		{"another tenant's transit address", v4, discoveryv1.AddressTypeIPv4, "10.6.0.4", "", "in the external CIDR of cluster delta"},
		{"metadata service", v4, discoveryv1.AddressTypeIPv4, "169.254.169.254", "", "in link-local 169.254.0.0/16 (cloud metadata services)"},
		{"loopback", v4, discoveryv1.AddressTypeIPv4, "127.0.0.1", "", "in loopback"},
		{"public", v4, discoveryv1.AddressTypeIPv4, "8.8.8.8", "", "outside the consumer's ranges"},
		{"unspecified", v4, discoveryv1.AddressTypeIPv4, "0.0.0.0", "", "in the unspecified/this-network range 0.0.0.0/8"},
		{"broadcast", v4, discoveryv1.AddressTypeIPv4, "255.255.255.255", "", "in the reserved range 240.0.0.0/4 (broadcast included)"},
		{"multicast", v4, discoveryv1.AddressTypeIPv4, "224.0.0.1", "", "in multicast"},
		{"leading zeros", v4, discoveryv1.AddressTypeIPv4, "010.2.0.1", "", "not an IP address"},
		{"hostname", v4, discoveryv1.AddressTypeIPv4, "kubernetes.default", "", "not an IP address"},
		{"empty", v4, discoveryv1.AddressTypeIPv4, "", "", "not an IP address"},
		{"CIDR", v4, discoveryv1.AddressTypeIPv4, "10.2.0.0/16", "", "not an IP address"},
		{"IPv6 in an IPv4 slice", v6, discoveryv1.AddressTypeIPv4, "fd00:2::1", "", "not an IPv4 address"},
		{"FQDN slice", v4, discoveryv1.AddressTypeFQDN, "web.example.com", "", `addressType "FQDN": only IP addresses in the consumer's ranges are published`},
		{"IPv6 consumer pod, canonical form", v6, discoveryv1.AddressTypeIPv6, "FD00:2:0::7", "fd00:2::7", ""},
		{"IPv6 with a zone", v6, discoveryv1.AddressTypeIPv6, "fd00:2::7%eth0", "", "not an IP address"},
		{"IPv4 in an IPv6 slice", v6, discoveryv1.AddressTypeIPv6, "10.2.0.1", "", "not an IPv6 address"},
		{"IPv4-mapped IPv6", v6, discoveryv1.AddressTypeIPv6, "::ffff:10.2.0.1", "", "in IPv4-mapped IPv6"},
		{"IPv6 loopback", v6, discoveryv1.AddressTypeIPv6, "::1", "", "in loopback"},
		{"IPv6 link-local", v6, discoveryv1.AddressTypeIPv6, "fe80::1", "", "in link-local fe80::/10"},
		{"IPv6 metadata service", wide, discoveryv1.AddressTypeIPv6, "fd00:ec2::254", "", "in a cloud metadata service"},
		{"wide claim: node refused", wide, discoveryv1.AddressTypeIPv4, "192.168.1.10", "", "in an address of node node-1"},
		{"wide claim: service IP refused", wide, discoveryv1.AddressTypeIPv4, "10.96.0.10", "", "in the service CIDR of this cluster"},
		{"wide claim: provider pod refused", wide, discoveryv1.AddressTypeIPv4, "10.1.2.3", "", "in the pod CIDR of this cluster"},
		{"wide claim: metadata refused", wide, discoveryv1.AddressTypeIPv4, "169.254.169.254", "", "in link-local 169.254.0.0/16 (cloud metadata services)"},
		{"wide claim: other tenant refused", wide, discoveryv1.AddressTypeIPv4, "10.5.1.1", "", "in the pod CIDR of cluster delta"},
		{"wide claim: public refused", wide, discoveryv1.AddressTypeIPv4, "8.8.8.8", "", "a public address: a consumer's ranges are private"},
		{"wide claim: private passes", wide, discoveryv1.AddressTypeIPv4, "172.16.0.1", "172.16.0.1", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, why := tc.tenant.Check(tc.typ, tc.addr)
			if diff := cmp.Diff([]string{tc.want, tc.wantWhy}, []string{got, why}); diff != "" {
				t.Errorf("Check(%s, %q) (-want +got):\n%s", tc.typ, tc.addr, diff)
			}
		})
	}
}

func TestNewTenant(t *testing.T) {
	deleting := link("alpha", "10.9.0.0/16", "10.8.0.0/16", &networkingv1alpha1.RemappedCIDRs{})
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	tests := []struct {
		name    string
		links   []networkingv1alpha1.NetworkConfiguration
		want    *Tenant
		wantWhy string
	}{{
		name:    "no link",
		links:   []networkingv1alpha1.NetworkConfiguration{*link("delta", "10.5.0.0/16", "10.6.0.0/16", &networkingv1alpha1.RemappedCIDRs{})},
		wantWhy: "no network link with consumer alpha (no NetworkConfiguration for it in this cluster)",
	}, {
		name:    "a link being deleted is no link",
		links:   []networkingv1alpha1.NetworkConfiguration{*deleting},
		wantWhy: "no network link with consumer alpha (no NetworkConfiguration for it in this cluster)",
	}, {
		name:    "mapping not decided",
		links:   []networkingv1alpha1.NetworkConfiguration{*link("alpha", "10.2.0.0/16", "10.3.0.0/16", nil)},
		wantWhy: "the network link with consumer alpha does not say yet how this cluster maps its CIDRs (NetworkConfiguration alpha has no status.remappedRemote)",
	}, {
		name: "remapped; other links reserved in this cluster's view, undecided ones left out",
		links: []networkingv1alpha1.NetworkConfiguration{
			*link("gamma", "10.2.0.0/16", "10.72.0.0/16", &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.64.0.0/16"}),
			*link("alpha", "10.2.0.0/16", "10.70.0.0/16", &networkingv1alpha1.RemappedCIDRs{PodCIDR: "100.65.0.0/16", ExternalCIDR: "100.66.0.0/16"}),
			*link("omega", "10.2.0.0/16", "10.73.0.0/16", nil),
		},
		want: &Tenant{
			Consumer:     "alpha",
			PodCIDR:      netip.MustParsePrefix("100.65.0.0/16"),
			ExternalCIDR: netip.MustParsePrefix("100.66.0.0/16"),
			Reserved: []Range{
				{Prefix: netip.MustParsePrefix("100.64.0.0/16"), Name: "the pod CIDR of cluster gamma", Cluster: "gamma"},
				{Prefix: netip.MustParsePrefix("10.72.0.0/16"), Name: "the external CIDR of cluster gamma", Cluster: "gamma"},
				{Prefix: netip.MustParsePrefix("10.1.0.0/16"), Name: "the pod CIDR of this cluster"},
				{Prefix: netip.MustParsePrefix("10.71.0.0/16"), Name: "the external CIDR of this cluster"},
				{Prefix: netip.MustParsePrefix("192.168.1.10/32"), Name: "an address of node node-1"},
			},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, why := NewTenant("alpha", tc.links, nil, []corev1.Node{*node("node-1", "192.168.1.10")})
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("NewTenant() (-want +got):\n%s", diff)
			}
			if why != tc.wantWhy {
				t.Errorf("NewTenant() why = %q, want %q", why, tc.wantWhy)
			}
		})
	}
}

func TestFilter(t *testing.T) {
	tn := testTenant(t, "10.2.0.0/16")
	many := make([]string, MaxAddressesPerEndpoint+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.2.0.%d", i)
	}
	eps := []discoveryv1.Endpoint{
		endpoint("10.2.0.1"),
		{Addresses: []string{"10.2.0.2", "169.254.169.254"}},
		{},
		{Addresses: many},
		endpoint("100.66.0.1"),
	}
	orig := append([]discoveryv1.Endpoint{}, eps...)
	kept, refused, dropped := tn.Filter(discoveryv1.AddressTypeIPv4, eps)
	if diff := cmp.Diff([]discoveryv1.Endpoint{endpoint("10.2.0.1"), endpoint("100.66.0.1")}, kept); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	want := []Refusal{
		{Address: "169.254.169.254", Why: "in link-local 169.254.0.0/16 (cloud metadata services)"},
		{Why: "an endpoint without addresses"},
		{Address: "10.2.0.0", Why: "an endpoint with 101 addresses (at most 100)"},
	}
	if diff := cmp.Diff(want, refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
	if dropped != 3 {
		t.Errorf("dropped = %d, want 3", dropped)
	}
	if diff := cmp.Diff(orig, eps, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("input modified (-before +after):\n%s", diff)
	}
}

func TestRefusalSummary(t *testing.T) {
	tn := testTenant(t, "10.2.0.0/16")
	var refused []Refusal
	for i := range 7 {
		refused = append(refused, Refusal{Address: fmt.Sprintf("8.8.8.%d", i), Why: "outside the consumer's ranges"})
	}
	refused[1].Address = strings.Repeat("x", 200)
	got := tn.RefusalSummary(refused, 7)
	want := "7 endpoints dropped: their addresses are not consumer alpha's (pod CIDR 10.2.0.0/16, external CIDR 100.66.0.0/16 in this cluster's view): " +
		`"8.8.8.0" (outside the consumer's ranges); "` + strings.Repeat("x", 64) + `…" (outside the consumer's ranges); ` +
		`"8.8.8.2" (outside the consumer's ranges); "8.8.8.3" (outside the consumer's ranges); "8.8.8.4" (outside the consumer's ranges); and 2 more`
	if got != want {
		t.Errorf("RefusalSummary() =\n%s\nwant\n%s", got, want)
	}
}

// FuzzFilter checks that nothing outside the consumer's ranges, or inside
// this provider's own ranges and addresses, ever comes out of Filter, what
// ever the consumer's CIDRs and addresses.
func FuzzFilter(f *testing.F) {
	f.Add("10.2.0.0/16", "", "10.70.0.0/16", "100.66.0.0/16", "10.2.0.1,169.254.169.254,10.1.0.8,192.168.1.10,100.66.0.3,8.8.8.8", false)
	f.Add("0.0.0.0/0", "", "10.70.0.0/16", "", "127.0.0.1,10.96.0.1,10.5.0.1,1.1.1.1,::ffff:10.2.0.1", false)
	f.Add("fd00:2::/64", "fd00:9::/64", "fd00:70::/64", "", "fd00:9::1,fd00:2::1,::1,fe80::1%eth0,FD00:9:0::2", true)
	f.Add("::/0", "", "fd00:70::/64", "", "fd00:ec2::254,ff02::1,::,::ffff:1.2.3.4", true)
	f.Fuzz(func(t *testing.T, pod, podRemap, ext, extRemap, addrs string, v6 bool) {
		links := []networkingv1alpha1.NetworkConfiguration{
			*link("delta", "10.5.0.0/16", "10.6.0.0/16", &networkingv1alpha1.RemappedCIDRs{}),
			*link("alpha", pod, ext, &networkingv1alpha1.RemappedCIDRs{PodCIDR: podRemap, ExternalCIDR: extRemap}),
		}
		own := []Range{{Prefix: netip.MustParsePrefix("10.96.0.0/12"), Name: "the service CIDR of this cluster"}}
		tn, _ := NewTenant("alpha", links, own, []corev1.Node{*node("node-1", "192.168.1.10")})
		if tn == nil {
			return
		}
		typ := discoveryv1.AddressTypeIPv4
		if v6 {
			typ = discoveryv1.AddressTypeIPv6
		}
		var eps []discoveryv1.Endpoint
		for a := range strings.SplitSeq(addrs, ";") {
			eps = append(eps, discoveryv1.Endpoint{Addresses: strings.Split(a, ",")})
		}
		kept, refused, dropped := tn.Filter(typ, eps)
		if len(kept)+dropped != len(eps) || (dropped > 0) != (len(refused) > 0) {
			t.Fatalf("%d kept + %d dropped of %d endpoints, %d refusals", len(kept), dropped, len(eps), len(refused))
		}
		forbidden := []netip.Prefix{
			netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.71.0.0/16"), netip.MustParsePrefix("10.96.0.0/12"),
			netip.MustParsePrefix("192.168.1.10/32"), netip.MustParsePrefix("10.5.0.0/16"), netip.MustParsePrefix("10.6.0.0/16"),
			netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("0.0.0.0/8"),
			netip.MustParsePrefix("224.0.0.0/3"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("::/128"),
			netip.MustParsePrefix("fe80::/10"), netip.MustParsePrefix("ff00::/8"), netip.MustParsePrefix("::ffff:0:0/96"),
			netip.MustParsePrefix("fd00:ec2::254/128"),
		}
		for _, ep := range kept {
			if len(ep.Addresses) == 0 || len(ep.Addresses) > MaxAddressesPerEndpoint {
				t.Fatalf("endpoint with %d addresses kept", len(ep.Addresses))
			}
			for _, a := range ep.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil || addr.String() != a || addr.Is4() == v6 {
					t.Fatalf("kept %q: not a canonical %s address", a, typ)
				}
				if !tn.PodCIDR.Contains(addr) && !tn.ExternalCIDR.Contains(addr) {
					t.Fatalf("kept %q outside the consumer's ranges %s", a, tn.Ranges())
				}
				if !private(addr) {
					t.Fatalf("kept public %q", a)
				}
				for _, p := range forbidden {
					if p.Contains(addr) {
						t.Fatalf("kept %q in the forbidden range %s", a, p)
					}
				}
			}
		}
		if msg := tn.RefusalSummary(refused, dropped); len(msg) > 2048 {
			t.Fatalf("summary of %d bytes", len(msg))
		}
	})
}

func TestIdentityRanges(t *testing.T) {
	got := IdentityRanges(identity.Identity{ClusterID: "beta", PodCIDR: "10.1.0.0/16", ServiceCIDR: "10.96.0.0/12", ExternalCIDR: "not a CIDR"})
	want := []Range{
		{Prefix: netip.MustParsePrefix("10.1.0.0/16"), Name: "the pod CIDR of this cluster"},
		{Prefix: netip.MustParsePrefix("10.96.0.0/12"), Name: "the service CIDR of this cluster"},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("IdentityRanges() (-want +got):\n%s", diff)
	}
}
