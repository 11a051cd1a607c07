package network

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheckPeerCIDR(t *testing.T) {
	local := LocalRanges{
		ServiceCIDR: netip.MustParsePrefix("10.96.0.0/16"),
		Nodes: []NodeAddress{{Node: "n1", Addr: netip.MustParseAddr("192.168.77.1")},
			{Node: "n2", Addr: netip.MustParseAddr("172.18.0.2")}},
	}
	type want struct{ Rule, Message string }
	tests := []struct {
		name, cidr string
		local      *LocalRanges // nil: local
		want       *want
	}{
		{name: "10.x is private", cidr: "10.200.0.0/16"},
		{name: "all of 10/8", cidr: "10.0.0.0/8", local: &LocalRanges{}},
		{name: "172.16/12 is private", cidr: "172.20.0.0/16"},
		{name: "192.168.x is private", cidr: "192.168.10.0/24"},
		{name: "100.64.x (shared address space) is private", cidr: "100.64.0.0/16"},
		{name: "IPv6 ULA is private", cidr: "fd12:3456::/48"},
		{name: "a public range", cidr: "8.8.8.0/24", want: &want{RulePrivateRange,
			"annex-network-private-range: spec.remote.podCIDR 8.8.8.0/24 is not inside a private range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fd00::/8)"}},
		{name: "everything", cidr: "0.0.0.0/0", want: &want{RulePrivateRange, ""}},
		{name: "wider than 10/8", cidr: "10.0.0.0/7", want: &want{RulePrivateRange, ""}},
		{name: "the link-local range (cloud metadata)", cidr: "169.254.0.0/16", want: &want{RulePrivateRange, ""}},
		{name: "beyond the shared address space", cidr: "100.128.0.0/16", want: &want{RulePrivateRange, ""}},
		{name: "a global IPv6 range", cidr: "2001:db8::/32", want: &want{RulePrivateRange, ""}},
		{name: "overlaps the service CIDR", cidr: "10.96.128.0/17", want: &want{RuleServiceCIDR,
			"annex-network-service-cidr: spec.remote.podCIDR 10.96.128.0/17 overlaps this cluster's service CIDR 10.96.0.0/16"}},
		{name: "covers the service CIDR", cidr: "10.0.0.0/8", want: &want{RuleServiceCIDR, ""}},
		{name: "holds a node", cidr: "192.168.77.0/24", want: &want{RuleNodeAddress,
			"annex-network-node-address: spec.remote.podCIDR 192.168.77.0/24 holds the address 192.168.77.1 of this cluster's node n1"}},
		{name: "next to the nodes", cidr: "192.168.78.0/24"},
		{name: "no service CIDR known", cidr: "10.96.0.0/16", local: &LocalRanges{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := local
			if tt.local != nil {
				l = *tt.local
			}
			err := CheckPeerCIDR("spec.remote.podCIDR", netip.MustParsePrefix(tt.cidr), l)
			var got *want
			if err != nil {
				var ce *ClaimError
				if !errors.As(err, &ce) {
					t.Fatalf("error %v is not a *ClaimError", err)
				}
				got = &want{ce.Rule, err.Error()}
				if tt.want != nil && tt.want.Message == "" {
					got.Message = ""
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CheckPeerCIDR(%s) (-want +got):\n%s", tt.cidr, diff)
			}
		})
	}
}

func TestCheckView(t *testing.T) {
	local := LocalRanges{ServiceCIDR: netip.MustParsePrefix("10.96.0.0/16"),
		Nodes: []NodeAddress{{Node: "n1", Addr: netip.MustParseAddr("100.64.0.7")}}}
	// A remapped range is the admin's choice (--remap-pool): not held to
	// the private ranges, but it must stay clear of Services and nodes.
	if err := CheckView("status.remappedRemote.podCIDR", netip.MustParsePrefix("198.18.0.0/16"), local); err != nil {
		t.Errorf("a remapped range off the nodes and Services: %v", err)
	}
	err := CheckView("status.remappedRemote.podCIDR", netip.MustParsePrefix("100.64.0.0/16"), local)
	if want := "annex-network-node-address: status.remappedRemote.podCIDR 100.64.0.0/16 holds the address 100.64.0.7 of this cluster's node n1"; err == nil || err.Error() != want {
		t.Errorf("CheckView = %v, want %s", err, want)
	}
}

func TestCheckOwn(t *testing.T) {
	local := LocalRanges{Own: []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16"), netip.MustParsePrefix("10.70.0.0/16")}}
	tests := []struct {
		name, cidr string
		local      *LocalRanges // nil: local
		want       string       // the error; empty: accepted
	}{
		{name: "a peer's own range", cidr: "10.201.0.0/16"},
		{name: "a remapped range", cidr: "100.64.0.0/16"},
		{name: "the consumer's pod CIDR", cidr: "10.200.0.0/16",
			want: "annex-network-own-range: status.remappedRemote.podCIDR 10.200.0.0/16 overlaps this cluster's own range 10.200.0.0/16 (it would route it into the peer)"},
		{name: "inside the external CIDR", cidr: "10.70.3.0/24",
			want: "annex-network-own-range: status.remappedRemote.podCIDR 10.70.3.0/24 overlaps this cluster's own range 10.70.0.0/16 (it would route it into the peer)"},
		{name: "all of 10/8 covers them", cidr: "10.0.0.0/8",
			want: "annex-network-own-range: status.remappedRemote.podCIDR 10.0.0.0/8 overlaps this cluster's own range 10.200.0.0/16 (it would route it into the peer)"},
		{name: "nothing known: not checked", cidr: "10.200.0.0/16", local: &LocalRanges{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := local
			if tt.local != nil {
				l = *tt.local
			}
			got := ""
			if err := CheckOwn("status.remappedRemote.podCIDR", netip.MustParsePrefix(tt.cidr), l); err != nil {
				var ce *ClaimError
				if !errors.As(err, &ce) || ce.Rule != RuleOwnRange {
					t.Fatalf("error %v is not a *ClaimError of %s", err, RuleOwnRange)
				}
				got = err.Error()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CheckOwn (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckAgreed(t *testing.T) {
	tests := []struct {
		name, claimed, agreed string // agreed "": nothing agreed
		want                  string
	}{
		{name: "as agreed", claimed: "10.201.0.0/16", agreed: "10.201.0.0/16"},
		{name: "nothing agreed", claimed: "10.201.0.0/16"},
		{name: "same range, host bits set", claimed: "10.201.0.0/16", agreed: "10.201.7.0/16"},
		{name: "widened", claimed: "10.0.0.0/8", agreed: "10.201.0.0/16",
			want: "annex-network-agreed-range: spec.remote.podCIDR 10.0.0.0/8 is not the 10.201.0.0/16 agreed when the link was made (run `annexctl network disconnect` and connect again to agree on new ranges)"},
		{name: "moved", claimed: "10.202.0.0/16", agreed: "10.201.0.0/16",
			want: "annex-network-agreed-range: spec.remote.podCIDR 10.202.0.0/16 is not the 10.201.0.0/16 agreed when the link was made (run `annexctl network disconnect` and connect again to agree on new ranges)"},
		{name: "narrowed", claimed: "10.201.0.0/24", agreed: "10.201.0.0/16", want: "annex-network-agreed-range: spec.remote.podCIDR 10.201.0.0/24 is not the 10.201.0.0/16 agreed when the link was made (run `annexctl network disconnect` and connect again to agree on new ranges)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var agreed netip.Prefix
			if tt.agreed != "" {
				agreed = netip.MustParsePrefix(tt.agreed)
			}
			got := ""
			if err := CheckAgreed("spec.remote.podCIDR", netip.MustParsePrefix(tt.claimed), agreed); err != nil {
				var ce *ClaimError
				if !errors.As(err, &ce) || ce.Rule != RuleAgreedRange {
					t.Fatalf("error %v is not a *ClaimError of %s", err, RuleAgreedRange)
				}
				got = err.Error()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CheckAgreed (-want +got):\n%s", diff)
			}
		})
	}
}
