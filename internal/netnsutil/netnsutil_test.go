package netnsutil

import (
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// newNetns makes an anonymous network namespace (gone when the test closes
// its handle) without moving the test's threads into it.
func newNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	type result struct {
		h   netns.NsHandle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		h, err := netns.New()
		ch <- result{h, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { _ = r.h.Close() })
	return r.h
}

func handle(t *testing.T, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func TestLinksInNamespaces(t *testing.T) {
	a, b := newNetns(t), newNetns(t)
	ah, bh := handle(t, a), handle(t, b)
	if err := LinkUp(ah, "lo"); err != nil {
		t.Fatal(err)
	}
	br, err := EnsureBridge(ah, "br0")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := EnsureBridge(ah, "br0"); err != nil || again.Attrs().Index != br.Attrs().Index {
		t.Errorf("second EnsureBridge: %v, index %d want %d", err, again.Attrs().Index, br.Attrs().Index)
	}
	x, y, made, err := EnsureVethPair(ah, "x0", bh, "eth0", b)
	if err != nil || !made {
		t.Fatalf("EnsureVethPair: made %v, %v", made, err)
	}
	if _, _, made, err := EnsureVethPair(ah, "x0", bh, "eth0", b); err != nil || made {
		t.Errorf("EnsureVethPair of an existing pair: made %v, %v", made, err)
	}
	if _, err := netlink.LinkByName("x0"); !IsNotFound(err) {
		t.Errorf("x0 in the test's own namespace: %v", err)
	}
	for _, p := range []string{"10.9.0.2/24", "10.9.0.3/24"} {
		if err := SetOnlyAddr(bh, y, netip.MustParsePrefix(p), netlink.SCOPE_UNIVERSE); err != nil {
			t.Fatal(err)
		}
	}
	addrs, err := bh.AddrList(y, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ad := range addrs {
		got = append(got, PrefixOf(ad.IPNet).String())
	}
	if diff := cmp.Diff([]string{"10.9.0.3/24"}, got); diff != "" {
		t.Errorf("addresses after SetOnlyAddr (-want +got):\n%s", diff)
	}
	if err := ah.LinkSetUp(x); err != nil {
		t.Fatal(err)
	}
	if err := bh.LinkSetUp(y); err != nil {
		t.Fatal(err)
	}
	WaitOperUp(bh, "eth0", 2*time.Second)

	// In runs code in the namespace; WriteSysctls there changes only it.
	if err := In(b, func() error { return WriteSysctls(map[string]string{"net/ipv4/ip_forward": "1"}) }); err != nil {
		t.Fatal(err)
	}
	var inB string
	if err := In(b, func() error {
		data, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
		inB = strings.TrimSpace(string(data))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if inB != "1" {
		t.Errorf("ip_forward in the namespace = %q, want 1", inB)
	}
	var inA string
	if err := In(a, func() error {
		data, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
		inA = strings.TrimSpace(string(data))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if inA != "0" {
		t.Errorf("ip_forward in another new namespace = %q, want 0", inA)
	}
}

func TestPrefixConversions(t *testing.T) {
	for _, s := range []string{"10.1.2.0/24", "192.168.1.7/32", "0.0.0.0/0"} {
		p := netip.MustParsePrefix(s)
		if got := PrefixOf(IPNet(p)); got != p {
			t.Errorf("PrefixOf(IPNet(%s)) = %s", p, got)
		}
	}
}
