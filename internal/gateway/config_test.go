package gateway

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

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
		{"no accept", func(c *Config) { c.Accept = nil }, "accept"},
		{"IPv6 accept", func(c *Config) { c.Accept = []netip.Prefix{p("fd00::/64")} }, "not an IPv4 prefix"},
		{"no links, no accept", func(c *Config) { c.Links, c.Accept = nil, nil }, ""},
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
			c := Config{Accept: []netip.Prefix{p("10.200.0.0/16")}, Links: []Link{l}}
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
		{"trailing data", `{"links":[]} {}`, "after"},
		{"not JSON", `links: []`, "invalid character"},
		{"invalid", `{"links":[{"peer":"Gamma"}]}`, "accept"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.data))
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("ParseConfig(%s) = %v, want an error containing %q", tc.data, err, tc.wantErr)
			}
		})
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
