package network

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTranslate(t *testing.T) {
	tests := []struct {
		name, addr, from, to string
		want, wantErr        string
	}{
		{name: "swap a /16", addr: "10.200.3.7", from: "10.200.0.0/16", to: "100.64.0.0/16", want: "100.64.3.7"},
		{name: "swap a /9 keeps the low bit of the second octet", addr: "10.129.1.2", from: "10.128.0.0/9", to: "100.0.0.0/9", want: "100.1.1.2"},
		{name: "odd prefix length", addr: "10.200.255.1", from: "10.200.240.0/20", to: "100.64.16.0/20", want: "100.64.31.1"},
		{name: "identity", addr: "10.200.3.7", from: "10.200.0.0/16", to: "10.200.0.0/16", want: "10.200.3.7"},
		{name: "/32", addr: "192.0.2.1", from: "192.0.2.1/32", to: "198.51.100.7/32", want: "198.51.100.7"},
		{name: "/0", addr: "192.0.2.1", from: "0.0.0.0/0", to: "0.0.0.0/0", want: "192.0.2.1"},
		{name: "IPv6", addr: "fd00:10::abcd", from: "fd00:10::/64", to: "fd00:99:0:1::/64", want: "fd00:99:0:1::abcd"},
		{name: "unmasked target", addr: "10.200.3.7", from: "10.200.0.0/16", to: "100.64.9.9/16", want: "100.64.3.7"},
		{name: "lengths differ", addr: "10.200.3.7", from: "10.200.0.0/16", to: "100.64.0.0/17", wantErr: "differ in family or prefix length"},
		{name: "families differ", addr: "10.200.3.7", from: "10.200.0.0/16", to: "fd00::/16", wantErr: "differ in family or prefix length"},
		{name: "outside", addr: "10.201.3.7", from: "10.200.0.0/16", to: "100.64.0.0/16", wantErr: "not in 10.200.0.0/16"},
		{name: "IPv4-mapped IPv6 address is not IPv4", addr: "::ffff:10.200.3.7", from: "10.200.0.0/16", to: "100.64.0.0/16", wantErr: "not in"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Translate(addr(tt.addr), pfx(tt.from), pfx(tt.to))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Translate() = %s, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got.String()); diff != "" {
				t.Errorf("Translate() (-want +got):\n%s", diff)
			}
			back, err := Translate(got, pfx(tt.to), pfx(tt.from))
			if err != nil || back != addr(tt.addr) {
				t.Errorf("inverse = %s, %v; want %s", back, err, tt.addr)
			}
		})
	}
}

func TestMapping(t *testing.T) {
	tests := []struct {
		name               string
		original, remapped string
		remote, local      string // the same address in the remote's view and in ours
		wantView, wantStr  string
		wantParseErr       string
	}{
		{name: "remapped", original: "10.200.0.0/16", remapped: "100.64.0.0/16", remote: "10.200.3.7", local: "100.64.3.7", wantView: "100.64.0.0/16", wantStr: "10.200.0.0/16→100.64.0.0/16"},
		{name: "as is", original: "10.72.0.0/16", remote: "10.72.0.1", local: "10.72.0.1", wantView: "10.72.0.0/16", wantStr: "10.72.0.0/16"},
		{name: "length mismatch", original: "10.200.0.0/16", remapped: "100.64.0.0/24", wantParseErr: "prefix length must be equal"},
		{name: "bad original", original: "10.200.0.1/16", wantParseErr: "host bits"},
		{name: "bad remap", original: "10.200.0.0/16", remapped: "x", wantParseErr: "not a CIDR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseMapping(tt.original, tt.remapped)
			if tt.wantParseErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantParseErr) {
					t.Fatalf("ParseMapping() error = %v, want %q", err, tt.wantParseErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.IsRemapped() != (tt.remapped != "") || m.View().String() != tt.wantView || m.String() != tt.wantStr {
				t.Errorf("mapping %+v: IsRemapped %v, View %s, String %s", m, m.IsRemapped(), m.View(), m)
			}
			got, err := m.ToLocal(addr(tt.remote))
			if err != nil || got != addr(tt.local) {
				t.Errorf("ToLocal(%s) = %s, %v; want %s", tt.remote, got, err, tt.local)
			}
			back, err := m.ToRemote(got)
			if err != nil || back != addr(tt.remote) {
				t.Errorf("ToRemote(%s) = %s, %v; want %s", got, back, err, tt.remote)
			}
			if _, err := m.ToLocal(addr("192.0.2.1")); err == nil {
				t.Error("ToLocal of an address outside the CIDR succeeded")
			}
			if _, err := m.ToRemote(addr("192.0.2.1")); err == nil {
				t.Error("ToRemote of an address outside the view succeeded")
			}
		})
	}
}
