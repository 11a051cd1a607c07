package sandboxnet

import (
	"net/netip"
	"strings"
	"testing"

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
