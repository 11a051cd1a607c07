package sandboxnet

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

func TestNames(t *testing.T) {
	uid := types.UID("5F3A2B1C-9d8e-4f00-a1b2-c3d4e5f60718")
	if got, want := RouterNetns("alpha"), "annex-sbx-alpha"; got != want {
		t.Errorf("RouterNetns = %q, want %q", got, want)
	}
	if got, want := UnderlayNetns(), "annex-sbx-ul"; got != want {
		t.Errorf("UnderlayNetns = %q, want %q", got, want)
	}
	if got, want := PodNetns("gamma", uid), "annex-sbx-gamma-5f3a2b1c"; got != want {
		t.Errorf("PodNetns = %q, want %q", got, want)
	}
	if got := PodNetns("gamma", uid); len(got) > 32 {
		t.Errorf("PodNetns = %q is longer than 32 characters", got)
	}
	if got, want := PodNetns("a", "12-34"), "annex-sbx-a-1234"; got != want {
		t.Errorf("PodNetns of a short UID = %q, want %q", got, want)
	}
	if got, want := routerPodIface(uid), "p5f3a2b1c"; got != want {
		t.Errorf("routerPodIface = %q, want %q", got, want)
	}
	for _, c := range []Cluster{{Name: "alpha", Index: 0}, {Name: "a-very-long-cluster-name", Index: 12}} {
		if got := bridgePort(c); len(got) > 15 || !strings.HasPrefix(got, "r") {
			t.Errorf("bridgePort(%v) = %q: not an interface name", c, got)
		}
	}
	if got, want := bridgePort(Cluster{Name: "beta", Index: 1}), "r1-beta"; got != want {
		t.Errorf("bridgePort = %q, want %q", got, want)
	}
}

func TestIsPodNetns(t *testing.T) {
	n := defaultNaming
	for name, want := range map[string]bool{
		"annex-sbx-alpha-5f3a2b1c":       true,
		"annex-sbx-alpha-1234":           true,
		"annex-sbx-alpha":                false, // the router
		"annex-sbx-alpha-":               false,
		"annex-sbx-alpha-5f3a2b1c9":      false, // too long
		"annex-sbx-alpha-xyz":            false,
		"annex-sbx-alpha-beta-5f3a2b1c":  false, // another cluster's
		"annex-sbx-gamma-5f3a2b1c":       false,
		"annex-sbx-ul":                   false,
		"other-annex-sbx-alpha-5f3a2b1c": false,
	} {
		if got := n.isPodNetns("alpha", name); got != want {
			t.Errorf("isPodNetns(alpha, %q) = %v, want %v", name, got, want)
		}
	}
}

func TestUnderlayAddr(t *testing.T) {
	for index, want := range map[int]string{0: "192.168.77.1", 1: "192.168.77.2", 2: "192.168.77.3", 253: "192.168.77.254"} {
		if got := UnderlayAddr(index); got != netip.MustParseAddr(want) {
			t.Errorf("UnderlayAddr(%d) = %s, want %s", index, got, want)
		}
	}
	for _, index := range []int{-1, 254, 1000} {
		if got := UnderlayAddr(index); got.IsValid() {
			t.Errorf("UnderlayAddr(%d) = %s, want the zero Addr", index, got)
		}
	}
}

func TestValidateClusters(t *testing.T) {
	ok := []Cluster{{Name: "alpha", Index: 0}, {Name: "beta", Index: 1}, {Name: "gamma", Index: 2}}
	if err := validateClusters(ok); err != nil {
		t.Errorf("validateClusters(%v) = %v", ok, err)
	}
	for _, bad := range [][]Cluster{
		{{Name: "", Index: 0}},
		{{Name: "a/b", Index: 0}},
		{{Name: "ul", Index: 0}},
		{{Name: "alpha", Index: -1}},
		{{Name: "alpha", Index: 254}},
		{{Name: "alpha", Index: 0}, {Name: "alpha", Index: 1}},
		{{Name: "alpha", Index: 0}, {Name: "beta", Index: 0}},
	} {
		if err := validateClusters(bad); err == nil {
			t.Errorf("validateClusters(%v) = nil, want an error", bad)
		}
	}
}

func TestNodeUnderlayAddr(t *testing.T) {
	type key struct{ cluster, node int }
	got := map[key]netip.Addr{}
	for c := -1; c <= maxNodeCluster+1; c++ {
		for n := -1; n <= maxNodeIndex+1; n++ {
			if a := NodeUnderlayAddr(c, n); a.IsValid() {
				got[key{c, n}] = a
			}
		}
	}
	want := map[key]string{
		{0, 0}: "192.168.77.1", {0, 1}: "192.168.77.17", {0, 2}: "192.168.77.18", {0, 3}: "192.168.77.19",
		{1, 0}: "192.168.77.2", {1, 1}: "192.168.77.33", {1, 3}: "192.168.77.35",
		{2, 0}: "192.168.77.3", {2, 1}: "192.168.77.49", {2, 3}: "192.168.77.51",
		{14, 0}: "192.168.77.15", {14, 1}: "192.168.77.241", {14, 14}: "192.168.77.254",
	}
	picked := map[key]netip.Addr{}
	for k := range want {
		picked[k] = got[k]
	}
	wantAddrs := map[key]netip.Addr{}
	for k, a := range want {
		wantAddrs[k] = netip.MustParseAddr(a)
	}
	if d := cmp.Diff(wantAddrs, picked, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
		t.Errorf("NodeUnderlayAddr (-want +got):\n%s", d)
	}
	// Every valid pair: 15 clusters of 15 nodes, node 0 at its router's
	// address, all distinct, inside the underlay and not its network or
	// broadcast address.
	if len(got) != (maxNodeCluster+1)*(maxNodeIndex+1) {
		t.Errorf("%d valid (cluster, node) pairs, want %d", len(got), (maxNodeCluster+1)*(maxNodeIndex+1))
	}
	underlay := netip.PrefixFrom(underlayBase, underlayBits)
	owner := map[netip.Addr]key{}
	for k, a := range got {
		if o, dup := owner[a]; dup {
			t.Errorf("NodeUnderlayAddr%v = NodeUnderlayAddr%v = %s", k, o, a)
		}
		owner[a] = k
		if !underlay.Contains(a) || a == underlayBase || a.As4()[3] == 255 {
			t.Errorf("NodeUnderlayAddr%v = %s: not a host address of %s", k, a, underlay)
		}
		if k.node == 0 && a != UnderlayAddr(k.cluster) {
			t.Errorf("NodeUnderlayAddr(%d, 0) = %s, want UnderlayAddr %s", k.cluster, a, UnderlayAddr(k.cluster))
		}
		// Only node 0 may stand where routers stand.
		if k.node != 0 && a.As4()[3] <= byte(maxNodeCluster+1) {
			t.Errorf("NodeUnderlayAddr%v = %s: a router's address", k, a)
		}
	}
}

func TestNodeBridgePort(t *testing.T) {
	alpha, long := Cluster{Name: "alpha", Index: 0}, Cluster{Name: "a-very-long-cluster-name", Index: 14}
	for _, tc := range []struct {
		c    Cluster
		node int
		want string
	}{
		{alpha, 0, "r0-alpha"},
		{alpha, 1, "n0-1-alpha"},
		{Cluster{Name: "gamma", Index: 2}, 3, "n2-3-gamma"},
		{long, 0, "r14-a-very-long"},
		{long, 14, "n14-14-a-very-l"},
	} {
		if got := nodeBridgePort(tc.c, tc.node); got != tc.want {
			t.Errorf("nodeBridgePort(%v, %d) = %q, want %q", tc.c, tc.node, got, tc.want)
		}
	}
	seen := map[string]string{}
	for ci, name := range []string{"alpha", "beta", "gamma", "a-very-long-cluster-name"} {
		for n := range maxNodeIndex + 1 {
			p := nodeBridgePort(Cluster{Name: name, Index: ci}, n)
			if len(p) > 15 {
				t.Errorf("nodeBridgePort(%s, %d) = %q: longer than 15", name, n, p)
			}
			if o, dup := seen[p]; dup {
				t.Errorf("nodeBridgePort(%s, %d) = %q, also %s's", name, n, p, o)
			}
			seen[p] = fmt.Sprintf("%s/%d", name, n)
		}
	}
}

func TestValidateNodes(t *testing.T) {
	api := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{172, 31, byte(i + 1), 254}) } //nolint:gosec // G115: i is a small cluster index
	alpha, beta := Cluster{Name: "alpha", Index: 0}, Cluster{Name: "beta", Index: 1}
	ok := []Node{
		{Cluster: alpha, Index: 0, API: api(0)},
		{Cluster: alpha, Index: 1, API: api(0)},
		{Cluster: beta, Index: 0, API: api(1)},
		{Cluster: beta, Index: 3, API: api(1)},
	}
	if err := validateNodes(ok); err != nil {
		t.Errorf("validateNodes(%v) = %v", ok, err)
	}
	for _, tc := range []struct {
		name  string
		nodes []Node
		want  string
	}{
		{"IPv6 API", []Node{{Cluster: alpha, API: netip.MustParseAddr("::1")}}, "not IPv4"},
		{"no API", []Node{{Cluster: alpha}}, "not IPv4"},
		{"node index", []Node{{Cluster: alpha, API: api(0)}, {Cluster: alpha, Index: 15, API: api(0)}}, "outside 0..14"},
		{"negative node index", []Node{{Cluster: alpha, Index: -1, API: api(0)}}, "outside 0..14"},
		{"cluster index", []Node{{Cluster: Cluster{Name: "far", Index: 15}, API: api(0)}}, "cluster index 15"},
		{"node twice", []Node{{Cluster: alpha, API: api(0)}, {Cluster: alpha, API: api(0)}}, "given twice"},
		{"no node 0", []Node{{Cluster: alpha, Index: 1, API: api(0)}}, "node 0 is missing"},
		{"two APIs", []Node{{Cluster: alpha, API: api(0)}, {Cluster: alpha, Index: 1, API: api(1)}}, "API addresses"},
		{"two indexes", []Node{{Cluster: alpha, API: api(0)}, {Cluster: Cluster{Name: "alpha", Index: 1}, Index: 1, API: api(0)}}, "cluster indexes"},
		{"shared cluster index", []Node{{Cluster: alpha, API: api(0)}, {Cluster: Cluster{Name: "beta"}, API: api(1)}}, "share index"},
	} {
		err := validateNodes(tc.nodes)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: validateNodes = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
