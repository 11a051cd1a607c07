package gateway

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/curve25519"
)

func TestKeys(t *testing.T) {
	priv, pub := mustKey(t)
	// The public key is X25519(priv, basepoint), and survives JSON.
	want, _ := curve25519.X25519(priv[:], curve25519.Basepoint)
	if string(pub[:]) != string(want) {
		t.Error("public key is not X25519(private, basepoint)")
	}
	data, _ := json.Marshal(struct{ K Key }{pub})
	var back struct{ K Key }
	if err := json.Unmarshal(data, &back); err != nil || back.K != pub {
		t.Errorf("JSON round trip: %v, %v", back.K, err)
	}
	if err := json.Unmarshal([]byte(`{"K":"c2hvcnQ="}`), &back); err == nil {
		t.Error("a short key was accepted")
	}
}

func TestValidate(t *testing.T) {
	p := netip.MustParsePrefix
	priv, pub := mustKey(t)
	good := Link{Peer: "gamma", ListenPort: 51820, PeerEndpoint: netip.MustParseAddrPort("192.0.2.2:51820"),
		PrivateKey: priv, PeerPublicKey: pub, AllowedSources: []netip.Prefix{p("10.200.0.0/16")},
		Routes: []netip.Prefix{p("100.64.0.0/16")}, DNAT: []Netmap{{From: p("100.64.0.0/16"), To: p("10.200.0.0/16")}}}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"valid", func(*Config) {}, ""},
		{"bad peer", func(c *Config) { c.Links[0].Peer = "Gamma!" }, "cluster ID"},
		{"no endpoint", func(c *Config) { c.Links[0].PeerEndpoint = netip.AddrPort{} }, "peerEndpoint"},
		{"no routes", func(c *Config) { c.Links[0].Routes = nil }, "no routes"},
		{"IPv6 route", func(c *Config) { c.Links[0].Routes = []netip.Prefix{p("fd00::/64")} }, "not an IPv4 prefix"},
		{"invalid route", func(c *Config) { c.Links[0].Routes = []netip.Prefix{{}} }, "not an IPv4 prefix"},
		{"IPv6 allowed source", func(c *Config) { c.Links[0].AllowedSources = []netip.Prefix{p("fd00::/64")} }, "not an IPv4 prefix"},
		{"no allowed sources", func(c *Config) { c.Links[0].AllowedSources = nil }, "no allowedSources"},
		{"IPv6 endpoint", func(c *Config) { c.Links[0].PeerEndpoint = netip.MustParseAddrPort("[fd00::1]:51820") }, "IPv4"},
		{"no private key", func(c *Config) { c.Links[0].PrivateKey = Key{} }, "privateKey"},
		{"no peer key", func(c *Config) { c.Links[0].PeerPublicKey = Key{} }, "peerPublicKey"},
		{"no accept: nothing accepted, valid", func(c *Config) { c.Links[0].Accept = nil }, ""},
		{"IPv6 accept", func(c *Config) { c.Links[0].Accept = []netip.Prefix{p("fd00::/64")} }, `link "gamma": accept: fd00::/64 is not an IPv4 prefix`},
		{"invalid accept", func(c *Config) { c.Links[0].Accept = []netip.Prefix{{}} }, "not an IPv4 prefix"},
		{"accept at the bound", func(c *Config) { c.Links[0].Accept = make([]netip.Prefix, MaxAccept) }, "not an IPv4 prefix"},
		{"accept over the bound", func(c *Config) { c.Links[0].Accept = make([]netip.Prefix, MaxAccept+1) }, "more than 65536"},
		{"no links", func(c *Config) { c.Links = nil }, ""},
		{"bad port", func(c *Config) { c.Links[0].ListenPort = 0 }, "listenPort"},
		{"netmap lengths differ", func(c *Config) { c.Links[0].DNAT[0].To = p("10.200.0.0/24") }, "equal length"},
		{"port used twice", func(c *Config) {
			other := good
			other.Peer = "beta"
			c.Links = append(c.Links, other)
		}, "used twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := good
			l.DNAT = append([]Netmap(nil), good.DNAT...)
			l.Accept = []netip.Prefix{p("10.200.0.5/32")}
			c := Config{Links: []Link{l}}
			tc.mutate(&c)
			err := c.Validate()
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
	if got := DeviceName("a-very-long-cluster-id"); len(got) > 15 {
		t.Errorf("DeviceName too long: %q", got)
	}
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name, data, wantErr string
	}{
		{"empty", `{"links":[]}`, ""},
		{"unknown field", `{"links":[],"acept":["10.0.0.0/8"]}`, "unknown field"},
		{"accept is per link now", `{"accept":["10.0.0.0/8"],"links":[]}`, "unknown field"},
		{"trailing data", `{"links":[]} {}`, "after"},
		{"not JSON", `links: []`, "invalid character"},
		{"invalid", `{"links":[{"peer":"Gamma"}]}`, "cluster ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.data))
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("ParseConfig(%s) = %v, want an error containing %q", tc.data, err, tc.wantErr)
			}
		})
	}
}

func TestAggregate(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name     string
		in, want []netip.Prefix
	}{
		{"nothing", nil, []netip.Prefix{}},
		{"one address", []netip.Prefix{p("10.200.0.5/32")}, []netip.Prefix{p("10.200.0.5/32")}},
		{"consecutive addresses become blocks", []netip.Prefix{p("10.200.0.7/32"), p("10.200.0.4/32"), p("10.200.0.5/32"), p("10.200.0.6/32"), p("10.200.0.8/32")},
			[]netip.Prefix{p("10.200.0.4/30"), p("10.200.0.8/32")}},
		{"duplicates and contained prefixes", []netip.Prefix{p("10.200.0.0/16"), p("10.200.3.7/32"), p("10.200.3.7/32"), p("10.70.0.1/32")},
			[]netip.Prefix{p("10.70.0.1/32"), p("10.200.0.0/16")}},
		{"adjacent halves merge", []netip.Prefix{p("10.0.1.0/24"), p("10.0.0.0/24")}, []netip.Prefix{p("10.0.0.0/23")}},
		{"host bits ignored", []netip.Prefix{p("10.0.0.9/24")}, []netip.Prefix{p("10.0.0.0/24")}},
		{"the whole space", []netip.Prefix{p("0.0.0.0/1"), p("128.0.0.0/1"), p("255.255.255.255/32")}, []netip.Prefix{p("0.0.0.0/0")}},
		{"IPv6 left out", []netip.Prefix{p("fd00::/64"), p("10.0.0.1/32")}, []netip.Prefix{p("10.0.0.1/32")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Aggregate(tc.in), cmp.Comparer(func(x, y netip.Prefix) bool { return x == y })); diff != "" {
				t.Errorf("Aggregate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAcceptRanges(t *testing.T) {
	p := netip.MustParsePrefix
	got := ranges([]netip.Prefix{p("10.0.0.4/31"), p("255.255.255.0/24"), p("10.0.0.6/32"), p("10.0.0.8/32")})
	want := []addrRange{{u32(netip.MustParseAddr("10.0.0.4")), u32(netip.MustParseAddr("10.0.0.6"))},
		{u32(netip.MustParseAddr("10.0.0.8")), u32(netip.MustParseAddr("10.0.0.8"))},
		{u32(netip.MustParseAddr("255.255.255.0")), ^uint32(0)}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(addrRange{})); diff != "" {
		t.Errorf("ranges (-want +got):\n%s", diff)
	}
}

func mustKey(t *testing.T) (Key, Key) {
	t.Helper()
	priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := priv.Public()
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}
