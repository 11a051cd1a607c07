package network

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// op is one step against an Allocator: allocate (or look up) key, or release it.
type op struct {
	release bool
	key     string
	want    string // allocated address, or "" when an error is expected
}

func TestAllocator(t *testing.T) {
	tests := []struct {
		name     string
		cidr     string
		reserved []netip.Prefix
		ops      []op
	}{
		{name: "skips network and broadcast", cidr: "10.70.0.0/30", ops: []op{
			{key: "a", want: "10.70.0.1"}, {key: "b", want: "10.70.0.2"}, {key: "c"},
		}},
		{name: "stable per key", cidr: "10.70.0.0/16", ops: []op{
			{key: "a", want: "10.70.0.1"}, {key: "b", want: "10.70.0.2"}, {key: "a", want: "10.70.0.1"},
		}},
		{name: "next-fit after release", cidr: "10.70.0.0/29", ops: []op{
			{key: "a", want: "10.70.0.1"}, {key: "b", want: "10.70.0.2"}, {release: true, key: "a"},
			{key: "c", want: "10.70.0.3"}, {key: "a", want: "10.70.0.4"},
		}},
		{name: "wraps around to released addresses", cidr: "10.70.0.0/30", ops: []op{
			{key: "a", want: "10.70.0.1"}, {key: "b", want: "10.70.0.2"}, {release: true, key: "a"},
			{key: "c", want: "10.70.0.1"}, {key: "d"},
		}},
		{name: "skips reserved", cidr: "10.70.0.0/24", reserved: pfxs("10.70.0.0/30", "10.70.0.5/32", "10.71.0.0/16"), ops: []op{
			{key: "a", want: "10.70.0.4"}, {key: "b", want: "10.70.0.6"},
		}},
		{name: "all reserved", cidr: "10.70.0.0/24", reserved: pfxs("10.0.0.0/8"), ops: []op{{key: "a"}}},
		{name: "/31 uses both addresses", cidr: "10.70.0.0/31", ops: []op{
			{key: "a", want: "10.70.0.0"}, {key: "b", want: "10.70.0.1"}, {key: "c"},
		}},
		{name: "/32", cidr: "10.70.0.9/32", ops: []op{{key: "a", want: "10.70.0.9"}, {key: "b"}}},
		{name: "end of the address space", cidr: "255.255.255.252/30", ops: []op{
			{key: "a", want: "255.255.255.253"}, {key: "b", want: "255.255.255.254"}, {key: "c"},
		}},
		{name: "IPv6 skips only the first address", cidr: "fd00:70::/126", ops: []op{
			{key: "a", want: "fd00:70::1"}, {key: "b", want: "fd00:70::2"}, {key: "c", want: "fd00:70::3"}, {key: "d"},
		}},
		{name: "IPv6 large reservation is jumped over", cidr: "fd00:70::/48", reserved: pfxs("fd00:70::/64"), ops: []op{
			{key: "a", want: "fd00:70:0:1::"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAllocator(pfx(tt.cidr), tt.reserved...)
			if err != nil {
				t.Fatal(err)
			}
			for i, o := range tt.ops {
				if o.release {
					if !a.Release(o.key) {
						t.Fatalf("op %d: Release(%q) = false", i, o.key)
					}
					continue
				}
				got, err := a.Allocate(o.key)
				if o.want == "" {
					if !errors.Is(err, ErrExhausted) {
						t.Fatalf("op %d: Allocate(%q) = %s, %v; want ErrExhausted", i, o.key, got, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("op %d: %v", i, err)
				}
				if diff := cmp.Diff(o.want, got.String()); diff != "" {
					t.Fatalf("op %d: Allocate(%q) (-want +got):\n%s", i, o.key, diff)
				}
				if owner, ok := a.Owner(got); !ok || owner != o.key {
					t.Fatalf("op %d: Owner(%s) = %q, %v", i, got, owner, ok)
				}
			}
		})
	}
}

func TestAllocatorStateRoundTrip(t *testing.T) {
	a, _ := NewAllocator(pfx("10.70.0.0/16"))
	for i := range 5 {
		if _, err := a.Allocate(fmt.Sprintf("pod-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	a.Release("pod-2")
	data, err := json.Marshal(a.State())
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"pod-0":"10.70.0.1","pod-1":"10.70.0.2","pod-3":"10.70.0.4","pod-4":"10.70.0.5"}`; string(data) != want {
		t.Fatalf("State JSON = %s, want %s", data, want)
	}
	var state map[string]netip.Addr
	if err := json.Unmarshal(data, &state); err != nil {
		t.Fatal(err)
	}
	b, _ := NewAllocator(pfx("10.70.0.0/16"))
	if err := b.Restore(state); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a.State(), b.State(), cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
		t.Fatalf("restored state (-want +got):\n%s", diff)
	}
	// A restored allocator continues after the highest address and keeps
	// the existing keys stable.
	if got, _ := b.Allocate("pod-5"); got != addr("10.70.0.6") {
		t.Errorf("Allocate after Restore = %s, want 10.70.0.6", got)
	}
	if got, _ := b.Allocate("pod-3"); got != addr("10.70.0.4") {
		t.Errorf("Allocate(pod-3) after Restore = %s, want 10.70.0.4", got)
	}
	if b.Len() != 5 {
		t.Errorf("Len = %d, want 5", b.Len())
	}
}

func TestAllocatorAssignAndRestoreErrors(t *testing.T) {
	newA := func() *Allocator {
		a, _ := NewAllocator(pfx("10.70.0.0/24"), pfx("10.70.0.128/25"))
		if err := a.Assign("a", addr("10.70.0.10")); err != nil {
			t.Fatal(err)
		}
		return a
	}
	tests := []struct {
		name    string
		key     string
		addr    string
		wantErr string
	}{
		{name: "same again", key: "a", addr: "10.70.0.10"},
		{name: "outside", key: "b", addr: "10.71.0.1", wantErr: "not an allocatable address"},
		{name: "network address", key: "b", addr: "10.70.0.0", wantErr: "not an allocatable address"},
		{name: "broadcast address", key: "b", addr: "10.70.0.255", wantErr: "not an allocatable address"},
		{name: "reserved", key: "b", addr: "10.70.0.200", wantErr: "inside reserved 10.70.0.128/25"},
		{name: "taken", key: "b", addr: "10.70.0.10", wantErr: `already belongs to "a"`},
		{name: "key has another", key: "a", addr: "10.70.0.11", wantErr: `"a" already has 10.70.0.10`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check := func(what string, err error) {
				t.Helper()
				if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
					t.Errorf("%s: error %v, want %q", what, err, tt.wantErr)
				}
			}
			check("Assign", newA().Assign(tt.key, addr(tt.addr)))
			a := newA()
			check("Restore", a.Restore(map[string]netip.Addr{"c": addr("10.70.0.20"), tt.key: addr(tt.addr)}))
			if tt.wantErr != "" {
				if _, ok := a.Lookup("c"); ok {
					t.Error("a failed Restore assigned some keys")
				}
			}
		})
	}
	a := newA()
	err := a.Restore(map[string]netip.Addr{"x": addr("10.70.0.20"), "y": addr("10.70.0.20")})
	if err == nil || !strings.Contains(err.Error(), "given to both") {
		t.Errorf("Restore with a duplicate address: %v", err)
	}
}

func TestAllocatorConcurrent(t *testing.T) {
	a, _ := NewAllocator(pfx("10.70.0.0/20"))
	var wg sync.WaitGroup
	got := make([]netip.Addr, 1000)
	for i := range got {
		wg.Go(func() {
			addr, err := a.Allocate(fmt.Sprint(i))
			if err != nil {
				t.Error(err)
			}
			got[i] = addr
		})
	}
	wg.Wait()
	seen := map[netip.Addr]bool{}
	for _, x := range got {
		if seen[x] {
			t.Fatalf("%s handed out twice", x)
		}
		seen[x] = true
	}
}

func TestNewAllocatorInvalid(t *testing.T) {
	if _, err := NewAllocator(netip.Prefix{}); err == nil {
		t.Fatal("NewAllocator of an invalid CIDR succeeded")
	}
}
