package gateway

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/crypto/curve25519"
)

func TestKeys(t *testing.T) {
	priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := priv.Public()
	if err != nil {
		t.Fatal(err)
	}
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
	good := Link{Peer: "gamma", ListenPort: 51820, PeerEndpoint: netip.MustParseAddrPort("192.0.2.2:51820"),
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
