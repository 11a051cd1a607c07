package network

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }
func pfxs(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, pfx(s))
	}
	return out
}

func TestParseCIDR(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "10.200.0.0/16", want: "10.200.0.0/16"},
		{in: "fd00:10::/64", want: "fd00:10::/64"},
		{in: "10.200.1.0/16", wantErr: "did you mean 10.200.0.0/16"},
		{in: "10.200.0.0", wantErr: "is not a CIDR"},
		{in: "", wantErr: "is not a CIDR"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseCIDR(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseCIDR(%q) error = %v, want it to contain %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want {
				t.Errorf("ParseCIDR(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestNeedsRemap(t *testing.T) {
	alpha := pfxs("10.200.0.0/16", "10.96.0.0/16", "10.70.0.0/16")
	tests := []struct {
		name   string
		local  []netip.Prefix
		remote netip.Prefix
		inUse  []netip.Prefix
		want   bool
	}{
		{name: "disjoint", local: alpha, remote: pfx("10.201.0.0/16"), want: false},
		{name: "same as local pod CIDR", local: alpha, remote: pfx("10.200.0.0/16"), want: true},
		{name: "inside the local service CIDR", local: alpha, remote: pfx("10.96.128.0/17"), want: true},
		{name: "contains the local external CIDR", local: alpha, remote: pfx("10.64.0.0/12"), want: true},
		{name: "overlaps a peer in use", local: alpha, remote: pfx("10.201.0.0/24"), inUse: pfxs("10.201.0.0/16"), want: true},
		{name: "overlaps a peer's remapping", local: alpha, remote: pfx("100.64.0.0/16"), inUse: pfxs("100.64.0.0/16"), want: true},
		{name: "other family never overlaps", local: alpha, remote: pfx("fd00::/64"), want: false},
		{name: "nothing local", remote: pfx("10.0.0.0/8"), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NeedsRemap(tt.local, tt.remote, tt.inUse); got != tt.want {
				t.Errorf("NeedsRemap(%v, %s, %v) = %v, want %v", tt.local, tt.remote, tt.inUse, got, tt.want)
			}
		})
	}
}

func TestAllocateCIDR(t *testing.T) {
	tests := []struct {
		name     string
		pool     string
		bits     int
		reserved []netip.Prefix
		want     string
		wantErr  error
	}{
		{name: "empty pool gives the lowest block", pool: DefaultPool, bits: 16, want: "100.64.0.0/16"},
		{name: "skips a used block", pool: DefaultPool, bits: 16, reserved: pfxs("100.64.0.0/16"), want: "100.65.0.0/16"},
		{name: "skips a block partly used", pool: DefaultPool, bits: 16, reserved: pfxs("100.64.3.0/24", "100.65.0.0/16"), want: "100.66.0.0/16"},
		{name: "fills a hole", pool: DefaultPool, bits: 16, reserved: pfxs("100.64.0.0/16", "100.66.0.0/15"), want: "100.65.0.0/16"},
		{name: "smaller block next to a small reservation", pool: DefaultPool, bits: 24, reserved: pfxs("100.64.0.0/24"), want: "100.64.1.0/24"},
		{name: "reservation covering the pool start", pool: DefaultPool, bits: 24, reserved: pfxs("100.64.0.0/12"), want: "100.80.0.0/24"},
		{name: "unordered reservations", pool: DefaultPool, bits: 16, reserved: pfxs("100.66.0.0/16", "100.64.0.0/16", "100.65.0.0/16"), want: "100.67.0.0/16"},
		{name: "other family ignored", pool: DefaultPool, bits: 16, reserved: pfxs("::/0"), want: "100.64.0.0/16"},
		{name: "whole pool", pool: "100.64.0.0/10", bits: 10, want: "100.64.0.0/10"},
		{name: "too big for the pool", pool: DefaultPool, bits: 8, wantErr: ErrNoFreeCIDR},
		{name: "pool exhausted", pool: "100.64.0.0/15", bits: 16, reserved: pfxs("100.64.0.0/16", "100.65.0.0/16"), wantErr: ErrNoFreeCIDR},
		{name: "pool entirely reserved", pool: DefaultPool, bits: 16, reserved: pfxs("100.0.0.0/8"), wantErr: ErrNoFreeCIDR},
		{name: "end of the address space", pool: "255.255.255.0/24", bits: 25, reserved: pfxs("255.255.255.0/25", "255.255.255.128/25"), wantErr: ErrNoFreeCIDR},
		{name: "last block of the address space", pool: "255.255.255.0/24", bits: 25, reserved: pfxs("255.255.255.0/25"), want: "255.255.255.128/25"},
		{name: "IPv6", pool: "fd00:a::/48", bits: 64, reserved: pfxs("fd00:a::/64", "fd00:a:0:1::/64"), want: "fd00:a:0:2::/64"},
		{name: "IPv6 host routes", pool: "fd00::/126", bits: 128, reserved: pfxs("fd00::/127", "fd00::2/128"), want: "fd00::3/128"},
		{name: "unmasked pool", pool: "100.64.1.2/10", bits: 16, want: "100.64.0.0/16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AllocateCIDR(pfx(tt.pool), tt.bits, tt.reserved)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("AllocateCIDR() = %s, %v; want error %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got.String()); diff != "" {
				t.Errorf("AllocateCIDR() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllocateCIDRInvalidPool(t *testing.T) {
	if _, err := AllocateCIDR(netip.Prefix{}, 16, nil); err == nil {
		t.Fatal("AllocateCIDR with an invalid pool succeeded")
	}
}

func TestLastAddr(t *testing.T) {
	tests := map[string]string{
		"10.200.0.0/16":   "10.200.255.255",
		"10.200.7.9/16":   "10.200.255.255",
		"0.0.0.0/0":       "255.255.255.255",
		"192.0.2.1/32":    "192.0.2.1",
		"fd00:10::/64":    "fd00:10::ffff:ffff:ffff:ffff",
		"10.128.0.0/9":    "10.255.255.255",
		"100.64.0.0/10":   "100.127.255.255",
		"172.16.0.0/12":   "172.31.255.255",
		"::/0":            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		"198.51.100.0/31": "198.51.100.1",
	}
	for in, want := range tests {
		if got := LastAddr(pfx(in)); got != addr(want) {
			t.Errorf("LastAddr(%s) = %s, want %s", in, got, want)
		}
	}
}
