package fabric

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []netip.Prefix
		want    []netip.Prefix
		wantErr string
	}{
		{name: "none", in: nil, want: []netip.Prefix{}},
		{name: "sorted", in: prefixes("100.64.0.0/16", "10.201.0.0/16"), want: prefixes("10.201.0.0/16", "100.64.0.0/16")},
		{name: "host bits masked", in: prefixes("10.201.3.4/16"), want: prefixes("10.201.0.0/16")},
		{name: "duplicates", in: prefixes("10.1.0.0/16", "10.1.0.0/16", "10.1.9.9/16"), want: prefixes("10.1.0.0/16")},
		{name: "covered dropped", in: prefixes("10.1.2.0/24", "10.2.0.0/16", "10.0.0.0/8", "10.1.0.0/16"), want: prefixes("10.0.0.0/8")},
		{name: "same address, shorter first", in: prefixes("10.1.0.0/24", "10.1.0.0/16", "10.3.0.0/16"), want: prefixes("10.1.0.0/16", "10.3.0.0/16")},
		// Siblings are kept as they are: a route per prefix of the plan.
		{name: "adjacent kept", in: prefixes("10.1.1.0/24", "10.1.0.0/24"), want: prefixes("10.1.0.0/24", "10.1.1.0/24")},
		{name: "IPv6", in: prefixes("10.1.0.0/16", "fd00::/64"), wantErr: "fd00::/64 is not IPv4"},
		{name: "mapped IPv4", in: prefixes("::ffff:10.1.0.0/112"), wantErr: "is not IPv4"},
		{name: "default", in: prefixes("0.0.0.0/0"), wantErr: "would take every address"},
		{name: "invalid", in: []netip.Prefix{{}}, wantErr: "invalid prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := normalize("destinations", tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	gw := netip.MustParseAddr("172.31.9.3")
	for _, tc := range []struct {
		name    string
		plan    Plan
		wantErr string
	}{
		{name: "zero", plan: Plan{}},
		{name: "no gateway", plan: Plan{Destinations: prefixes("10.201.0.0/16"), Sources: prefixes("10.244.0.0/16")}},
		{name: "full", plan: Plan{Gateway: gw, Destinations: prefixes("10.201.0.0/16"), Sources: prefixes("10.244.0.0/16")}},
		{name: "IPv6 gateway", plan: Plan{Gateway: netip.MustParseAddr("fd00::1")}, wantErr: "gateway fd00::1"},
		{name: "unspecified gateway", plan: Plan{Gateway: netip.IPv4Unspecified()}, wantErr: "gateway 0.0.0.0"},
		{name: "IPv6 source", plan: Plan{Sources: prefixes("fd00::/48")}, wantErr: "sources: fd00::/48"},
		{name: "destination overlaps source", plan: Plan{Gateway: gw, Destinations: prefixes("10.244.3.0/24"), Sources: prefixes("10.244.0.0/16")},
			wantErr: "destination 10.244.3.0/24 overlaps source 10.244.0.0/16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := check(tc.plan)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestMergeAdjacent(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name string
		in   []netip.Prefix
		want []addrRange
	}{
		{name: "none"},
		{name: "one", in: prefixes("10.201.0.0/16"), want: []addrRange{{a("10.201.0.0"), a("10.201.255.255")}}},
		{name: "host", in: prefixes("10.1.2.3/32"), want: []addrRange{{a("10.1.2.3"), a("10.1.2.3")}}},
		{name: "odd length", in: prefixes("10.0.0.0/13"), want: []addrRange{{a("10.0.0.0"), a("10.7.255.255")}}},
		{name: "adjacent merged", in: prefixes("10.1.0.0/24", "10.1.1.0/24", "10.1.2.0/23"),
			want: []addrRange{{a("10.1.0.0"), a("10.1.3.255")}}},
		{name: "gap kept", in: prefixes("10.1.0.0/24", "10.1.2.0/24"),
			want: []addrRange{{a("10.1.0.0"), a("10.1.0.255")}, {a("10.1.2.0"), a("10.1.2.255")}}},
		{name: "up to the last address", in: prefixes("128.0.0.0/1"), want: []addrRange{{a("128.0.0.0"), a("255.255.255.255")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeAdjacent(tc.in)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(addrRange{}), cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiffRoutes(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	gw, gw2 := a("172.31.9.3"), a("172.31.9.4")
	via := func(dst string, g netip.Addr) route { return route{Dst: p(dst), Via: g, Ours: true} }
	unreach := func(dst string) route { return route{Dst: p(dst), Unreachable: true, Ours: true} }
	foreign := func(dst string) route { return route{Dst: p(dst), Via: gw} }
	type result struct{ Set, Remove, Conflicts []route }
	for _, tc := range []struct {
		name       string
		have, want []route
		result     result
	}{
		{name: "nothing"},
		{name: "from scratch", have: []route{foreign("0.0.0.0/0"), foreign("172.31.9.0/24")},
			want:   []route{via("10.201.0.0/16", gw), via("100.64.0.0/16", gw)},
			result: result{Set: []route{via("10.201.0.0/16", gw), via("100.64.0.0/16", gw)}}},
		{name: "in place", have: []route{via("10.201.0.0/16", gw), foreign("0.0.0.0/0")}, want: []route{via("10.201.0.0/16", gw)}},
		{name: "gateway moved", have: []route{via("10.201.0.0/16", gw)}, want: []route{via("10.201.0.0/16", gw2)},
			result: result{Set: []route{via("10.201.0.0/16", gw2)}}},
		{name: "gateway gone", have: []route{via("10.201.0.0/16", gw)}, want: []route{unreach("10.201.0.0/16")},
			result: result{Set: []route{unreach("10.201.0.0/16")}}},
		{name: "stale removed, others kept", have: []route{via("10.201.0.0/16", gw), unreach("10.99.0.0/16"), foreign("10.98.0.0/16")},
			want:   []route{via("10.202.0.0/16", gw)},
			result: result{Set: []route{via("10.202.0.0/16", gw)}, Remove: []route{via("10.201.0.0/16", gw), unreach("10.99.0.0/16")}}},
		{name: "ours at another metric is stale", have: []route{{Dst: p("10.201.0.0/16"), Via: gw, Metric: 100, Ours: true}},
			want:   []route{via("10.201.0.0/16", gw)},
			result: result{Set: []route{via("10.201.0.0/16", gw)}, Remove: []route{{Dst: p("10.201.0.0/16"), Via: gw, Metric: 100, Ours: true}}}},
		{name: "foreign route not replaced", have: []route{foreign("10.201.0.0/16")}, want: []route{via("10.201.0.0/16", gw)},
			result: result{Conflicts: []route{via("10.201.0.0/16", gw)}}},
		{name: "foreign route at another metric is no conflict", have: []route{{Dst: p("10.201.0.0/16"), Via: gw, Metric: 100}},
			want:   []route{via("10.201.0.0/16", gw)},
			result: result{Set: []route{via("10.201.0.0/16", gw)}}},
		{name: "clean", have: []route{via("10.201.0.0/16", gw), foreign("0.0.0.0/0")},
			result: result{Remove: []route{via("10.201.0.0/16", gw)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got result
			got.Set, got.Remove, got.Conflicts = diffRoutes(tc.have, tc.want)
			if diff := cmp.Diff(tc.result, got, cmp.Comparer(func(x, y netip.Addr) bool { return x == y }),
				cmp.Comparer(func(x, y netip.Prefix) bool { return x == y })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestWantRoutes(t *testing.T) {
	gw := netip.MustParseAddr("172.31.9.3")
	dst := prefixes("10.201.0.0/16")
	got := [][]route{wantRoutes(normalized{gateway: gw, destinations: dst}), wantRoutes(normalized{destinations: dst})}
	want := [][]route{{{Dst: dst[0], Via: gw, Ours: true}}, {{Dst: dst[0], Unreachable: true, Ours: true}}}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(x, y netip.Addr) bool { return x == y }),
		cmp.Comparer(func(x, y netip.Prefix) bool { return x == y })); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
